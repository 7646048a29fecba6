"""Snapshots of the metadata state machine: files, format and the store that owns them (KIP-630).

A snapshot with id `OffsetAndEpoch(epoch, offset)` holds the state after applying every entry
below `offset` (exclusive end); `epoch` is the epoch of the entry at `offset - 1`. File name,
KRaft's: `<offset, 20 digits>-<epoch, 10 digits>.checkpoint` in the metadata log directory, e.g.
`00000000000000000120-0000000003.checkpoint`.

Format: the state machine's bytes cut into chunks of at most `CHUNK_BYTES`, each the one record
value of a RecordBatch v2 (offsets 0, 1, 2, ...; epoch = the snapshot's epoch), so every chunk is
covered by a CRC-32C and `storage.records` is the only codec. KRaft's snapshots are record
batches too; it adds header and footer control records, which we do not need.

Files are written whole and atomically: `<name>.part`, fsync, rename, fsync of the directory. A
`.part` left by a crash is deleted when the store opens. Owner: `RaftLog`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from controller.raft_messages import OffsetAndEpoch
from storage.errors import StorageError
from storage.records import build_batch_from_values, decode_records, validate_batch

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".part"
CHUNK_BYTES = 256 * 1024
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


class CorruptSnapshotError(ValueError):
    """A snapshot file (or a downloaded one) fails its size or CRC checks."""


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> OffsetAndEpoch | None:
    match = _NAME.match(name)
    if match is None:
        return None
    return OffsetAndEpoch(epoch=int(match.group(2)), offset=int(match.group(1)))


def encode_snapshot(snapshot_id: OffsetAndEpoch, data: bytes) -> bytes:
    """The file bytes for state `data`: one batch per chunk (an empty state is one empty chunk)."""
    chunks = [data[start : start + CHUNK_BYTES] for start in range(0, len(data), CHUNK_BYTES)] or [b""]
    return b"".join(
        build_batch_from_values([chunk], base_offset=index, partition_leader_epoch=snapshot_id.epoch)
        for index, chunk in enumerate(chunks)
    )


def decode_snapshot(file_bytes: bytes) -> bytes:
    """The state bytes of a snapshot file; CorruptSnapshotError if any batch fails its checks."""
    pieces: list[bytes] = []
    position = 0
    try:
        while position < len(file_bytes):
            header = validate_batch(file_bytes, position, max_message_bytes=None, check_records=True)
            if header.base_offset != len(pieces):
                raise CorruptSnapshotError(f"chunk {len(pieces)} has base offset {header.base_offset}")
            records = decode_records(file_bytes, position)
            assert len(records) == 1, f"snapshot chunk holds {len(records)} records"
            pieces.append(records[0].value or b"")
            position += header.size_in_bytes
    except StorageError as error:
        raise CorruptSnapshotError(f"snapshot chunk {len(pieces)} at byte {position}: {error}") from None
    if not pieces:
        raise CorruptSnapshotError("snapshot file holds no chunk")
    return b"".join(pieces)


class SnapshotStore:
    """The snapshot files of one metadata log directory.

    State: the ids of the complete snapshot files on disk, sorted by offset. Invariant: every
    listed file decoded once when written or downloaded (reads re-check the CRCs)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        for partial in directory.glob(f"*{SNAPSHOT_SUFFIX}{PARTIAL_SUFFIX}"):
            partial.unlink()
        found = (parse_snapshot_file_name(path.name) for path in directory.iterdir())
        self._ids = sorted((item for item in found if item is not None), key=_by_offset)

    def ids(self) -> list[OffsetAndEpoch]:
        return list(self._ids)

    def latest_id(self) -> OffsetAndEpoch | None:
        return self._ids[-1] if self._ids else None

    def path(self, snapshot_id: OffsetAndEpoch) -> Path:
        return self.directory / snapshot_file_name(snapshot_id)

    def write(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """Store state `data` as snapshot `snapshot_id`, atomically and durably."""
        self.write_file(snapshot_id, encode_snapshot(snapshot_id, data))

    def write_file(self, snapshot_id: OffsetAndEpoch, file_bytes: bytes) -> bytes:
        """Store downloaded file bytes after checking them; return the state bytes they hold."""
        data = decode_snapshot(file_bytes)
        path = self.path(snapshot_id)
        partial = path.with_name(path.name + PARTIAL_SUFFIX)
        with open(partial, "wb") as file:
            file.write(file_bytes)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
        _fsync_directory(self.directory)
        if snapshot_id not in self._ids:
            self._ids.append(snapshot_id)
            self._ids.sort(key=_by_offset)
        return data

    def read(self, snapshot_id: OffsetAndEpoch) -> bytes:
        """The state bytes of a stored snapshot."""
        return decode_snapshot(self.path(snapshot_id).read_bytes())

    def size(self, snapshot_id: OffsetAndEpoch) -> int:
        return self.path(snapshot_id).stat().st_size

    def read_chunk(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """File bytes [position, position + max_bytes) of a stored snapshot (FetchSnapshot)."""
        assert position >= 0, f"position={position}"
        assert max_bytes > 0, f"max_bytes={max_bytes}"
        with open(self.path(snapshot_id), "rb") as file:
            file.seek(position)
            return file.read(max_bytes)

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> int:
        """Delete every snapshot older than `snapshot_id` (by offset); return how many went."""
        doomed = [item for item in self._ids if item.offset < snapshot_id.offset]
        for item in doomed:
            self.path(item).unlink(missing_ok=True)
            self._ids.remove(item)
        return len(doomed)


def _by_offset(snapshot_id: OffsetAndEpoch) -> tuple[int, int]:
    return snapshot_id.offset, snapshot_id.epoch


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


__all__ = [
    "CHUNK_BYTES",
    "CorruptSnapshotError",
    "SnapshotStore",
    "decode_snapshot",
    "encode_snapshot",
    "parse_snapshot_file_name",
    "snapshot_file_name",
]
