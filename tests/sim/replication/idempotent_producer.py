"""SimIdempotentProducer: the simulation's idempotent producer, on the client's own sender logic.

It runs what `client/producer.py`'s sender runs, minus asyncio and sockets: the records go into the
client's `RecordAccumulator` (linger 0, small batches; a backlog held back by the gate is merged at
drain), each partition's batches are numbered and gated by the client's `PartitionSequences` (up to
five in flight, one at a time until the leader acknowledged one, retries one at a time in sequence
order, a new epoch with the queued batches re-sequenced after a batch lost for good: KIP-98, KIP-360)
and encoded by the client's `ProducerBatch`. `poll` is the sender loop's pass (expire, ready, drain,
number, give up requests past their timeout); `answered` is `Producer._produce`'s handling of an
answer and `_handle_error`'s, a merged backlog over the topic's limit sent again as its parts
included (`segment.bytes` is a few hundred bytes in many seeds). What is not the client's: one
request per partition's batch (the client's requests go over several HTTP connections, which may
reorder them just as the simulated network does), requests given up after `request_timeout_ms`
(an answer arriving later is dropped, as a closed connection's), no limit of requests per node (the
client's counts requests of many partitions; the limit that matters here, five batches per
partition, is `PartitionSequences`'), and counters.

Record values are `idempotent_value(partition, number)`, numbered per partition in the order they
are appended, so each is distinct and the checker can tell the order the producer sent them in.
Pure: the caller passes the time and its metadata (`leader_for`, `invalidate`), and sends what
`poll` returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from client.accumulator import RecordAccumulator
from client.batch_retry import Retry, after_error
from client.errors import error_for
from client.idempotence import MAX_IN_FLIGHT, PartitionSequences
from client.producer_batch import ProducerBatch
from storage.records import Compression
from tests.sim.replication.observations import idempotent_value
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

BATCH_SIZE = 150  # a few records per batch (values ~8 bytes, 36 bytes of framing each at most)
RETRIES = 2**31 - 1  # Kafka's default: delivery.timeout.ms bounds the retries


@dataclass(frozen=True, slots=True)
class Send:
    """One produce request to make: a batch's bytes to `leader`."""

    request_id: int
    topic_partition: TopicPartition
    leader: int
    records: bytes
    created_ms: int  # when the batch's first record was appended (its write's lifetime starts)


@dataclass(slots=True)
class IdempotentFigures:
    sends: int = 0
    acknowledged: int = 0  # batches
    out_of_order: int = 0  # answers OUT_OF_ORDER_SEQUENCE_NUMBER
    failed: int = 0  # batches given up for good (delivery.timeout.ms or a fatal error)
    new_epochs: int = 0
    in_flight_max: int = 0  # the most batches of one partition in flight at once
    splits: int = 0  # merged backlogs refused as too large and sent again as their parts


class SimIdempotentProducer:
    """See the module docstring. Owner: the simulation, which calls it on its own generator's ticks."""

    def __init__(self, producer_id: int, leader_for: Callable[[TopicPartition], int | None],
                 invalidate: Callable[[TopicPartition], None], delivery_timeout_ms: int, request_timeout_ms: int,
                 retry_backoff_ms: int) -> None:
        self.producer_id = producer_id
        self.leader_for = leader_for
        self.invalidate = invalidate  # the partition's leader is stale: look it up again
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.accumulator = RecordAccumulator(BATCH_SIZE, linger_ms=0, gate=self._may_send)
        self.sequences: dict[TopicPartition, PartitionSequences] = {}
        self.appended: dict[TopicPartition, int] = {}  # records appended per partition (the next number)
        self.in_flight: dict[int, tuple[ProducerBatch, int]] = {}  # request id -> (batch, deadline)
        self.given_up: set[int] = set()  # requests past their timeout: a late answer is dropped
        self.figures = IdempotentFigures()
        # The accumulator keeps a future per run of records; nothing awaits them here (a loop never run).
        self._loop = asyncio.new_event_loop()

    def close(self) -> None:
        self._loop.close()

    def _sequences_of(self, topic_partition: TopicPartition) -> PartitionSequences:
        sequences = self.sequences.get(topic_partition)
        if sequences is None:
            sequences = self.sequences[topic_partition] = PartitionSequences(self.producer_id, MAX_IN_FLIGHT)
        return sequences

    def _may_send(self, batch: ProducerBatch) -> bool:
        """The accumulator's gate, as `Producer._may_send`."""
        sequences = self._sequences_of(batch.tp)
        epoch = sequences.epoch
        sequences.maybe_start_new_epoch()
        self.figures.new_epochs += sequences.epoch - epoch
        return sequences.may_send(batch)

    def append(self, topic_partition: TopicPartition, count: int, now_ms: int, timestamp_ms: int) -> None:
        first = self.appended.get(topic_partition, 0)
        self.appended[topic_partition] = first + count
        values = [idempotent_value(topic_partition.partition, number) for number in range(first, first + count)]
        self.accumulator.append_many(topic_partition, values, None, timestamp_ms, self._loop.create_future, now_ms)

    def poll(self, now_ms: int, next_request_id: Callable[[], int]) -> list[Send]:
        """The sender loop's pass: expire queued batches, give up requests past their timeout, drain
        what may go and number it (`Producer._send_loop`); the requests to make."""
        for batch in self.accumulator.expired(now_ms, self.delivery_timeout_ms):
            self._finish(batch, failed=True)
        for request_id, (batch, deadline_ms) in list(self.in_flight.items()):
            if deadline_ms < now_ms:
                del self.in_flight[request_id]
                self.given_up.add(request_id)
                self._handle_error(batch, ErrorCode.NETWORK_EXCEPTION, now_ms)
        nodes, _, _ = self.accumulator.ready(now_ms, self.leader_for)
        sends = []
        for leader, batches in self.accumulator.drain(nodes, now_ms, self.leader_for).items():
            for batch in batches:
                sequences = self._sequences_of(batch.tp)
                sequences.sent(batch)
                self.figures.in_flight_max = max(self.figures.in_flight_max, sequences.sending)
                batch.attempts += 1
                request_id = next_request_id()
                self.in_flight[request_id] = (batch, now_ms + self.request_timeout_ms)
                self.figures.sends += 1
                sends.append(Send(request_id, batch.tp, leader, batch.encode(Compression.NONE), batch.created_ms))
        return sends

    def owns(self, request_id: int) -> bool:
        return request_id in self.in_flight or request_id in self.given_up

    def answered(self, request_id: int, error: ErrorCode, now_ms: int) -> None:
        """The answer to one of its requests (dropped if the request was given up already)."""
        sent = self.in_flight.pop(request_id, None)
        if sent is None:
            return
        batch = sent[0]
        if error is ErrorCode.NONE:
            sequences = self._sequences_of(batch.tp)
            sequences.answered(batch, out_of_order=False)
            sequences.acknowledged(batch)
            self.figures.acknowledged += 1
            self._finish(batch, failed=False)
        else:
            self._handle_error(batch, error, now_ms)

    def _handle_error(self, batch: ProducerBatch, code: ErrorCode, now_ms: int) -> None:
        """`Producer._handle_error` for one batch."""
        error = error_for(code)
        if error.invalid_metadata:
            self.invalidate(batch.tp)
        out_of_order = code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        self.figures.out_of_order += out_of_order
        sequences = self._sequences_of(batch.tp)
        sequences.answered(batch, out_of_order)
        decision = after_error(batch, error, sequences, RETRIES, self.delivery_timeout_ms, now_ms)
        if decision is Retry.SPLIT:
            # A merged backlog over the topic's limit (segment.bytes is small here), never written:
            # its parts go again in its place with its sequences (`Producer._resend_parts`).
            parts = batch.split()
            sequences.split(batch, parts)
            self.figures.splits += 1
            for part in reversed(parts):
                self.accumulator.reenqueue(part, now_ms)
        elif decision in (Retry.RETRY, Retry.RETRY_NOW):
            self.accumulator.reenqueue(batch, now_ms + (self.retry_backoff_ms if decision is Retry.RETRY else 0))
        else:
            self._finish(batch, failed=True)

    def _finish(self, batch: ProducerBatch, failed: bool) -> None:
        if failed:
            self.figures.failed += 1
            self._sequences_of(batch.tp).failed(batch)
        self.accumulator.release(batch)
