"""LogSegments: the segments of one log in a SortedDict keyed by base offset.

Kafka keeps them in a ConcurrentSkipListMap for the same reason: find the segment holding an
offset with a floor lookup. The last segment is the active one; it is kept beside the map
(Kafka's LocalLog reads its end offset from the active segment on every append and fetch, and
a SortedDict's `peekitem(-1)` costs a tree walk), set by `add` and `remove`, the map's only writers.
"""

from __future__ import annotations

from collections.abc import Iterator

from sortedcontainers import SortedDict

from storage.log_segment import LogSegment


class LogSegments:
    def __init__(self) -> None:
        self._segments: SortedDict[int, LogSegment] = SortedDict()
        self._active: LogSegment | None = None  # the segment with the largest base offset

    def add(self, segment: LogSegment) -> None:
        self._segments[segment.base_offset] = segment
        if self._active is None or segment.base_offset >= self._active.base_offset:
            self._active = segment

    def remove(self, base_offset: int) -> LogSegment:
        segment = self._segments.pop(base_offset)
        if segment is self._active:
            self._active = self._segments.peekitem(-1)[1] if self._segments else None
        return segment

    def get(self, base_offset: int) -> LogSegment | None:
        return self._segments.get(base_offset)

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments.values())

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self._segments

    @property
    def active_segment(self) -> LogSegment:
        active = self._active
        assert active is not None, "a log always has at least one segment"
        return active

    @property
    def first_segment(self) -> LogSegment:
        assert self._segments, "a log always has at least one segment"
        return self._segments.peekitem(0)[1]

    def floor_segment(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= `offset`."""
        slot = self._segments.bisect_right(offset)
        return self._segments.peekitem(slot - 1)[1] if slot else None

    def higher_segment(self, offset: int) -> LogSegment | None:
        """The segment with the smallest base offset > `offset`."""
        slot = self._segments.bisect_right(offset)
        return self._segments.peekitem(slot)[1] if slot < len(self._segments) else None

    def values_from(self, offset: int) -> list[LogSegment]:
        """Segments that may hold offsets >= `offset`: the floor segment and all after it."""
        slot = max(self._segments.bisect_right(offset) - 1, 0)
        return list(self._segments.values()[slot:])

    def values_before(self, offset: int) -> list[LogSegment]:
        """Segments whose base offset is < `offset`."""
        return list(self._segments.values()[: self._segments.bisect_left(offset)])

    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments.values())
