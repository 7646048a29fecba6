"""`.lock`: one process per data directory, as Kafka's `FileLock` on `<log dir>/.lock`.

Two processes on one log dir would both append to the same segments and checkpoints, mixing two
histories in one partition. Each node takes an exclusive, non-blocking `flock` on the `.lock` file
at the root of every data dir before it reads anything there, and holds it while it runs; the
kernel drops it when the process exits, however it exits (kill -9 included), so a stale file never
blocks a restart. The holder writes who it is into the file, so a refused process can name it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from storage.errors import LogDirLockedError

LOCK_FILE = ".lock"


class DirLock:
    """The held lock of one data dir; `release` (or the process's exit) frees it."""

    def __init__(self, directory: Path, descriptor: int) -> None:
        self.directory = directory
        self._descriptor = descriptor

    @classmethod
    def acquire(cls, directory: Path, holder: str) -> DirLock:
        """Lock `directory` (created if absent) for this process, described by `holder`; raise
        LogDirLockedError, naming the current holder, when another process has it."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                current = path.read_text(encoding="utf-8", errors="replace").strip() or "an unknown process"
            finally:
                os.close(descriptor)
            raise LogDirLockedError(
                f"failed to acquire lock on file {LOCK_FILE} in {directory}: it is held by {current}; "
                f"another node process is using this directory. Stop it, or point this node at another directory"
            ) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{holder}, pid {os.getpid()}\n".encode(), 0)
        return cls(directory, descriptor)

    def release(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)  # closing the only descriptor drops the flock
            self._descriptor = -1
