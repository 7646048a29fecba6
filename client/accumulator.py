"""RecordAccumulator: per-partition queues of ProducerBatch, and which are ready to send.

Theory of operation (Kafka's `RecordAccumulator`, aiokafka's `MessageAccumulator`): appends go to
the last batch of the partition's deque, or to a new one when it is full. A partition is ready
when its first batch is full (or not alone in the deque), has lingered `linger.ms`, or a flush
or close is under way, unless it waits out a retry backoff or is held back:
- without idempotence, while it has a request in flight (a muted partition: one produce request
  per partition at a time keeps records in order across retries); `drain` takes every ready batch
  of every ready partition led by a node, up to `max.request.size`, so one request per leader
  carries them all;
- with idempotence, while the producer's `gate` says its first batch may not go (client/
  idempotence.py: up to 5 batches in flight, retries one at a time in sequence order); `drain`
  takes one batch per partition per request, as the broker takes one batch per partition of an
  idempotent producer (Kafka's rule since produce v3), merging a backlog of new batches into one
  (`ProducerBatch.merge`, within `max.request.size`): Kafka's producer would send one batch.size
  batch per request, and requests, not bytes, are what a node's acks=all path pays for (sixteen
  KiB batches made idempotent produce ~7x slower here). Retried batches go back in sequence order.

Pure logic: time is `now_ms` from the caller, leaders come from a lookup function.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence

from client.producer_batch import BatchMetadata, Headers, ProducerBatch, RecordMetadata
from wire.topic_partition import TopicPartition


class RecordAccumulator:
    def __init__(self, batch_size: int, linger_ms: int, max_request_size: int = 1048576,
                 gate: Callable[[ProducerBatch], bool] | None = None) -> None:
        assert batch_size > 0, f"batch_size={batch_size}"
        assert linger_ms >= 0, f"linger_ms={linger_ms}"
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.max_request_size = max_request_size
        self.gate = gate  # idempotent: may a partition's first batch go now (else muting applies)
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.muted: set[TopicPartition] = set()
        self.buffered_bytes = 0
        self.flushing = 0  # flush() calls under way: everything is ready at once
        self.closing = False

    def _deque(self, tp: TopicPartition) -> deque[ProducerBatch]:
        queue = self.batches.get(tp)
        if queue is None:
            queue = self.batches[tp] = deque()
        return queue

    def append(
        self, tp: TopicPartition, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers | None,
        future: asyncio.Future[RecordMetadata], now_ms: int,
    ) -> bool:
        """Add one record; True if it opened a new batch (the sticky partitioner then moves on)."""
        queue = self._deque(tp)
        if queue:
            last = queue[-1]
            size = last.size_in_bytes
            if last.try_append(key, value, timestamp, headers, future):
                self.buffered_bytes += last.size_in_bytes - size
                return False
            last.closed = True
        batch = ProducerBatch(tp, now_ms, self.batch_size)
        appended = batch.try_append(key, value, timestamp, headers, future)
        assert appended, "a new batch takes its first record"
        queue.append(batch)
        self.buffered_bytes += batch.size_in_bytes
        return True

    def would_open_batch(self, tp: TopicPartition, size: int) -> bool:
        """Whether a record of `size` bytes would need a new batch of `tp` (it has none open, or no room)."""
        queue = self.batches.get(tp)
        return not queue or queue[-1].closed or not queue[-1].has_room_for(size)

    def append_many(
        self, tp: TopicPartition, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
        timestamp: int, make_future: Callable[[], asyncio.Future[BatchMetadata]], now_ms: int,
    ) -> tuple[list[asyncio.Future[BatchMetadata]], int]:
        """Add `values` (filling batches in turn); return one future per run and the batches opened."""
        queue = self._deque(tp)
        futures = []
        opened = 0
        while values:
            if not queue or queue[-1].closed:
                queue.append(ProducerBatch(tp, now_ms, self.batch_size))
                self.buffered_bytes += queue[-1].size_in_bytes
                opened += 1
            future = make_future()
            size = queue[-1].size_in_bytes
            taken = queue[-1].append_many(values, keys, timestamp, future)
            self.buffered_bytes += queue[-1].size_in_bytes - size
            if taken:
                futures.append(future)
                values = values[taken:]
                keys = None if keys is None else keys[taken:]
            if values:
                queue[-1].closed = True
        return futures, opened

    def ready(self, now_ms: int, leader_for: Callable[[TopicPartition], int | None]) -> tuple[set[int], int, bool]:
        """Nodes with a sendable batch, ms until the next batch may become ready, and whether a
        partition with data has no known leader (the caller refreshes metadata)."""
        nodes: set[int] = set()
        next_ready_ms = self.linger_ms if self.linger_ms else 100
        unknown_leader = False
        for tp, queue in self.batches.items():
            if self._held(tp, queue):
                continue
            leader = leader_for(tp)
            if leader is None:
                unknown_leader = True
                continue
            wait_ms = self._wait_ms(queue, now_ms)
            if wait_ms <= 0:
                nodes.add(leader)
            else:
                next_ready_ms = min(next_ready_ms, wait_ms)
        return nodes, next_ready_ms, unknown_leader

    def _held(self, tp: TopicPartition, queue: deque[ProducerBatch]) -> bool:
        if not queue:
            return True
        return tp in self.muted if self.gate is None else not self.gate(queue[0])

    def _wait_ms(self, queue: deque[ProducerBatch], now_ms: int) -> int:
        first = queue[0]
        if first.attempts and now_ms < first.retry_at_ms:
            return first.retry_at_ms - now_ms
        if len(queue) > 1 or first.closed or self.flushing or self.closing:
            return 0
        return first.created_ms + self.linger_ms - now_ms

    def drain(
        self, nodes: set[int], now_ms: int, leader_for: Callable[[TopicPartition], int | None]
    ) -> dict[int, list[ProducerBatch]]:
        """Take the ready batches of partitions led by `nodes`; their partitions become muted."""
        drained: dict[int, list[ProducerBatch]] = {}
        for tp, queue in self.batches.items():
            leader = leader_for(tp)
            if leader not in nodes or self._held(tp, queue) or self._wait_ms(queue, now_ms) > 0:
                continue
            taken = drained.setdefault(leader, [])
            size = sum(batch.size_in_bytes for batch in taken)
            count = len(taken)
            if self.gate is not None:
                batch = self._merged_first(queue, self.max_request_size - size, alone=not taken)
                if batch is not None:
                    taken.append(batch)
                    size += batch.size_in_bytes
            while self.gate is None and queue and (queue[0].closed or len(queue) == 1):
                batch = queue[0]
                if taken and size + batch.size_in_bytes > self.max_request_size:
                    break
                queue.popleft()
                batch.closed = True
                taken.append(batch)
                size += batch.size_in_bytes
            if len(taken) > count and self.gate is None:
                # Only a partition in the request is muted: its answer unmutes it. A partition the
                # full request left out stays ready for the next one.
                self.muted.add(tp)
        return {node: batches for node, batches in drained.items() if batches}

    @staticmethod
    def _merged_first(queue: deque[ProducerBatch], room: int, alone: bool) -> ProducerBatch | None:
        """The first batch, with the new batches ready behind it merged in while they fit `room`
        bytes; None if it does not fit (unless it would go `alone` in its request)."""
        first = queue[0]
        if first.size_in_bytes > room and not alone:
            return None
        parts = [queue.popleft()]
        size = first.size_in_bytes
        while (first.sequence is None and queue and queue[0].sequence is None
               and (queue[0].closed or len(queue) == 1) and size + queue[0].size_in_bytes <= room):
            size += queue[0].size_in_bytes
            parts.append(queue.popleft())
        first.closed = True
        return first if len(parts) == 1 else ProducerBatch.merge(parts)

    def reenqueue(self, batch: ProducerBatch, retry_at_ms: int) -> None:
        """Put a failed batch back at the front of its partition, to be retried after a backoff; a
        numbered one among the numbered ones there in sequence order (Kafka's insertInSequenceOrder)."""
        batch.retry_at_ms = retry_at_ms
        queue = self._deque(batch.tp)
        if batch.sequence is None:
            queue.appendleft(batch)
            return
        numbered = 0
        while numbered < len(queue) and queue[numbered].sequence is not None:
            numbered += 1
        queue.insert(bisect_left(range(numbered), batch.sequence, key=lambda i: queue[i].sequence), batch)

    def release(self, batch: ProducerBatch) -> None:
        """A batch is done (acknowledged, failed or expired): its bytes leave `buffer.memory`."""
        self.buffered_bytes -= batch.size_in_bytes
        assert self.buffered_bytes >= 0, f"buffered_bytes={self.buffered_bytes}"

    def unmute(self, tp: TopicPartition) -> None:
        self.muted.discard(tp)

    def expired(self, now_ms: int, delivery_timeout_ms: int) -> list[ProducerBatch]:
        """Remove and return the queued batches older than `delivery.timeout.ms`."""
        gone = []
        for tp, queue in self.batches.items():
            if tp in self.muted:
                continue
            while queue and now_ms - queue[0].created_ms >= delivery_timeout_ms:
                gone.append(queue.popleft())
        return gone

    def has_unsent(self) -> bool:
        return any(self.batches.values())

    def abort_all(self, error: BaseException) -> None:
        for queue in self.batches.values():
            while queue:
                batch = queue.popleft()
                self.release(batch)
                batch.fail(error)
