"""ProducerBatch: the records bound for one partition in one RecordBatch v2, and their futures.

Records are kept as columns (keys, values, timestamps, headers) and encoded once, when the batch
is drained, by `storage.records` (DESIGN §2: table-driven varints, one `bytes.join`). A batch whose
records have no headers takes the codec's fast path (`build_batch_from_values`, ~1.4M records/s on
this machine, a run of equal timestamps at a time); others the general `build_batch`.
`size_in_bytes` is an upper bound of the encoded size, so a batch never outgrows `batch.size`
by more than its last record (Kafka's `estimateSizeInBytesUpperBound`).

Completions: `send` adds a future per record, `send_many` one future per run of records; when
the leader answers with the batch's base offset each resolves to its records' metadata.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from storage.records import (
    BATCH_HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Compression,
    build_batch,
    build_batch_from_values,
)
from wire.topic_partition import TopicPartition

SEQUENCE_MASK = 2**31 - 1  # sequences wrap from 2^31-1 to 0 (Kafka's rule)
# Upper bound of a record's framing: length (5), attributes (1), timestampDelta (10),
# offsetDelta (5), key and value lengths (5 each), header count (5).
RECORD_OVERHEAD_MAX = 36


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record went. offset -1 under acks=0 (the leader does not say)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Where a run of records from `send_many` went: offsets base_offset .. base_offset+count-1."""

    topic: str
    partition: int
    base_offset: int
    record_count: int
    timestamp: int


Headers = Sequence[tuple[str, bytes | None]]


class ProducerBatch:
    """One partition's open or sent batch. Owned by the accumulator, then by one produce request."""

    def __init__(self, tp: TopicPartition, created_ms: int, batch_size: int) -> None:
        self.tp = tp
        self.created_ms = created_ms
        self.batch_size = batch_size
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[Headers] | None = None
        self.size_in_bytes = BATCH_HEADER_SIZE
        self.uniform_timestamp = True
        self.closed = False  # no more appends: full, or drained
        self.attempts = 0
        self.retry_at_ms = 0
        self.record_futures: list[tuple[int, asyncio.Future[RecordMetadata]]] = []
        self.run_futures: list[tuple[int, int, asyncio.Future[BatchMetadata]]] = []
        # Idempotent (client/idempotence.py): id, epoch and first sequence (unbounded; sent modulo 2^31),
        # set when first drained and again only under a new epoch; the sequencer's marks of its answers.
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.sequence: int | None = None
        self.sent_oldest = False  # sent while every earlier batch of its partition was acknowledged
        self.refused_out_of_order = False  # its last answer was OUT_OF_ORDER_SEQUENCE_NUMBER
        self.may_be_in_log = False  # sent with its sequences and not refused as out of order since
        self.acknowledged = False
        self.parts: list[ProducerBatch] = []  # the batches `merge` made this one of
        self._encoded: bytes | None = None

    @property
    def record_count(self) -> int:
        return len(self.values)

    @classmethod
    def merge(cls, parts: list[ProducerBatch]) -> ProducerBatch:
        """One batch with the records of `parts` (queued in this order, not numbered). The idempotent
        producer sends one batch per partition in a request, so a partition's backlog of batches goes
        as one (`split` gives the parts back if the leader finds it over max.message.bytes).
        `size_in_bytes` is the parts' sum: still an upper bound."""
        first = parts[0]
        merged = cls(first.tp, first.created_ms, first.batch_size)
        for part in parts:
            assert part.sequence is None and not part.parts, f"{part.tp}: merging a numbered or merged batch"
            start = len(merged.values)
            if part.headers is not None and merged.headers is None:
                merged.headers = [()] * start
            if merged.headers is not None:
                merged.headers.extend(part.headers or [()] * part.record_count)
            merged.keys.extend(part.keys)
            merged.values.extend(part.values)
            merged.timestamps.extend(part.timestamps)
            merged.record_futures.extend((start + index, future) for index, future in part.record_futures)
            merged.run_futures.extend((start + run, count, future) for run, count, future in part.run_futures)
            merged.size_in_bytes += part.size_in_bytes
        merged.size_in_bytes -= BATCH_HEADER_SIZE
        merged.uniform_timestamp = all(part.uniform_timestamp and part.timestamps[0] == first.timestamps[0]
                                       for part in parts)
        merged.closed = True
        merged.parts = parts
        return merged

    def split(self) -> list[ProducerBatch]:
        """The parts of a merged batch, with its attempts and, numbered, the same sequences in turn."""
        sequence = self.sequence
        for part in self.parts:
            part.closed = True
            part.attempts = self.attempts
            if sequence is not None:
                part.number(self.producer_id, self.producer_epoch, sequence)
                sequence += part.record_count
        return self.parts

    @property
    def sequence_end(self) -> int:
        assert self.sequence is not None, f"{self.tp}: not numbered"
        return self.sequence + self.record_count

    def number(self, producer_id: int, epoch: int, sequence: int) -> None:
        """Stamp the idempotent producer's id, epoch and first sequence (the encoding follows)."""
        self.producer_id, self.producer_epoch, self.sequence = producer_id, epoch, sequence
        self._encoded = None

    def has_room_for(self, size: int) -> bool:
        """Kafka's rule: the first record always fits, later ones while under batch.size."""
        return not self.values or self.size_in_bytes + size <= self.batch_size

    def try_append(
        self, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers | None,
        future: asyncio.Future[RecordMetadata],
    ) -> bool:
        size = record_size(key, value, headers)
        if self.closed or not self.has_room_for(size):
            return False
        index = len(self.values)
        if headers:
            if self.headers is None:
                self.headers = [()] * index
            self.headers.append(headers)
        elif self.headers is not None:
            self.headers.append(())
        self._append_columns(key, value, timestamp)
        self.size_in_bytes += size
        self.record_futures.append((index, future))
        return True

    def _append_columns(self, key: bytes | None, value: bytes | None, timestamp: int) -> None:
        if self.timestamps and timestamp != self.timestamps[0]:
            self.uniform_timestamp = False
        self.keys.append(key)
        self.values.append(value)
        self.timestamps.append(timestamp)

    def append_many(
        self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None, timestamp: int,
        future: asyncio.Future[BatchMetadata],
    ) -> int:
        """Append a prefix of `values` that fits; return how many were taken (maybe 0)."""
        if self.closed:
            return 0
        room = self.batch_size - self.size_in_bytes
        if keys is None and None not in values:
            taken, size = _fitting_values(values, room)
        else:
            taken, size = _fitting_records(values, keys, room)
        if not taken and not self.values:  # the first record always fits
            taken, size = 1, record_size(None if keys is None else keys[0], values[0], None)
        if not taken:
            return 0
        start = len(self.values)
        if self.timestamps and timestamp != self.timestamps[0]:
            self.uniform_timestamp = False
        self.values.extend(values[:taken] if taken < len(values) else values)
        self.keys.extend(keys[:taken] if keys is not None else [None] * taken)
        self.timestamps.extend([timestamp] * taken)
        if self.headers is not None:
            self.headers.extend([()] * taken)
        self.size_in_bytes += size
        self.run_futures.append((start, taken, future))
        return taken

    def encode(self, compression: Compression) -> bytes:
        """The batch's RecordBatch v2 bytes (baseOffset 0: the leader assigns it). Encoded once."""
        if self._encoded is None:
            assert self.values, f"empty batch for {self.tp}"
            keys = None if self.keys.count(None) == len(self.keys) else self.keys
            producer_id, producer_epoch = self.producer_id, self.producer_epoch
            base_sequence = NO_SEQUENCE if self.sequence is None else self.sequence & SEQUENCE_MASK
            if self.headers is None:
                self._encoded = build_batch_from_values(
                    self.values, keys=keys, timestamp_ms=self.timestamps[0],
                    timestamps=None if self.uniform_timestamp else self.timestamps, compression=compression,
                    producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                )
            else:
                headers = self.headers or [()] * len(self.values)
                self._encoded = build_batch(
                    list(zip(self.keys, self.values, headers, strict=True)), timestamps=self.timestamps,
                    compression=compression, producer_id=producer_id, producer_epoch=producer_epoch,
                    base_sequence=base_sequence,
                )
        return self._encoded

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        """Resolve every future: offsets from `base_offset` (-1 stays -1 under acks=0)."""
        topic, partition = self.tp.topic, self.tp.partition
        timestamps = self.timestamps
        for index, future in self.record_futures:
            if not future.done():
                offset = -1 if base_offset < 0 else base_offset + index
                timestamp = timestamps[index] if log_append_time_ms < 0 else log_append_time_ms
                future.set_result(RecordMetadata(topic, partition, offset, timestamp))
        for start, count, future in self.run_futures:
            if not future.done():
                offset = -1 if base_offset < 0 else base_offset + start
                timestamp = timestamps[start] if log_append_time_ms < 0 else log_append_time_ms
                future.set_result(BatchMetadata(topic, partition, offset, count, timestamp))

    def fail(self, error: BaseException) -> None:
        for _, future in self.record_futures:
            if not future.done():
                future.set_exception(error)
        for _, _, future in self.run_futures:
            if not future.done():
                future.set_exception(error)


def _fitting_values(values: Sequence[bytes], room: int) -> tuple[int, int]:
    """How many of `values` (no keys, no nulls) fit in `room` bytes, and their size: sizes summed
    by `accumulate` and the cut found by `bisect`, not a Python loop per record."""
    ends = list(accumulate(map(len, values), initial=0))  # ends[k]: bytes of the first k values
    taken = bisect_right(range(1, len(values) + 1), room, key=lambda count: ends[count] + count * RECORD_OVERHEAD_MAX)
    return taken, ends[taken] + taken * RECORD_OVERHEAD_MAX


def _fitting_records(
    values: Sequence[bytes | None], keys: Sequence[bytes | None] | None, room: int
) -> tuple[int, int]:
    """How many of the records fit in `room` bytes, and their size."""
    taken = 0
    size = 0
    for value in values:
        record = RECORD_OVERHEAD_MAX + (0 if value is None else len(value))
        if keys is not None and keys[taken] is not None:
            record += len(keys[taken])
        if size + record > room:
            break
        size += record
        taken += 1
    return taken, size


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    """Upper bound of one record's encoded size."""
    size = RECORD_OVERHEAD_MAX + (0 if key is None else len(key)) + (0 if value is None else len(value))
    if headers:
        for header_key, header_value in headers:
            size += 10 + len(header_key.encode("utf-8")) + (0 if header_value is None else len(header_value))
    return size
