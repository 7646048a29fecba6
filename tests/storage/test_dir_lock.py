"""DirLock: one process per data dir, and the refused one is told who holds it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.dir_lock import LOCK_FILE, DirLock
from storage.errors import LogDirLockedError

HOLD = """
import sys
from pathlib import Path
from storage.dir_lock import DirLock
DirLock.acquire(Path(sys.argv[1]), "node 7")
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_holder_is_refused_with_the_first_named(tmp_path: Path) -> None:
    lock = DirLock.acquire(tmp_path / "data", "node 1")
    with pytest.raises(LogDirLockedError, match=rf"held by node 1, pid {os.getpid()}"):
        DirLock.acquire(tmp_path / "data", "node 2")
    lock.release()
    DirLock.acquire(tmp_path / "data", "node 2").release()
    assert (tmp_path / "data" / LOCK_FILE).read_text() == f"node 2, pid {os.getpid()}\n"


def test_another_process_holds_it_until_it_dies_and_its_file_then_blocks_no_one(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(LogDirLockedError, match=rf"held by node 7, pid {holder.pid}"):
            DirLock.acquire(tmp_path, "node 1")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    DirLock.acquire(tmp_path, "node 1").release()  # a killed holder leaves the file, not the lock
