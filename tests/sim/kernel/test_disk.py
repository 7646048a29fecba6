"""DiskModel: a crash keeps exactly what was fsynced — appends, truncations, overwrites, new files,
renames — and may tear the unsynced tail. Method: real files on a temp dir, writes and fsyncs by
hand with the model installed, then a crash and a look at the bytes."""

from __future__ import annotations

import os
import random
from pathlib import Path

from storage.checkpoint import write_atomically
from tests.sim.kernel.disk import DiskModel


def write(path: Path, data: bytes, sync: bool, mode: str = "ab") -> None:
    with open(path, mode) as file:
        file.write(data)
        file.flush()
        if sync:
            os.fsync(file.fileno())


def test_unsynced_appends_are_lost_and_synced_ones_kept(tmp_path: Path) -> None:
    model = DiskModel()
    model.track(tmp_path)
    segment = tmp_path / "00000000000000000000.log"
    with model.watching():
        write(segment, b"durable", sync=True)
        write(segment, b"+lost", sync=False)
    cuts = model.crash(tmp_path, random.Random(1), tear_probability=0.0)
    assert segment.read_bytes() == b"durable"
    assert [(cut.before, cut.after, cut.restored) for cut in cuts] == [(b"durable+lost", b"durable", False)]


def test_an_unsynced_truncation_is_undone(tmp_path: Path) -> None:
    model = DiskModel()
    model.track(tmp_path)
    segment = tmp_path / "00000000000000000000.log"
    with model.watching():
        write(segment, b"abcdef", sync=True)
        os.truncate(segment, 2)
    (cut,) = model.crash(tmp_path, random.Random(1), tear_probability=0.0)
    assert segment.read_bytes() == b"abcdef"
    assert cut.restored
    with model.watching():
        os.truncate(segment, 2)
        with open(segment, "rb+") as file:
            os.fsync(file.fileno())
    assert model.crash(tmp_path, random.Random(1), tear_probability=0.0) == []
    assert segment.read_bytes() == b"ab"


def test_a_file_never_synced_is_empty_and_a_renamed_synced_one_survives(tmp_path: Path) -> None:
    model = DiskModel()
    model.track(tmp_path)
    with model.watching():
        write(tmp_path / "fresh.log", b"never synced", sync=False)
        write_atomically(tmp_path / "quorum-state", "{}")  # .tmp fsynced, then renamed
    model.crash(tmp_path, random.Random(1), tear_probability=0.0)
    assert (tmp_path / "fresh.log").read_bytes() == b""
    assert (tmp_path / "quorum-state").read_text() == "{}"


def test_a_torn_write_back_keeps_a_prefix_of_the_tail_maybe_damaged(tmp_path: Path) -> None:
    model = DiskModel()
    model.track(tmp_path)
    kept, damaged = set(), 0
    for seed in range(40):
        segment = tmp_path / f"{seed:020d}.log"
        tail = b"0123456789" * 10
        with model.watching():
            write(segment, b"head", sync=True)
            write(segment, tail, sync=False)
        cuts = model.crash(tmp_path, random.Random(seed), tear_probability=1.0)
        after = segment.read_bytes()
        assert after[:4] == b"head" and len(after) <= 104
        assert cuts == [] or cuts[0].after == after
        kept.add(len(after))
        damaged += any(cut.damaged_at >= 0 for cut in cuts)
        if not any(cut.damaged_at >= 0 for cut in cuts):
            assert (b"head" + tail).startswith(after), "an undamaged tear is a prefix"
    assert len(kept) > 5, "tears keep prefixes of many lengths"
    assert damaged > 0


def test_memory_mapped_index_files_are_left_alone(tmp_path: Path) -> None:
    model = DiskModel()
    model.track(tmp_path)
    index = tmp_path / "00000000000000000000.index"
    write(index, b"entries", sync=False)
    assert model.crash(tmp_path, random.Random(1), tear_probability=0.0) == []
    assert index.read_bytes() == b"entries"


def test_models_watching_at_once_each_keep_the_fsyncs_of_their_own_files(tmp_path: Path) -> None:
    """Each simulated node may own a model of its disk: a model must take no image of another's
    files, and one model's unwatching must not blind the other."""
    first, second = DiskModel(), DiskModel()
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first.track(tmp_path / "first")
    second.track(tmp_path / "second")
    first.watch()
    second.watch()
    try:
        write(tmp_path / "first" / "a.log", b"first", sync=True)
        first.unwatch()
        write(tmp_path / "second" / "b.log", b"second", sync=True)
        write(tmp_path / "first" / "a.log", b"+unwatched", sync=True)
    finally:
        first.unwatch()
        second.unwatch()
    assert (first.fsync_count, second.fsync_count) == (1, 1)
    (cut,) = first.crash(tmp_path / "first", random.Random(1), tear_probability=0.0)
    assert (tmp_path / "first" / "a.log").read_bytes() == b"first"
    assert cut.describe() == "first/a.log:15->5"
    assert second.crash(tmp_path / "second", random.Random(1), tear_probability=0.0) == []
    assert (tmp_path / "second" / "b.log").read_bytes() == b"second"
