"""SimDisk: the crash model of one node's metadata log directory.

Storage writes reach the page cache; only an fsync makes them durable. The simulator records,
after every log flush the driver performs (`Ready.must_sync`), the identity (device, inode) and
length of every segment `.log` file: that much is durable. A crash then cuts each `.log` file back
to its durable length — keeping, with `tear_probability`, a random part of the unflushed tail
(the page cache wrote some of it back), maybe with a damaged byte in it — before `LogLoader`
recovers. A file created since the last flush has nothing durable. Truncations, renames and
deletions are taken as durable at once (a truncation also lowers the durable length, see
`record_truncation`); files written with `write_atomically` (quorum-state, the
leader-epoch checkpoint, snapshots) are fsynced by their writers and survive whole.

Flushes the driver did not ask for (a roll fsyncs the old segment) are not recorded, so the model
may lose bytes a real disk would keep: harsher than reality, never kinder.

A wipe (`SimDisk.wipe`) takes everything: the node's directory comes back empty, as after a disk
replacement, a reformat or an operator's `rm -r`.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

from controller.raft_log import RaftLog


def default_root() -> Path:
    """Where the simulators make their temp directories: /dev/shm when present (no real disk I/O)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


class SimDisk:
    """One node's durable view (see the module docstring). State: per segment file, the (device,
    inode, length) recorded at the last flush. Owner: the node's SimDriver and the Simulation."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.durable: dict[str, tuple[int, int, int]] = {}  # name -> (st_dev, st_ino, length)

    def record_flush(self) -> None:
        """Everything in the segment files is durable now."""
        durable = {}
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".log"):
                stat = entry.stat()
                durable[entry.name] = (stat.st_dev, stat.st_ino, stat.st_size)
        self.durable = durable

    def record_truncation(self) -> None:
        """The log was truncated: a file cut below its durable length is durable only up to the cut,
        or bytes appended later (and never flushed) would survive a crash."""
        for entry in os.scandir(self.directory):
            known = self.durable.get(entry.name)
            if known is not None:
                stat = entry.stat()
                if (stat.st_dev, stat.st_ino) == known[:2] and stat.st_size < known[2]:
                    self.durable[entry.name] = (known[0], known[1], stat.st_size)

    def crash(self, log: RaftLog, rng: random.Random, tear_probability: float) -> list[str]:
        """Drop the open files unflushed and cut every segment to what a crash would leave;
        return what was cut, for the trace."""
        abandon(log)
        cuts = []
        for entry in sorted(os.scandir(self.directory), key=lambda item: item.name):
            if not entry.name.endswith(".log"):
                continue
            stat = entry.stat()
            device, inode, length = self.durable.get(entry.name, (-1, -1, 0))
            durable_length = length if (device, inode) == (stat.st_dev, stat.st_ino) else 0
            if stat.st_size <= durable_length:
                continue
            keep = durable_length
            damaged = False
            if rng.random() < tear_probability:
                keep = rng.randint(durable_length, stat.st_size)
                damaged = keep > durable_length and rng.random() < 0.5
            with open(entry.path, "r+b") as file:
                file.truncate(keep)
                if damaged:
                    position = rng.randint(durable_length, keep - 1)
                    file.seek(position)
                    file.write(bytes([rng.randint(0, 255)]))
            cuts.append(f"{entry.name}:{stat.st_size}->{keep}{'!' if damaged else ''}")
        self.record_flush()  # what survived the crash is on the disk now
        return cuts

    def wipe(self) -> None:
        """The directory and everything in it are gone; an empty one takes its place. Only while the
        node is down (its files are closed)."""
        shutil.rmtree(self.directory)
        self.directory.mkdir(parents=True)
        self.durable = {}


def abandon(log: RaftLog) -> None:
    """Release a log's files as a dying process would: no flush, no index trimming."""
    for segment in list(log.log.segments):
        segment.close_handlers()
    for _, segment in getattr(log.log, "_pending_deletes", []):
        segment.close_handlers()
