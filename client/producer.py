"""Producer: async, batching, Kafka's partitioner, retries with metadata refresh.

`send` and `send_many` put records into the accumulator and return futures; one sender task
drains ready batches into one ProduceRequest per leader (aiokafka's `Sender`), handles each
partition's answer, and retries retriable errors after `retry.backoff.ms`, refreshing metadata
when the error says it is stale (NOT_LEADER_OR_FOLLOWER, a node down, ...). A batch fails when
its error is not retriable, after `retries` attempts, or `delivery.timeout.ms` after it was
created; its futures then raise the `TributaryError` named by the code.

Idempotence (KIP-98, on by default with acks=all as in Kafka's Java client since 3.0): the producer
gets a producer id (InitProducerId) at start and numbers each partition's batches by record; a
batch keeps its id, epoch and sequence across retries, so a retry of a write the leader already has
(its answer was lost, or it timed out during a failover) is answered with the original offsets
instead of being written twice. A partition's batch goes alone in a request and up to
`max.in.flight.requests.per.connection` (at most 5) of its batches are in flight; after a failure
they are retried one at a time in sequence order, so order holds across retries. A batch that
fails for good after it was numbered bumps that partition's epoch and the batches behind it are
numbered again under it (KIP-360), unless a later batch was acknowledged (then it was written);
client/idempotence.py has the rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from client.accumulator import RecordAccumulator
from client.batch_retry import OVERTAKEN_MESSAGE, WRITTEN_MESSAGE, Retry, after_error
from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from client.errors import TributaryError, error_for
from client.idempotence import MAX_IN_FLIGHT, PartitionSequences
from client.metadata import Metadata
from client.partitioner import StickyPartitioner, partition_for_key
from client.producer_batch import BatchMetadata, Headers, ProducerBatch, RecordMetadata, record_size
from storage.errors import StorageError
from storage.records import NO_PRODUCER_ID, Compression
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.produce import ProducePartition, ProduceRequest, ProduceResponse
from wire.producer_ids import InitProducerIdRequest, InitProducerIdResponse
from wire.topic_partition import TopicPartition

COMPRESSION_TYPES = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
                     "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
# A topic just created may be unknown to the broker asked, or have no leader yet.
METADATA_RETRIABLE = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NONE})


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Producer:
    """Kafka's producer settings by their names (`acks=-1` is all). Use `async with Producer(...)`
    or call `start()` and `close()`."""

    def __init__(
        self,
        bootstrap: str,
        *,
        acks: int | str = -1,
        linger_ms: int = 5,
        batch_size: int = 16384,
        compression_type: str = "none",
        retries: int = 2147483647,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120000,
        request_timeout_ms: int = 30000,
        max_block_ms: int = 60000,
        max_in_flight_requests_per_connection: int = 5,
        max_request_size: int = 1048576,
        buffer_memory: int = 33554432,
        enable_idempotence: bool | None = None,
        connections: Connections | None = None,
        clock: Callable[[], int] = monotonic_ms,
        wall_clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.acks = -1 if acks == "all" else int(acks)
        if self.acks not in (-1, 0, 1):
            raise ValueError(f"acks={acks!r}: use 0, 1 or all (-1)")
        if compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"compression_type={compression_type!r}: use one of {', '.join(COMPRESSION_TYPES)}")
        self.compression = COMPRESSION_TYPES[compression_type]
        # Kafka's rules: idempotence needs acks=all, retries and at most 5 requests in flight; unset, it
        # is on unless another setting conflicts.
        conflicts = [f"{name}={value}" for name, value, bad in (
            ("acks", acks, self.acks != -1), ("retries", retries, retries <= 0),
            ("max_in_flight_requests_per_connection", max_in_flight_requests_per_connection,
             max_in_flight_requests_per_connection > MAX_IN_FLIGHT)) if bad]
        if enable_idempotence and conflicts:
            raise ValueError(f"enable_idempotence needs acks=all, retries > 0 and max_in_flight_requests_per_"
                             f"connection <= {MAX_IN_FLIGHT}, not {', '.join(conflicts)} (Kafka's rule)")
        self.idempotent = not conflicts if enable_idempotence is None else enable_idempotence
        self.producer_id = NO_PRODUCER_ID
        self._sequences: dict[TopicPartition, PartitionSequences] = {}  # idempotent
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_block_ms = max_block_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self.buffer_memory = buffer_memory
        self._own_connections = connections is None
        self.connections = connections or Connections()
        self.metadata = Metadata(bootstrap, self.connections, request_timeout_ms, retry_backoff_ms=retry_backoff_ms)
        self.accumulator = RecordAccumulator(batch_size, linger_ms, max_request_size,
                                             gate=self._may_send if self.idempotent else None)
        self.partitioner = StickyPartitioner()
        self._clock = clock
        self._wall_clock = wall_clock
        self._in_flight: dict[int, set[asyncio.Task[None]]] = {}
        self._in_flight_batches: dict[asyncio.Task[None], list[ProducerBatch]] = {}
        self._wakeup = asyncio.Event()
        self._space = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._closed = False

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Fetch metadata once (failing fast if no node answers), get a producer id if idempotent,
        and start the sender."""
        try:
            await self.metadata.refresh()
            if self.idempotent:
                await self._init_producer_id()
        except BaseException:
            if self._own_connections:
                await self.connections.close()
            raise
        self._sender = asyncio.create_task(self._run_sender(), name="tributary-producer-sender")

    async def _init_producer_id(self) -> None:
        """InitProducerId from any broker, retried on retriable errors for up to `max_block_ms`."""
        deadline = self._clock() + self.max_block_ms
        while True:
            try:
                response = await self.metadata.request(Api.INIT_PRODUCER_ID, InitProducerIdRequest(),
                                                       InitProducerIdResponse)
                if response.error_code is ErrorCode.NONE:
                    self.producer_id = response.producer_id
                    return
                error = error_for(response.error_code, response.error_message or "InitProducerId failed")
            except TributaryError as raised:
                error = raised
            if not error.retriable or self._clock() >= deadline:
                raise error
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    def _sequences_of(self, tp: TopicPartition) -> PartitionSequences:
        sequences = self._sequences.get(tp)
        if sequences is None:
            sequences = self._sequences[tp] = PartitionSequences(self.producer_id, self.max_in_flight)
        return sequences

    def _may_send(self, batch: ProducerBatch) -> bool:
        """The accumulator's gate (idempotent): may the partition's first queued batch go now."""
        sequences = self._sequences_of(batch.tp)
        sequences.maybe_start_new_epoch()
        return sequences.may_send(batch)

    def _answered(self, batch: ProducerBatch, code: ErrorCode) -> None:
        """A batch's request is over with `code` (NONE: acknowledged)."""
        if self.idempotent:
            sequences = self._sequences_of(batch.tp)
            sequences.answered(batch, code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
            if code is ErrorCode.NONE:
                sequences.acknowledged(batch)

    # -- sending ------------------------------------------------------------------------

    async def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None,
        headers: Headers | None = None, timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the future resolves once the leader acknowledges it (per `acks`)."""
        await self._wait_for_space()
        tp = await self._partition(topic, key, partition)
        sticky = key is None and partition is None
        if sticky and self.accumulator.would_open_batch(tp, record_size(key, value, headers)):
            # KIP-480's onNewBatch: the record that would open a batch opens it on the next partition.
            tp = TopicPartition(topic, self._move_sticky(tp))
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        timestamp = self._wall_clock() if timestamp_ms is None else timestamp_ms
        opened = self.accumulator.append(tp, key, value, timestamp, headers, future, self._clock())
        if opened:
            self._wakeup.set()  # a full batch to send, or a new one whose linger the sender must time
        return future

    async def send_and_wait(self, topic: str, value: bytes | None, **kwargs: object) -> RecordMetadata:
        return await (await self.send(topic, value, **kwargs))  # type: ignore[arg-type]

    async def send_many(
        self, topic: str, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
        partition: int | None = None, timestamp_ms: int | None = None,
    ) -> asyncio.Future[list[BatchMetadata]]:
        """Queue many records with one timestamp: the high-throughput path (no per-record objects).

        Without keys all go to one partition (`partition`, else the sticky one); with keys each goes
        where its key hashes. The future resolves to one `BatchMetadata` per run of consecutive
        offsets, once every run is acknowledged."""
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        await self._wait_for_space()
        timestamp = self._wall_clock() if timestamp_ms is None else timestamp_ms
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[BatchMetadata]] = []
        now_ms = self._clock()
        for tp, part_values, part_keys in await self._split(topic, values, keys, partition):
            runs, opened = self.accumulator.append_many(
                tp, part_values, part_keys, timestamp, loop.create_future, now_ms
            )
            futures.extend(runs)
            if opened:
                if keys is None and partition is None:
                    self._move_sticky(tp)  # the run filled the sticky batch: the next run goes elsewhere
                self._wakeup.set()
        return asyncio.ensure_future(_gather(futures))

    async def _split(
        self, topic: str, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None, partition: int | None
    ) -> list[tuple[TopicPartition, Sequence[bytes | None], Sequence[bytes | None] | None]]:
        if keys is None or partition is not None:
            return [(await self._partition(topic, None, partition), values, keys)]
        num_partitions = len(await self._partitions_of(topic))
        groups: dict[int, tuple[list[bytes | None], list[bytes | None]]] = {}
        for key, value in zip(keys, values, strict=True):
            number = self._sticky_partition(topic) if key is None else partition_for_key(key, num_partitions)
            group = groups.get(number)
            if group is None:
                group = groups[number] = ([], [])
            group[0].append(value)
            group[1].append(key)
        return [(TopicPartition(topic, number), group[0], group[1]) for number, group in groups.items()]

    def _move_sticky(self, tp: TopicPartition) -> int:
        """KIP-480: the sticky partition's batch is full; stick to another partition."""
        partitions = self.metadata.partitions_for(tp.topic) or {}
        available = [p for p, info in partitions.items() if info.leader >= 0]
        return self.partitioner.next_partition(tp.topic, available, len(partitions), tp.partition)

    async def _wait_for_space(self) -> None:
        self._check_sender()
        while self.accumulator.buffered_bytes >= self.buffer_memory:
            self._space.clear()
            self._wakeup.set()
            await self._space.wait()
            self._check_sender()

    def _check_sender(self) -> None:
        """Records are only queued while a sender runs to drain them (else they would wait forever)."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        if self._sender is None:
            raise RuntimeError("the producer is not started: use `async with Producer(...)` or `await start()`")
        if self._sender.done():
            cause = "cancelled" if self._sender.cancelled() else repr(self._sender.exception())
            raise RuntimeError(f"the producer's sender stopped ({cause}); create a new producer")

    async def _partitions_of(self, topic: str) -> dict:
        """The topic's partitions, waiting up to `max_block_ms` for it to appear, as Kafka's
        producer does: the broker asked may not have applied a topic just created yet."""
        partitions = self.metadata.partitions_for(topic)
        if partitions:
            return partitions
        self.metadata.add_topics([topic])
        deadline = self._clock() + self.max_block_ms
        while True:
            await self.metadata.refresh()
            partitions = self.metadata.partitions_for(topic)
            if partitions:
                return partitions
            code = self.metadata.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if self._clock() >= deadline or code not in METADATA_RETRIABLE:
                self.metadata.require_topic(topic)
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    def _sticky_partition(self, topic: str) -> int:
        partitions = self.metadata.partitions_for(topic) or {}
        available = [p for p, info in partitions.items() if info.leader >= 0]
        return self.partitioner.partition(topic, available, len(partitions))

    async def _partition(self, topic: str, key: bytes | None, partition: int | None) -> TopicPartition:
        partitions = await self._partitions_of(topic)
        if partition is not None:
            if partition not in partitions:
                raise error_for(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                f"{topic} has partitions 0..{len(partitions) - 1}, not {partition}")
            return TopicPartition(topic, partition)
        if key is not None:
            return TopicPartition(topic, partition_for_key(key, len(partitions)))
        return TopicPartition(topic, self._sticky_partition(topic))

    # -- the sender ---------------------------------------------------------------------

    async def _run_sender(self) -> None:
        try:
            await self._send_loop()
        except Exception as error:
            # A bug must not leave futures pending forever: fail every queued record with it.
            self.accumulator.abort_all(error)
            self._space.set()
            raise

    async def _send_loop(self) -> None:
        while True:
            now_ms = self._clock()
            self._expire(now_ms)
            with contextlib.suppress(TributaryError):
                await self.metadata.refresh_if_stale()
            nodes, wait_ms, unknown_leader = self.accumulator.ready(now_ms, self.metadata.leader_for)
            if unknown_leader:
                self.metadata.invalidate()
                wait_ms = min(wait_ms, self.retry_backoff_ms)
            nodes = {node for node in nodes if len(self._in_flight.get(node, ())) < self.max_in_flight}
            for node, batches in self.accumulator.drain(nodes, now_ms, self.metadata.leader_for).items():
                if self.idempotent:  # numbered in drain order, before the next drain asks the gate
                    for batch in batches:
                        self._sequences_of(batch.tp).sent(batch)
                task = asyncio.create_task(self._produce(node, batches))
                self._in_flight.setdefault(node, set()).add(task)
                self._in_flight_batches[task] = batches
                task.add_done_callback(self._in_flight[node].discard)
                task.add_done_callback(self._in_flight_batches.pop)
            if self._closed and not self.accumulator.has_unsent() and not any(self._in_flight.values()):
                return
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), max(wait_ms, 1) / 1000)

    def _expire(self, now_ms: int) -> None:
        for batch in self.accumulator.expired(now_ms, self.delivery_timeout_ms):
            self._finish(batch, error_for(
                ErrorCode.REQUEST_TIMED_OUT,
                f"expiring {batch.record_count} record(s) for {batch.tp}: {now_ms - batch.created_ms} ms has passed "
                f"since batch creation (delivery.timeout.ms={self.delivery_timeout_ms}); check the partition's leader",
            ))

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        """One ProduceRequest to `node` with every drained batch, grouped per partition."""
        by_tp: dict[TopicPartition, list[ProducerBatch]] = {}
        for batch in batches:
            batch.attempts += 1
            by_tp.setdefault(batch.tp, []).append(batch)
        address = self.metadata.address_of(node)
        try:
            request = self._produce_request(by_tp)
            if address is None:
                raise NodeUnavailableError(f"node {node} is not in the metadata")
            response = await self.connections.call(
                address, Api.PRODUCE, request, ProduceResponse, self.request_timeout_ms + 5000
            )
        except NodeUnavailableError as error:
            self.metadata.invalidate()
            for tp_batches in by_tp.values():
                self._handle_error(tp_batches, ErrorCode.NETWORK_EXCEPTION, str(error))
        except RequestRejectedError as error:
            for tp_batches in by_tp.values():
                self._handle_error(tp_batches, error.code, error.message)
        except (TypeError, ValueError, StorageError) as error:
            for tp_batches in by_tp.values():  # records the codec refused: values must be bytes or None
                for batch in tp_batches:
                    self._answered(batch, ErrorCode.INVALID_RECORD)
                    self._finish(batch, error_for(ErrorCode.INVALID_RECORD, f"{batch.tp}: {error}"))
        else:
            answered = {TopicPartition(p.topic, p.partition): p for p in response.partitions}
            for tp, tp_batches in by_tp.items():
                result = answered.get(tp)
                if result is None:
                    self._handle_error(tp_batches, ErrorCode.UNKNOWN_SERVER_ERROR, f"the answer left out {tp}")
                elif result.error_code is not ErrorCode.NONE:
                    self._handle_error(tp_batches, result.error_code, result.error_message)
                else:
                    offset = result.base_offset
                    for batch in tp_batches:
                        self._answered(batch, ErrorCode.NONE)
                        batch.complete(offset, result.log_append_time_ms)
                        self._finish(batch, None)
                        if offset >= 0:
                            offset += batch.record_count
        finally:
            for tp in by_tp:
                self.accumulator.unmute(tp)
            self._wakeup.set()

    def _produce_request(self, by_tp: dict[TopicPartition, list[ProducerBatch]]) -> ProduceRequest:
        return ProduceRequest(self.acks, self.request_timeout_ms, tuple(
            ProducePartition(tp.topic, tp.partition, b"".join(b.encode(self.compression) for b in tp_batches),
                             self._leader_epoch(tp))
            for tp, tp_batches in by_tp.items()
        ))

    def _leader_epoch(self, tp: TopicPartition) -> int:
        info = self.metadata.partition_info(tp)
        return -1 if info is None else info.leader_epoch

    def _handle_error(self, batches: list[ProducerBatch], code: ErrorCode, message: str) -> None:
        error = error_for(code, message or f"producing to {batches[0].tp} failed")
        now_ms = self._clock()
        if error.invalid_metadata:
            self.metadata.invalidate()
        for batch in reversed(batches):  # appendleft in reverse keeps their order
            self._answered(batch, code)
            sequences = self._sequences_of(batch.tp) if self.idempotent else None
            decision = after_error(batch, error, sequences, self.retries, self.delivery_timeout_ms, now_ms)
            if decision is Retry.SPLIT:
                self._resend_parts(batch, now_ms)
            elif decision is Retry.RETRY_NOW:
                self.accumulator.reenqueue(batch, now_ms)
            elif decision is Retry.RETRY:
                self.accumulator.reenqueue(batch, now_ms + self.retry_backoff_ms)
            elif decision is Retry.FAIL_WRITTEN:
                self._finish(batch, error_for(code, f"{batch.tp}: {WRITTEN_MESSAGE}"))
            elif decision is Retry.FAIL_OVERTAKEN:
                self._finish(batch, error_for(code, f"{batch.tp}: {OVERTAKEN_MESSAGE}"))
            else:
                self._finish(batch, error)

    def _resend_parts(self, merged: ProducerBatch, now_ms: int) -> None:
        """Send a merged batch's parts again, in its place (nothing of it was written)."""
        parts = merged.split()
        if self.idempotent:
            self._sequences_of(merged.tp).split(merged, parts)
        for part in reversed(parts):
            self.accumulator.reenqueue(part, now_ms)

    def _finish(self, batch: ProducerBatch, error: BaseException | None) -> None:
        if error is not None:
            batch.fail(error)
            if self.idempotent:
                self._sequences_of(batch.tp).failed(batch)
        self.accumulator.release(batch)
        if self.accumulator.buffered_bytes < self.buffer_memory:
            self._space.set()

    # -- flush and close ----------------------------------------------------------------

    async def flush(self) -> None:
        """Send everything queued now, at once (ignoring linger.ms), and wait until each record is
        acknowledged or has failed (retries included)."""
        self.accumulator.flushing += 1
        try:
            batches = [batch for queue in self.accumulator.batches.values() for batch in queue]
            batches += [batch for sent in self._in_flight_batches.values() for batch in sent]
            pending = [future for batch in batches for future in _futures_of(batch) if not future.done()]
            self._wakeup.set()
            if pending:
                await asyncio.wait(pending)
        finally:
            self.accumulator.flushing -= 1

    async def close(self) -> None:
        """Send what is queued, wait for the answers, stop the sender and close connections."""
        if self._closed:
            return
        self._closed = True
        self.accumulator.closing = True
        self._wakeup.set()
        try:
            if self._sender is not None:
                try:
                    await self._sender
                finally:
                    self._sender = None
        finally:
            self.accumulator.abort_all(RuntimeError("the producer closed before sending"))
            if self._own_connections:
                await self.connections.close()


def _futures_of(batch: ProducerBatch) -> list[asyncio.Future]:
    return [future for _, future in batch.record_futures] + [future for _, _, future in batch.run_futures]


async def _gather(futures: list[asyncio.Future[BatchMetadata]]) -> list[BatchMetadata]:
    return list(await asyncio.gather(*futures))
