"""Log: one partition's replica on disk — segments, key offsets, epochs, retention, flushing.

This is the storage API the node uses (Kafka's LocalLog and UnifiedLog in one, without
replication, scheduling or metrics). Key offsets, with the invariant
`log_start_offset <= high_watermark <= log_end_offset` after every change:
- `log_start_offset`: the first offset a reader may ask for; raised by retention,
  `delete_records` and (on followers) the leader's start offset;
- `high_watermark`: owned by replication, which sets it; reads by consumers stop there;
- `log_end_offset` (LEO): one past the last appended offset;
- `recovery_point`: everything below it is fsynced; recovery re-validates only above it.
  A leader-epoch entry whose checkpoint write was deferred (leader_epoch_cache.py) lies at or
  above it, in the active segment, which a reload after a crash always recovers, finding its epoch
  in the batches again: a roll or a flush writes such entries first.

Time is passed in as `now_ms`; the log reads no clock. Files deleted by retention or
truncation leave the segment map at once, are renamed `*.deleted` and removed by
`delete_expired_files` once `file.delete.delay.ms` has passed, so a reader that still holds
the old segment finishes its read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from storage.checkpoint import EpochEntry, fsync_directory
from storage.config import LogConfig, TimestampType
from storage.errors import InvalidRecordError, KafkaStorageError, OffsetOutOfRangeError, RecordTooLargeError
from storage.leader_epoch_cache import LeaderEpochCache
from storage.log_segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    RollReason,
    TimestampAndOffset,
    file_name,
)
from storage.log_segments import LogSegments
from storage.producer_state import ProducerStateManager, snapshot_file_name
from storage.records import (
    NO_PRODUCER_ID,
    BatchHeader,
    assign_offsets,
    decode_records,
    read_header,
    validate_batch,
    with_log_append_time,
)
from storage.retention import SegmentDeletionReason, SegmentInfo, deletable_segments
from storage.time_index import NO_TIMESTAMP
from wire.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP


class LogStartOffsetIncrementReason(Enum):
    CLIENT_RECORD_DELETION = "client delete records"
    SEGMENT_DELETION = "segment deletion"
    LEADER_OFFSET_INCREMENTED = "leader log start offset incremented"
    RECOVERY_ELECTION = "recovery election"  # ours: the offsets below were used (PartitionRegistration)


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did: offsets assigned, the largest timestamp, the bytes written."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time_ms: int
    records_count: int
    valid_bytes: int
    rolled: RollReason | None
    duplicate: bool = False  # an idempotent producer's retry of a batch in the log: nothing was appended


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Raw batch bytes starting at or before `fetch_offset` (whole batches; may be empty)."""

    fetch_offset: int
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class Log:
    """A partition's log directory. Build with `LogLoader.load`; one owner, no locks."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int,
        leader_epoch_cache: LeaderEpochCache,
        producer_state: ProducerStateManager,
        now_ms: int,
    ) -> None:
        self.directory = directory
        self.config = config
        self.segments = segments
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.high_watermark = high_watermark
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.last_flush_ms = now_ms
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._check_offsets()

    # -- offsets ------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self.segments.active_segment.next_offset

    @property
    def name(self) -> str:
        return self.directory.name

    def assign_epoch(self, epoch: int, start_offset: int) -> bool:
        """The leader-epoch cache's `assign`, a new latest entry's checkpoint write deferred: it is at
        or past the active segment's base, which an unclean reload recovers."""
        return self.leader_epoch_cache.assign(epoch, start_offset, defer_write=True)

    def size_in_bytes(self) -> int:
        return self.segments.size_in_bytes()

    def _check_offsets(self) -> None:
        assert self.log_start_offset <= self.high_watermark, (
            f"log_start_offset={self.log_start_offset} high_watermark={self.high_watermark} {self.name}"
        )
        assert self.high_watermark <= self.log_end_offset, (
            f"high_watermark={self.high_watermark} log_end_offset={self.log_end_offset} {self.name}"
        )
        assert self.recovery_point <= self.log_end_offset, (
            f"recovery_point={self.recovery_point} log_end_offset={self.log_end_offset} {self.name}"
        )
        pending_since = self.leader_epoch_cache.write_pending_since
        unwritten_floor = max(self.recovery_point, self.segments.active_segment.base_offset)
        assert pending_since is None or pending_since >= unwritten_floor, (
            f"epoch entry from {pending_since} unwritten below the recovery point or the active segment {self.name}"
        )

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log_start_offset, LEO]; return the value set.

        Replication decides when it moves (and that a leader's never falls); storage only
        keeps it inside the log."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self._check_offsets()
        return self.high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> int | None:
        """Raise the HW to `offset` if that is higher; return the old HW, or None if unchanged."""
        if offset <= self.high_watermark:
            return None
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"high watermark {offset} would pass the log end offset {self.log_end_offset} of {self.name}"
            )
        old = self.high_watermark
        self.high_watermark = offset
        self._check_offsets()
        return old

    def maybe_increment_log_start_offset(self, offset: int, reason: LogStartOffsetIncrementReason) -> int | None:
        """Raise logStartOffset (never above the HW); return the old value, or None if unchanged."""
        if offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.name} to {offset}: it is above the high "
                f"watermark {self.high_watermark}; records can be deleted only up to the high watermark"
            )
        if offset <= self.log_start_offset:
            return None
        old = self.log_start_offset
        self.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self._check_offsets()
        return old

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords: raise logStartOffset to `offset` (-1 means the HW).

        Segments wholly below it go at the next retention pass. Returns the new logStartOffset."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"cannot delete records before offset {offset}; use -1 or an offset >= 0")
        self.maybe_increment_log_start_offset(target, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
        return self.log_start_offset

    # -- appending ----------------------------------------------------------------------

    def append_as_leader(self, records: bytes, leader_epoch: int, now_ms: int) -> LogAppendInfo:
        """Validate client batches, assign offsets from the LEO, stamp the epoch, append.

        Validation covers every batch before any byte is written, so a bad request leaves
        the log unchanged. Only headers are rewritten; records are never decoded or copied
        (except for LogAppendTime topics, whose batches get a new maxTimestamp and CRC)."""
        headers = self._validate(records, check_records=True)
        duplicate = self._check_producers(headers)
        if duplicate is not None:
            return duplicate
        assigned: list[tuple[Sequence[bytes | memoryview], BatchHeader]] = []
        next_offset = self.log_end_offset
        log_append_time = self.config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
        for position, header in headers:
            if log_append_time:
                batch = with_log_append_time(records[position : position + header.size_in_bytes], now_ms)
                assigned.append(assign_offsets(batch, 0, read_header(batch), next_offset, leader_epoch))
            else:
                assigned.append(assign_offsets(records, position, header, next_offset, leader_epoch))
            next_offset += header.last_offset_delta + 1
        return self._append(assigned, now_ms, now_ms if log_append_time else -1, leader_epoch)

    def _check_producers(self, headers: list[tuple[int, BatchHeader]]) -> LogAppendInfo | None:
        """Idempotent producers' batches (storage/producer_state.py): the answer for a retry of a
        batch in the log (its offsets; nothing is appended), else None; raises on an epoch or
        sequence the producer's state refuses."""
        for _, header in headers:
            if header.producer_id == NO_PRODUCER_ID:
                continue
            if len(headers) > 1:
                raise InvalidRecordError(
                    f"a batch of idempotent producer {header.producer_id} must come alone in the records for "
                    f"{self.name} (Kafka's rule since produce v3)")
            kept = self.producer_state.check(header)
            if kept is not None:
                return LogAppendInfo(kept.first_offset, kept.last_offset, kept.timestamp, -1, header.records_count,
                                     0, None, duplicate=True)
        return None

    def append_as_follower(self, records: bytes, now_ms: int) -> LogAppendInfo:
        """Append batches fetched from the leader unchanged (offsets and epochs kept)."""
        headers = self._validate(records, check_records=False)
        previous = self.log_end_offset
        for _, header in headers:
            if header.base_offset < previous:
                raise InvalidRecordError(
                    f"batch at offset {header.base_offset} is below the log end offset {previous} of "
                    f"{self.name}; the follower must truncate before appending"
                )
            previous = header.next_offset
        view = memoryview(records)
        batches = [((view[p : p + h.size_in_bytes],), h) for p, h in headers]
        return self._append(batches, now_ms, -1, None)

    def _validate(self, records: bytes, check_records: bool) -> list[tuple[int, BatchHeader]]:
        headers: list[tuple[int, BatchHeader]] = []
        position = 0
        while position < len(records):
            header = validate_batch(records, position, self.config.max_message_bytes, check_records,
                                    self.config.max_decompressed_batch_bytes)
            if header.size_in_bytes > self.config.segment_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size_in_bytes} bytes is larger than segment.bytes="
                    f"{self.config.segment_bytes} of {self.name}; send smaller batches"
                )
            headers.append((position, header))
            position += header.size_in_bytes
        if not headers:
            raise InvalidRecordError(f"produce request for {self.name} holds no record batch")
        return headers

    def _append(self, batches: list[tuple[Sequence[bytes | memoryview], BatchHeader]], now_ms: int,
                log_append_time_ms: int, leader_epoch: int | None) -> LogAppendInfo:
        """Append validated batches in order, rolling first where a segment says so.

        All or nothing: if a write (or a roll) fails with OSError, the batches of the request
        already appended are taken back (`_undo_append`), then KafkaStorageError is raised (the
        OSError itself if the undo failed too). A failed flush after the append is an OSError:
        the records are in the log then."""
        rolled: RollReason | None = None
        max_timestamp = -1
        records_count = 0
        valid_bytes = 0
        segment_bytes, segment_ms = self.config.segment_bytes, self.config.segment_ms
        active = first_active = self.segments.active_segment
        # What `_undo_append` restores: read once per request, so the loop does no extra work.
        size_before = active.size
        offset_entries_before, time_entries_before = active.offset_index.entries, active.time_index.entries
        recovery_point_before = self.recovery_point
        # The epoch entries are copied just before the request's first assign (rare), not here.
        epochs_before: list[EpochEntry] | None = None
        epoch_cache = self.leader_epoch_cache
        try:
            for pieces, header in batches:
                size = header.size_in_bytes
                reason = active.should_roll(size, header, now_ms, segment_bytes, segment_ms)
                if reason is not None:
                    active = self.roll(now_ms, expected_next_offset=header.base_offset)
                    rolled = reason
                active.append(pieces, header)
                epoch = header.partition_leader_epoch if leader_epoch is None else leader_epoch
                latest = epoch_cache.latest_entry()
                # assign() is a no-op unless the epoch is new (or moves back); skip the call then.
                if epoch >= 0 and (latest is None or latest.epoch != epoch or latest.start_offset > header.base_offset):
                    if epochs_before is None:
                        epochs_before = epoch_cache.entries()
                    self.assign_epoch(epoch, header.base_offset)
                max_timestamp = max(max_timestamp, header.max_timestamp)
                records_count += header.records_count
                valid_bytes += size
        except OSError as failure:
            try:
                self._undo_append(first_active, size_before, offset_entries_before, time_entries_before,
                                  recovery_point_before, epochs_before)
            except Exception as undo_failure:
                # A disk step of the undo failed too: report it, caused by the write that failed first.
                undo_failure.add_note(f"raised while taking back a failed append to {self.name}")
                raise undo_failure from failure
            raise KafkaStorageError(
                f"writing to the log of {self.name} failed ({failure}); nothing was appended. "
                f"Check the log dir's disk (space, permissions); the request may be retried"
            ) from failure
        producer_state = self.producer_state
        for _, header in batches:
            if header.producer_id != NO_PRODUCER_ID:
                producer_state.update(header)
        producer_state.map_end_offset = batches[-1][1].next_offset
        if active.unflushed_messages >= self.config.flush_messages:
            self.flush(now_ms)
        return LogAppendInfo(
            first_offset=batches[0][1].base_offset,
            last_offset=batches[-1][1].last_offset,
            max_timestamp=max_timestamp,
            log_append_time_ms=log_append_time_ms,
            records_count=records_count,
            valid_bytes=valid_bytes,
            rolled=rolled,
        )

    def _undo_append(self, first_active: LogSegment, size: int, offset_entries: int, time_entries: int,
                     recovery_point: int, epochs: list[EpochEntry] | None) -> None:
        """Put the log back as it was before a request whose write failed part-way.

        `first_active` was the active segment then, with `size` bytes and the given numbers of
        index entries; `epochs` are the epoch cache's entries before the request's first
        `assign`, None if it made none. Not `truncate_to`, which is for readers' data: it would
        keep the segments this request rolled to as `.deleted` files, keep time-index entries the
        request added for older batches (the roll's final entry), and, when the request replaced
        an empty active segment, start the log afresh and clear the epoch cache.

        Memory first, then disk: should a disk step raise (the caller chains its error to the
        write's), the recovery point and the segment map are already as before the request, so
        the recovery point is not above the log end offset; the first segment and the files may
        still hold part of the request. A roll fsynced the first segment with the request's
        earlier batches, so after cutting them the segment and the directory (the rolled-to
        segments' deletion) are fsynced: a power loss cannot bring them back."""
        # Only a roll moves the recovery point during a request (it fsyncs the segment it leaves).
        fsynced_by_roll = self.recovery_point > recovery_point
        self.recovery_point = recovery_point
        replacement = None
        if self.segments.get(first_active.base_offset) is not first_active:
            # The request's first roll replaced an empty active segment (`roll`): make it again,
            # before the map changes, so that the map always has an active segment.
            assert size == 0, f"a segment of {size} bytes was replaced in {self.name}"
            replacement = self.new_segment(first_active.base_offset, first_active.created_ms)
        rolled_to: list[LogSegment] = []
        while (later := self.segments.higher_segment(first_active.base_offset)) is not None:
            # Rolled to by this request: nothing in it was ever acknowledged, so it goes now.
            rolled_to.append(self.segments.remove(later.base_offset))
        if replacement is not None:
            self.segments.add(replacement)
        self._check_offsets()
        for later in rolled_to:
            later.delete_files()
            (self.directory / snapshot_file_name(later.base_offset)).unlink(missing_ok=True)  # the roll's
        if replacement is None:
            first_active.undo_appends(size, offset_entries, time_entries)
            if fsynced_by_roll:
                first_active.flush()
        if rolled_to or replacement is not None:
            fsync_directory(self.directory)
        if epochs is not None:
            self.leader_epoch_cache.restore(epochs)
        self._check_offsets()

    def roll(self, now_ms: int, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected, LEO); a no-op on an empty active segment."""
        active = self.segments.active_segment
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        if active.size == 0 and active.base_offset == new_base:
            return active
        self.leader_epoch_cache.write_pending()  # the deferred entries leave the active segment
        if active.size == 0:
            # An empty active segment at a lower base (a follower jumping ahead) is replaced.
            self.segments.remove(active.base_offset)
            active.delete_files()
        else:
            active.on_become_inactive()
            active.flush()
            self.recovery_point = max(self.recovery_point, active.next_offset)
        segment = self.new_segment(new_base, now_ms)
        self.segments.add(segment)
        if new_base == self.producer_state.map_end_offset:
            self.producer_state.take_snapshot()  # the state of every batch below the new segment
        return segment

    def new_segment(self, base_offset: int, now_ms: int, suffix: str = "") -> LogSegment:
        """An empty writable segment at `base_offset`, not yet in the map (`create_segment`)."""
        return create_segment(self.directory, self.config, base_offset, now_ms, suffix)

    # -- reading ------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """Whole batches from the one holding `offset`, none at or past `max_offset` (the HW for
        consumers, the LEO for followers). OFFSET_OUT_OF_RANGE outside [logStartOffset, LEO]."""
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {end}] of {self.name}; "
                f"seek to {self.log_start_offset} (earliest) or {end} (latest)"
            )
        bound = end if max_offset is None else min(max_offset, end)
        data = b""
        if offset < bound:
            active = self.segments.active_segment
            # A read in the active segment (followers, tailing consumers) needs no floor lookup.
            candidates = (active,) if offset >= active.base_offset else self.segments.values_from(offset)
            for segment in candidates:
                found = segment.read(offset, max_bytes, max_offset=bound, min_one_message=min_one_message)
                if found is not None:
                    data = found[1]
                    break
        return FetchDataInfo(offset, data, self.high_watermark, self.log_start_offset, end)

    def damaged_from(self, offset: int) -> int:
        """Where to cut the log when a read found a batch it cannot trust at or before `offset`:
        the end of the sound run from the start of the segment holding `offset` (a scan of that
        segment), or `offset` if that run reaches it."""
        segment = self.segments.floor_segment(offset)
        return offset if segment is None else min(segment.sound_end(self.config.max_message_bytes), offset)

    def iter_batches(self, start_offset: int | None = None) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """(segment, position, header) of every batch from `start_offset` (tools and cleaner)."""
        start = self.log_start_offset if start_offset is None else start_offset
        for segment in self.segments.values_from(start):
            for position, header in segment.iter_headers():
                if header.last_offset >= start:
                    yield segment, position, header

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets on the log: -2 earliest, -1 latest, else the first record with
        timestamp >= target (segments by largestTimestamp, then the time and offset indexes)."""
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self.log_end_offset)
        for segment in self.segments:
            if segment.next_offset <= self.log_start_offset or segment.largest_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
        return None

    def offset_for_max_timestamp(self) -> TimestampAndOffset | None:
        """KIP-734's ListOffsets MAX_TIMESTAMP: the first record at or above logStartOffset with the
        largest timestamp (None when there is none). Segments wholly above logStartOffset answer
        from their kept maximum; the one holding logStartOffset from its batch headers, decoding
        only a batch that straddles logStartOffset."""
        start = self.log_start_offset
        best: tuple[int, LogSegment] | None = None
        for segment in self.segments.values_from(start):
            largest = segment.max_timestamp_so_far if segment.base_offset >= start else _largest_timestamp_from(
                segment, start)
            if largest >= 0 and (best is None or largest > best[0]):
                best = (largest, segment)
        return None if best is None else best[1].find_offset_by_timestamp(best[0], start)

    # -- truncation ---------------------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int) -> bool:
        """Drop everything at or above `offset` (a follower diverged); True if anything went."""
        if offset >= self.log_end_offset:
            return False
        if offset < self.segments.first_segment.base_offset:
            self.truncate_fully_and_start_at(offset, now_ms)
            return True
        removed = False
        for segment in list(self.segments):
            if segment.base_offset > offset:
                self._remove_segment(segment, now_ms)
                removed = True
        active = self.segments.active_segment
        active.truncate_to(offset)
        # The cut is made durable before the leader-epoch cache forgets the epochs it cut: after a
        # power loss between the two, the file's old length (or a `.deleted` rename) could come back
        # with batches of epochs the cache no longer lists, and truncation by leader epoch (KIP-101),
        # which reads the cache, would keep them.
        active.flush()
        if removed:
            fsync_directory(self.directory)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self.high_watermark)
        self.reload_producer_state()
        self._check_offsets()
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int, producer_snapshot: bytes = b"") -> None:
        """Delete every segment and start empty at `offset` (a follower behind the leader's
        logStartOffset, or a replica wiped by the leader), with the producers' state the leader had
        there (`producer_snapshot`, from its `producer_state_at_start`; none: no producers).

        Kafka starts such a follower with no producers, so the next leader takes an idempotent
        producer's retry of a batch that retention removed below `offset` as new (replication sim
        seed 659147698: written twice). The snapshot is written first, at `offset`, and the old
        segments' snapshots go only once the new segment exists: a crash in between reloads the old
        log, or an empty one at the checkpointed logStartOffset, each with a snapshot of its own
        (a follower restarting inside the leader's first batch keeps the leader's state there).
        Raises CorruptSnapshotError (a ValueError), changing nothing, for a snapshot that does not
        parse."""
        if producer_snapshot:
            self.producer_state.write_snapshot(offset, producer_snapshot)
        for segment in list(self.segments):
            self._remove_segment(segment, now_ms, keep_snapshot=True)
        self.segments.add(self.new_segment(offset, now_ms))
        fsync_directory(self.directory)  # the removals are durable before the cache forgets (truncate_to)
        self.leader_epoch_cache.clear_and_flush()
        self.log_start_offset = offset
        self.recovery_point = offset
        self.high_watermark = offset
        self.producer_state.delete_snapshots_below(offset if producer_snapshot else 2**63)  # all but the one written
        self.reload_producer_state()
        self._check_offsets()

    def producer_state_at_start(self) -> bytes:
        """The producers' state after every batch that ends below logStartOffset, as snapshot bytes:
        what a follower that starts empty there takes (`truncate_fully_and_start_at`)."""
        return self.producer_state.state_at(self._first_batch_offset(), self.log_start_offset, self._headers_from)

    def reload_producer_state(self) -> None:
        """Rebuild the producers' state for the log as it is now (load, truncation), from its first
        batch on disk: batches below logStartOffset not deleted yet were appended, and the state after
        them is the producers' state (Kafka replays from logStartOffset, and so forgets a producer
        whose batches a follower's raised logStartOffset passed before a crash: replication sim seed
        101, a retry of such a batch taken as new by the next leader and written twice)."""
        self.producer_state.load(self._first_batch_offset(), self.log_end_offset, self._headers_from)

    def _first_batch_offset(self) -> int:
        """Where the batches on disk start (below logStartOffset until retention deletes them)."""
        return min(self.log_start_offset, self.segments.first_segment.base_offset)

    def _headers_from(self, start: int) -> Iterator[BatchHeader]:
        return (header for _, _, header in self.iter_batches(start))

    # -- retention ----------------------------------------------------------------------

    def delete_old_segments(self, now_ms: int) -> list[tuple[SegmentDeletionReason, int]]:
        """Apply retention (time, size, logStartOffset) on segments below the HW.

        Returns (reason, count) per deletion. Rolls first when every segment would go, so the
        log always keeps an active segment (seed 002)."""
        deleted: list[tuple[SegmentDeletionReason, int]] = []
        for _ in range(len(self.segments) + 1):
            count, reason = deletable_segments(
                [SegmentInfo(s.base_offset, s.size, s.largest_timestamp) for s in self.segments],
                log_end_offset=self.log_end_offset,
                high_watermark=self.high_watermark,
                log_start_offset=self.log_start_offset,
                now_ms=now_ms,
                retention_ms=self.config.retention_ms,
                retention_bytes=self.config.retention_bytes,
                delete_policy=self.config.delete,
            )
            if reason is None:
                break
            doomed = list(self.segments)[:count]
            if count == len(self.segments):
                self.roll(now_ms)
            for segment in doomed:
                self._remove_segment(segment, now_ms)
            new_start = self.segments.first_segment.base_offset
            if new_start > self.log_start_offset:
                self.maybe_increment_log_start_offset(new_start, LogStartOffsetIncrementReason.SEGMENT_DELETION)
            deleted.append((reason, count))
        return deleted

    def _remove_segment(self, segment: LogSegment, now_ms: int, keep_snapshot: bool = False) -> None:
        """Take a segment out of the map now; rename its files `.deleted` for a delayed delete.
        The producer snapshot taken at its base goes with it, unless the caller deletes it later."""
        self.segments.remove(segment.base_offset)
        if not keep_snapshot:
            (self.directory / snapshot_file_name(segment.base_offset)).unlink(missing_ok=True)
        # A segment at the same base may already wait for deletion (two cleans within
        # file.delete.delay.ms): delete that one now so the rename cannot overwrite it.
        for pending in [s for _, s in self._pending_deletes if s.base_offset == segment.base_offset]:
            pending.delete_files()
        self._pending_deletes = [(d, s) for d, s in self._pending_deletes if s.base_offset != segment.base_offset]
        segment.change_file_suffixes("", DELETED_SUFFIX)
        self._pending_deletes.append((now_ms + self.config.file_delete_delay_ms, segment))

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove `.deleted` files whose delay has passed; return how many segments went."""
        due = [segment for deadline, segment in self._pending_deletes if deadline <= now_ms]
        self._pending_deletes = [(d, s) for d, s in self._pending_deletes if d > now_ms]
        for segment in due:
            segment.delete_files()
        return len(due)

    # -- durability ---------------------------------------------------------------------

    def flush(self, now_ms: int) -> None:
        """fsync every segment at or above the recovery point; move the recovery point to LEO (past
        the leader-epoch entries whose write was deferred: written first)."""
        self.leader_epoch_cache.write_pending()
        for segment in self.segments.values_from(self.recovery_point):
            segment.flush()
        self.recovery_point = self.log_end_offset
        self.last_flush_ms = now_ms

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when `flush.ms` has passed since the last flush (Kafka's default: never)."""
        if now_ms - self.last_flush_ms < self.config.flush_ms or self.recovery_point == self.log_end_offset:
            return False
        self.flush(now_ms)
        return True

    def close(self) -> None:
        """Flush-free close: trims indexes and snapshots the producers' state at the log end (the
        next load replays nothing) and writes deferred leader-epoch entries (a clean shutdown's next
        load recovers nothing). The owner flushes first for a clean shutdown."""
        self.leader_epoch_cache.write_pending()
        self.producer_state.take_snapshot()
        for segment in self.segments:
            segment.close()
        for _, segment in self._pending_deletes:
            segment.close_handlers()

    def close_handlers(self) -> None:
        """Close every file without writing to it: what a killed process leaves behind."""
        for segment in [*self.segments, *(segment for _, segment in self._pending_deletes)]:
            segment.close_handlers()

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, start={self.log_start_offset}, hw={self.high_watermark}, "
            f"leo={self.log_end_offset}, segments={len(self.segments)})"
        )


def create_segment(directory: Path, config: LogConfig, base_offset: int, now_ms: int, suffix: str = "") -> LogSegment:
    """An empty writable segment at `base_offset` in `directory`. Leftover empty files of that name
    go first; a regular `.log` that holds data is never overwritten. Files with a suffix (the
    cleaner's `.cleaned`) are scratch output and always replaced. Touches no `Log`: the cleaner's
    build creates its segments with it outside the log's owner (storage/cleaner.py)."""
    for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        leftover = directory / (file_name(base_offset, kind) + suffix)
        if not suffix and kind == LOG_SUFFIX and leftover.exists() and leftover.stat().st_size > 0:
            raise InvalidRecordError(f"{leftover} already holds data; refusing to overwrite it")
        leftover.unlink(missing_ok=True)
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        created_ms=now_ms,
        writable=True,
        suffix=suffix,
    )


def _largest_timestamp_from(segment: LogSegment, start: int) -> int:
    """The largest record timestamp at or above offset `start` in `segment` (NO_TIMESTAMP: none)."""
    largest = NO_TIMESTAMP
    for position, header in segment.iter_headers():
        if header.last_offset < start:
            continue
        if header.base_offset >= start:
            largest = max(largest, header.max_timestamp)
        else:
            records = decode_records(segment.read_bytes(position, header.size_in_bytes))
            largest = max([largest] + [record.timestamp for record in records if record.offset >= start])
    return largest
