"""OffsetIndex: sparse map from offset to the byte position of a batch in a `.log` file.

Format (Kafka's `.index`): 8-byte entries, big-endian `relativeOffset i32, position i32`, where
relativeOffset = offset - baseOffset. An entry (offset, position) says the batch starting at
`position` has last offset `offset`, so the batch holding any target >= offset starts at or after
`position`. Offsets and positions strictly increase. One entry is added per
`index.interval.bytes` of log; `lookup` returns the largest entry with offset <= target, or
(baseOffset, 0) when there is none, and the reader scans forward from there.
"""

from __future__ import annotations

import struct

from storage.errors import CorruptIndexError, LogSegmentOffsetOverflowError
from storage.index import AbstractIndex

INT32_MAX = 2**31 - 1


class OffsetIndex(AbstractIndex):
    entry_size = 8
    _entry_format = struct.Struct(">ii")

    def _parse(self, first: int, second: int) -> tuple[int, int]:
        return self.base_offset + first, second

    def relative_offset(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise LogSegmentOffsetOverflowError(
                f"offset {offset} does not fit a segment based at {self.base_offset}; roll first"
            )
        return relative

    def last_offset(self) -> int:
        last = self.last()
        return last[0] if last is not None else self.base_offset

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (baseOffset, 0)."""
        slot = self.floor_slot(target_offset)
        return self.entry(slot) if slot >= 0 else (self.base_offset, 0)

    def append(self, offset: int, position: int) -> None:
        if self.entries and offset <= self.last_offset():
            raise CorruptIndexError(
                f"{self.path}: entry offset {offset} is not above the last entry {self.last_offset()}"
            )
        self._write(self.entries, self.relative_offset(offset), position)

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= `offset` (the log is being cut there)."""
        self.truncate_entries(self.ceiling_slot(offset))

    def sanity_check(self, log_size: int) -> None:
        """Kafka's O(1) check of the last entry; lookups check each entry they use against the
        log (LogSegment), so a damaged entry elsewhere is found when it matters."""
        last = self.last()
        if last is not None and (last[0] < self.base_offset or not 0 <= last[1] < log_size):
            raise CorruptIndexError(
                f"{self.path}: last entry ({last[0]}, {last[1]}) is below the base offset {self.base_offset} or "
                f"past the log end {log_size}"
            )
