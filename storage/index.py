"""AbstractIndex: the format-agnostic part of Kafka's sparse, memory-mapped segment indexes.

An index file holds fixed-size entries sorted by key. The file of the active segment is
preallocated to `segment.index.bytes` (rounded down to whole entries) and memory-mapped, so
an append is a slice assignment; on roll and on close it is trimmed to the entries in use, so
a cleanly closed index is exactly `entries * entry_size` bytes. Lookups are binary searches for
the largest entry whose key is <= the target. Subclasses give the entry layout.

After a crash an index may hold garbage past its last real entry (the preallocated tail) or be
torn; `sanity_check` finds what it can and recovery rebuilds the index from the log.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from storage.errors import CorruptIndexError


class AbstractIndex:
    """A memory-mapped file of fixed-size entries; `entry_size` and `_entry_format` per subclass."""

    entry_size: int
    _entry_format: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool) -> None:
        assert max_index_size >= self.entry_size, f"max_index_size={max_index_size}"
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        exists = path.exists()
        self._file = open(path, "r+b" if exists else "w+b")  # noqa: SIM115 - lives as long as the index
        length = os.fstat(self._file.fileno()).st_size
        if length % self.entry_size:
            # A torn write: keep only whole entries; the loader's sanity check decides the rest.
            length -= length % self.entry_size
            self._file.truncate(length)
        self.entries = length // self.entry_size
        self._mmap: mmap.mmap | None = None
        self.max_entries = 0
        if writable:
            self._remap(self._rounded(max_index_size))
        else:
            self._remap(length)

    # -- sizing -------------------------------------------------------------------------

    def _rounded(self, size: int) -> int:
        return max(size - size % self.entry_size, self.entries * self.entry_size)

    def _remap(self, size: int) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        self._file.truncate(size)
        if size > 0:
            self._mmap = mmap.mmap(self._file.fileno(), size)
        self.max_entries = size // self.entry_size
        self._last = self.entry(self.entries - 1) if self.entries else None

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def trim_to_valid_size(self) -> None:
        """Shrink the file to the entries in use (on roll and on close)."""
        self._remap(self.entries * self.entry_size)

    def resize_for_append(self) -> None:
        """Grow back to the preallocated size when a segment becomes active again."""
        self._remap(self._rounded(self.max_index_size))

    # -- entries ------------------------------------------------------------------------

    def entry(self, slot: int) -> tuple[int, int]:
        """(key, value) of entry `slot`, with relative offsets made absolute by the subclass."""
        assert 0 <= slot < self.entries, f"slot={slot} entries={self.entries} {self.path}"
        assert self._mmap is not None
        return self._parse(*self._entry_format.unpack_from(self._mmap, slot * self.entry_size))

    def _parse(self, first: int, second: int) -> tuple[int, int]:
        raise NotImplementedError

    def _key(self, slot: int, field: int = 0) -> int:
        return self.entry(slot)[field]

    def _write(self, slot: int, first: int, second: int) -> None:
        if slot >= self.max_entries:
            raise CorruptIndexError(
                f"{self.path}: index is full ({self.entries} entries); the segment must roll"
            )
        assert self._mmap is not None
        self._entry_format.pack_into(self._mmap, slot * self.entry_size, first, second)
        self.entries = slot + 1
        self._last = self._parse(first, second)

    def floor_slot(self, key: int) -> int:
        """Slot of the largest entry with key <= `key`, or -1 when every entry is larger."""
        low, high = 0, self.entries - 1
        found = -1
        while low <= high:
            middle = (low + high) // 2
            if self._key(middle) <= key:
                found = middle
                low = middle + 1
            else:
                high = middle - 1
        return found

    def ceiling_slot(self, key: int, field: int = 0) -> int:
        """Slot of the first entry whose `field` (0: key, 1: value) is >= `key`, or `entries`.

        Both fields of both index kinds never decrease, so either can be searched."""
        low, high = 0, self.entries
        while low < high:
            middle = (low + high) // 2
            if self._key(middle, field) < key:
                low = middle + 1
            else:
                high = middle
        return low

    def truncate_entries(self, entries: int) -> None:
        """Forget entries from slot `entries` on; the file keeps its size."""
        assert 0 <= entries <= self.entries, f"entries={entries} have={self.entries}"
        self.entries = entries
        self._last = self.entry(entries - 1) if entries else None

    def reset(self) -> None:
        self.entries = 0
        self._last = None

    def last(self) -> tuple[int, int] | None:
        """The last entry (cached: the append path asks for it on every index entry)."""
        return self._last

    # -- lifecycle ----------------------------------------------------------------------

    def flush(self) -> None:
        if self._mmap is not None:
            self._mmap.flush()

    def close(self) -> None:
        """Trim to the entries in use and release the file."""
        self.trim_to_valid_size()
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        self._file.close()

    def close_handler(self) -> None:
        """Release the file without trimming (used before renaming or deleting it)."""
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        self._file.close()

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path
