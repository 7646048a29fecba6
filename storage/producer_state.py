"""ProducerStateManager: each idempotent producer's last batches on one replica (Kafka's, KIP-98).

An idempotent producer stamps every batch with its producer id, epoch and the sequence number of
the first record, numbered per partition from 0. Every replica keeps, per producer id, the epoch
and the last `BATCHES_KEPT` batches (sequences and offsets), built from the batches it appends:
- on the leader, a client's batch is checked first (`check`): one equal to a batch kept (same
  epoch, first and last sequence) is a retry of a write that is in the log already, and is
  answered with that batch's offsets instead of being written again; an older epoch is
  INVALID_PRODUCER_EPOCH; a sequence that does not follow the last one is
  OUT_OF_ORDER_SEQUENCE_NUMBER (a new epoch starts at 0). A producer the replica has no state for
  may start at any sequence (Kafka's rule since KIP-360: its records may be gone by retention);
- on followers the same batches arrive through replication and are taken as they are (`update`).

Snapshots (Kafka's `<offset>.snapshot`, version 1, beside the segments): the state after every
batch below `offset`, written at each roll (offset = the new segment's base) and at a clean
shutdown (offset = the log end). Format, big-endian: version i16, CRC-32C u32 of what follows,
entry count i32, then per entry producer id i64, epoch i16, last sequence i32, last offset i64,
offset delta i32, max timestamp i64, coordinator epoch i32 (-1), current transaction's first
offset i64 (-1). Kafka writes the last batch of each producer only; here each producer gets one
entry per batch kept, oldest first, so the whole window of retries survives a restart (a Kafka
reader keeps the last entry of a producer id: the newest batch). Loading (`load`, and
`truncate_and_reload` after a truncation) starts from the latest snapshot at or below the log end
and replays the batch headers after it; a damaged snapshot is deleted and an older one (or the
first batch on disk, which may lie below the log start: `Log.reload_producer_state`) used.
Snapshots below the log start are deleted with the segments they describe. A follower that starts
empty at its leader's logStartOffset writes the leader's state there (`state_at`, `write_snapshot`)
as its snapshot at that offset.

Bounds: a producer idle for `producer.id.expiration.ms` (by its last batch's max timestamp, as
Kafka judges it) is forgotten (`remove_expired`, on the broker's periodic check), so producer ids
that come and go, or are made up, do not pile up.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from storage.checkpoint import write_atomically
from storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from storage.records import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
BATCHES_KEPT = 5  # Kafka's NUM_BATCHES_TO_RETAIN: a producer has at most 5 requests in flight
_INT32_MAX = 2**31 - 1
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_NO_COORDINATOR_EPOCH = -1
_NO_TXN_OFFSET = -1

HeadersFrom = Callable[[int], Iterable[BatchHeader]]
"""The headers of the log's batches from an offset on (`Log.iter_batches`)."""


def last_sequence(base_sequence: int, offset_delta: int) -> int:
    """The sequence of a batch's last record; sequences wrap from 2^31-1 to 0 (Kafka's rule)."""
    if base_sequence > _INT32_MAX - offset_delta:
        return offset_delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + offset_delta


def _first_sequence(last_seq: int, offset_delta: int) -> int:
    if last_seq < offset_delta:
        return _INT32_MAX - (offset_delta - last_seq) + 1
    return last_seq - offset_delta


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class CorruptSnapshotError(ValueError):
    """A producer snapshot that does not parse or whose CRC does not match."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer, as Kafka keeps it."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _first_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """A producer's epoch and its last batches (oldest first, at most `BATCHES_KEPT`)."""

    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def add(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.producer_epoch:
            self.producer_epoch = epoch
            self.batches.clear()
        self.batches.append(batch)

    def duplicate_of(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        last = last_sequence(header.base_sequence, header.last_offset_delta)
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last:
                return batch
        return None


class ProducerStateManager:
    """See the module docstring. Owner: the partition's `Log`; one owner, no locks.

    `map_end_offset`: the state covers every batch below it (it follows the log end)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0

    # -- the leader's check and every replica's update ------------------------------------------

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """For a client's batch of an idempotent producer, before it is appended: the batch kept
        that it repeats (answer with its offsets, append nothing), or None to append it. Raises
        InvalidProducerEpochError or OutOfOrderSequenceError (Kafka's ProducerAppendInfo checks)."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} wrote epoch {header.producer_epoch} to {self.name}, older than its "
                f"epoch {entry.producer_epoch} there: another producer with its id took over")
        duplicate = entry.duplicate_of(header)
        if duplicate is not None:
            return duplicate
        if header.producer_epoch != entry.producer_epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} starts epoch {header.producer_epoch} on {self.name} at sequence "
                    f"{header.base_sequence}; a new epoch starts at 0")
        elif entry.batches and not _in_sequence(entry.last_seq, header.base_sequence):
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sent sequence {header.base_sequence} to {self.name} after "
                f"{entry.last_seq}; expected {last_sequence(entry.last_seq, 1)}")
        return None

    def update(self, header: BatchHeader) -> None:
        """An appended batch (offsets assigned): the producer's state moves on, the map with it."""
        if header.producer_id != NO_PRODUCER_ID and not header.is_control:
            entry = self.producers.get(header.producer_id)
            if entry is None:
                entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id,
                                                                                header.producer_epoch)
            entry.add(header.producer_epoch, BatchMetadata(
                last_sequence(header.base_sequence, header.last_offset_delta), header.last_offset,
                header.last_offset_delta, header.max_timestamp))
        self.map_end_offset = header.next_offset

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose last batch is `expiration_ms` old at wall-clock `now_ms`; how many."""
        expired = [producer_id for producer_id, entry in self.producers.items()
                   if now_ms - entry.batches[-1].timestamp >= expiration_ms]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    # -- snapshots ----------------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def encode(self, below: int = 2**63) -> bytes:
        """The state as a snapshot file's bytes, without the batches that end at or above `below`."""
        entries = [_ENTRY.pack(entry.producer_id, entry.producer_epoch, batch.last_seq, batch.last_offset,
                               batch.offset_delta, batch.timestamp, _NO_COORDINATOR_EPOCH, _NO_TXN_OFFSET)
                   for entry in self.producers.values() for batch in entry.batches if batch.last_offset < below]
        body = _COUNT.pack(len(entries)) + b"".join(entries)
        return _HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + body

    def take_snapshot(self) -> None:
        """Write `<map_end_offset>.snapshot` (atomically, fsynced)."""
        write_atomically(self.directory / snapshot_file_name(self.map_end_offset), self.encode())

    def write_snapshot(self, offset: int, data: bytes) -> None:
        """Write `data`, another replica's state after every batch below `offset` (`state_at`), as
        the snapshot at `offset` (atomically, fsynced). Raises CorruptSnapshotError, writing
        nothing, unless it parses, names real producer ids, and each producer's batches lie in
        [0, offset) in offset order (a peer's bytes: a batch at an offset the log will not hold would
        answer a retry with offsets never written)."""
        label = f"a snapshot for {self.name} at {offset}"
        for entry in decode_snapshot(data, label).values():
            end = -1
            for batch in entry.batches:
                if (entry.producer_id < 0 or batch.offset_delta < 0
                        or not end < batch.first_offset <= batch.last_offset < offset):
                    raise CorruptSnapshotError(f"{label}: producer {entry.producer_id}'s batch "
                                               f"[{batch.first_offset}, {batch.last_offset}] is out of place")
                end = batch.last_offset
        write_atomically(self.directory / snapshot_file_name(offset), data)

    def delete_snapshots_below(self, offset: int) -> None:
        for snapshot in self.snapshot_offsets():
            if snapshot < offset:
                (self.directory / snapshot_file_name(snapshot)).unlink(missing_ok=True)

    # -- loading ------------------------------------------------------------------------------------

    def load(self, first_offset: int, log_end_offset: int, headers_from: HeadersFrom) -> None:
        """Rebuild from the latest sound snapshot in [first offset, log end] and the batches after
        it; snapshots outside that range are deleted (above the end: written before a truncation or
        an unclean shutdown cut the log). `first_offset`: where the log's batches on disk start."""
        self.map_end_offset, self.producers = self._latest_snapshot(first_offset, log_end_offset, discard=True)
        for header in headers_from(self.map_end_offset):
            if header.base_offset >= self.map_end_offset:
                self.update(header)
        self.map_end_offset = log_end_offset

    def state_at(self, first_offset: int, offset: int, headers_from: HeadersFrom) -> bytes:
        """The snapshot bytes of the state after every batch that ends below `offset`, built like
        `load` (from `first_offset`) without changing any file or this state: what a follower that
        starts empty at this replica's logStartOffset must know (`Log.truncate_fully_and_start_at`)."""
        state = ProducerStateManager(self.directory, self.name)
        state.map_end_offset, state.producers = self._latest_snapshot(first_offset, offset, discard=False)
        for header in headers_from(state.map_end_offset):
            if header.base_offset < state.map_end_offset:
                continue
            if header.next_offset > offset:
                break
            state.update(header)
        return state.encode()

    def _latest_snapshot(self, first_offset: int, last_offset: int,
                         discard: bool) -> tuple[int, dict[int, ProducerStateEntry]]:
        """The latest sound snapshot in [first_offset, last_offset] (else `first_offset` and no
        producers); with `discard`, the later and the damaged snapshots are deleted on the way."""
        for snapshot in reversed(self.snapshot_offsets()):
            path = self.directory / snapshot_file_name(snapshot)
            if first_offset <= snapshot <= last_offset:
                try:
                    return snapshot, decode_snapshot(path.read_bytes(), path.name)
                except CorruptSnapshotError:
                    pass
            if discard:
                path.unlink(missing_ok=True)
        return first_offset, {}


def decode_snapshot(data: bytes, label: str) -> dict[int, ProducerStateEntry]:
    """A snapshot's producers; CorruptSnapshotError unless it parses and its CRC matches."""
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptSnapshotError(f"{label} has {len(data)} bytes")
    version, crc = _HEAD.unpack_from(data)
    body = data[_HEAD.size:]
    if version != SNAPSHOT_VERSION or crc32c(body) != crc:
        raise CorruptSnapshotError(f"{label}: version {version}, or a CRC mismatch")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{label}: {count} entries in {len(body)} bytes")
    producers: dict[int, ProducerStateEntry] = {}
    for producer_id, epoch, last_seq, last_offset, delta, timestamp, _, _ in _ENTRY.iter_unpack(body[_COUNT.size:]):
        entry = producers.get(producer_id)
        if entry is None:
            entry = producers[producer_id] = ProducerStateEntry(producer_id, epoch)
        entry.add(epoch, BatchMetadata(last_seq, last_offset, delta, timestamp))
    return producers
