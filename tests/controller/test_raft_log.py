"""The pieces under the Raft core: QuorumConfig parsing, the quorum-state file, snapshot files and
RaftLog's answers to Raft's questions (positions, divergence, snapshots, recovery)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.quorum_config import QuorumConfig, QuorumConfigError, VoterEndpoint, parse_voters
from controller.quorum_state import CorruptQuorumStateError, ElectionState, QuorumStateStore
from controller.raft_log import FetchValidation, RaftLog, metadata_log_config
from controller.raft_messages import OffsetAndEpoch
from controller.snapshot import (
    CorruptSnapshotError,
    SnapshotStore,
    decode_snapshot,
    encode_snapshot,
    parse_snapshot_file_name,
    snapshot_file_name,
)


def test_voters_parse_like_kafka() -> None:
    voters = parse_voters("1@ctrl1:9093, 2@ctrl2:9094,3@[::1]:9095")
    assert voters == {1: VoterEndpoint(1, "ctrl1", 9093), 2: VoterEndpoint(2, "ctrl2", 9094),
                      3: VoterEndpoint(3, "::1", 9095)}
    assert str(voters[1]) == "1@ctrl1:9093"


@pytest.mark.parametrize("text", ["", "1@host", "x@host:1", "1@host:0", "1@host:1,1@other:2", "1host:9"])
def test_bad_voters_are_named_errors(text: str) -> None:
    with pytest.raises(QuorumConfigError, match=r"controller\.quorum\.voters"):
        parse_voters(text)


def test_quorum_config_has_kafkas_defaults_and_keys() -> None:
    config = QuorumConfig.from_properties({"controller.quorum.voters": "1@a:1,2@b:2,3@c:3"})
    assert (config.election_timeout_ms, config.fetch_timeout_ms, config.election_backoff_max_ms,
            config.request_timeout_ms) == (1000, 2000, 1000, 2000)
    assert config.majority == 2
    assert config.is_voter(3)
    assert not config.is_voter(4)
    tuned = QuorumConfig.from_properties({"controller.quorum.election.timeout.ms": "150"}, base=config)
    assert tuned.election_timeout_ms == 150
    with pytest.raises(QuorumConfigError, match="unknown quorum config"):
        QuorumConfig.from_properties({"controller.quorum.bogus": 1}, base=config)
    with pytest.raises(QuorumConfigError, match="required"):
        QuorumConfig.from_properties({})
    with pytest.raises(QuorumConfigError, match="must be >= 1"):
        QuorumConfig.from_properties({"controller.quorum.fetch.timeout.ms": "0"}, base=config)


def test_quorum_state_round_trips_in_krafts_json(tmp_path: Path) -> None:
    store = QuorumStateStore(tmp_path)
    store.write(ElectionState(7, voted_id=2, leader_id=2), voters=[3, 1, 2])
    assert store.read() == ElectionState(7, voted_id=2, leader_id=2)
    text = (tmp_path / "quorum-state").read_text()
    assert '"leaderEpoch":7' in text
    assert '"votedId":2' in text
    assert '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}]' in text
    store.write(ElectionState(8), voters=[1])
    assert store.read() == ElectionState(8, voted_id=None, leader_id=None)


@pytest.mark.parametrize("text", [
    '{"leaderEpoch": "x"}',
    '{"data_version":0,"leaderEpoch":3,"votedId":-1,"leaderId":-1,"restoration":{"answeredVoters":2}}',
    '{"data_version":0,"leaderEpoch":3,"votedId":-1,"leaderId":-1,"restoration":{"answeredVoters":[2],'
    '"epochBound":-1,"logBoundEpoch":0,"logBoundOffset":0}}',
    '{"data_version":1,"leaderEpoch":3,"votedId":-1,"leaderId":-1}',
])
def test_damaged_quorum_state_is_refused_with_the_safe_way_out(tmp_path: Path, text: str) -> None:
    """Goal: a file that does not parse stops the node, naming the file; the way out it gives is to
    move the file aside (the node then restores as a voter without state), never to delete it and
    go on as if it had never voted (what the old message said)."""
    (tmp_path / "quorum-state").write_text(text)
    with pytest.raises(CorruptQuorumStateError, match=str(tmp_path / "quorum-state")) as raised:
        QuorumStateStore(tmp_path).read()
    assert "Move the file aside" in str(raised.value)
    assert "without state" in str(raised.value)
    assert "remove" not in str(raised.value)


def test_snapshot_files_are_named_and_checked_like_krafts(tmp_path: Path) -> None:
    snapshot_id = OffsetAndEpoch(epoch=3, offset=120)
    assert snapshot_file_name(snapshot_id) == "00000000000000000120-0000000003.checkpoint"
    assert parse_snapshot_file_name(snapshot_file_name(snapshot_id)) == snapshot_id
    assert parse_snapshot_file_name("00000000000000000120.log") is None
    data = bytes(range(256)) * 2000
    assert decode_snapshot(encode_snapshot(snapshot_id, data)) == data
    assert decode_snapshot(encode_snapshot(snapshot_id, b"")) == b""
    damaged = bytearray(encode_snapshot(snapshot_id, b"state"))
    damaged[-2] ^= 0xFF
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(damaged))
    store = SnapshotStore(tmp_path)
    store.write(snapshot_id, data)
    store.write(OffsetAndEpoch(4, 200), b"newer")
    (tmp_path / "00000000000000000300-0000000005.checkpoint.part").write_bytes(b"torn")
    reopened = SnapshotStore(tmp_path)
    assert reopened.ids() == [snapshot_id, OffsetAndEpoch(4, 200)]
    assert not list(tmp_path.glob("*.part")), "a partial snapshot left by a crash is removed"
    assert reopened.read(snapshot_id) == data
    assert reopened.delete_before(OffsetAndEpoch(4, 200)) == 1
    assert reopened.latest_id() == OffsetAndEpoch(4, 200)


def raft_log(directory: Path, epochs: list[int]) -> RaftLog:
    log = RaftLog.open(directory, 0, metadata_log_config(segment_bytes=1024))
    for index, epoch in enumerate(epochs):
        log.append_as_leader(b"entry %d" % index, epoch, 0)
    log.flush(0)
    return log


def test_validate_offset_and_epoch_answers_like_kraft(tmp_path: Path) -> None:
    log = raft_log(tmp_path, [1, 1, 3, 3, 3, 5])
    assert log.end_offset_and_epoch() == OffsetAndEpoch(5, 6)
    assert log.validate_offset_and_epoch(0, 0).kind is FetchValidation.VALID
    assert log.validate_offset_and_epoch(2, 1).kind is FetchValidation.VALID
    assert log.validate_offset_and_epoch(6, 5).kind is FetchValidation.VALID
    diverging = log.validate_offset_and_epoch(4, 2)
    assert (diverging.kind, diverging.offset_and_epoch) == (FetchValidation.DIVERGING, OffsetAndEpoch(1, 2))
    ahead = log.validate_offset_and_epoch(7, 5)
    assert (ahead.kind, ahead.offset_and_epoch) == (FetchValidation.DIVERGING, OffsetAndEpoch(5, 6))


def test_snapshot_raises_the_log_start_and_old_followers_get_it(tmp_path: Path) -> None:
    log = raft_log(tmp_path, [1, 1, 2, 2, 4, 4, 4])
    log.log.update_high_watermark(7)
    log.create_snapshot(OffsetAndEpoch(4, 5), b"state", 0)
    assert log.log_start_offset == 5
    below = log.validate_offset_and_epoch(3, 2)
    assert (below.kind, below.offset_and_epoch) == (FetchValidation.SNAPSHOT, OffsetAndEpoch(4, 5))
    at_start_other_epoch = log.validate_offset_and_epoch(5, 2)
    assert at_start_other_epoch.kind is FetchValidation.SNAPSHOT
    assert log.validate_offset_and_epoch(5, 4).kind is FetchValidation.VALID
    older_epoch_beyond = log.validate_offset_and_epoch(9, 3)
    assert older_epoch_beyond.kind is FetchValidation.SNAPSHOT, "epoch 3 ended inside the snapshot"


def test_follower_truncation_stops_at_the_high_watermark(tmp_path: Path) -> None:
    log = raft_log(tmp_path, [1, 1, 2, 2, 2])
    log.log.update_high_watermark(2)
    assert log.truncate_to_end_offset(OffsetAndEpoch(1, 2), 0) == 2
    log.log.update_high_watermark(2)
    with pytest.raises(AssertionError, match="below the high watermark"):
        log.truncate_to_end_offset(OffsetAndEpoch(1, 1), 0)


def test_reopen_after_an_unfinished_snapshot_install_starts_at_the_snapshot(tmp_path: Path) -> None:
    """A crash between storing a downloaded snapshot and truncating the log: the log (ending before the
    snapshot, or holding entries of an older epoch at its end) is dropped at the next open."""
    log = raft_log(tmp_path, [1, 1, 1])
    log.snapshots.write(OffsetAndEpoch(2, 6), b"downloaded")
    log.close()
    reopened = RaftLog.open(tmp_path, 0, metadata_log_config(segment_bytes=1024))
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.high_watermark) == (6, 6, 6)
    assert reopened.last_fetched_epoch() == 2


def test_a_parked_fetch_must_be_answered_before_the_request_times_out() -> None:
    with pytest.raises(QuorumConfigError, match="fetch_max_wait_ms=500 must be below request_timeout_ms=500"):
        QuorumConfig.from_properties({"controller.quorum.voters": "1@a:1", "controller.quorum.fetch.max.wait.ms": "500",
                                      "controller.quorum.request.timeout.ms": "500"})


def test_follower_truncates_to_its_own_end_of_the_diverging_epoch(tmp_path: Path) -> None:
    """KRaft's truncateToEndOffset: the leader's epoch 1 ends at 4, but this follower's epoch 1 ends at
    2 (its entries 2..5 came from a leader of epoch 2 that lost): cut at 2, not at 4."""
    follower = raft_log(tmp_path, [1, 1, 2, 2, 2, 2])
    assert follower.truncate_to_end_offset(OffsetAndEpoch(1, 4), 0) == 2
    assert follower.end_offset_and_epoch() == OffsetAndEpoch(1, 2)
