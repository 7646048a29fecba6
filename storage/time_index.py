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
        """Raise CorruptIndexError unless timestamps grow and offsets stay inside the segment."""
        previous_timestamp, previous_offset = NO_TIMESTAMP - 1, self.base_offset
        for slot in range(self.entries):
            timestamp, offset = self.entry(slot)
            if timestamp <= previous_timestamp or offset < previous_offset or offset >= log_end_offset:
                raise CorruptIndexError(
                    f"{self.path}: entry {slot} ({timestamp}, {offset}) is out of order or past "
                    f"the segment's next offset {log_end_offset}"
                )
            previous_timestamp, previous_offset = timestamp, offset
