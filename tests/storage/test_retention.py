"""Retention: Kafka's three rules, the high-watermark bound, the empty active segment, the roll when
every segment would go, delayed file deletion, and cleanup.policy=compact.

Method: logs built segment by segment (leader appends, explicit rolls) with chosen record
timestamps and sizes, so each rule sits exactly at its boundary; seed 002's logStartOffset example
is replayed end to end; and `deletable_segments` is checked by hypothesis against an independent
transcription of Kafka's UnifiedLog.deletableSegments and the three predicates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import OffsetOutOfRangeError
from storage.log import Log, LogStartOffsetIncrementReason
from storage.records import build_batch
from storage.retention import SegmentDeletionReason, SegmentInfo, deletable_segments
from tests.storage.conftest import NOW_MS, OpenLog, records_of

DAY_MS = 24 * 3600 * 1000


def build_segments(log: Log, counts: Sequence[int], timestamps: Sequence[int] | None = None,
                   roll_last: bool = False) -> None:
    """One batch of counts[i] records per segment, all with timestamps[i]; roll between them."""
    for slot, count in enumerate(counts):
        stamp = timestamps[slot] if timestamps is not None else NOW_MS
        log.append_as_leader(build_batch([(b"k", b"v%d" % slot)] * count, timestamps=[stamp] * count), 0, NOW_MS)
        if slot < len(counts) - 1 or roll_last:
            log.roll(NOW_MS)
    log.update_high_watermark(log.log_end_offset)


def bases(log: Log) -> list[int]:
    return [segment.base_offset for segment in log.segments]


def segment_files(log: Log) -> list[str]:
    return sorted(path.name for path in log.directory.iterdir() if path.name[:20].isdigit())


# --- seed 002: logStartOffset -----------------------------------------------------------------


def test_seed_log_start_offset_25_deletes_the_segments_at_0_and_11(make_log: OpenLog) -> None:
    # Seed 002: logStartOffset=25, segments at 0, 11, 23, 30. Segment 1's next base 11 <= 25 and
    # segment 2's next base 23 <= 25: both go; segment 3's next base 30 > 25: it and all after stay.
    log = make_log()
    build_segments(log, [11, 12, 7, 5])
    assert bases(log) == [0, 11, 23, 30]
    assert log.delete_records(25) == 25
    assert bases(log) == [0, 11, 23, 30], "delete_records only moves logStartOffset"
    assert log.delete_old_segments(NOW_MS) == [(SegmentDeletionReason.LOG_START_OFFSET, 2)]
    assert bases(log) == [23, 30]
    assert log.log_start_offset == 25
    assert log.delete_old_segments(NOW_MS) == []
    # The records from 25 on are still readable; 23 and 24 are below the log start.
    assert records_of(log.read(25, 10_000).records)[0].offset == 23  # the batch holding 25 starts at 23
    with pytest.raises(OffsetOutOfRangeError):
        log.read(24, 10_000)


def test_seed_log_start_offset_rule_as_a_function() -> None:
    segments = [SegmentInfo(base, 100, NOW_MS) for base in (0, 11, 23, 30)]
    count, reason = deletable_segments(
        segments, log_end_offset=35, high_watermark=35, log_start_offset=25, now_ms=NOW_MS,
        retention_ms=-1, retention_bytes=-1, delete_policy=True,
    )
    assert (count, reason) == (2, SegmentDeletionReason.LOG_START_OFFSET)


def test_log_start_offset_at_a_segment_base_deletes_everything_below_it(make_log: OpenLog) -> None:
    log = make_log()
    build_segments(log, [11, 12, 7, 5])
    log.maybe_increment_log_start_offset(23, LogStartOffsetIncrementReason.LEADER_OFFSET_INCREMENTED)
    assert log.delete_old_segments(NOW_MS) == [(SegmentDeletionReason.LOG_START_OFFSET, 2)]
    assert bases(log) == [23, 30]
    log.maybe_increment_log_start_offset(29, LogStartOffsetIncrementReason.LEADER_OFFSET_INCREMENTED)
    assert log.delete_old_segments(NOW_MS) == []  # 30 > 29: segment 23 still holds offset 29
    assert bases(log) == [23, 30]


# --- retention.ms -----------------------------------------------------------------------------


def test_retention_ms_deletes_segments_whose_largest_timestamp_is_too_old(make_log: OpenLog) -> None:
    retention = 10_000
    log = make_log({"retention.ms": retention})
    build_segments(log, [2, 2, 2, 2], timestamps=[1000, 2000, 3000, 4000])
    # Segment 2's largest timestamp is exactly retention.ms old: kept (Kafka: strictly more).
    now = 2000 + retention
    assert log.delete_old_segments(now) == [(SegmentDeletionReason.RETENTION_MS, 1)]
    assert bases(log) == [2, 4, 6]
    assert log.log_start_offset == 2
    assert log.delete_old_segments(now + 1) == [(SegmentDeletionReason.RETENTION_MS, 1)]
    assert bases(log) == [4, 6]
    assert log.log_start_offset == 4


def test_retention_ms_uses_the_largest_timestamp_not_the_first(make_log: OpenLog) -> None:
    log = make_log({"retention.ms": 1000})
    log.append_as_leader(build_batch([(b"k", b"a"), (b"k", b"b")], timestamps=[5000, 100]), 0, NOW_MS)
    log.roll(NOW_MS)
    build_segments(log, [1], timestamps=[10**7])
    assert log.delete_old_segments(5000 + 1000) == []
    assert log.delete_old_segments(5000 + 1001) == [(SegmentDeletionReason.RETENTION_MS, 1)]


def test_retention_ms_removes_only_a_prefix(make_log: OpenLog) -> None:
    # A young segment stops the walk: older segments after it stay (retention removes a prefix).
    log = make_log({"retention.ms": 1000})
    build_segments(log, [1, 1, 1, 1], timestamps=[100, 9000, 100, 9000])
    assert log.delete_old_segments(5000) == [(SegmentDeletionReason.RETENTION_MS, 1)]
    assert bases(log) == [1, 2, 3]


def test_negative_retention_ms_keeps_forever(make_log: OpenLog) -> None:
    log = make_log({"retention.ms": -1})
    build_segments(log, [1, 1, 1], timestamps=[0, 0, 0])
    assert log.delete_old_segments(100 * 365 * DAY_MS) == []
    assert bases(log) == [0, 1, 2]


# --- retention.bytes --------------------------------------------------------------------------


def test_retention_bytes_deletes_while_the_excess_covers_a_whole_segment(make_log: OpenLog) -> None:
    log = make_log()
    build_segments(log, [3, 3, 3, 3, 3])
    size = log.segments.first_segment.size
    total = log.size_in_bytes()
    assert total == 5 * size
    # Excess of exactly two segments: both go (Kafka: diff - segment.size >= 0).
    tight = make_log({"retention.bytes": total - 2 * size}, name="t-1")
    build_segments(tight, [3, 3, 3, 3, 3])
    assert tight.delete_old_segments(NOW_MS) == [(SegmentDeletionReason.RETENTION_BYTES, 2)]
    assert bases(tight) == [6, 9, 12]
    assert tight.size_in_bytes() == 3 * size
    # One byte less excess: only one whole segment fits in it.
    loose = make_log({"retention.bytes": total - 2 * size + 1}, name="t-2")
    build_segments(loose, [3, 3, 3, 3, 3])
    assert loose.delete_old_segments(NOW_MS) == [(SegmentDeletionReason.RETENTION_BYTES, 1)]
    assert bases(loose) == [3, 6, 9, 12]


def test_retention_bytes_below_the_log_size_deletes_nothing(make_log: OpenLog) -> None:
    log = make_log({"retention.bytes": 10**9})
    build_segments(log, [3, 3])
    assert log.delete_old_segments(NOW_MS) == []


# --- bounds -----------------------------------------------------------------------------------


def test_segments_not_wholly_below_the_high_watermark_are_kept(make_log: OpenLog) -> None:
    log = make_log({"retention.ms": 1000})
    build_segments(log, [2, 2, 2, 2], timestamps=[0, 0, 0, 0], roll_last=True)
    assert bases(log) == [0, 2, 4, 6, 8]
    log.update_high_watermark(5)  # inside segment 4
    assert log.delete_old_segments(10**6) == [(SegmentDeletionReason.RETENTION_MS, 2)]
    assert bases(log) == [4, 6, 8]
    assert log.log_start_offset == 4
    log.update_high_watermark(6)  # exactly segment 4's end: now it may go
    assert log.delete_old_segments(10**6) == [(SegmentDeletionReason.RETENTION_MS, 1)]
    assert bases(log) == [6, 8]


def test_high_watermark_bounds_the_size_rule_too(make_log: OpenLog) -> None:
    log = make_log({"retention.bytes": 0})
    build_segments(log, [2, 2, 2])
    log.update_high_watermark(3)
    assert log.delete_old_segments(NOW_MS) == [(SegmentDeletionReason.RETENTION_BYTES, 1)]
    assert bases(log) == [2, 4]
    assert log.log_start_offset == 2 <= log.high_watermark


def test_empty_active_segment_is_never_deleted(make_log: OpenLog) -> None:
    log = make_log({"retention.ms": 1000})
    build_segments(log, [2, 2], timestamps=[0, 0], roll_last=True)
    active = log.segments.active_segment
    assert (active.base_offset, active.size) == (4, 0)
    assert log.delete_old_segments(10**6) == [(SegmentDeletionReason.RETENTION_MS, 2)]
    assert bases(log) == [4]
    assert log.segments.active_segment is active, "no roll: the empty active segment stays"
    assert log.log_start_offset == 4 == log.log_end_offset
    assert log.delete_old_segments(10**7) == []
    assert bases(log) == [4]


def test_rolls_first_when_every_segment_would_be_deleted(make_log: OpenLog) -> None:
    log = make_log({"retention.ms": 1000})
    build_segments(log, [2, 3], timestamps=[0, 0])
    assert log.segments.active_segment.size > 0
    assert log.delete_old_segments(10**6) == [(SegmentDeletionReason.RETENTION_MS, 2)]
    assert bases(log) == [5]
    assert log.segments.active_segment.size == 0
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (5, 5, 5)
    assert log.read(5, 1000).records == b""
    info = log.append_as_leader(build_batch([(b"k", b"new")], timestamps=[10**6]), 0, 10**6)
    assert info.first_offset == 5
    assert [r.value for r in records_of(log.read(5, 1000).records)] == [b"new"]


# --- files ------------------------------------------------------------------------------------


def test_deleted_segments_are_renamed_at_once_and_removed_after_the_delay(make_log: OpenLog) -> None:
    delay = 5000
    log = make_log({"retention.ms": 1000, "file.delete.delay.ms": delay})
    build_segments(log, [2, 2, 2], timestamps=[0, 0, 10**7])
    now = 10**6
    assert log.delete_old_segments(now) == [(SegmentDeletionReason.RETENTION_MS, 2)]
    names = segment_files(log)
    for base in (0, 2):
        for suffix in (".log", ".index", ".timeindex"):
            assert f"{base:020d}{suffix}.deleted" in names
            assert f"{base:020d}{suffix}" not in names
    assert "00000000000000000004.log" in names
    assert log.delete_expired_files(now + delay - 1) == 0
    assert sum(name.endswith(".deleted") for name in segment_files(log)) == 6
    assert log.delete_expired_files(now + delay) == 2
    # The producer snapshot taken at the roll to 4 stays with its segment; those at 0 and 2 went with theirs.
    assert segment_files(log) == [f"{4:020d}{suffix}" for suffix in (".index", ".log", ".snapshot", ".timeindex")]
    assert log.delete_expired_files(now + 10 * delay) == 0


def test_deleted_files_are_gone_after_a_reopen(make_log: OpenLog) -> None:
    log = make_log({"retention.ms": 1000})
    build_segments(log, [2, 2], timestamps=[0, 10**7])
    log.delete_old_segments(10**6)
    assert any(name.endswith(".deleted") for name in segment_files(log))
    log.close()
    reopened = make_log({"retention.ms": 1000}, log_start_offset=2, high_watermark=4, recovery_point=4)
    assert not any(name.endswith(".deleted") for name in segment_files(reopened))
    assert bases(reopened) == [2]
    assert reopened.log_start_offset == 2


# --- cleanup.policy ---------------------------------------------------------------------------


def test_compact_policy_applies_only_the_log_start_offset_rule(make_log: OpenLog) -> None:
    log = make_log({"cleanup.policy": "compact", "retention.ms": 1, "retention.bytes": 0})
    build_segments(log, [2, 2, 2], timestamps=[0, 0, 0])
    assert log.delete_old_segments(10**9) == []
    assert bases(log) == [0, 2, 4]
    log.delete_records(3)
    assert log.delete_old_segments(10**9) == [(SegmentDeletionReason.LOG_START_OFFSET, 1)]
    assert bases(log) == [2, 4]


def test_compact_and_delete_policy_applies_time_retention(make_log: OpenLog) -> None:
    log = make_log({"cleanup.policy": "compact,delete", "retention.ms": 1})
    build_segments(log, [2, 2], timestamps=[0, 0])
    assert log.delete_old_segments(10**6) == [(SegmentDeletionReason.RETENTION_MS, 2)]
    assert bases(log) == [4]


# --- deletable_segments against a reference ---------------------------------------------------


Predicate = Callable[[SegmentInfo, SegmentInfo | None], bool]


def kafka_deletable(segments: list[SegmentInfo], hw: int, leo: int, predicate: Predicate) -> int:
    """UnifiedLog.deletableSegments: walk oldest first; stop at the first segment the predicate
    keeps, that ends above the high watermark, or that is the last one and empty."""
    count = 0
    for slot, segment in enumerate(segments):
        following = segments[slot + 1] if slot + 1 < len(segments) else None
        upper_bound = following.base_offset if following is not None else leo
        is_last_and_empty = following is None and segment.size == 0
        result = hw >= upper_bound and predicate(segment, following)
        if not result or is_last_and_empty:
            break
        count += 1
    return count


def kafka_rules(segments: list[SegmentInfo], *, hw: int, leo: int, start: int, now: int, retention_ms: int,
                retention_bytes: int, delete: bool) -> tuple[int, SegmentDeletionReason | None]:
    """UnifiedLog.deleteOldSegments (Kafka 3.x order: log start offset, size, time)."""
    def log_start(segment: SegmentInfo, following: SegmentInfo | None) -> bool:
        return following is not None and following.base_offset <= start

    count = kafka_deletable(segments, hw, leo, log_start)
    if count:
        return count, SegmentDeletionReason.LOG_START_OFFSET
    if not delete:
        return 0, None
    total = sum(segment.size for segment in segments)
    if retention_bytes >= 0 and total >= retention_bytes:
        diff = total - retention_bytes

        def too_big(segment: SegmentInfo, following: SegmentInfo | None) -> bool:
            nonlocal diff
            if diff - segment.size >= 0:
                diff -= segment.size
                return True
            return False

        count = kafka_deletable(segments, hw, leo, too_big)
        if count:
            return count, SegmentDeletionReason.RETENTION_BYTES
    if retention_ms >= 0:
        count = kafka_deletable(segments, hw, leo, lambda segment, _: now - segment.largest_timestamp > retention_ms)
        if count:
            return count, SegmentDeletionReason.RETENTION_MS
    return 0, None


@st.composite
def retention_cases(draw: st.DrawFn) -> dict:
    """Small ranges, so that equalities (now - timestamp == retention.ms, excess == size, next
    base == log start, upper bound == HW) come up often."""
    count = draw(st.integers(1, 6))
    bases_, base = [], draw(st.integers(0, 5))
    for _ in range(count):
        bases_.append(base)
        base += draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 30)) for _ in range(count - 1)] + [draw(st.one_of(st.just(0), st.integers(0, 30)))]
    leo = bases_[-1] + (draw(st.integers(1, 4)) if sizes[-1] else 0)
    hw = draw(st.one_of(st.just(leo), st.integers(bases_[0], leo)))
    start = draw(st.one_of(st.just(bases_[0]), st.integers(bases_[0], hw)))
    segments = [SegmentInfo(b, s, draw(st.integers(0, 30))) for b, s in zip(bases_, sizes, strict=True)]
    now = draw(st.integers(25, 40))
    total = sum(sizes)
    return {
        "segments": segments,
        "hw": hw,
        "leo": leo,
        "start": start,
        "now": now,
        "retention_ms": draw(st.one_of(st.integers(-1, 30), st.sampled_from([now - s.largest_timestamp
                                                                               for s in segments]))),
        "retention_bytes": draw(st.one_of(st.integers(-1, 150), st.integers(max(total - 60, 0), total))),
        "delete": draw(st.booleans()),
    }


@settings(max_examples=100, deadline=None)
@given(retention_cases())
def test_deletable_segments_matches_kafkas_rules(case: dict) -> None:
    expected = kafka_rules(
        case["segments"], hw=case["hw"], leo=case["leo"], start=case["start"], now=case["now"],
        retention_ms=case["retention_ms"], retention_bytes=case["retention_bytes"], delete=case["delete"],
    )
    got = deletable_segments(
        case["segments"], log_end_offset=case["leo"], high_watermark=case["hw"], log_start_offset=case["start"],
        now_ms=case["now"], retention_ms=case["retention_ms"], retention_bytes=case["retention_bytes"],
        delete_policy=case["delete"],
    )
    assert got == expected


def test_a_second_deletion_of_the_same_base_offset_does_not_lose_track_of_files(make_log) -> None:
    log = make_log({"file.delete.delay.ms": 1000})
    for round_number in range(2):
        log.append_as_leader(build_batch([(b"k", b"round-%d" % round_number)], timestamps=[1]), 0, NOW_MS)
        log.truncate_fully_and_start_at(0, NOW_MS + round_number)
    deleted = sorted(p.name for p in log.directory.glob("*.deleted"))
    assert deleted == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
    ]
    assert b"round-1" in (log.directory / "00000000000000000000.log.deleted").read_bytes()
    assert log.delete_expired_files(NOW_MS + 1000) == 0, "the second deletion waits its own full delay"
    assert log.delete_expired_files(NOW_MS + 1001) == 1
    assert not list(log.directory.glob("*.deleted"))
