"""TimeIndex: sparse map from timestamp to offset, for lookups by time.

Format (Kafka's `.timeindex`): 12-byte entries, big-endian `timestamp i64, relativeOffset i32`.
An entry (timestamp, offset) says: up to and including the batch whose last offset is `offset`,
the largest timestamp seen is `timestamp`, and no earlier batch reached it. Entries are added
with the offset-index entries, but only when the timestamp grows, so timestamps strictly increase
and offsets never decrease. `lookup` returns the largest entry with timestamp <= target, else
(-1, baseOffset). The last entry is the segment's largest timestamp (written on roll).
"""

from __future__ import annotations

import struct

from storage.errors import CorruptIndexError
from storage.index import AbstractIndex

NO_TIMESTAMP = -1


class TimeIndex(AbstractIndex):
    entry_size = 12
    _entry_format = struct.Struct(">qi")

    def _parse(self, first: int, second: int) -> tuple[int, int]:
        return first, self.base_offset + second

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, baseOffset) when empty."""
        last = self.last()
        return last if last is not None else (NO_TIMESTAMP, self.base_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        slot = self.floor_slot(target_timestamp)
        return self.entry(slot) if slot >= 0 else (NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if timestamp grows; return whether an entry was added.

        `skip_full_check` is for the final entry written on roll: Kafka lets it take the
        slot a full check would refuse, because the index is trimmed right after."""
        last_timestamp, last_offset = self.last_entry()
        if self.entries and offset < last_offset:
            raise CorruptIndexError(
                f"{self.path}: entry offset {offset} is below the last entry's {last_offset}"
            )
        if timestamp <= last_timestamp:
            return False  # also refuses NO_TIMESTAMP as a first entry, as Kafka does
        if not skip_full_check and self.is_full():
            raise CorruptIndexError(f"{self.path}: time index is full; the segment must roll")
        if self.is_full():
            self._remap(self.size_in_bytes + self.entry_size)
        self._write(self.entries, timestamp, offset - self.base_offset)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop entries with offset >= `offset`."""
        self.truncate_entries(self.ceiling_slot(offset, field=1))

    def sanity_check(self, log_end_offset: int) -> None:
        """Kafka's O(1) check of the last entry (see OffsetIndex.sanity_check)."""
        last = self.last()
        if last is not None and not self.base_offset <= last[1] < log_end_offset:
            raise CorruptIndexError(
                f"{self.path}: last entry ({last[0]}, {last[1]}) lies outside the segment's offsets "
                f"[{self.base_offset}, {log_end_offset})"
            )
