"""The leader-epoch-checkpoint's deferred writes (storage/leader_epoch_cache.py): a new epoch's entry
reaches the file before the recovery point passes it (a roll, a flush) and at close, a removal at
once; and whatever the log did, a crash then a reload with any recovery point the log ever had
(what its recovery-point checkpoint may hold) gives the epochs of the batches again.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCheckpointFile
from storage.config import LogConfig
from storage.leader_epoch_cache import LeaderEpochCache
from storage.log import Log
from storage.log_loader import LogLoader
from storage.records import build_batch

CONFIG = LogConfig.from_properties({"segment.bytes": 600, "index.interval.bytes": 120})


def on_disk(log: Log) -> list[EpochEntry]:
    return LeaderEpochCheckpointFile(log.directory / LEADER_EPOCH_CHECKPOINT).read()


def append(log: Log, epoch: int, count: int = 2) -> None:
    log.append_as_leader(build_batch([(b"k", b"v" * 40)] * count, timestamps=[0] * count), epoch, 0)


def batch_epochs(log: Log) -> list[EpochEntry]:
    """The entries the log's batches call for (Kafka's assign over every batch)."""
    return LeaderEpochCache.of_batches((header.partition_leader_epoch, header.base_offset)
                                       for segment in log.segments for _, header in segment.iter_headers())


def test_a_new_epoch_is_written_before_the_recovery_point_passes_it_and_at_close(tmp_path: Path) -> None:
    log = LogLoader(tmp_path / "t-0", CONFIG, 0).load()
    append(log, 1)
    append(log, 2)
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 2)]
    assert on_disk(log) == []
    log.flush(0)
    assert on_disk(log) == [EpochEntry(1, 0), EpochEntry(2, 2)]
    append(log, 3)
    assert on_disk(log) == [EpochEntry(1, 0), EpochEntry(2, 2)]
    for _ in range(8):  # rolls: each moves the recovery point past the epoch-3 entry
        append(log, 3)
    assert len(log.segments) > 1 and log.recovery_point > 4
    assert on_disk(log) == log.leader_epoch_cache.entries()
    log.assign_epoch(4, log.log_end_offset)  # a new leader's epoch, no batch yet
    assert on_disk(log) != log.leader_epoch_cache.entries()
    log.close()
    assert on_disk(log) == log.leader_epoch_cache.entries()


def test_a_removal_is_written_at_once(tmp_path: Path) -> None:
    """A truncation of written entries, or an epoch below the latest, rewrites the entries: the file
    stays a prefix."""
    log = LogLoader(tmp_path / "t-0", CONFIG, 0).load()
    append(log, 1)
    append(log, 2)
    log.flush(0)
    log.truncate_to(2, 0)
    assert on_disk(log) == log.leader_epoch_cache.entries() == [EpochEntry(1, 0)]
    log.assign_epoch(4, 2)
    log.append_as_follower(build_batch([(b"k", b"v")], base_offset=2, partition_leader_epoch=3), 0)
    assert on_disk(log) == log.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(3, 2)]


def test_a_roll_writes_the_entries_of_the_segment_it_leaves(tmp_path: Path) -> None:
    """Once rolled, the entry's segment is no longer the active one: a reload after a crash, from the
    recovery point the roll set, re-reads only the new segment, so the entry must be on disk."""
    directory = tmp_path / "t-0"
    log = LogLoader(directory, CONFIG, 0).load()
    append(log, 0)
    log.flush(0)
    while len(log.segments) == 1:
        append(log, 1)
    assert on_disk(log) == [EpochEntry(0, 0), EpochEntry(1, 2)]
    for segment in log.segments:  # a crash
        segment.close_handlers()
    reloaded = LogLoader(directory, CONFIG, 0).load(recovery_point=log.recovery_point, had_clean_shutdown=False)
    assert reloaded.leader_epoch_cache.entries() == [EpochEntry(0, 0), EpochEntry(1, 2)]


def test_removing_only_unwritten_entries_writes_nothing(tmp_path: Path) -> None:
    """A new leader's entry that a follower's truncation removes (it became follower before any
    batch) never reached the file: the file is still a prefix, with no write."""
    log = LogLoader(tmp_path / "t-0", CONFIG, 0).load()
    append(log, 1)
    log.flush(0)
    log.assign_epoch(2, log.log_end_offset)
    written = (log.directory / LEADER_EPOCH_CHECKPOINT).stat().st_mtime_ns
    assert log.leader_epoch_cache.truncate_from_end(log.log_end_offset) == [EpochEntry(2, 2)]
    assert log.leader_epoch_cache.write_pending_since is None
    assert (log.directory / LEADER_EPOCH_CHECKPOINT).stat().st_mtime_ns == written
    assert on_disk(log) == log.leader_epoch_cache.entries() == [EpochEntry(1, 0)]


operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 4)),  # epoch step, records
    st.tuples(st.just("lead"), st.integers(1, 2), st.just(0)),  # a new leader's epoch, no batch
    st.tuples(st.just("flush"), st.just(0), st.just(0)),
    st.tuples(st.just("truncate"), st.integers(1, 6), st.just(0)),  # offsets cut from the end
), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=operations, data=st.data())
def test_a_crash_then_a_reload_from_any_recovery_point_the_log_had_gives_the_batches_epochs(
        tmp_path_factory: object, operations: list[tuple[str, int, int]], data: st.DataObject) -> None:
    directory = tmp_path_factory.mktemp("epochs") / "t-0"  # type: ignore[attr-defined]
    log = LogLoader(directory, CONFIG, 0).load()
    epoch = 0
    append(log, epoch)
    log.flush(0)  # a first entry on disk: a reload rebuilds a cache whose file has none from every batch
    recovery_points = {log.recovery_point}
    for operation, step, count in operations:
        if operation == "append":
            epoch += step
            append(log, epoch, count)
        elif operation == "lead":
            epoch += step
            log.assign_epoch(epoch, log.log_end_offset)
        elif operation == "flush":
            log.flush(0)
        else:
            log.truncate_to(max(log.log_end_offset - step, 2), 0)
        recovery_points.add(log.recovery_point)
    expected = batch_epochs(log)
    assert [e for e in log.leader_epoch_cache.entries() if e.start_offset < log.log_end_offset] == expected
    for segment in log.segments:  # a crash: nothing closed, nothing more written
        segment.close_handlers()

    persisted = data.draw(st.sampled_from(sorted(recovery_points)), label="recovery point on disk")
    reloaded = LogLoader(directory, CONFIG, 0).load(recovery_point=persisted, had_clean_shutdown=False)

    assert reloaded.leader_epoch_cache.entries() == expected
    assert on_disk(reloaded) == expected
