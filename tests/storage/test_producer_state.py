"""Idempotent producers' state in the log (storage/producer_state.py): retries answered with the
original offsets, sequence and epoch checks, the window of five batches, snapshots across clean and
unclean restarts, truncation. A property test drives appends, retries, truncations and restarts
against a reference model: no batch of a producer is ever in the log twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError
from storage.log import Log, LogStartOffsetIncrementReason
from storage.producer_state import (
    BATCHES_KEPT,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    last_sequence,
    snapshot_file_name,
)
from storage.records import build_batch
from tests.storage.conftest import NOW_MS, open_log

PID = 7
PROPERTIES = {"segment.bytes": 400}


def batch(sequence: int, records: int = 1, epoch: int = 0, pid: int = PID) -> bytes:
    return build_batch([(None, b"v%d" % (sequence + n)) for n in range(records)], producer_id=pid,
                       producer_epoch=epoch, base_sequence=sequence, base_timestamp=NOW_MS)


def producer_batches(log: Log) -> list[tuple[int, int, int, int]]:
    """(producer id, epoch, first sequence, base offset) of every batch in the log."""
    return [(h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset) for _, _, h in log.iter_batches()]


def test_a_retry_is_answered_with_the_original_offsets_and_appends_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", PROPERTIES)
    first = log.append_as_leader(batch(0, records=3), 0, NOW_MS)
    log.append_as_leader(batch(3), 0, NOW_MS)
    retry = log.append_as_leader(batch(0, records=3), 0, NOW_MS)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 4


def test_out_of_order_sequences_and_older_epochs_are_refused_and_change_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", PROPERTIES)
    log.append_as_leader(batch(0, records=2), 0, NOW_MS)
    with pytest.raises(OutOfOrderSequenceError, match="expected 2"):
        log.append_as_leader(batch(3), 0, NOW_MS)
    log.append_as_leader(batch(0, epoch=1), 0, NOW_MS)  # a new epoch starts at 0
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch(2, epoch=0), 0, NOW_MS)
    with pytest.raises(OutOfOrderSequenceError, match="starts at 0"):
        log.append_as_leader(batch(5, epoch=2), 0, NOW_MS)
    assert log.log_end_offset == 3
    log.append_as_leader(batch(40, pid=99), 0, NOW_MS)  # no state for it: any first sequence (KIP-360)


def test_sequences_wrap_at_int32_max() -> None:
    assert last_sequence(2**31 - 2, 3) == 1
    assert last_sequence(5, 3) == 8


def test_an_idempotent_batch_comes_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", PROPERTIES)
    with pytest.raises(InvalidRecordError, match="alone"):
        log.append_as_leader(batch(0) + batch(1), 0, NOW_MS)


def test_the_last_five_batches_are_recognised_and_survive_a_clean_restart(tmp_path: Path) -> None:
    """Kafka's snapshot keeps only a producer's last batch; ours keeps the whole window."""
    log = open_log(tmp_path / "t-0", PROPERTIES)
    offsets = [log.append_as_leader(batch(sequence), 0, NOW_MS).first_offset for sequence in range(7)]
    log.flush(NOW_MS)
    log.close()
    log = open_log(tmp_path / "t-0", PROPERTIES)
    assert (tmp_path / "t-0" / snapshot_file_name(7)).exists()
    for sequence in range(7 - BATCHES_KEPT, 7):
        retry = log.append_as_leader(batch(sequence), 0, NOW_MS)
        assert retry.duplicate and retry.first_offset == offsets[sequence]
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(batch(6 - BATCHES_KEPT), 0, NOW_MS)


def test_after_an_unclean_restart_the_state_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"segment.bytes": 200})
    for sequence in range(6):
        log.append_as_leader(batch(sequence), 0, NOW_MS)
    log.flush(NOW_MS)
    log.close_handlers()  # killed: no snapshot at the log end
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.write_bytes(path.read_bytes()[:-1] + b"\xff")  # and every snapshot damaged
    log = open_log(tmp_path / "t-0", {"segment.bytes": 200}, had_clean_shutdown=False)
    assert log.append_as_leader(batch(5), 0, NOW_MS).duplicate
    assert not log.append_as_leader(batch(6), 0, NOW_MS).duplicate


def test_batches_below_the_log_start_still_on_disk_rebuild_the_state_after_an_unclean_restart(tmp_path: Path) -> None:
    """A follower raised its logStartOffset to its leader's, past every batch it has, and crashed
    before retention deleted the segment (so before the roll that snapshots the state): the batches
    are on disk below the log start. They were appended, so the state after them is the producer's
    state; rebuilt from the log start alone it was empty, and a later leader took a retry of a
    deleted batch as new (replication sim seed 101: records written twice)."""
    log = open_log(tmp_path / "t-0")
    for sequence in range(3):
        log.append_as_leader(batch(sequence), 0, NOW_MS)
    log.maybe_increment_high_watermark(3)
    log.maybe_increment_log_start_offset(3, LogStartOffsetIncrementReason.LEADER_OFFSET_INCREMENTED)
    log.flush(NOW_MS)
    log.close_handlers()  # killed: no snapshot
    log = open_log(tmp_path / "t-0", had_clean_shutdown=False, log_start_offset=3, high_watermark=3)
    assert log.log_start_offset == 3
    retry = log.append_as_leader(batch(2), 0, NOW_MS)
    assert retry.duplicate and retry.first_offset == 2
    assert log.log_end_offset == 3


def test_a_truncated_batch_is_no_longer_a_duplicate(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", PROPERTIES)
    for sequence in range(3):
        log.append_as_leader(batch(sequence), 0, NOW_MS)
    log.truncate_to(2, NOW_MS)
    retry = log.append_as_leader(batch(2), 1, NOW_MS)
    assert not retry.duplicate and retry.first_offset == 2
    assert log.append_as_leader(batch(1), 1, NOW_MS).duplicate


def test_followers_take_the_leaders_batches_and_recognise_retries_once_leading(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path / "a", PROPERTIES), open_log(tmp_path / "b", PROPERTIES)
    for sequence in range(3):
        leader.append_as_leader(batch(sequence), 0, NOW_MS)
    follower.append_as_follower(leader.read(0, 10_000).records, NOW_MS)
    assert follower.append_as_leader(batch(2), 1, NOW_MS).duplicate


# -- the property ----------------------------------------------------------------------------------

OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(0, 2), st.integers(1, 3)),  # producer, records
    st.tuples(st.just("retry"), st.integers(0, 2), st.integers(1, 6)),  # producer, how many batches back
    st.tuples(st.just("truncate"), st.integers(0, 4)),  # batches cut from the end
    st.tuples(st.just("restart"), st.booleans()),  # clean or not
), max_size=40)


@settings(max_examples=60, deadline=None)
@given(OPERATIONS)
def test_no_producer_batch_is_ever_in_the_log_twice(tmp_path_factory: pytest.TempPathFactory,
                                                    operations: list[tuple]) -> None:
    """Reference: a retry of one of the producer's last five batches still in the log is answered
    with its offsets; one no longer in the log (truncated) is appended again if it follows."""
    directory = tmp_path_factory.mktemp("log") / "t-0"
    log = open_log(directory, {"segment.bytes": 300})
    sent: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}  # producer -> (first sequence, records)
    for operation in operations:
        if operation[0] == "send":
            _, producer, records = operation
            in_log = _in_log(log, producer)
            sequence = sum(count for _, count in in_log)
            log.append_as_leader(batch(sequence, records, pid=producer), 0, NOW_MS)
            sent[producer] = [*in_log, (sequence, records)]
        elif operation[0] == "retry":
            _, producer, back = operation
            in_log = _in_log(log, producer)
            if back > len(in_log):
                continue
            sequence, records = in_log[-back]
            if back <= BATCHES_KEPT:
                assert log.append_as_leader(batch(sequence, records, pid=producer), 0, NOW_MS).duplicate
            else:
                with pytest.raises(OutOfOrderSequenceError):
                    log.append_as_leader(batch(sequence, records, pid=producer), 0, NOW_MS)
        elif operation[0] == "truncate":
            bases = [header.base_offset for _, _, header in log.iter_batches()]
            if operation[1] and len(bases) >= operation[1]:
                log.truncate_to(bases[-operation[1]], NOW_MS)
        else:
            log.flush(NOW_MS)
            if operation[1]:
                log.close()
            else:
                log.close_handlers()
            log = open_log(directory, {"segment.bytes": 300}, had_clean_shutdown=operation[1])
        keys = [(pid, epoch, sequence) for pid, epoch, sequence, _ in producer_batches(log)]
        assert len(keys) == len(set(keys)), f"a batch twice: {producer_batches(log)}"
    log.close()


def _in_log(log: Log, producer: int) -> list[tuple[int, int]]:
    return [(h.base_sequence, h.records_count) for _, _, h in log.iter_batches() if h.producer_id == producer]


def test_snapshots_hold_kafkas_fields(tmp_path: Path) -> None:
    """Version 1, CRC-32C, entries of 46 bytes (Kafka's producer snapshot schema)."""
    log = open_log(tmp_path / "t-0", PROPERTIES)
    log.append_as_leader(batch(0, records=2), 0, NOW_MS)
    log.close()
    data = (tmp_path / "t-0" / snapshot_file_name(2)).read_bytes()
    assert data[:2] == b"\x00\x01" and int.from_bytes(data[6:10], "big") == 1 and len(data) == 10 + 46
    assert int.from_bytes(data[10:18], "big") == PID and int.from_bytes(data[20:24], "big") == 1  # last seq


def test_idle_producers_are_forgotten(tmp_path: Path) -> None:
    """`producer.id.expiration.ms`: made-up or departed producer ids do not pile up."""
    log = open_log(tmp_path / "t-0", PROPERTIES)
    for pid in range(3):
        log.append_as_leader(batch(0, pid=pid), 0, NOW_MS)
    assert log.producer_state.remove_expired(NOW_MS + 999, expiration_ms=1000) == 0
    assert log.producer_state.remove_expired(NOW_MS + 1000, expiration_ms=1000) == 3
    assert not log.append_as_leader(batch(0, pid=0), 0, NOW_MS).duplicate, "forgotten: its retry is written"


# -- a replica that starts over at another's logStartOffset ----------------------------------------

def _state(log: Log) -> dict[int, tuple[int, list]]:
    return {pid: (entry.producer_epoch, list(entry.batches)) for pid, entry in log.producer_state.producers.items()}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3)), min_size=1, max_size=25), st.data())
def test_a_log_started_at_another_logs_start_takes_exactly_its_producers_there(
        tmp_path_factory: pytest.TempPathFactory, sends: list[tuple[int, int]], data: st.DataObject) -> None:
    """Reference: a log that appended the same batches up to the last one ending at or below the
    leader's logStartOffset (raised anywhere, inside a batch too, segments below it deleted, the
    leader maybe restarted uncleanly). The follower that starts over there holds that state, also
    after a crash; reading it changes no file of the leader."""
    root = tmp_path_factory.mktemp("logs")
    leader, reference = open_log(root / "leader", {"segment.bytes": 300}), open_log(root / "reference")
    start = data.draw(st.integers(0, sum(records for _, records in sends)), label="logStartOffset")
    sequences = [0, 0, 0]
    for producer, records in sends:
        info = leader.append_as_leader(batch(sequences[producer], records, pid=producer), 0, NOW_MS)
        if info.last_offset < start:
            reference.append_as_leader(batch(sequences[producer], records, pid=producer), 0, NOW_MS)
        sequences[producer] += records
    end = leader.log_end_offset
    leader.maybe_increment_high_watermark(end)
    leader.maybe_increment_log_start_offset(start, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
    leader.delete_old_segments(NOW_MS)
    if data.draw(st.booleans(), label="the leader restarted uncleanly"):
        leader.flush(NOW_MS)
        leader.close_handlers()
        leader = open_log(root / "leader", {"segment.bytes": 300}, had_clean_shutdown=False,
                          log_start_offset=start, high_watermark=end)
    files = sorted(path.name for path in (root / "leader").iterdir())
    snapshot = leader.producer_state_at_start()
    assert sorted(path.name for path in (root / "leader").iterdir()) == files
    follower = open_log(root / "follower", {"segment.bytes": 300})
    follower.append_as_leader(batch(0, pid=5), 0, NOW_MS)
    follower.truncate_fully_and_start_at(start, NOW_MS, snapshot)
    assert _state(follower) == _state(reference)
    follower.close_handlers()  # a crash: the state comes back from the snapshot at `start`
    follower = open_log(root / "follower", {"segment.bytes": 300}, had_clean_shutdown=False,
                        log_start_offset=start, high_watermark=start)
    assert _state(follower) == _state(reference)


def test_a_snapshot_written_above_the_log_end_is_dropped_by_the_next_load(tmp_path: Path) -> None:
    """`Log.truncate_fully_and_start_at` writes the leader's state before it removes the old log:
    after a crash between the two, the old log comes back without the state meant for the new one."""
    source = open_log(tmp_path / "source", PROPERTIES)
    source.append_as_leader(batch(0, records=3), 0, NOW_MS)
    log = open_log(tmp_path / "t-0", PROPERTIES)
    log.producer_state.write_snapshot(3, source.producer_state.encode())
    log.close_handlers()
    log = open_log(tmp_path / "t-0", PROPERTIES, had_clean_shutdown=False)
    assert log.producer_state.producers == {} and log.producer_state.snapshot_offsets() == []


def _snapshot(tmp_path: Path, *batches: tuple[int, int, int]) -> bytes:
    """Snapshot bytes with (producer id, first offset, last offset) batches, in the order given."""
    state = ProducerStateManager(tmp_path, "peer")
    for pid, first, last in batches:
        entry = state.producers.setdefault(pid, ProducerStateEntry(pid, 0))
        entry.batches.append(BatchMetadata(len(entry.batches) * 10 + last - first, last, last - first, NOW_MS))
    return state.encode()


@pytest.mark.parametrize("damage", ["bytes", "a batch at the start", "batches out of order", "a negative offset",
                                    "no producer id"])
def test_a_state_that_does_not_parse_or_lies_out_of_place_changes_nothing(tmp_path: Path, damage: str) -> None:
    """A peer's bytes: a batch the log will not hold at its offsets would answer a retry with
    offsets never written."""
    snapshot = {
        "bytes": _snapshot(tmp_path, (7, 0, 1))[:-1],
        "a batch at the start": _snapshot(tmp_path, (7, 0, 2)),
        "batches out of order": _snapshot(tmp_path, (7, 1, 1), (7, 0, 0)),
        "a negative offset": _snapshot(tmp_path, (7, -1, 0)),
        "no producer id": _snapshot(tmp_path, (-1, 0, 0)),
    }[damage]
    log = open_log(tmp_path / "t-0", PROPERTIES)
    log.append_as_leader(batch(0, pid=5), 0, NOW_MS)
    with pytest.raises(CorruptSnapshotError):
        log.truncate_fully_and_start_at(2, NOW_MS, snapshot)
    assert (log.log_start_offset, log.log_end_offset, list(log.producer_state.producers)) == (0, 1, [5])
    assert log.producer_state.snapshot_offsets() == []
    log.truncate_fully_and_start_at(2, NOW_MS, _snapshot(tmp_path, (7, 0, 0), (7, 1, 1)))
    assert [batch.last_offset for batch in log.producer_state.producers[7].batches] == [0, 1]


class _Crash(BaseException):
    """A kill -9 inside a storage call: nothing after it runs."""


def test_a_crash_while_starting_over_inside_the_leaders_first_batch_keeps_the_leaders_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower started empty at the leader's logStartOffset (2) with the leader's state there,
    then starts again at the leader's first batch, which holds 2 (DeleteRecords put the start inside
    it), and is killed after removing its segment, before the new one exists: it reloads empty at
    the checkpointed logStartOffset, and must still know the producer (the snapshot at 2 went with
    the segment before, and the one at 1 lies below the reloaded log)."""
    log = open_log(tmp_path / "t-0", PROPERTIES)
    log.truncate_fully_and_start_at(2, NOW_MS, _snapshot(tmp_path, (7, 0, 0)))

    def killed(*_: object) -> None:
        raise _Crash

    monkeypatch.setattr(Log, "new_segment", killed)
    with pytest.raises(_Crash):
        log.truncate_fully_and_start_at(1, NOW_MS, log.producer_state.encode(below=1))
    monkeypatch.undo()
    log = open_log(tmp_path / "t-0", PROPERTIES, had_clean_shutdown=False, log_start_offset=2, high_watermark=2)
    assert [batch.last_offset for batch in log.producer_state.producers[7].batches] == [0]
