"""Cleaner: Kafka's log compaction (LogCleaner's `Cleaner`) of one log at a time.

Theory of operation. A compacted log keeps, for every key, at least the last record written with
it; offsets never change, so a compacted log has gaps. The cleaner-offset-checkpoint (one file
per log dir, `topic partition offset` lines) splits a log in two:
- the clean part, [log start, first dirty offset): compacted before;
- the dirty part, [first dirty offset, first uncleanable offset): never compacted. The first
  uncleanable offset is the base offset of the segment holding min(active segment's base offset,
  high watermark, base of the first dirty segment whose largest timestamp is newer than
  now - min.compaction.lag.ms), so only whole segments below the high watermark are cleaned and
  the active segment never is.
A log is due when dirty bytes / (clean + dirty bytes) >= min.cleanable.dirty.ratio (Kafka's
`LogToClean.cleanableRatio`; Kafka's threshold is strictly greater, DESIGN §3 says >=).

Pass 1 (`_build_offset_map`) maps key -> offset of its last record over the dirty part, a whole
batch at a time, until the next batch would bring more than `dedupe_entries_max` keys (Kafka's
`log.cleaner.dedupe.buffer.size`); the end offset is where it stopped, else the first
uncleanable offset. Only [first dirty, end) is cleaned this time; the checkpoint becomes `end`.

Pass 2 recopies every segment whose base offset is below `end`, from the log's first segment on,
in groups that fit one segment's bytes, index sizes and 2**31 relative offsets (Kafka's
`groupSegmentsBySize`); each group becomes one segment based at the group's first base offset.
A record below `end` is kept iff all hold:
- it has a key (Kafka's cleaner discards keyless records; a compacted topic should refuse them);
- its offset >= map.get(key, -1): it is the last record of its key, or its key is not dirty;
- it is not a tombstone (null value) whose delete horizon has passed (below).
Records at or above `end` and control batches are copied unchanged. A batch keeps its base and
last offset, leader epoch, producer fields, timestamp type and codec; a batch whose records all
stay is copied byte for byte, and one that loses all is dropped, except (as an empty batch, 61
bytes, Kafka's empty-batch format):
- the last batch of an active idempotent producer (one the log's producer state still holds):
  it carries the producer's epoch and last sequence, so its state is rebuilt from the log after
  an unclean shutdown and its retries are still found duplicates (Kafka's RETAIN_EMPTY);
- the group's last batch, so the cleaned segment ends where the group ended: that is what
  `LogLoader` reads from a `.swap` segment to know which old segments it replaces.

Tombstones (Kafka's KIP-534 rule for RecordBatch v2): the first time a batch holding a kept
tombstone is cleaned, it is rewritten with attribute bit 6 set and baseTimestamp = its delete
horizon, now_ms + delete.retention.ms (record timestamps are re-based on it, so they read back
unchanged). A tombstone is dropped by a later clean at now_ms >= horizon. A consumer that reads a
key's old value therefore has delete.retention.ms from the first clean to reach its tombstone.

Threads (Kafka's LogCleaner: a cleaner thread builds the cleaned segments, the log swaps them in
under its lock). A clean is three calls, so that its expensive part runs off the log's owner:
- `Cleaner.plan` (the owner): the clean and dirty parts, a `SegmentSnapshot` of every segment
  below the first uncleanable offset (all inactive, below the high watermark: never appended to),
  the active producers' last batches. Cheap: no record is read.
- `build_cleaned_segments(plan)` (any thread): passes 1 and 2 into `.cleaned` segments. It reads
  the planned segments through its own file handles, by the paths the plan saw, and writes only
  files it creates; it never touches the `Log`, which may meanwhile append, roll, apply retention,
  truncate or close. It stops with LogCleaningAbortedError at the next batch once the owner has
  `abort`ed the plan (Kafka's checkDone), or when a planned file is gone or shorter.
- `Cleaner.swap(log, build)` (the owner): refuses the build (`DiscardReason`; its files are
  deleted) if the plan was aborted, the log is another one, or any segment it replaces left the
  map, changed size or became active; otherwise renames the files in and writes the checkpoint.
  Records appended during the build are in segments the build did not replace, so they stay.
`clean` runs the three in a row (tests, tools); node/log_tasks.py runs the build in a thread.

Files. A group's new segment goes through names that make every crash recoverable by
`LogLoader`; each step is a `CleanerStep` at which a test's `fault` may stop the cleaner:
1. build: write `<base>.log.cleaned` (and indexes) for every group, each fsynced once complete
   (CLEANED_APPENDED per old segment, CLEANED_FLUSHED per group): a crash leaves the old segments
   intact, the loader drops `.cleaned`;
2. swap, per group: rename `.cleaned` -> `.swap`, fsync the directory (SWAP_RENAMED): from here
   the loader completes the swap, replacing the old segments inside the swap segment's range;
3. each old segment leaves the map and is renamed `.deleted` for a delayed delete, as retention
   does (OLD_SEGMENT_DELETED);
4. rename `.swap` -> `.log`, fsync the directory, put the new segment in the map (SWAP_COMPLETED).
After the last group the checkpoint is written (CHECKPOINT_WRITTEN); a crash before it means
the next clean maps the same dirty part again, which is harmless (cleaning is idempotent).
A build that fails (an abort, an I/O error) deletes what it wrote; a crash leaves `.cleaned`
files for the loader. An exception after SWAP_RENAMED leaves the in-memory `Log` short of
segments: the owner must close it and reopen the directory, as after a crash. The caller must
lower the checkpoint when it truncates a log below it (`maybe_truncate_checkpoint`, Kafka's
LogManager.truncateTo does), or re-appended records would count as clean and their tombstones
could outlive older values; a truncation during a build must also abort it (LogManager does both).

Where this differs from Kafka, and why:
- records at or above `end` are never dropped (Kafka also drops keyless records and tombstones
  past their horizon there, though pass 1 never saw them: an older value of such a tombstone's
  key, below `end`, would then come back);
- the map's bound counts distinct keys and never splits a batch, so `end` is a batch boundary;
- no transaction handling: Tributary has no transactions (Kafka removes aborted data and, after
  their horizon, markers).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from crc32c import crc32c

from storage.checkpoint import OffsetCheckpointFile, fsync_directory
from storage.config import LogConfig
from storage.log import Log, create_segment
from storage.log_segment import (
    CLEANED_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
)
from storage.offset_index import INT32_MAX
from storage.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Record,
    build_batch,
    decode_records,
    iter_headers,
    read_header,
)
from wire.topic_partition import TopicPartition

# Kafka's dedupe buffer is 128 MiB of 24-byte slots; a Python dict entry costs ~100 bytes plus
# the key, so half a million keys stay around 100 MiB with short keys.
DEDUPE_ENTRIES_MAX = 500_000
_READ_CHUNK_BYTES = 1024 * 1024
# RecordBatch v2 attribute bit 6 (KIP-534): baseTimestamp holds the batch's delete horizon.
DELETE_HORIZON_MASK = 0x40
_ATTRIBUTES_POSITION = 21
_CRC_POSITION = 17
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")
_EMPTY_HEADER_HEAD = struct.Struct(">qiibI")  # baseOffset .. crc
_EMPTY_HEADER_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount, covered by the CRC
_COMPRESSION_MASK = 0x07
_INT64_MAX = 2**63 - 1


class CleanerStep(Enum):
    """Points of a clean where a test's `fault` callable may raise to simulate a crash."""

    CLEANED_APPENDED = "one old segment copied into the .cleaned segment (not yet fsynced)"
    CLEANED_FLUSHED = "the .cleaned segment is complete and fsynced"
    SWAP_RENAMED = "the .cleaned files are renamed .swap"
    OLD_SEGMENT_DELETED = "one old segment left the map and was renamed .deleted"
    SWAP_COMPLETED = "the .swap files have their final names and the new segment is in the map"
    CHECKPOINT_WRITTEN = "the cleaner-offset-checkpoint holds the new first dirty offset"


Fault = Callable[[CleanerStep], None]


@dataclass(frozen=True, slots=True)
class LogToClean:
    """Kafka's LogToClean: a log's clean and dirty parts, in offsets and bytes.

    `first_uncleanable_offset` is a segment base offset; `clean_bytes` counts segments based below
    `first_dirty_offset`, `cleanable_bytes` those overlapping the dirty part (a segment holding the
    first dirty offset counts in both, as in Kafka). `checkpoint_reset`: the checkpointed offset was
    missing or outside [log start, LEO] and the log start was used (Kafka's forceUpdateCheckpoint).
    """

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    checkpoint_reset: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        """Dirty bytes / (clean + dirty bytes); 0.0 for an empty log."""
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one `clean` did. The new checkpoint (first dirty offset of the next clean) is `end_offset`."""

    first_dirty_offset: int
    end_offset: int
    first_uncleanable_offset: int
    map_entries: int
    segments_before: int
    segments_after: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_removed: int

    @property
    def map_full(self) -> bool:
        """The offset map filled before the first uncleanable offset (Kafka cleans up to there only)."""
        return self.end_offset < self.first_uncleanable_offset


@dataclass(slots=True)
class _Stats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0


@dataclass(slots=True)
class _OffsetMap:
    """Pass 1's result: key -> offset of its last record in [first dirty, end_offset)."""

    offsets: dict[bytes, int] = field(default_factory=dict)
    end_offset: int = 0


class LogCleaningAbortedError(Exception):
    """Kafka's LogCleaningAbortedException: a build stopped because its owner aborted the plan, or a
    planned segment file was gone or shorter (the log changed; the swap would refuse the build)."""


class DiscardReason(Enum):
    """Why `Cleaner.swap` deleted a build instead of swapping it in (the next pass plans again)."""

    ABORTED = "cleaning was aborted: the log was truncated, deleted or closed during the build"
    LOG_REPLACED = "the log is not the one the plan was made from"
    SEGMENT_CHANGED = "a segment the build replaces left the log, changed size or became active"


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """An inactive segment as the plan saw it: what grouping needs, and the file the build reads
    through its own handle. `segment` is only for `swap`'s check that the log still holds that very
    segment; the build never uses it (the `LogSegment` belongs to the log's owner)."""

    base_offset: int
    next_offset: int
    size: int
    offset_index_bytes: int
    time_index_bytes: int
    log_path: Path
    modified_ns: int  # the cleaned segment of a group takes its last segment's mtime (retention.ms)
    segment: LogSegment = field(compare=False, repr=False)

    @classmethod
    def of(cls, segment: LogSegment) -> SegmentSnapshot:
        return cls(segment.base_offset, segment.next_offset, segment.size, segment.offset_index.size_in_bytes,
                   segment.time_index.size_in_bytes, segment.log_path, os.stat(segment.log_path).st_mtime_ns,
                   segment)


@dataclass(slots=True)
class CleanPlan:
    """What `build_cleaned_segments` needs, taken from the log by its owner (`Cleaner.plan`).

    `segments`: every segment based below the first uncleanable offset, in order. `producers_last`:
    last offset of each active idempotent producer's last batch -> its producer id, as at the plan.
    `log` is for `swap`'s identity check only. `aborted` is the one field written after the plan is
    made, by the owner (`abort`), and read by the build between batches: a plain flag, so a build
    that reads it late only wastes the batches it copies meanwhile (the swap checks it again).
    """

    log: Log
    topic_partition: TopicPartition
    directory: Path
    config: LogConfig
    now_ms: int
    to_clean: LogToClean
    segments: tuple[SegmentSnapshot, ...]
    producers_last: dict[int, int]
    dedupe_entries_max: int
    aborted: bool = False

    def abort(self) -> None:
        """Kafka's abortCleaning: the build stops at its next batch and the swap refuses it."""
        self.aborted = True


@dataclass(slots=True)
class CleanBuild:
    """A build's output: per group, its flushed `.cleaned` segment (not in any map) and the
    snapshots of the segments it replaces; pass 1's end offset (the next checkpoint)."""

    plan: CleanPlan
    end_offset: int
    map_entries: int
    groups: list[tuple[LogSegment, tuple[SegmentSnapshot, ...]]]
    stats: _Stats

    def discard(self) -> None:
        """Delete the `.cleaned` files (the owner's step when the swap refuses the build)."""
        for cleaned, _ in self.groups:
            cleaned.delete_files()


def _no_fault(step: CleanerStep) -> None:
    """Outside tests nothing stops the cleaner."""


# -- which part of a log to clean ---------------------------------------------------------


def cleanable_offsets(log: Log, checkpointed_offset: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, checkpoint reset) of `log` (Kafka's
    LogCleanerManager.cleanableOffsets, with the uncleanable offset rounded down to its segment)."""
    first_dirty = log.log_start_offset if checkpointed_offset is None else checkpointed_offset
    reset = not log.log_start_offset <= first_dirty <= log.log_end_offset
    if reset:
        first_dirty = log.log_start_offset
    active = log.segments.active_segment
    bound = min(active.base_offset, log.high_watermark)
    lag_ms = log.config.min_compaction_lag_ms
    if lag_ms > 0:
        for segment in log.segments.values_from(first_dirty):
            if segment.base_offset >= bound:
                break
            if segment.largest_timestamp > now_ms - lag_ms:
                bound = segment.base_offset
                break
    holder = log.segments.floor_segment(bound)
    first_uncleanable = (holder or log.segments.first_segment).base_offset
    assert first_uncleanable <= active.base_offset, f"{first_uncleanable} > {active.base_offset} {log.name}"
    assert first_uncleanable <= max(log.high_watermark, log.segments.first_segment.base_offset), log.name
    return first_dirty, first_uncleanable, checkpointed_offset is None or reset


def log_to_clean(log: Log, checkpointed_offset: int | None, now_ms: int) -> LogToClean:
    """The clean and dirty parts of `log` given its checkpointed first dirty offset."""
    first_dirty, first_uncleanable, reset = cleanable_offsets(log, checkpointed_offset, now_ms)
    clean_bytes = sum(segment.size for segment in log.segments.values_before(first_dirty))
    cleanable_bytes = sum(segment.size for segment in _dirty_segments(log, first_dirty, first_uncleanable))
    return LogToClean(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, reset)


def needs_cleaning(to_clean: LogToClean, min_cleanable_dirty_ratio: float) -> bool:
    """Some dirty bytes and a dirty ratio at or above the threshold."""
    return to_clean.cleanable_bytes > 0 and to_clean.cleanable_ratio >= min_cleanable_dirty_ratio


def _dirty_segments(log: Log, first_dirty: int, first_uncleanable: int) -> list[LogSegment]:
    """Segments overlapping [first_dirty, first_uncleanable)."""
    if first_dirty >= first_uncleanable:
        return []
    return [s for s in log.segments.values_from(first_dirty) if s.base_offset < first_uncleanable]


def group_segments_by_size(segments: Sequence[SegmentSnapshot], segment_bytes: int,
                           index_bytes_max: int) -> list[list[SegmentSnapshot]]:
    """Consecutive runs of `segments` that fit one segment (Kafka's groupSegmentsBySize): total
    log bytes <= segment.bytes, each index's total bytes <= segment.index.bytes, and every offset
    within 2**31-1 of the group's base offset. A segment alone always forms a group."""
    groups: list[list[SegmentSnapshot]] = []
    slot = 0
    while slot < len(segments):
        group = [segments[slot]]
        log_bytes = group[0].size
        offset_index_bytes = group[0].offset_index_bytes
        time_index_bytes = group[0].time_index_bytes
        slot += 1
        while slot < len(segments):
            candidate = segments[slot]
            fits = (
                log_bytes + candidate.size <= segment_bytes
                and offset_index_bytes + candidate.offset_index_bytes <= index_bytes_max
                and time_index_bytes + candidate.time_index_bytes <= index_bytes_max
                and (candidate.size == 0 or candidate.next_offset - 1 - group[0].base_offset <= INT32_MAX)
            )
            if not fits:
                break
            group.append(candidate)
            log_bytes += candidate.size
            offset_index_bytes += candidate.offset_index_bytes
            time_index_bytes += candidate.time_index_bytes
            slot += 1
        groups.append(group)
    return groups


# -- reading and rewriting batches ---------------------------------------------------------


def _iter_batches(segment: SegmentSnapshot, plan: CleanPlan) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of a planned segment, through the build's own handle on its file, a chunk at a
    time rather than one read per header; checks before each batch that the plan is not aborted."""
    try:
        file = open(segment.log_path, "rb", buffering=0)  # noqa: SIM115 (closed below, also when abandoned)
    except FileNotFoundError as gone:
        raise LogCleaningAbortedError(f"{segment.log_path} is gone: the log changed during the build") from gone
    with file:
        position = 0
        while position < segment.size:
            chunk = _read_planned(file.fileno(), position, min(_READ_CHUNK_BYTES, segment.size - position), segment)
            consumed = 0
            for local, header in iter_headers(chunk):
                _check_done(plan)
                consumed = local + header.size_in_bytes
                yield header, chunk[local:consumed]
            if consumed == 0:  # a batch larger than the chunk
                _check_done(plan)
                header = read_header(chunk)
                consumed = header.size_in_bytes
                yield header, _read_planned(file.fileno(), position, consumed, segment)
            position += consumed


def _read_planned(fd: int, position: int, size: int, segment: SegmentSnapshot) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) < size:
        raise LogCleaningAbortedError(
            f"{segment.log_path} holds fewer than the {segment.size} bytes planned: the log changed during the build")
    return data


def _check_done(plan: CleanPlan) -> None:
    """Kafka's checkDone: stop the build once its owner has aborted the plan."""
    if plan.aborted:
        raise LogCleaningAbortedError(f"cleaning of {plan.topic_partition} was aborted")


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The batch's KIP-534 delete horizon, or None when the cleaner has not set one."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None


def _with_delete_horizon_flag(batch: bytes) -> bytes:
    """Copy of `batch` with attribute bit 6 set and the CRC recomputed (the caller has already put
    the horizon in baseTimestamp)."""
    rewritten = bytearray(batch)
    attributes = _INT16.unpack_from(rewritten, _ATTRIBUTES_POSITION)[0]
    _INT16.pack_into(rewritten, _ATTRIBUTES_POSITION, attributes | DELETE_HORIZON_MASK)
    with memoryview(rewritten) as view:
        _UINT32.pack_into(rewritten, _CRC_POSITION, crc32c(view[_ATTRIBUTES_POSITION:]))
    return bytes(rewritten)


def _empty_batch(header: BatchHeader) -> bytes:
    """A batch with no records that keeps `header`'s offsets, epoch, timestamps and producer
    fields (Kafka's DefaultRecordBatch.writeEmptyHeader); it has no codec, nothing being compressed."""
    tail = _EMPTY_HEADER_TAIL.pack(
        header.attributes & ~_COMPRESSION_MASK, header.last_offset_delta, header.base_timestamp,
        header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence, 0,
    )
    head = _EMPTY_HEADER_HEAD.pack(
        header.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD, header.partition_leader_epoch, MAGIC, crc32c(tail)
    )
    return head + tail


def _retain_record(record: Record, offset_map: _OffsetMap, horizon_ms: int | None, now_ms: int) -> bool:
    """Kafka's Cleaner.shouldRetainRecord; records at or above the end offset were not mapped and stay."""
    if record.offset >= offset_map.end_offset:
        return True
    if record.key is None:
        return False
    if record.offset < offset_map.offsets.get(record.key, -1):
        return False
    return record.value is not None or horizon_ms is None or now_ms < horizon_ms


def _filter_batch(header: BatchHeader, batch: bytes, offset_map: _OffsetMap, now_ms: int,
                  delete_retention_ms: int, stats: _Stats, producer_last: bool) -> bytes | None:
    """The batch as it stays after cleaning: unchanged, rebuilt with fewer records or a delete
    horizon, empty if it is an active producer's last (`producer_last`), or None when no record stays."""
    if header.base_offset >= offset_map.end_offset or header.is_control:
        stats.records_read += header.records_count
        return batch
    records = decode_records(batch)
    horizon_ms = delete_horizon_ms(header)
    kept = [record for record in records if _retain_record(record, offset_map, horizon_ms, now_ms)]
    stats.records_read += len(records)
    stats.records_removed += len(records) - len(kept)
    if not kept:
        return _empty_batch(header) if producer_last else None
    set_horizon = horizon_ms is None and any(record.value is None for record in kept)
    if len(kept) == len(records) and not set_horizon:
        return batch
    if set_horizon:
        horizon_ms = min(now_ms + delete_retention_ms, _INT64_MAX)
    rebuilt = build_batch(
        kept,
        base_offset=header.base_offset,
        keep_offsets=True,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=horizon_ms,
        compression=header.compression,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        timestamp_type=header.timestamp_type,
        is_transactional=header.is_transactional,
    )
    return rebuilt if horizon_ms is None else _with_delete_horizon_flag(rebuilt)


# -- the cleaner ---------------------------------------------------------------------------


class Cleaner:
    """Plans and swaps in cleans of one log dir's logs and owns its cleaner-offset-checkpoint; the
    build between them (`build_cleaned_segments`) may run on another thread.

    `dedupe_entries_max` bounds pass 1's map (keys); a clean covers at least one dirty batch even
    when that batch alone holds more keys. One owner, no locks; time is passed in.
    """

    def __init__(self, checkpoint: OffsetCheckpointFile, dedupe_entries_max: int = DEDUPE_ENTRIES_MAX) -> None:
        assert dedupe_entries_max >= 1, f"dedupe_entries_max={dedupe_entries_max}"
        self.checkpoint = checkpoint
        self.dedupe_entries_max = dedupe_entries_max

    # -- checkpoint ---------------------------------------------------------------------

    def checkpointed_offset(self, log: Log) -> int | None:
        return self.checkpoint.read().get(TopicPartition.from_dir_name(log.name))

    def _write_checkpoint(self, topic_partition: TopicPartition, offset: int | None) -> None:
        offsets = self.checkpoint.read()
        if offset is None:
            offsets.pop(topic_partition, None)
        else:
            offsets[topic_partition] = offset
        self.checkpoint.write(offsets)

    def maybe_truncate_checkpoint(self, topic_partition: TopicPartition, offset: int) -> int | None:
        """Lower the partition's first dirty offset to `offset` (the log was truncated there);
        return the old value, or None if it was not above `offset`."""
        old = self.checkpoint.read().get(topic_partition)
        if old is None or old <= offset:
            return None
        self._write_checkpoint(topic_partition, offset)
        return old

    def remove_checkpoint(self, topic_partition: TopicPartition) -> None:
        """Forget a deleted partition."""
        self._write_checkpoint(topic_partition, None)

    # -- cleaning -----------------------------------------------------------------------

    def log_to_clean(self, log: Log, now_ms: int) -> LogToClean:
        return log_to_clean(log, self.checkpointed_offset(log), now_ms)

    def maybe_plan(self, log: Log, now_ms: int) -> CleanPlan | None:
        """A plan for `log` if its policy includes compact and its dirty ratio has reached
        min.cleanable.dirty.ratio; None otherwise."""
        if not log.config.compact:
            return None
        to_clean = self.log_to_clean(log, now_ms)
        if not needs_cleaning(to_clean, log.config.min_cleanable_dirty_ratio):
            return None
        return self._plan(log, to_clean, now_ms)

    def plan(self, log: Log, now_ms: int) -> CleanPlan:
        """A plan for `log` now, whatever its ratio; reads no record (on the log's owner)."""
        return self._plan(log, self.log_to_clean(log, now_ms), now_ms)

    def _plan(self, log: Log, to_clean: LogToClean, now_ms: int) -> CleanPlan:
        planned = log.segments.values_before(to_clean.first_uncleanable_offset)
        assert all(segment is not log.segments.active_segment for segment in planned), f"{log.name}: active planned"
        return CleanPlan(
            log=log,
            topic_partition=TopicPartition.from_dir_name(log.name),
            directory=log.directory,
            config=log.config,
            now_ms=now_ms,
            to_clean=to_clean,
            segments=tuple(SegmentSnapshot.of(segment) for segment in planned),
            producers_last={entry.batches[-1].last_offset: producer_id
                            for producer_id, entry in log.producer_state.producers.items()},
            dedupe_entries_max=self.dedupe_entries_max,
        )

    def maybe_clean(self, log: Log, now_ms: int, fault: Fault | None = None) -> CleanResult | None:
        """Clean `log` now if `maybe_plan` gives a plan; None otherwise."""
        plan = self.maybe_plan(log, now_ms)
        return None if plan is None else self._clean(log, plan, now_ms, fault)

    def clean(self, log: Log, now_ms: int, fault: Fault | None = None) -> CleanResult:
        """Compact `log` now, whatever its ratio (Kafka's Cleaner.doClean): plan, build and swap in
        a row, on the caller's thread; write the checkpoint."""
        return self._clean(log, self.plan(log, now_ms), now_ms, fault)

    def _clean(self, log: Log, plan: CleanPlan, now_ms: int, fault: Fault | None) -> CleanResult:
        outcome = self.swap(log, build_cleaned_segments(plan, fault), now_ms, fault)
        assert isinstance(outcome, CleanResult), f"{log.name}: nothing ran between build and swap, yet {outcome}"
        return outcome

    def swap(self, log: Log, build: CleanBuild, now_ms: int, fault: Fault | None = None) -> CleanResult | DiscardReason:
        """Steps 2-4 for every group of `build`, then the checkpoint (on the log's owner). A build the
        log has moved away from is deleted instead, and the reason returned."""
        fault = fault or _no_fault
        reason = _discard_reason(log, build)
        if reason is not None:
            build.discard()
            return reason
        for cleaned, group in build.groups:
            _replace_segments(log, cleaned, [snapshot.segment for snapshot in group], now_ms, fault)
        plan = build.plan
        self._write_checkpoint(plan.topic_partition, build.end_offset)
        fault(CleanerStep.CHECKPOINT_WRITTEN)
        return CleanResult(
            first_dirty_offset=plan.to_clean.first_dirty_offset,
            end_offset=build.end_offset,
            first_uncleanable_offset=plan.to_clean.first_uncleanable_offset,
            map_entries=build.map_entries,
            segments_before=sum(len(group) for _, group in build.groups),
            segments_after=len(build.groups),
            bytes_read=build.stats.bytes_read,
            bytes_written=build.stats.bytes_written,
            records_read=build.stats.records_read,
            records_removed=build.stats.records_removed,
        )


def _discard_reason(log: Log, build: CleanBuild) -> DiscardReason | None:
    """Why `build` no longer fits `log`, or None. Segments the build did not read (later ones, rolled
    or appended to during the build) do not matter: the swap leaves them as they are."""
    if build.plan.aborted:
        return DiscardReason.ABORTED
    if log is not build.plan.log:
        return DiscardReason.LOG_REPLACED
    active_base_offset = log.segments.active_segment.base_offset
    for _, group in build.groups:
        for snapshot in group:
            still = log.segments.get(snapshot.base_offset)
            if still is not snapshot.segment or still.size != snapshot.size:
                return DiscardReason.SEGMENT_CHANGED
            if snapshot.base_offset >= active_base_offset:
                return DiscardReason.SEGMENT_CHANGED
    return None


# -- the build: any thread; touches only files it creates and reads the planned ones -------


def build_cleaned_segments(plan: CleanPlan, fault: Fault | None = None) -> CleanBuild:
    """Passes 1 and 2 of `plan` into flushed `.cleaned` segments, one per group (step 1).

    Raises LogCleaningAbortedError when the plan is aborted or a planned file changed. On any
    exception the `.cleaned` files written so far are deleted; a crash (a test's fault raising a
    BaseException, as kill -9 runs nothing more) leaves them to LogLoader."""
    fault = fault or _no_fault
    offset_map = _build_offset_map(plan)
    upper = min(offset_map.end_offset, plan.to_clean.first_uncleanable_offset)
    candidates = [snapshot for snapshot in plan.segments if snapshot.base_offset < upper]
    groups = group_segments_by_size(candidates, plan.config.segment_bytes, plan.config.segment_index_bytes)
    stats = _Stats()
    built: list[tuple[LogSegment, tuple[SegmentSnapshot, ...]]] = []
    try:
        for group in groups:
            _check_done(plan)
            cleaned = create_segment(plan.directory, plan.config, group[0].base_offset, plan.now_ms, CLEANED_SUFFIX)
            built.append((cleaned, tuple(group)))
            _clean_into(cleaned, group, offset_map, plan, stats, fault)
    except Exception as failure:
        for cleaned, _ in built:
            cleaned.delete_files()
        if plan.aborted and not isinstance(failure, LogCleaningAbortedError):
            # The owner aborted it and then changed its files (a deleted log's directory is gone).
            raise LogCleaningAbortedError(f"cleaning of {plan.topic_partition} was aborted") from failure
        raise
    return CleanBuild(plan, offset_map.end_offset, len(offset_map.offsets), built, stats)


def _dirty_snapshots(plan: CleanPlan) -> list[SegmentSnapshot]:
    """Planned segments overlapping [first dirty, first uncleanable)."""
    first_dirty = plan.to_clean.first_dirty_offset
    if first_dirty >= plan.to_clean.first_uncleanable_offset:
        return []
    slot = bisect.bisect_right([snapshot.base_offset for snapshot in plan.segments], first_dirty)
    return list(plan.segments[max(slot - 1, 0):])


def _build_offset_map(plan: CleanPlan) -> _OffsetMap:
    """Pass 1: key -> last offset over the dirty part, whole batches, until the map is full."""
    first_dirty = plan.to_clean.first_dirty_offset
    offset_map = _OffsetMap(end_offset=first_dirty)
    offsets = offset_map.offsets
    for segment in _dirty_snapshots(plan):
        for header, batch in _iter_batches(segment, plan):
            if header.last_offset < first_dirty:
                continue
            keyed = [] if header.is_control else [
                (record.key, record.offset) for record in decode_records(batch)
                if record.key is not None and record.offset >= first_dirty
            ]
            if offsets and len(offsets) + len(keyed) > plan.dedupe_entries_max:
                new_keys = len({key for key, _ in keyed if key not in offsets})  # exact, only near the bound
                if len(offsets) + new_keys > plan.dedupe_entries_max:
                    return offset_map
            offsets.update(keyed)
            offset_map.end_offset = header.next_offset
    offset_map.end_offset = max(first_dirty, plan.to_clean.first_uncleanable_offset)
    return offset_map


def _clean_into(cleaned: LogSegment, group: list[SegmentSnapshot], offset_map: _OffsetMap, plan: CleanPlan,
                stats: _Stats, fault: Fault) -> None:
    """Pass 2 for one group: copy what stays of it into `cleaned`, then trim and fsync that."""
    last_dropped: BatchHeader | None = None
    for old in group:
        for header, batch in _iter_batches(old, plan):
            stats.bytes_read += len(batch)
            producer_last = plan.producers_last.get(header.last_offset) == header.producer_id
            kept = _filter_batch(header, batch, offset_map, plan.now_ms, plan.config.delete_retention_ms, stats,
                                 producer_last)
            last_dropped = header if kept is None else None
            if kept is not None:
                cleaned.append((kept,), header if kept is batch else read_header(kept))
        fault(CleanerStep.CLEANED_APPENDED)
    if last_dropped is not None:
        # Keep the group's offset range: LogLoader replaces old segments by the swap's range.
        empty = _empty_batch(last_dropped)
        cleaned.append((empty,), read_header(empty))
    group_end = max((old.next_offset for old in group if old.size), default=group[0].base_offset)
    assert cleaned.next_offset == group_end, f"{cleaned} ends before the group {group} did"
    stats.bytes_written += cleaned.size
    cleaned.on_become_inactive()
    modified_ns = group[-1].modified_ns
    os.utime(cleaned.log_path, ns=(modified_ns, modified_ns))  # retention by mtime, as Kafka keeps it
    cleaned.flush()
    fault(CleanerStep.CLEANED_FLUSHED)


def _replace_segments(log: Log, cleaned: LogSegment, group: list[LogSegment], now_ms: int, fault: Fault) -> None:
    """Steps 2-4 (Kafka's LocalLog.replaceSegments): `.swap`, old segments `.deleted`, final name."""
    cleaned.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
    fsync_directory(log.directory)
    fault(CleanerStep.SWAP_RENAMED)
    for old in group:
        log._remove_segment(old, now_ms)
        fault(CleanerStep.OLD_SEGMENT_DELETED)
    cleaned.change_file_suffixes(SWAP_SUFFIX, "")
    fsync_directory(log.directory)
    log.segments.add(cleaned)
    fault(CleanerStep.SWAP_COMPLETED)
