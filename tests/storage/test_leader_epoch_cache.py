"""LeaderEpochCache: Kafka's LeaderEpochFileCache semantics, persisted in leader-epoch-checkpoint.

Method: examples taken from Kafka's documented behaviour (KIP-101/279, the javadoc of
assign, endOffsetFor, truncateFromEnd and truncateFromStart); a hypothesis state machine runs
random assign/truncate/clear/reopen sequences against a plain-list model, checking after every
step that the cache equals the model and that a reload from the file equals the cache; and
end_offset_for is checked against an answer derived by labelling every offset of a log with
the epoch that wrote it.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage.errors import CorruptCheckpointError
from storage.leader_epoch_cache import EpochEntry, LeaderEpochCache
from wire.sentinels import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def make_cache(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, start_offset in entries:
        cache.assign(epoch, start_offset)
    return cache


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(entry.epoch, entry.start_offset) for entry in cache.entries()]


def reloaded(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return pairs(LeaderEpochCache(cache.checkpoint.path))


# --- assign ---------------------------------------------------------------------------------


def test_empty_cache_has_no_epoch(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    assert cache.latest_epoch() is None
    assert cache.latest_entry() is None
    assert cache.earliest_entry() is None
    assert cache.entries() == []
    assert len(cache) == 0
    assert not cache.checkpoint.path.exists()


def test_assign_appends_and_flushes(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    assert cache.assign(2, 10) is True
    assert cache.assign(4, 25) is True
    assert cache.entries() == [EpochEntry(2, 10), EpochEntry(4, 25)]
    assert cache.latest_epoch() == 4
    assert cache.earliest_entry() == EpochEntry(2, 10)
    assert cache.latest_entry() == EpochEntry(4, 25)
    assert cache.checkpoint.path.read_text() == "0\n2\n2 10\n4 25\n"


def test_assign_of_the_latest_epoch_at_a_later_offset_changes_nothing(tmp_path: Path) -> None:
    # Every batch appended in an epoch calls assign; only the first one records anything.
    cache = make_cache(tmp_path, (2, 10))
    assert cache.assign(2, 10) is False
    assert cache.assign(2, 11) is False
    assert cache.assign(2, 500) is False
    assert pairs(cache) == [(2, 10)]


def test_assign_of_the_latest_epoch_at_an_earlier_offset_moves_its_start(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (1, 0), (2, 10))
    assert cache.assign(2, 7) is True
    assert pairs(cache) == [(1, 0), (2, 7)]
    assert reloaded(cache) == [(1, 0), (2, 7)]


def test_assign_of_a_lower_epoch_removes_the_later_entries(tmp_path: Path) -> None:
    # Kafka: entries that would break monotonicity are stale and are removed first.
    cache = make_cache(tmp_path, (1, 0), (3, 10), (5, 20))
    assert cache.assign(2, 15) is True
    assert pairs(cache) == [(1, 0), (2, 15)]


def test_assign_at_an_offset_below_earlier_entries_removes_them(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (1, 5), (3, 10), (5, 20))
    assert cache.assign(6, 10) is True
    assert pairs(cache) == [(1, 5), (6, 10)]
    assert cache.assign(7, 0) is True
    assert pairs(cache) == [(7, 0)]


def test_assign_rejects_negative_values_without_changing_anything(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (1, 0))
    with pytest.raises(ValueError, match="epoch=-1"):
        cache.assign(-1, 5)
    with pytest.raises(ValueError, match="start_offset=-5"):
        cache.assign(2, -5)
    assert pairs(cache) == [(1, 0)]


# --- end_offset_for ------------------------------------------------------------------------


def test_end_offset_for_on_an_empty_cache_is_undefined(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_end_offset_for_the_latest_epoch_is_the_log_end_offset(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (1, 0), (2, 10))
    assert cache.end_offset_for(2, 42) == (2, 42)


def test_end_offset_for_an_earlier_epoch_is_the_next_epochs_start(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (1, 5), (2, 10), (5, 13))
    assert cache.end_offset_for(1, 42) == (1, 10)
    assert cache.end_offset_for(2, 42) == (2, 13)


def test_end_offset_for_a_missing_epoch_answers_the_largest_epoch_below(tmp_path: Path) -> None:
    # A follower of epoch 1 learns that the leader's log holds epoch 0 up to offset 13.
    cache = make_cache(tmp_path, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 42) == (0, 13)
    assert cache.end_offset_for(3, 42) == (2, 17)


def test_end_offset_for_an_epoch_before_the_first_answers_the_first_start(tmp_path: Path) -> None:
    # Kafka: those epochs were removed with the log's start; the follower truncates to it.
    cache = make_cache(tmp_path, (5, 11), (6, 12), (7, 13))
    assert cache.end_offset_for(4, 42) == (4, 11)
    assert cache.end_offset_for(0, 42) == (0, 11)


def test_end_offset_for_an_epoch_above_the_latest_is_undefined(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (2, 100))
    assert cache.end_offset_for(3, 150) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, 150) == UNDEFINED


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (1, 5), (3, 10))
    assert [cache.epoch_for_offset(offset) for offset in (0, 4, 5, 9, 10, 99)] == [
        None,
        None,
        1,
        1,
        3,
        3,
    ]


# --- truncation -----------------------------------------------------------------------------


def test_truncate_from_end_removes_entries_at_or_after_the_offset(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (2, 6), (3, 8), (4, 11))
    assert cache.truncate_from_end(11) == [EpochEntry(4, 11)]
    assert pairs(cache) == [(2, 6), (3, 8)]
    assert cache.truncate_from_end(9) == []
    assert cache.truncate_from_end(7) == [EpochEntry(3, 8)]
    assert pairs(cache) == [(2, 6)]
    assert reloaded(cache) == [(2, 6)]


def test_truncate_from_end_to_zero_clears_and_negative_does_nothing(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (2, 0), (3, 8))
    assert cache.truncate_from_end(-1) == []
    assert pairs(cache) == [(2, 0), (3, 8)]
    assert cache.truncate_from_end(0) == [EpochEntry(2, 0), EpochEntry(3, 8)]
    assert reloaded(cache) == []


def test_truncate_from_start_moves_the_covering_entry_to_the_start(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (2, 6), (3, 8), (4, 11))
    assert cache.truncate_from_start(9) == [EpochEntry(2, 6), EpochEntry(3, 8)]
    assert pairs(cache) == [(3, 9), (4, 11)]
    assert reloaded(cache) == [(3, 9), (4, 11)]


def test_truncate_from_start_keeps_an_entry_that_starts_exactly_there(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(8)
    assert pairs(cache) == [(3, 8), (4, 11)]


def test_truncate_from_start_below_the_first_entry_does_nothing(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (2, 6), (3, 8))
    assert cache.truncate_from_start(5) == []
    assert pairs(cache) == [(2, 6), (3, 8)]


def test_truncate_from_start_past_every_entry_keeps_the_latest_epoch(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(100)
    assert pairs(cache) == [(4, 100)]


def test_clear_and_flush_empties_the_file(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (2, 6), (3, 8))
    cache.clear_and_flush()
    assert cache.entries() == []
    assert cache.checkpoint.path.read_text() == "0\n0\n"
    assert reloaded(cache) == []


def test_restore_brings_back_the_entries_a_lower_epoch_removed(tmp_path: Path) -> None:
    # The undo of a failed append: a copy taken before assign goes back, in memory and in the file.
    cache = make_cache(tmp_path, (1, 0), (3, 10))
    copy = cache.entries()
    cache.assign(2, 15)
    assert cache.restore(copy) is True
    assert pairs(cache) == [(1, 0), (3, 10)]
    assert reloaded(cache) == [(1, 0), (3, 10)]
    copy.clear()
    assert pairs(cache) == [(1, 0), (3, 10)], "the cache keeps its own list"


def test_restore_of_the_same_entries_writes_nothing(tmp_path: Path) -> None:
    cache = make_cache(tmp_path, (1, 0), (3, 10))
    cache.checkpoint.path.unlink()
    assert cache.restore(cache.entries()) is False
    assert not cache.checkpoint.path.exists()


# --- loading --------------------------------------------------------------------------------


def test_a_non_monotonic_file_loads_through_the_assign_rule(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n4\n1 0\n3 10\n2 15\n4 12\n")
    assert pairs(LeaderEpochCache(path)) == [(1, 0), (4, 12)]


def test_a_corrupt_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n2\n1 0\n")
    with pytest.raises(CorruptCheckpointError, match="leader-epoch-checkpoint line 2"):
        LeaderEpochCache(path)


@pytest.mark.parametrize("change", ["assign", "truncate_from_end", "truncate_from_start", "restore", "clear"])
def test_a_failed_checkpoint_write_changes_neither_the_cache_nor_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    # The file is written before memory changes: a caller that sees the write fail (a full disk)
    # keeps a cache that still equals what a restart would load.
    cache = make_cache(tmp_path, (1, 0), (3, 10), (5, 20))
    before = pairs(cache)

    def full_disk(entries: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device (injected)")

    monkeypatch.setattr(cache.checkpoint, "write", full_disk)
    with pytest.raises(OSError, match="injected"):
        match change:
            case "assign":
                cache.assign(4, 15)
            case "truncate_from_end":
                cache.truncate_from_end(10)
            case "truncate_from_start":
                cache.truncate_from_start(12)
            case "restore":
                cache.restore([EpochEntry(1, 0)])
            case "clear":
                cache.clear_and_flush()
    assert pairs(cache) == before
    assert reloaded(cache) == before


# --- reference model ------------------------------------------------------------------------


def model_assign(model: list[tuple[int, int]], epoch: int, start: int) -> list[tuple[int, int]]:
    """Kafka's assign, stated as a filter: keep what can precede the new entry, append it."""
    if model and model[-1][0] == epoch and model[-1][1] <= start:
        return model
    return [(e, s) for e, s in model if e < epoch and s < start] + [(epoch, start)]


def model_truncate_from_start(model: list[tuple[int, int]], start: int) -> list[tuple[int, int]]:
    covered = [(e, s) for e, s in model if s <= start]
    if not covered:
        return model
    return [(covered[-1][0], start)] + [(e, s) for e, s in model if s > start]


def model_end_offset_for(
    model: list[tuple[int, int]], requested: int, log_end_offset: int
) -> tuple[int, int]:
    """Kafka's endOffsetFor javadoc, by linear scans over the entries."""
    if requested == UNDEFINED_EPOCH:
        return UNDEFINED
    if model and model[-1][0] == requested:
        return requested, log_end_offset
    later_starts = [s for e, s in model if e > requested]
    if not later_starts:
        return UNDEFINED
    earlier_epochs = [e for e, _ in model if e <= requested]
    return (max(earlier_epochs) if earlier_epochs else requested), min(later_starts)


class LeaderEpochCacheMachine(RuleBasedStateMachine):
    """Random operation sequences: the cache, its file and a plain-list model agree throughout."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="epoch-cache-"))
        self.path = self.directory / "leader-epoch-checkpoint"
        self.cache = LeaderEpochCache(self.path)
        self.model: list[tuple[int, int]] = []

    def teardown(self) -> None:
        shutil.rmtree(self.directory)

    @rule(epoch=st.integers(0, 12), start_offset=st.integers(0, 60))
    def assign(self, epoch: int, start_offset: int) -> None:
        expected = model_assign(self.model, epoch, start_offset)
        assert self.cache.assign(epoch, start_offset) == (expected != self.model)
        self.model = expected

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def assign_next_batch(self, data: st.DataObject) -> None:
        # The common case: the leader appends more batches in the current epoch, or a new one.
        epoch, start_offset = self.model[-1]
        epoch += data.draw(st.integers(0, 2), label="epoch step")
        start_offset += data.draw(st.integers(0, 10), label="offset step")
        self.assign(epoch, start_offset)

    @rule(end_offset=st.integers(-1, 65))
    def truncate_from_end(self, end_offset: int) -> None:
        expected = self.model if end_offset < 0 else [m for m in self.model if m[1] < end_offset]
        removed = [EpochEntry(*m) for m in self.model if m not in expected]
        assert self.cache.truncate_from_end(end_offset) == removed
        self.model = expected

    @rule(start_offset=st.integers(0, 65))
    def truncate_from_start(self, start_offset: int) -> None:
        self.cache.truncate_from_start(start_offset)
        self.model = model_truncate_from_start(self.model, start_offset)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def truncate_at_an_entry_boundary(self, data: st.DataObject) -> None:
        # Offsets equal to a start offset are the edge cases of both truncations.
        start_offset = data.draw(st.sampled_from([s for _, s in self.model]), label="boundary")
        if data.draw(st.booleans(), label="from start"):
            self.truncate_from_start(start_offset)
        else:
            self.truncate_from_end(start_offset)

    @rule()
    def clear_and_flush(self) -> None:
        self.cache.clear_and_flush()
        self.model = []

    @rule()
    def reopen(self) -> None:
        self.cache = LeaderEpochCache(self.path)

    @rule(requested=st.integers(-1, 14), extra=st.integers(0, 10))
    def end_offset_for(self, requested: int, extra: int) -> None:
        log_end_offset = (self.model[-1][1] if self.model else 0) + extra
        expected = model_end_offset_for(self.model, requested, log_end_offset)
        assert self.cache.end_offset_for(requested, log_end_offset) == expected

    @invariant()
    def cache_equals_model(self) -> None:
        assert pairs(self.cache) == self.model

    @invariant()
    def file_equals_cache(self) -> None:
        assert reloaded(self.cache) == self.model

    @invariant()
    def entries_strictly_increase(self) -> None:
        for (epoch, start), (next_epoch, next_start) in zip(
            self.model, self.model[1:], strict=False
        ):
            assert epoch < next_epoch
            assert start < next_start


TestLeaderEpochCacheMachine = LeaderEpochCacheMachine.TestCase
TestLeaderEpochCacheMachine.settings = settings(max_examples=200, stateful_step_count=40)


# --- end_offset_for from first principles ---------------------------------------------------

epoch_histories = st.lists(st.tuples(st.integers(1, 3), st.integers(1, 6)), min_size=1, max_size=8)


@given(history=epoch_histories, first_epoch=st.integers(0, 3), first_offset=st.integers(0, 20))
def test_end_offset_for_matches_a_log_labelled_by_epoch(
    tmp_path_factory: pytest.TempPathFactory,
    history: list[tuple[int, int]],
    first_epoch: int,
    first_offset: int,
) -> None:
    # Build a log as runs of (epoch gap, record count), label each offset with its epoch, and
    # answer OffsetsForLeaderEpoch from the labels: the end offset of a requested epoch is the
    # first offset written by a higher epoch, its epoch the highest label <= the request.
    path = tmp_path_factory.mktemp("epochs") / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    labels: list[int] = []
    epoch = first_epoch
    for epoch_gap, record_count in history:
        epoch += epoch_gap
        cache.assign(epoch, first_offset + len(labels))
        labels.extend([epoch] * record_count)
    log_end_offset = first_offset + len(labels)
    for requested in range(-1, epoch + 3):
        if requested == UNDEFINED_EPOCH or requested > epoch:
            expected = UNDEFINED
        elif requested == epoch:
            expected = (epoch, log_end_offset)
        else:
            higher = next(i for i, label in enumerate(labels) if label > requested)
            lower_or_equal = [label for label in labels if label <= requested]
            expected = (max(lower_or_equal, default=requested), first_offset + higher)
        assert cache.end_offset_for(requested, log_end_offset) == expected, requested
