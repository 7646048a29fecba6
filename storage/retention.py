"""Which segments retention deletes: Kafka's three rules as pure functions.

Each rule walks segments oldest first and stops at the first it must keep, so retention only
ever removes a prefix of the log. Rules (UnifiedLog.deleteOldSegments):
- a segment is deletable only if the high watermark has passed its end (the next segment's base
  offset, or the log end offset for the last one): nothing a consumer has not seen is lost;
- the active segment is never deleted when it is empty;
- time: now - largestTimestamp > retention.ms (retention.ms < 0: keep forever);
- size: while total size - retention.bytes is at least the segment's size (retention.bytes < 0: off);
- logStartOffset: the next segment's base offset <= logStartOffset, i.e. the whole segment is
  below the start offset (seed 002's example: start 25, segments 0, 11, 23, 30 -> 0 and 11 go).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum


class SegmentDeletionReason(Enum):
    RETENTION_MS = "retention.ms"
    RETENTION_BYTES = "retention.bytes"
    LOG_START_OFFSET = "log start offset"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What retention needs of a segment."""

    base_offset: int
    size: int
    largest_timestamp: int


Predicate = Callable[[SegmentInfo, SegmentInfo | None], bool]


def deletable_count(
    segments: Sequence[SegmentInfo], log_end_offset: int, high_watermark: int, predicate: Predicate
) -> int:
    """How many oldest segments `predicate` and the high-watermark bound let go."""
    count = 0
    for slot, segment in enumerate(segments):
        following = segments[slot + 1] if slot + 1 < len(segments) else None
        end_offset = following.base_offset if following is not None else log_end_offset
        last_and_empty = following is None and segment.size == 0
        if high_watermark < end_offset or last_and_empty or not predicate(segment, following):
            break
        count += 1
    return count


def by_time(now_ms: int, retention_ms: int) -> Predicate:
    def expired(segment: SegmentInfo, following: SegmentInfo | None) -> bool:
        return retention_ms >= 0 and now_ms - segment.largest_timestamp > retention_ms

    return expired


def by_size(total_size: int, retention_bytes: int) -> Predicate:
    excess = total_size - retention_bytes if retention_bytes >= 0 else 0

    def over(segment: SegmentInfo, following: SegmentInfo | None) -> bool:
        nonlocal excess
        if retention_bytes < 0 or excess - segment.size < 0:
            return False
        excess -= segment.size
        return True

    return over


def by_log_start_offset(log_start_offset: int) -> Predicate:
    def below(segment: SegmentInfo, following: SegmentInfo | None) -> bool:
        return following is not None and following.base_offset <= log_start_offset

    return below


def deletable_segments(
    segments: Sequence[SegmentInfo],
    *,
    log_end_offset: int,
    high_watermark: int,
    log_start_offset: int,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    delete_policy: bool,
) -> tuple[int, SegmentDeletionReason | None]:
    """(count, reason) of the first rule that deletes anything, in Kafka's order.

    Without `delete` in cleanup.policy only the logStartOffset rule applies."""
    rules: list[tuple[SegmentDeletionReason, Predicate]] = [
        (SegmentDeletionReason.LOG_START_OFFSET, by_log_start_offset(log_start_offset))
    ]
    if delete_policy:
        total = sum(segment.size for segment in segments)
        rules.append((SegmentDeletionReason.RETENTION_BYTES, by_size(total, retention_bytes)))
        rules.append((SegmentDeletionReason.RETENTION_MS, by_time(now_ms, retention_ms)))
    for reason, predicate in rules:
        count = deletable_count(segments, log_end_offset, high_watermark, predicate)
        if count:
            return count, reason
    return 0, None
