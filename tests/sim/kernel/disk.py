"""DiskModel: what a power loss leaves of a simulated node's files, judged at the OS boundary.

The simulated nodes run the real storage code on real files (/dev/shm when present). Writes reach
the page cache; only an fsync makes a file's bytes durable. The model watches the one door every
durable write goes through: while it watches (`watch()`), `os.fsync` and `os.fdatasync` of a
regular file under a tracked root record that file's whole content as its durable image, keyed by
its inode (so renames, as in `write_atomically`, keep the image). A crash (`crash(root)`) then puts
every file under the root back to its durable image: appended bytes never fsynced are lost (with
`tear_probability` the page cache wrote back a random prefix of them, maybe with one damaged
byte); a truncation never fsynced is undone, the cut bytes come back; overwrites revert; a file
created since the last fsync of it is empty. Bit rot (`rot`) changes a byte in both the file and
its image. Nothing here reads storage's own bookkeeping (the recovery point, the flush calls it
intends): the model sees only what reached the OS, so a missing fsync in storage shows up as lost
or resurrected bytes.

Simplifications, each documented where it matters: directory entries (creations, renames,
deletions) are durable at once, as on a journalling file system with ordered metadata (storage
fsyncs directories after renames anyway); memory-mapped index files (`.index`, `.timeindex`) are
left as they are, because their msync is not observable here and recovery rebuilds or sanity-checks
what it does not trust. A file is small in a simulation (segments of a few KiB), so an fsync copies
it whole.

Several models may watch at once (each simulated node may own one, as each has its own disk): every
model sees every fsync and records those of files under its own roots.
"""

from __future__ import annotations

import contextlib
import os
import random
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

UNMODELLED_SUFFIXES = (".index", ".timeindex")  # memory-mapped: msync is not observable
FileKey = tuple[int, int]  # (st_dev, st_ino)
DamagePolicy = Callable[[Path, bytes, int, int, random.Random], int]


def default_root() -> Path:
    """Where the simulators make their temp directories: /dev/shm when present (no real disk I/O)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


@dataclass(frozen=True, slots=True)
class FileCut:
    """What a crash did to one file: its content `before` and `after` (the durable image, or more of
    the appended tail when a torn write-back kept some), and the position of a damaged byte (-1:
    none)."""

    path: Path
    before: bytes
    after: bytes
    damaged_at: int = -1

    @property
    def restored(self) -> bool:
        """Bytes came back that the file no longer had: an undone truncation or overwrite."""
        return not self.before.startswith(self.after)

    def describe(self) -> str:
        """`<dir>/<file>:<length before>-><length after>`, marked `!` when damaged, `+` when restored."""
        mark = "!" if self.damaged_at >= 0 else ("+" if self.restored else "")
        return f"{self.path.parent.name}/{self.path.name}:{len(self.before)}->{len(self.after)}{mark}"


class DiskModel:
    """The durable images of every modelled file (see the module docstring). State: the tracked
    roots and, per inode, the bytes the last fsync made durable. Owner: the simulation (one per run,
    installed while the run lasts) or a simulated node (one per disk, installed while it is up)."""

    def __init__(self) -> None:
        self.roots: list[Path] = []
        self.durable: dict[FileKey, bytes] = {}
        self.fsync_count = 0

    def track(self, root: Path) -> None:
        """Model the files under `root` (a node's directory); everything in it now is durable."""
        root = root.resolve()
        if root not in self.roots:
            self.roots.append(root)
        self.settle(root)

    def settle(self, root: Path) -> None:
        """Everything under `root` is durable now (after a crash's cut, what is left is on disk)."""
        for path in _files(root.resolve()):
            with contextlib.suppress(FileNotFoundError):
                self.durable[_key(path)] = path.read_bytes()

    # -- the OS boundary ---------------------------------------------------------------------------

    def watch(self) -> None:
        """Start recording the fsyncs of files under the tracked roots (see `_Fsyncs`)."""
        _FSYNCS.add(self)

    def unwatch(self) -> None:
        _FSYNCS.discard(self)

    @contextlib.contextmanager
    def watching(self) -> Iterator[DiskModel]:
        self.watch()
        try:
            yield self
        finally:
            self.unwatch()

    def _synced(self, path: Path, key: FileKey) -> None:
        """The regular file `path` (inode `key`) was fsynced."""
        if not self._modelled(path):
            return
        self.fsync_count += 1
        self.durable[key] = path.read_bytes()  # the fd may be write-only

    def _modelled(self, path: Path) -> bool:
        return not path.name.endswith(UNMODELLED_SUFFIXES) and any(path.is_relative_to(root) for root in self.roots)

    # -- the crash ---------------------------------------------------------------------------------

    def crash(self, root: Path, rng: random.Random, tear_probability: float,
              damage: DamagePolicy | None = None) -> list[FileCut]:
        """Put every modelled file under `root` back to its durable image (see the module
        docstring); return what changed, sorted by path. The node's open files must be abandoned
        (closed without flushing) before. A torn tail is damaged with probability 1/2, at the
        position `damage(path, content, start, end, rng)` picks in [start, end) (-1: nowhere;
        default: any byte of the kept tail)."""
        cuts = []
        for path in sorted(_files(root.resolve())):
            if path.name.endswith(UNMODELLED_SUFFIXES):
                continue
            before = path.read_bytes()
            image = self.durable.get(_key(path), b"")
            after, damaged_at = image, -1
            if before.startswith(image) and len(before) > len(image) and rng.random() < tear_probability:
                kept = rng.randint(len(image), len(before))
                after = before[:kept]
                if kept > len(image) and rng.random() < 0.5:
                    if damage is None:
                        damaged_at = rng.randint(len(image), kept - 1)
                    else:
                        damaged_at = damage(path, before, len(image), kept, rng)
                    if damaged_at >= 0:
                        after = after[:damaged_at] + bytes([rng.randint(0, 255)]) + after[damaged_at + 1:]
            if after != before:
                with open(path, "r+b") as file:
                    file.truncate(0)
                    file.write(after)
                cuts.append(FileCut(path, before, after, damaged_at))
        self.settle(root)
        return cuts

    def rot(self, path: Path, position: int, rng: random.Random) -> None:
        """Bit rot: the byte at `position` of `path` changes on the platter, so in what is read now
        and in what a power loss leaves (where the durable image reaches that far)."""
        flip = rng.randint(1, 255)
        with open(path, "r+b") as file:
            file.seek(position)
            byte = file.read(1)[0]
            file.seek(position)
            file.write(bytes([byte ^ flip]))
        key = _key(path)
        image = self.durable.get(key)
        if image is not None and position < len(image):
            self.durable[key] = image[:position] + bytes([image[position] ^ flip]) + image[position + 1:]

    def wipe(self, root: Path) -> None:
        """The disk under `root` is gone (replaced): forget its images; the caller removes the files."""
        for path in _files(root.resolve()):
            with contextlib.suppress(FileNotFoundError):
                self.durable.pop(_key(path), None)


class _Fsyncs:
    """The models watching fsyncs. While any watches, `os.fsync` and `os.fdatasync` are wrapped so
    that each model sees every fsync after it happened; with none left, the originals are back.
    Several simulations may live in one process (a test module's scenarios), each with its model."""

    def __init__(self) -> None:
        self.models: list[DiskModel] = []
        self.originals: tuple[object, object] | None = None

    def add(self, model: DiskModel) -> None:
        if model in self.models:
            return
        self.models.append(model)
        if self.originals is None:
            real_fsync, real_fdatasync = os.fsync, os.fdatasync
            self.originals = (real_fsync, real_fdatasync)

            def fsync(fd: int) -> None:
                real_fsync(fd)
                self.synced(fd)

            def fdatasync(fd: int) -> None:
                real_fdatasync(fd)
                self.synced(fd)

            os.fsync, os.fdatasync = fsync, fdatasync  # type: ignore[assignment]

    def discard(self, model: DiskModel) -> None:
        if model in self.models:
            self.models.remove(model)
        if not self.models and self.originals is not None:
            os.fsync, os.fdatasync = self.originals  # type: ignore[assignment]
            self.originals = None

    def synced(self, fd: int) -> None:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return  # a directory: its entries are durable already (see the module docstring)
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        for model in self.models:
            model._synced(path, (info.st_dev, info.st_ino))


_FSYNCS = _Fsyncs()


def _key(path: Path) -> FileKey:
    # Inodes identify files across renames. tmpfs (/dev/shm, where simulations run) does not reuse
    # inode numbers within a run, so a deleted file's image cannot be mistaken for a new file's.
    info = path.stat()
    return info.st_dev, info.st_ino


def _files(root: Path) -> Iterator[Path]:
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                yield path
