"""LogSegment: one `.log` file of record batches and its `.index` and `.timeindex`.

Files are named by the segment's base offset, 20 digits zero-padded
(`00000000000000000368.log`). Only the active (last) segment of a log is appended to; the
others are read-only. The log file is a plain concatenation of RecordBatch v2 bytes. After
every `index.interval.bytes` of appended batches the segment adds an offset-index entry
(the batch's last offset, its position) and offers the time index (the largest timestamp so
far, the offset of the batch that holds it).

The segment does not validate batches (the log does, before calling `append`) but `recover`
re-validates every batch, rebuilds both indexes and cuts the file at the first bad byte.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from storage.errors import CorruptIndexError, CorruptRecordError, StorageError
from storage.offset_index import INT32_MAX, OffsetIndex
from storage.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    decode_records,
    read_header,
    validate_batch,
)
from storage.time_index import NO_TIMESTAMP, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SCAN_CHUNK_BYTES = 1024 * 1024
_RECENT_BATCHES_MAX = 64


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class RollReason(Enum):
    """Why a segment rolled (Kafka's four conditions, plus an explicit request)."""

    SEGMENT_BYTES = "segment.bytes"
    SEGMENT_MS = "segment.ms"
    INDEX_FULL = "index full"
    OFFSET_OVERFLOW = "relative offset overflow"
    REQUESTED = "requested"


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int


class LogSegment:
    """A segment: its three files, its size and what its indexes need to keep appending.

    State: `size` (bytes in the log file), `next_offset` (one past the last offset in it, or
    the base offset when empty), `max_timestamp_so_far` and `offset_of_max_timestamp_so_far`
    (for the time index and for retention by time), `rolling_based_timestamp` (the first
    batch's max timestamp: Kafka measures segment.ms from it), `created_ms`.

    Recent batches: the last offset and position of the active segment's last batches (up to 64, at
    least the last 32 once that many were appended), valid while they end at `size`. Followers and
    tailing consumers read just below the log end, and these answer such a read without the offset
    index or a header read from the file: Kafka keeps the LEO's LogOffsetMetadata (segment and
    position) for the same reason. Other reads walk the headers from an index entry as before;
    truncation and undo re-track from the cut; a roll forgets them.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        created_ms: int,
        writable: bool,
        suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = directory / (file_name(base_offset, LOG_SUFFIX) + suffix)
        self._file = open(self.log_path, "r+b" if self.log_path.exists() else "w+b", buffering=0)  # noqa: SIM115
        self.size = os.fstat(self._file.fileno()).st_size
        index_path = directory / (file_name(base_offset, INDEX_SUFFIX) + suffix)
        time_index_path = directory / (file_name(base_offset, TIME_INDEX_SUFFIX) + suffix)
        self.offset_index = OffsetIndex(index_path, base_offset, max_index_size, writable)
        self.time_index = TimeIndex(time_index_path, base_offset, max_index_size, writable)
        self.bytes_since_last_index_entry = 0
        self.next_offset = base_offset
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = base_offset
        self.rolling_based_timestamp: int | None = None
        self.unflushed_messages = 0
        self._recent_last_offsets = array("q")
        self._recent_positions = array("q")
        self._recent_end = -1  # where the last recent batch ends
        self._recent_floor = 0  # the recent batches answer for offsets above this one

    # -- loading ------------------------------------------------------------------------

    def load_state(self) -> None:
        """Find next offset and max timestamp after opening trusted files (no full scan).

        Scans only from the last offset-index entry; the time index's last entry gives the
        max timestamp so far, refined by the scanned tail. Raises CorruptIndexError or
        CorruptRecordError when the files disagree, which sends the segment to `recover`."""
        self.offset_index.sanity_check(max(self.size, 1))
        position = self._indexed_position(2**63 - 1)
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = self.time_index.last_entry()
        self._forget_recent_batches()
        for batch_position, header in self.iter_headers(position):
            self._track(batch_position, header)
        self.time_index.sanity_check(self.next_offset)
        # The last time-index entry is the segment's largest timestamp (retention and lookups
        # by time trust it): check it against its batch, as lookups check the entries they use.
        last_time = self.time_index.last()
        if last_time is not None and not self._time_entry_matches(*last_time):
            raise CorruptIndexError(f"{self.time_index.path}: last entry {last_time} does not match its batch")
        self.bytes_since_last_index_entry = self.size - position
        first = next(self.iter_headers(0), None)
        self.rolling_based_timestamp = first[1].max_timestamp if first else None

    def recover(self, max_message_bytes: int, contiguous: bool = False) -> int:
        """Re-validate every batch, rebuild both indexes, cut at the first bad byte.

        baseOffset lies outside the CRC, so a damaged one passes validation; for logs that are
        not compacted, `contiguous` also cuts at the first batch that does not start where the
        previous one ended (or, first, at the segment's base offset). Returns the bytes cut
        (Kafka's LogSegment.recover). Like a roll, it ends the time index with the segment's
        largest timestamp, so a recovered segment's index is the one a clean roll leaves."""
        batches = self._iter_valid_batches(max_message_bytes)
        if contiguous:
            batches = self._contiguous(batches)
        valid_bytes = self._rebuild_indexes(batches)
        truncated = self.size - valid_bytes
        if truncated:
            self._file.truncate(valid_bytes)
            self.size = valid_bytes
        self._append_final_time_entry()
        return truncated

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the batch headers, when a lookup finds an index entry
        that does not match the log. Better than Kafka, which trusts the index of a cleanly
        shut down segment; the log file itself is not changed."""
        trimmed = self.offset_index.is_full()
        self._rebuild_indexes(self.iter_headers())
        if trimmed:
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()

    def _rebuild_indexes(self, batches: Iterator[tuple[int, BatchHeader]]) -> int:
        """Reset state and both indexes, re-add `batches` in order; return the bytes they cover."""
        self.offset_index.reset()
        self.time_index.reset()
        self.offset_index.resize_for_append()
        self.time_index.resize_for_append()
        self.bytes_since_last_index_entry = 0
        self.next_offset = self.base_offset
        self.max_timestamp_so_far = NO_TIMESTAMP
        self.offset_of_max_timestamp_so_far = self.base_offset
        self.rolling_based_timestamp = None
        self._forget_recent_batches()
        valid_bytes = 0
        for position, header in batches:
            if header.base_offset < self.next_offset or header.last_offset - self.base_offset > INT32_MAX:
                break
            if self.rolling_based_timestamp is None:
                self.rolling_based_timestamp = header.max_timestamp
            self._index(position, header)
            valid_bytes = position + header.size_in_bytes
        return valid_bytes

    def _contiguous(self, batches: Iterator[tuple[int, BatchHeader]]) -> Iterator[tuple[int, BatchHeader]]:
        expected = self.base_offset
        for position, header in batches:
            if header.base_offset != expected:
                return
            expected = header.next_offset
            yield position, header

    def sound_end(self, max_message_bytes: int | None) -> int:
        """The offset where the sound part of this segment ends (`_sound_run`)."""
        end = self.base_offset
        for _, header in self._sound_run(max_message_bytes):
            end = header.next_offset
        return end

    def _sound_run(self, max_message_bytes: int | None) -> Iterator[tuple[int, BatchHeader]]:
        """The batches from the start that are valid (`validate_batch`), with offsets and leader
        epochs that never go back, up to the first that is not."""
        end, epoch = self.base_offset, -1
        for position, header in self._iter_valid_batches(max_message_bytes):
            if header.base_offset < end or header.partition_leader_epoch < epoch:
                return
            end, epoch = header.next_offset, header.partition_leader_epoch
            yield position, header

    def _iter_valid_batches(self, max_message_bytes: int | None) -> Iterator[tuple[int, BatchHeader]]:
        """Batches from the start that pass `validate_batch`, stopping at the first that fails."""
        position, buffer, buffer_start = 0, b"", 0
        while position < self.size:
            local = position - buffer_start
            if local + BATCH_HEADER_SIZE > len(buffer):
                buffer, buffer_start, local = self.read_bytes(position, _SCAN_CHUNK_BYTES), position, 0
            try:
                header = read_header(buffer, local)
            except CorruptRecordError:
                return
            if header.size_in_bytes > self.size - position:
                return  # torn tail: the batch claims more bytes than the file has
            if local + header.size_in_bytes > len(buffer):
                chunk_bytes = max(_SCAN_CHUNK_BYTES, header.size_in_bytes)
                buffer, buffer_start, local = self.read_bytes(position, chunk_bytes), position, 0
            try:
                # Size, magic and CRC only, as Kafka's recover: compacted batches have offset gaps or no records.
                validate_batch(buffer, local, max_message_bytes, check_records=False)
            except StorageError:
                return
            yield position, header
            position += header.size_in_bytes

    # -- appending ----------------------------------------------------------------------

    def should_roll(self, batch_size: int, header: BatchHeader, now_ms: int, segment_bytes: int,
                    segment_ms: int) -> RollReason | None:
        """Kafka's LogSegment.shouldRoll, given the batch about to be appended."""
        if self.size > segment_bytes - batch_size:
            return RollReason.SEGMENT_BYTES
        if self.size > 0 and self._time_waited_for_roll(now_ms, header.max_timestamp) > segment_ms:
            return RollReason.SEGMENT_MS
        if self.offset_index.is_full() or self.time_index.is_full():
            return RollReason.INDEX_FULL
        if header.last_offset - self.base_offset > INT32_MAX:
            return RollReason.OFFSET_OVERFLOW
        return None

    def _time_waited_for_roll(self, now_ms: int, batch_max_timestamp: int) -> int:
        # Kafka measures segment.ms between record timestamps when the first batch has one, so
        # a log replayed from old data rolls by its data's time, not the broker's.
        if self.rolling_based_timestamp is not None and self.rolling_based_timestamp >= 0:
            return batch_max_timestamp - self.rolling_based_timestamp
        return now_ms - self.created_ms

    def append(self, pieces: Sequence[bytes | memoryview], header: BatchHeader) -> None:
        """Append one validated batch, given as pieces written with one `pwritev` (the leader
        passes a new 16-byte prefix and a view of the client's bytes, so nothing is copied).
        On a failed write the file is cut back: an append is all or nothing."""
        assert header.base_offset >= self.next_offset, f"{header.base_offset} < {self.next_offset}"
        size = header.size_in_bytes
        position = self.size
        fd = self._file.fileno()
        try:
            written = os.pwritev(fd, pieces, position)
            if written < size:  # short write (rare): finish from a joined copy
                rest = b"".join(pieces)[written:]
                while written < size:
                    written += os.pwrite(fd, rest[written - size + len(rest) :], position + written)
        except OSError:
            self._file.truncate(position)
            raise
        assert written == size, f"wrote {written} of {size} bytes"
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = header.max_timestamp
        self._index(position, header)
        self.unflushed_messages += header.records_count

    def _index(self, position: int, header: BatchHeader) -> None:
        """Account a batch now at `position`: sizes, next offset, timestamps, sparse entries."""
        self._track(position, header)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += header.size_in_bytes
        self.size = max(self.size, position + header.size_in_bytes)

    def _track(self, position: int, header: BatchHeader) -> None:
        self.next_offset = header.next_offset
        if header.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = header.max_timestamp
            self.offset_of_max_timestamp_so_far = header.last_offset
        last_offsets, positions = self._recent_last_offsets, self._recent_positions
        if not positions:
            self._recent_floor = header.base_offset - 1  # the batch before ends at or below it
        elif len(positions) == _RECENT_BATCHES_MAX:
            half = _RECENT_BATCHES_MAX // 2
            self._recent_floor = last_offsets[half - 1]
            del last_offsets[:half]
            del positions[:half]
        last_offsets.append(header.last_offset)
        positions.append(position)
        self._recent_end = position + header.size_in_bytes

    def _forget_recent_batches(self) -> None:
        del self._recent_last_offsets[:]
        del self._recent_positions[:]
        self._recent_end = -1

    def _recent_from(self, offset: int) -> int | None:
        """The slot among the recent batches of the first whose last offset is >= `offset` (their
        count: none is, `offset` is past the segment's end), or None when they cannot tell: they do not
        end at `size`, or `offset` is not above their floor (an earlier batch may hold it)."""
        if self._recent_end != self.size or offset <= self._recent_floor or not self._recent_positions:
            return None
        return bisect_left(self._recent_last_offsets, offset)

    def on_become_inactive(self) -> None:
        """On roll: record the segment's max timestamp in the time index, trim both indexes."""
        self._forget_recent_batches()
        self._append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def _append_final_time_entry(self) -> None:
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far, skip_full_check=True
            )

    # -- reading ------------------------------------------------------------------------

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self._file.fileno(), size, position)

    def iter_headers(self, start_position: int = 0, end_position: int | None = None
                     ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `start_position`, reading headers only."""
        end = self.size if end_position is None else end_position
        position = start_position
        while position + BATCH_HEADER_SIZE <= end:
            header = read_header(self.read_bytes(position, BATCH_HEADER_SIZE))
            if position + header.size_in_bytes > end:
                return
            yield position, header
            position += header.size_in_bytes

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= `offset`."""
        slot = self._recent_from(offset)
        if slot is not None:
            if slot == len(self._recent_positions):
                return None
            position = self._recent_positions[slot]
            return position, read_header(self.read_bytes(position, BATCH_HEADER_SIZE))
        try:
            position = self._indexed_position(offset)
        except (CorruptIndexError, CorruptRecordError):
            self.rebuild_indexes()
            position = self._indexed_position(offset)
        for batch_position, header in self.iter_headers(position):
            if header.last_offset >= offset:
                return batch_position, header
        return None

    def _indexed_position(self, offset: int) -> int:
        """The offset index's position for `offset`, checked against the batch it points at."""
        entry_offset, position = self.offset_index.lookup(offset)
        if position == 0:
            return 0
        if position < 0 or position + BATCH_HEADER_SIZE > self.size:
            raise CorruptIndexError(f"{self.offset_index.path}: position {position} outside the log [0, {self.size})")
        header = read_header(self.read_bytes(position, BATCH_HEADER_SIZE))
        if header.last_offset != entry_offset:
            raise CorruptIndexError(
                f"{self.offset_index.path}: entry ({entry_offset}, {position}) points at a batch ending at "
                f"{header.last_offset}"
            )
        return position

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> tuple[int, bytes] | None:
        """Whole batches from the one holding `offset`, at most `max_bytes` (KIP-74: at least
        one batch when `min_one_message`), none reaching `max_offset`. None past the segment's end."""
        batches: Iterable[tuple[int, int]]  # (last offset, end position) of each batch from the first read
        slot = self._recent_from(offset)
        if slot is not None:
            positions = self._recent_positions
            if slot == len(positions):
                return None
            start = positions[slot]
            if (max_offset is None or max_offset >= self.next_offset) and self.size - start <= max_bytes:
                return start, self.read_bytes(start, self.size - start)  # every batch to the end fits
            ends = [*positions[slot + 1 :], self._recent_end]
            batches = zip(self._recent_last_offsets[slot:], ends, strict=True)
        else:
            found = self.translate_offset(offset)
            if found is None:
                return None
            start = found[0]
            batches = ((header.last_offset, position + header.size_in_bytes)
                       for position, header in self.iter_headers(start))
        end = start
        for last_offset, next_end in batches:
            if max_offset is not None and last_offset >= max_offset:
                break
            if next_end - start > max_bytes and not (min_one_message and end == start):
                break
            end = next_end
        if end == start:
            return start, b""  # the first batch does not fit: an empty read, not "look further"
        return start, self.read_bytes(start, end - start)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampAndOffset | None:
        """First record at or after `starting_offset` with timestamp >= `timestamp`.

        Time index -> offset index -> scan batches by maxTimestamp -> records of that batch."""
        indexed_timestamp, indexed_offset = self.time_index.lookup(timestamp)
        if indexed_timestamp != NO_TIMESTAMP and not self._time_entry_matches(indexed_timestamp, indexed_offset):
            self.rebuild_indexes()
            indexed_timestamp, indexed_offset = self.time_index.lookup(timestamp)
        found = self.translate_offset(max(indexed_offset, starting_offset))
        if found is None:
            return None
        for batch_position, header in self.iter_headers(found[0]):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            batch = self.read_bytes(batch_position, header.size_in_bytes)
            for record in decode_records(batch):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampAndOffset(record.timestamp, record.offset)
        return None

    def _time_entry_matches(self, timestamp: int, offset: int) -> bool:
        found = self.translate_offset(offset)
        return found is not None and found[1].last_offset == offset and found[1].max_timestamp == timestamp

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's mtime when none is known (Kafka)."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return int(os.stat(self.log_path).st_mtime * 1000)

    # -- changing -----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= `offset`; return the bytes removed.

        The segment is the log's active one afterwards, so both indexes are made writable again
        even when nothing is cut (Kafka's truncateTo): a rolled segment whose end lies below
        `offset` (an offset gap of a compacted log) would otherwise keep its trimmed indexes and
        roll at the next append with INDEX_FULL."""
        try:
            found: tuple[int, BatchHeader | None] | None = self.translate_offset(offset)
        except CorruptRecordError:  # a damaged header before the batch: cut where the sound run ends
            position = 0
            for batch_position, header in self._sound_run(None):
                if header.last_offset >= offset:
                    break
                position = batch_position + header.size_in_bytes
            found = (position, None)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.offset_index.resize_for_append()
        self.time_index.resize_for_append()
        if found is None:
            return 0
        position, _ = found
        removed = self.size - position
        self._file.truncate(position)
        self.size = position
        self._reload_after_truncate()
        return removed

    def undo_appends(self, size: int, offset_index_entries: int, time_index_entries: int) -> None:
        """Take back the appends made since the segment held `size` bytes and its indexes the
        given numbers of entries (a request whose later write failed). Cut by entry count, not
        by offset as `truncate_to` does: the request may have added a time-index entry for an
        older batch (the largest timestamp so far, or the final entry of a roll). Both indexes
        are made writable again, since a roll during the request trimmed them. The count of
        unflushed messages keeps the taken-back records: at worst `flush.messages` flushes early."""
        assert size <= self.size, f"size={size} > {self.size} {self.log_path}"
        self.offset_index.truncate_entries(offset_index_entries)
        self.time_index.truncate_entries(time_index_entries)
        self.offset_index.resize_for_append()
        self.time_index.resize_for_append()
        self._file.truncate(size)
        self.size = size
        self._reload_after_truncate()

    def _reload_after_truncate(self) -> None:
        _, position = self.offset_index.lookup(2**63 - 1)
        self.next_offset = self.base_offset
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = self.time_index.last_entry()
        self._forget_recent_batches()
        for batch_position, header in self.iter_headers(position):
            self._track(batch_position, header)
        self.bytes_since_last_index_entry = self.size - position
        if self.size == 0:
            self.rolling_based_timestamp = None

    def flush(self) -> None:
        os.fsync(self._file.fileno())
        self.offset_index.flush()
        self.time_index.flush()
        self.unflushed_messages = 0

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self._file.close()

    def close_handlers(self) -> None:
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self._file.close()

    def paths(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path]

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename all three files, e.g. "" -> ".deleted" or ".swap" -> ""."""
        def renamed(path: Path) -> Path:
            name = path.name
            assert name.endswith(old_suffix), f"{name} does not end with {old_suffix!r}"
            stem = name[: len(name) - len(old_suffix)] if old_suffix else name
            return path.with_name(stem + new_suffix)

        target = renamed(self.log_path)
        os.replace(self.log_path, target)
        self.log_path = target
        self.offset_index.rename_to(renamed(self.offset_index.path))
        self.time_index.rename_to(renamed(self.time_index.path))

    def delete_files(self) -> None:
        """Close and remove all three files (missing ones are fine: a crash may have raced)."""
        self.close_handlers()
        for path in self.paths():
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"
