"""Segment roll: Kafka's four conditions (seed 000), each on its own, at its exact boundary.

Each test appends up to one byte / millisecond / entry / offset below a limit (no roll), then
past it, and checks the RollReason the append reports, the new segment's base offset, and that
the batch that caused the roll is the first one of the new segment. Also: no roll by time on an
empty segment, 20-digit file names, inactive segments' indexes trimmed to their entries (and the
active one's on close), and index.interval.bytes at its boundary.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.log import Log
from storage.log_segment import RollReason
from storage.records import build_batch, read_header
from tests.storage.conftest import NOW_MS, OpenLog, append, index_entries, sized_batch

SEGMENT_MS = 1000


def bases(log: Log) -> list[int]:
    return [segment.base_offset for segment in log.segments]


def one_record_size() -> int:
    return len(build_batch([(b"k", b"v")], timestamps=[NOW_MS]))


# --- segment.bytes ----------------------------------------------------------------------------


def test_rolls_when_the_segment_would_exceed_segment_bytes(make_log: OpenLog) -> None:
    size = one_record_size()
    log = make_log({"segment.bytes": 3 * size})
    for offset in range(3):
        info = append(log, [b"v"])
        assert info.rolled is None, f"offset {offset}: the segment holds exactly segment.bytes"
    assert log.segments.active_segment.size == 3 * size
    info = append(log, [b"v"])
    assert info.rolled is RollReason.SEGMENT_BYTES
    assert bases(log) == [0, 3]
    assert info.first_offset == 3
    assert log.segments.active_segment.size == size
    assert log.segments.first_segment.size == 3 * size


def test_segment_bytes_counts_the_whole_incoming_batch(make_log: OpenLog) -> None:
    size = one_record_size()
    two = len(build_batch([(b"k", b"v"), (b"k", b"v")], timestamps=[NOW_MS, NOW_MS]))
    log = make_log({"segment.bytes": size + two - 1})
    append(log, [b"v"])
    info = append(log, [b"v", b"v"])  # one byte too many for the first segment
    assert info.rolled is RollReason.SEGMENT_BYTES
    assert bases(log) == [0, 1]


# --- segment.ms -------------------------------------------------------------------------------


def test_rolls_when_record_time_passes_segment_ms_since_the_first_batch(make_log: OpenLog) -> None:
    # Kafka measures segment.ms from the first batch's max timestamp to the new batch's max
    # timestamp; the broker clock (now_ms) does not matter when the records have timestamps.
    log = make_log({"segment.ms": SEGMENT_MS})
    first = 5_000_000
    assert append(log, [b"a"], [first]).rolled is None
    info = append(log, [b"b"], [first + SEGMENT_MS], now_ms=NOW_MS + 10 * SEGMENT_MS)
    assert info.rolled is None, "exactly segment.ms is not more than segment.ms"
    # The batch's max timestamp counts, not its first.
    info = append(log, [b"c", b"d"], [first, first + SEGMENT_MS + 1], now_ms=NOW_MS)
    assert info.rolled is RollReason.SEGMENT_MS
    assert bases(log) == [0, 2]
    assert info.first_offset == 2
    # The new segment measures from its own first batch (max timestamp first + SEGMENT_MS + 1).
    assert append(log, [b"e"], [first + 2 * SEGMENT_MS + 1]).rolled is None
    assert append(log, [b"f"], [first + 2 * SEGMENT_MS + 2]).rolled is RollReason.SEGMENT_MS
    assert bases(log) == [0, 2, 5]


def test_segment_ms_uses_the_first_batchs_max_timestamp_not_its_first(make_log: OpenLog) -> None:
    log = make_log({"segment.ms": SEGMENT_MS})
    append(log, [b"a", b"b"], [100_000, 200_000])  # max timestamp 200_000
    assert append(log, [b"c"], [200_000 + SEGMENT_MS]).rolled is None
    assert append(log, [b"d"], [200_000 + SEGMENT_MS + 1]).rolled is RollReason.SEGMENT_MS
    assert bases(log) == [0, 3]


def test_without_record_timestamps_segment_ms_runs_from_segment_creation(make_log: OpenLog) -> None:
    log = make_log({"segment.ms": SEGMENT_MS}, now_ms=NOW_MS)  # the first segment is created at NOW_MS
    assert append(log, [b"a"], [-1], now_ms=NOW_MS + 5).rolled is None
    assert append(log, [b"b"], [-1], now_ms=NOW_MS + SEGMENT_MS).rolled is None
    info = append(log, [b"c"], [-1], now_ms=NOW_MS + SEGMENT_MS + 1)
    assert info.rolled is RollReason.SEGMENT_MS
    assert bases(log) == [0, 2]
    # The new segment was created by that append, at NOW_MS + SEGMENT_MS + 1.
    created = NOW_MS + SEGMENT_MS + 1
    assert log.segments.active_segment.created_ms == created
    assert append(log, [b"d"], [-1], now_ms=created + SEGMENT_MS).rolled is None
    assert append(log, [b"e"], [-1], now_ms=created + SEGMENT_MS + 1).rolled is RollReason.SEGMENT_MS
    assert bases(log) == [0, 2, 4]


def test_no_roll_by_time_on_an_empty_segment(make_log: OpenLog) -> None:
    log = make_log({"segment.ms": SEGMENT_MS}, now_ms=NOW_MS)
    info = append(log, [b"a"], [-1], now_ms=NOW_MS + 100 * SEGMENT_MS)
    assert info.rolled is None
    assert bases(log) == [0]
    # Also after an explicit roll: the new empty segment is not rolled again by time.
    log.roll(NOW_MS + 100 * SEGMENT_MS)
    info = append(log, [b"b"], [7], now_ms=NOW_MS + 1000 * SEGMENT_MS)
    assert info.rolled is None
    assert bases(log) == [0, 1]


# --- index full -------------------------------------------------------------------------------


def test_rolls_when_the_offset_index_is_full(make_log: OpenLog) -> None:
    # segment.index.bytes=24: 3 offset entries, 2 time entries. index.interval.bytes=0 indexes
    # every batch after the first; a constant timestamp keeps the time index at one entry.
    log = make_log({"segment.index.bytes": 24, "index.interval.bytes": 0})
    for offset in range(4):
        assert append(log, [b"v"], [500]).rolled is None, f"offset {offset}"
    segment = log.segments.active_segment
    assert segment.offset_index.entries == 3
    assert segment.offset_index.is_full()
    assert segment.time_index.entries == 1
    info = append(log, [b"v"], [500])
    assert info.rolled is RollReason.INDEX_FULL
    assert bases(log) == [0, 4]


def test_rolls_when_the_time_index_is_full(make_log: OpenLog) -> None:
    log = make_log({"segment.index.bytes": 24, "index.interval.bytes": 0})
    for offset in range(3):
        assert append(log, [b"v"], [500 + offset]).rolled is None, f"offset {offset}"
    segment = log.segments.active_segment
    assert segment.time_index.entries == 2
    assert segment.time_index.is_full()
    assert not segment.offset_index.is_full()
    info = append(log, [b"v"], [600])
    assert info.rolled is RollReason.INDEX_FULL
    assert bases(log) == [0, 3]


# --- relative offset overflow -----------------------------------------------------------------


def test_rolls_when_a_follower_batch_does_not_fit_relative_offsets(make_log: OpenLog) -> None:
    log = make_log()
    assert log.append_as_follower(build_batch([(b"k", b"a")], base_offset=0, timestamps=[1]), NOW_MS).rolled is None
    # Relative offset 2**31 - 1 is the largest that fits an i32: no roll.
    near = build_batch([(b"k", b"b")], base_offset=2**31 - 1, timestamps=[2])
    assert log.append_as_follower(near, NOW_MS).rolled is None
    assert bases(log) == [0]
    far = build_batch([(b"k", b"c"), (b"k", b"d")], base_offset=2**31, timestamps=[3, 3])
    info = log.append_as_follower(far, NOW_MS)
    assert info.rolled is RollReason.OFFSET_OVERFLOW
    assert bases(log) == [0, 2**31]
    assert log.log_end_offset == 2**31 + 2
    assert (log.directory / "00000000002147483648.log").exists()


def test_offset_overflow_by_the_batchs_last_offset(make_log: OpenLog) -> None:
    log = make_log()
    log.append_as_follower(build_batch([(b"k", b"a")], base_offset=0, timestamps=[1]), NOW_MS)
    # The batch starts inside the i32 range but ends outside it.
    straddling = build_batch([(b"k", b"b"), (b"k", b"c")], base_offset=2**31 - 1, timestamps=[2, 2])
    info = log.append_as_follower(straddling, NOW_MS)
    assert info.rolled is RollReason.OFFSET_OVERFLOW
    assert bases(log) == [0, 2**31 - 1]


def test_offset_overflow_on_an_empty_log_starts_the_segment_at_the_batch(make_log: OpenLog) -> None:
    log = make_log()
    far = build_batch([(b"k", b"a")], base_offset=5 * 2**31, timestamps=[1])
    info = log.append_as_follower(far, NOW_MS)
    assert info.rolled is RollReason.OFFSET_OVERFLOW
    assert bases(log) == [5 * 2**31]
    data = log.read(5 * 2**31, 1000).records
    assert read_header(data).base_offset == 5 * 2**31


# --- files ------------------------------------------------------------------------------------


def test_segment_files_are_named_by_20_digit_base_offsets(make_log: OpenLog) -> None:
    size = one_record_size()
    log = make_log({"segment.bytes": 2 * size})
    for _ in range(5):
        append(log, [b"v"])
    log.append_as_follower(build_batch([(b"k", b"v")], base_offset=12_345_678_901, timestamps=[1]), NOW_MS)
    assert bases(log) == [0, 2, 4, 12_345_678_901]
    names = sorted(path.name for path in log.directory.iterdir() if path.suffix in (".log", ".index", ".timeindex"))
    expected = sorted(
        f"{base:020d}{suffix}" for base in (0, 2, 4, 12_345_678_901) for suffix in (".log", ".index", ".timeindex")
    )
    assert names == expected
    assert "00000000012345678901.log" in names


def test_inactive_segments_indexes_are_trimmed_and_the_active_one_preallocated(make_log: OpenLog) -> None:
    size = one_record_size()
    log = make_log({"segment.bytes": 4 * size, "index.interval.bytes": 0, "segment.index.bytes": 1000})
    for offset in range(10):
        append(log, [b"v"], [100 + (offset * 7) % 5])  # non-monotonic timestamps
    assert bases(log) == [0, 4, 8]
    directory: Path = log.directory
    for segment in list(log.segments)[:-1]:
        offsets, times = index_entries(segment)
        assert (directory / f"{segment.base_offset:020d}.index").stat().st_size == 8 * len(offsets)
        assert (directory / f"{segment.base_offset:020d}.timeindex").stat().st_size == 12 * len(times)
        assert len(offsets) == 3  # every batch after the first
        # The rolled segment's last time entry is its largest timestamp and where it is.
        stamps = [100 + (offset * 7) % 5 for offset in range(segment.base_offset, segment.next_offset)]
        largest = max(stamps)
        assert times[-1] == (largest, segment.base_offset + stamps.index(largest))
    active = log.segments.active_segment
    assert (directory / "00000000000000000008.index").stat().st_size == 1000
    assert (directory / "00000000000000000008.timeindex").stat().st_size == 996
    assert active.offset_index.max_entries == 125


def test_close_trims_the_active_segments_indexes_to_their_entries(make_log: OpenLog) -> None:
    log = make_log({"index.interval.bytes": 0, "segment.index.bytes": 1200})
    for offset in range(6):
        append(log, [b"v"], [100 + offset % 4])  # the time index skips the timestamps that do not grow
    active = log.segments.active_segment
    offsets, times = index_entries(active)
    assert (len(offsets), len(times)) == (5, 3)
    directory: Path = log.directory
    assert (directory / "00000000000000000000.index").stat().st_size == 1200, "preallocated while open"
    log.close()
    assert (directory / "00000000000000000000.index").stat().st_size == 8 * len(offsets)
    assert (directory / "00000000000000000000.timeindex").stat().st_size == 12 * len(times)
    again = make_log({"index.interval.bytes": 0, "segment.index.bytes": 1200})
    assert index_entries(again.segments.active_segment) == (offsets, times)


# --- index.interval.bytes ---------------------------------------------------------------------

INTERVAL = 300


@pytest.mark.parametrize(("gap", "indexed"), [(INTERVAL, False), (INTERVAL + 1, True)])
def test_an_index_entry_needs_more_than_index_interval_bytes_since_the_last(make_log: OpenLog, gap: int,
                                                                            indexed: bool) -> None:
    # Kafka's LogSegment.append indexes a batch when bytesSinceLastIndexEntry, the bytes from the
    # last indexed batch's start to this batch's start, is more than index.interval.bytes.
    log = make_log({"index.interval.bytes": INTERVAL})

    def append_sized(size: int) -> int:
        return log.append_as_leader(sized_batch(1, size, [NOW_MS]), 0, NOW_MS).first_offset

    append_sized(INTERVAL + 1)  # the segment's first batch: nothing before it, no entry
    assert append_sized(100) == 1  # INTERVAL + 1 bytes after the segment start: indexed
    segment = log.segments.active_segment
    assert segment.offset_index.lookup(10) == (1, INTERVAL + 1)
    append_sized(gap - 100)  # not indexed: 100 bytes since the entry's batch
    probe = append_sized(100)  # starts `gap` bytes after the indexed batch
    expected = [(1, INTERVAL + 1)] + ([(probe, INTERVAL + 1 + gap)] if indexed else [])
    assert index_entries(segment)[0] == expected
