"""Raft core, driven by hand: synchronous `handle(event, now_ms)` calls, no event loop, no network.

Each test states its goal; the method is always the same: build nodes over real `RaftLog`s in a temp
dir, hand them events (ticks at chosen times, messages copied from one node's Ready into another's
`handle`), and assert on the Ready and the node's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from controller.quorum_config import QuorumConfig, VoterEndpoint
from controller.quorum_state import ElectionState, QuorumStateStore
from controller.raft import Raft, RandomSource
from controller.raft_driver import RaftDriver
from controller.raft_log import RaftLog, metadata_log_config
from controller.raft_messages import (
    BeginQuorumEpoch,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    Message,
    MessageBody,
    OffsetAndEpoch,
    Propose,
    ProposeBatch,
    RaftError,
    Ready,
    Role,
    SnapshotCreated,
    Tick,
    Unreachable,
    VoteRequest,
    VoteResponse,
)
from storage.records import build_batch, iter_headers

ELECTION_TIMEOUT_MS = 100
FETCH_TIMEOUT_MS = 200


class LowestRandom:
    """A RandomSource that always draws the lowest value: election timeouts are exactly the
    configured ones, so a test knows when a node stands."""

    def randint(self, a: int, b: int) -> int:
        return a

    def getrandbits(self, k: int) -> int:
        return 1_000


class HighestRandom:
    """A RandomSource that always draws the highest value: election timeouts are twice the configured
    ones and every election backoff is election_backoff_max_ms."""

    def randint(self, a: int, b: int) -> int:
        return b

    def getrandbits(self, k: int) -> int:
        return 2_000


def quorum_config(voters: Iterable[int] = (1, 2, 3), **overrides: int) -> QuorumConfig:
    settings: dict[str, int] = {
        "election_timeout_ms": ELECTION_TIMEOUT_MS,
        "fetch_timeout_ms": FETCH_TIMEOUT_MS,
        "election_backoff_max_ms": 50,
        "request_timeout_ms": 50,
        "retry_backoff_ms": 10,
        "fetch_max_wait_ms": 0,
        "snapshot_interval_records": 1_000,
    }
    settings.update(overrides)
    endpoints = {voter: VoterEndpoint(voter, "localhost", 9090 + voter) for voter in voters}
    return QuorumConfig(voters=endpoints, **settings)  # type: ignore[arg-type]


class Cluster:
    """Nodes over real logs; messages wait in `outbox` until a test delivers them."""

    def __init__(self, root: Path, voters: Iterable[int] = (1, 2, 3), observers: Iterable[int] = (),
                 **overrides: int) -> None:
        self.root = root
        self.config = quorum_config(voters, **overrides)
        self.now_ms = 0
        self.outbox: list[Message] = []
        self.nodes = {node_id: self.open(node_id) for node_id in [*voters, *observers]}

    def open(self, node_id: int, state: ElectionState | None = None, rng: RandomSource | None = None) -> Raft:
        log = RaftLog.open(self.root / f"node-{node_id}", self.now_ms, metadata_log_config(segment_bytes=4096))
        return Raft(node_id, self.config, log, state or ElectionState(0), rng or LowestRandom(), self.now_ms)

    def handle(self, node_id: int, event: object) -> Ready:
        ready = self.nodes[node_id].handle(event, self.now_ms)  # type: ignore[arg-type]
        self.outbox.extend(ready.messages)
        return ready

    def tick(self, node_id: int, now_ms: int | None = None) -> Ready:
        if now_ms is not None:
            self.now_ms = now_ms
        return self.handle(node_id, Tick())

    def take(self, kind: type, source: int | None = None, destination: int | None = None) -> list[Message]:
        """Remove and return the waiting messages of one kind (and route)."""
        taken = [message for message in self.outbox if isinstance(message.body, kind)
                 and source in (None, message.source_id) and destination in (None, message.destination_id)]
        self.outbox = [message for message in self.outbox if message not in taken]
        return taken

    def deliver_all(self, rounds: int = 50, drop: Callable[[Message], bool] = lambda message: False) -> None:
        """Deliver until nothing is waiting (each round delivers what was waiting at its start)."""
        for _ in range(rounds):
            if not self.outbox:
                return
            waiting, self.outbox = self.outbox, []
            for message in waiting:
                if not drop(message) and message.destination_id in self.nodes:
                    self.handle(message.destination_id, message)
        raise AssertionError(f"still {len(self.outbox)} messages after {rounds} rounds")

    def deliver_round(self, drop: Callable[[Message], bool] = lambda message: False) -> list[Ready]:
        """Deliver what is waiting now (answers wait for the next round); return the Readys."""
        waiting, self.outbox = self.outbox, []
        return [self.handle(message.destination_id, message) for message in waiting
                if not drop(message) and message.destination_id in self.nodes]

    def run(self, duration_ms: int, step_ms: int = 5, drop: Callable[[Message], bool] = lambda message: False,
            nodes: Iterable[int] | None = None) -> list[Ready]:
        """Let time pass: every `step_ms` tick the nodes, then deliver until quiet. Returns the Readys."""
        readys: list[Ready] = []
        for _ in range(duration_ms // step_ms):
            self.now_ms += step_ms
            for node_id in nodes if nodes is not None else self.nodes:
                readys.append(self.tick(node_id))
            for _ in range(50):
                if not self.outbox:
                    break
                readys.extend(self.deliver_round(drop))
        return readys

    def elect(self, node_id: int, drop: Callable[[Message], bool] = lambda message: False) -> None:
        """Let `node_id` time out first and win; everyone else learns of it."""
        self.now_ms += ELECTION_TIMEOUT_MS + FETCH_TIMEOUT_MS
        self.tick(node_id)
        self.deliver_all(drop=drop)
        assert self.nodes[node_id].role is Role.LEADER, self.nodes[node_id].role


def only(messages: list[Message]) -> MessageBody:
    assert len(messages) == 1, messages
    return messages[0].body


def test_three_voters_elect_a_leader_with_pre_vote_then_vote(tmp_path: Path) -> None:
    """Goal: the KIP-996 sequence. Method: node 1 times out, gets pre-votes, bumps the epoch, wins."""
    cluster = Cluster(tmp_path)
    cluster.now_ms = ELECTION_TIMEOUT_MS
    ready = cluster.tick(1)
    assert cluster.nodes[1].role is Role.PROSPECTIVE
    assert ready.hard_state is None, "a pre-vote changes nothing durable"
    pre_votes = cluster.take(VoteRequest)
    assert [m.destination_id for m in pre_votes] == [2, 3]
    assert all(m.body.pre_vote and m.body.epoch == 0 for m in pre_votes)  # type: ignore[union-attr]
    answer = cluster.handle(2, pre_votes[0])
    assert answer.hard_state is None, "granting a pre-vote persists nothing"
    assert cluster.nodes[2].epoch == 0
    ready = cluster.handle(1, cluster.take(VoteResponse, source=2)[0])
    assert cluster.nodes[1].role is Role.CANDIDATE
    assert ready.hard_state == ElectionState(1, voted_id=1, leader_id=None)
    votes = cluster.take(VoteRequest)
    assert all(not m.body.pre_vote and m.body.epoch == 1 for m in votes)  # type: ignore[union-attr]
    answer = cluster.handle(3, next(m for m in votes if m.destination_id == 3))
    ready = cluster.handle(1, cluster_message(3, 1, answer))
    assert cluster.nodes[1].role is Role.LEADER
    assert ready.must_sync, "the LeaderChange record is flushed before anything depends on it"
    assert {m.destination_id for m in ready.messages if isinstance(m.body, BeginQuorumEpoch)} == {2, 3}
    assert cluster.nodes[1].log.log_end_offset == 1


def cluster_message(source: int, destination: int, ready: Ready) -> Message:
    """The one message `ready` sends from `source` to `destination`."""
    found = [m for m in ready.messages if m.source_id == source and m.destination_id == destination]
    assert len(found) == 1, ready.messages
    return found[0]


def test_leader_replicates_and_commits_a_proposal(tmp_path: Path) -> None:
    """Goal: a proposal completes once a majority fetched it. Method: elect, propose, deliver fetches."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    ready = cluster.handle(1, Propose(7, b"create topic"))
    assert ready.must_sync
    assert ready.completions == ()
    completions = [completion for ready in cluster.run(50) for completion in ready.completions]
    assert [(c.proposal_id, c.error, c.offset) for c in completions] == [(7, RaftError.NONE, 1)]
    for node in cluster.nodes.values():
        assert node.high_watermark == 2
        assert node.applied_offset == 2


def test_batch_proposal_is_one_batch_that_commits_and_applies_together(tmp_path: Path) -> None:
    """Goal: the records of one controller request are one RecordBatch, replicated whole even when it
    exceeds the fetch size (KIP-74), applied in one Ready and acknowledged once with its first offset.
    Method: elect 1, propose three records as a batch with a 64-byte fetch limit, run."""
    cluster = Cluster(tmp_path, fetch_bytes_max=64)
    cluster.elect(1)
    ready = cluster.handle(1, ProposeBatch(9, (b"topic" * 10, b"partition-0" * 5, b"partition-1" * 5)))
    assert ready.must_sync
    readys = cluster.run(50)
    completions = [completion for ready in readys for completion in ready.completions]
    assert [(c.proposal_id, c.error, c.offset) for c in completions] == [(9, RaftError.NONE, 1)]
    applied = [[entry.offset for entry in ready.committed if not entry.control] for ready in readys]
    assert [offsets for offsets in applied if offsets] == [[1, 2, 3]] * 3, "each node applies the batch at once"
    for node in cluster.nodes.values():
        assert node.high_watermark == 4
        batches = list(iter_headers(node.log.read(1, 1 << 20)))
        assert [(header.base_offset, header.last_offset) for _, header in batches] == [(1, 3)]


def test_uncommitted_batch_is_truncated_whole_by_the_next_leader(tmp_path: Path) -> None:
    """Goal: a failover commits none of a request's records if the batch did not reach a majority
    (never a prefix). Method: leader 1 appends a three-record batch that no follower fetches, then 2
    is elected while 1 is cut off; 1 rejoins as a follower, truncates the whole batch, and no node
    ever applies one of its records; the proposal fails with NOT_LEADER_OR_FOLLOWER."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    cluster.run(20)
    records = (b"register", b"fence", b"partition-change")
    cluster.handle(1, ProposeBatch(9, records))
    assert cluster.nodes[1].log.log_end_offset == 4
    cluster.outbox.clear()
    cut_off = cluster.nodes.pop(1)
    cluster.elect(2)
    cluster.nodes[1] = cut_off
    readys = cluster.run(100)
    completions = [completion for ready in readys for completion in ready.completions]
    assert [(c.proposal_id, c.error) for c in completions] == [(9, RaftError.NOT_LEADER_OR_FOLLOWER)]
    assert not [entry for ready in readys for entry in ready.committed if entry.data in records]
    assert cut_off.role is Role.FOLLOWER
    assert cut_off.log.end_offset_and_epoch() == cluster.nodes[2].log.end_offset_and_epoch()
    assert cut_off.log.log_end_offset == 2, "1's LeaderChange, then 2's; the batch is gone"


def test_pre_vote_refused_while_the_leader_is_heard(tmp_path: Path) -> None:
    """Goal: a node that was cut off cannot disrupt a working quorum when it returns (KIP-996).
    Method: node 3 misses everything, times out again and again as prospective, then reaches node 2,
    which heard from leader 1 recently: refused, epoch unchanged everywhere, and node 3 follows 1."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    cluster.now_ms += 1
    cluster.tick(2)
    cluster.deliver_all(drop=lambda message: 3 in (message.source_id, message.destination_id))
    epoch = cluster.nodes[1].epoch
    for _ in range(5):
        cluster.now_ms += 2 * FETCH_TIMEOUT_MS
        cluster.tick(3)
        assert cluster.nodes[3].role is Role.PROSPECTIVE
        assert cluster.nodes[3].epoch == epoch, "an isolated node never raises its epoch"
        cluster.take(VoteRequest)
    # Node 2 heard from leader 1 within the fetch timeout.
    cluster.now_ms += 1
    cluster.tick(2)
    cluster.deliver_all(drop=lambda message: 3 in (message.source_id, message.destination_id))
    cluster.now_ms += ELECTION_TIMEOUT_MS
    cluster.tick(3)
    request = cluster.take(VoteRequest, destination=2)[0]
    answer = cluster.handle(2, request)
    response = cluster_message(2, 3, answer).body
    assert isinstance(response, VoteResponse)
    assert not response.vote_granted
    assert response.leader_id == 1
    assert answer.hard_state is None
    cluster.handle(3, cluster_message(2, 3, answer))
    assert cluster.nodes[3].role is Role.FOLLOWER
    assert cluster.nodes[3].leader_id == 1
    assert cluster.nodes[1].role is Role.LEADER
    assert {node.epoch for node in cluster.nodes.values()} == {epoch}


def test_candidate_that_lost_stands_again_after_its_drawn_backoff(tmp_path: Path) -> None:
    """Goal: a candidate refused by a majority retries after a random backoff of up to
    election_backoff_max_ms from its defeat (KRaft), not at its election timeout and not at once.
    Method: node 1 draws the highest values (election timeout 2 x 100 ms, backoff 50 ms). It wins
    node 2's pre-vote at 200 and stands in epoch 1, but node 2 then votes for node 3, which already
    voted for itself in epoch 1; both refusals reach node 1 at 210. So it must not stand again before
    260 (not even at 250, when it would have resent its vote requests) and must at 260, well before
    its election deadline of 400."""
    cluster = Cluster(tmp_path)
    cluster.nodes[1] = cluster.open(1, rng=HighestRandom())
    cluster.nodes[3] = cluster.open(3, ElectionState(1, voted_id=3))
    candidate = cluster.nodes[1]
    cluster.tick(1, 2 * ELECTION_TIMEOUT_MS - 1)
    assert candidate.role is Role.UNATTACHED, "the highest draw doubles the election timeout"
    cluster.tick(1, 2 * ELECTION_TIMEOUT_MS)
    assert candidate.role is Role.PROSPECTIVE
    pre_vote = cluster.take(VoteRequest, destination=2)[0]
    cluster.outbox.clear()  # node 3's refusal would carry epoch 1 and end the pre-vote early
    cluster.handle(1, cluster_message(2, 1, cluster.handle(2, pre_vote)))
    assert candidate.role is Role.CANDIDATE
    assert candidate.election_state == ElectionState(1, voted_id=1, leader_id=None)
    votes = cluster.take(VoteRequest, source=1)
    assert sorted(m.destination_id for m in votes) == [2, 3]
    cluster.handle(2, Message(3, 2, VoteRequest(1, 3, 0, 0, pre_vote=False)))
    assert cluster.nodes[2].voted_id == 3
    cluster.outbox.clear()
    cluster.now_ms = 210
    refusals = [cluster_message(m.destination_id, 1, cluster.handle(m.destination_id, m)) for m in votes]
    assert all(isinstance(m.body, VoteResponse) and not m.body.vote_granted for m in refusals), refusals
    readys = [cluster.handle(1, refusal) for refusal in refusals]
    assert readys[-1].next_tick_ms == 210 + cluster.config.election_backoff_max_ms
    for now_ms in (250, 259):
        ready = cluster.tick(1, now_ms)
        assert candidate.role is Role.CANDIDATE
        assert ready.messages == (), f"stood or resent at {now_ms}, inside the backoff"
    ready = cluster.tick(1, 260)
    assert candidate.role is Role.PROSPECTIVE
    assert candidate.epoch == 1
    requests = [m for m in ready.messages if isinstance(m.body, VoteRequest)]
    assert sorted(m.destination_id for m in requests) == [2, 3]
    assert all(m.body.pre_vote and m.body.epoch == 1 for m in requests)  # type: ignore[union-attr]


@pytest.mark.parametrize("pre_vote", [True, False], ids=["pre-vote", "vote"])
def test_voter_refuses_a_candidate_outside_the_voter_set(tmp_path: Path, pre_vote: bool) -> None:
    """Goal: only voters may be elected (KRaft answers INCONSISTENT_VOTER_SET). Method: voter 2 gets a
    request from node 7, which is not among voters 1-3, with a higher epoch and a log as long as its
    own: refused, nothing persisted, and its epoch, vote and role unchanged (the term rule is not
    applied to a stranger). The same request from voter 3 is then granted, so the refusal was for
    membership alone."""
    cluster = Cluster(tmp_path)
    voter = cluster.nodes[2]
    ready = cluster.handle(2, Message(7, 2, VoteRequest(5, 7, 0, 0, pre_vote=pre_vote)))
    response = cluster_message(2, 7, ready).body
    assert isinstance(response, VoteResponse)
    assert not response.vote_granted
    assert response.error is RaftError.INCONSISTENT_VOTER_SET
    assert (response.epoch, response.pre_vote) == (0, pre_vote)
    assert ready.hard_state is None
    assert voter.election_state == ElectionState(0)
    assert voter.role is Role.UNATTACHED
    ready = cluster.handle(2, Message(3, 2, VoteRequest(5, 3, 0, 0, pre_vote=pre_vote)))
    response = cluster_message(2, 3, ready).body
    assert isinstance(response, VoteResponse)
    assert response.vote_granted
    assert response.error is RaftError.NONE


def test_vote_is_persisted_before_the_reply_and_never_given_twice(tmp_path: Path) -> None:
    """Goal: the hard state comes first in the Ready and the driver writes it before sending.
    Method: a VoteRequest through a RaftDriver whose store and transport record the order."""
    cluster = Cluster(tmp_path)
    order: list[str] = []

    class RecordingStore(QuorumStateStore):
        def write(self, state: ElectionState, voters: Iterable[int]) -> None:
            order.append(f"persist {state}")
            super().write(state, voters)

    store = RecordingStore(tmp_path / "node-2")
    driver = RaftDriver(cluster.nodes[2], store, NullStateMachine(), lambda message: order.append(f"send {message}"))
    driver.step(Message(1, 2, VoteRequest(5, 1, 0, 0, pre_vote=False)), 0)
    assert order[0] == f"persist {ElectionState(5, voted_id=1, leader_id=None)}"
    assert order[1].startswith("send") and "vote_granted=True" in order[1]
    assert store.read() == ElectionState(5, voted_id=1)
    order.clear()
    driver.step(Message(3, 2, VoteRequest(5, 3, 9, 100, pre_vote=False)), 1)
    assert len(order) == 1 and "vote_granted=False" in order[0], "one vote per epoch, even for a longer log"
    restarted = cluster.open(2, store.read())
    ready = restarted.handle(Message(3, 2, VoteRequest(5, 3, 9, 100, pre_vote=False)), 2)
    response = only(list(ready.messages))
    assert isinstance(response, VoteResponse)
    assert not response.vote_granted, "the vote survives a restart"
    # A vote in an epoch the voter already knew (no epoch change to persist) is persisted too.
    voter = cluster.open(3, ElectionState(6))
    ready = voter.handle(Message(1, 3, VoteRequest(6, 1, 0, 0, pre_vote=False)), 3)
    assert ready.hard_state == ElectionState(6, voted_id=1, leader_id=None)


class NullStateMachine:
    last_applied_offset = -1

    def apply(self, offset: int, epoch: int, data: bytes) -> None:
        self.last_applied_offset = offset

    def snapshot(self) -> bytes:
        return b""

    def restore(self, offset: int, data: bytes) -> None:
        self.last_applied_offset = offset


def write_entries(log: RaftLog, epochs: list[int]) -> None:
    for index, epoch in enumerate(epochs):
        log.append_as_leader(b"entry %d" % index, epoch, 0)
    log.flush(0)


def test_follower_truncates_to_the_diverging_epoch(tmp_path: Path) -> None:
    """Goal: log repair by leader epoch (KIP-595). Method: leader 1 has epochs [1,1,1,3,3], follower 2
    has [1,1,1,2,2,2] from a leader of epoch 2 that never committed; after election, 2's fetch is
    answered with the end of epoch 1 (offset 3), it truncates there and then takes epoch 3's entries."""
    cluster = Cluster(tmp_path)
    write_entries(cluster.nodes[1].log, [1, 1, 1, 3, 3])
    write_entries(cluster.nodes[2].log, [1, 1, 1, 2, 2, 2])
    cluster.nodes[1] = cluster.open(1, ElectionState(3))
    cluster.nodes[2] = cluster.open(2, ElectionState(3))
    cluster.nodes[3] = cluster.open(3, ElectionState(3))
    cluster.elect(1, drop=lambda message: isinstance(message.body, FetchRequest))
    follower = cluster.nodes[2]
    cluster.now_ms += cluster.config.request_timeout_ms
    cluster.tick(2)
    fetch = cluster.take(FetchRequest, source=2)[0]
    assert (fetch.body.fetch_offset, fetch.body.last_fetched_epoch) == (6, 2)  # type: ignore[union-attr]
    answer = cluster.handle(1, fetch)
    response = cluster_message(1, 2, answer).body
    assert isinstance(response, FetchResponse)
    assert response.diverging_epoch == OffsetAndEpoch(epoch=1, offset=3)
    cluster.handle(2, cluster_message(1, 2, answer))
    assert follower.log.log_end_offset == 3
    cluster.run(100)
    assert follower.log.log_end_offset == cluster.nodes[1].log.log_end_offset
    assert follower.log.end_offset_and_epoch() == cluster.nodes[1].log.end_offset_and_epoch()


def test_leader_commits_old_epoch_entries_only_with_one_of_its_own(tmp_path: Path) -> None:
    """Goal: Raft §5.4.2. Method: leader 1 of epoch 3 holds uncommitted epoch-2 entries 0..2 and its
    LeaderChange at 3; a follower holding 0..2 (fetch offset 3) is a majority for them, yet the HW stays;
    once the follower holds the LeaderChange (fetch offset 4) everything commits."""
    cluster = Cluster(tmp_path)
    write_entries(cluster.nodes[1].log, [2, 2, 2])
    write_entries(cluster.nodes[2].log, [2, 2, 2])
    for node_id in (1, 2, 3):
        cluster.nodes[node_id] = cluster.open(node_id, ElectionState(2))
    cluster.now_ms += ELECTION_TIMEOUT_MS
    cluster.tick(1)
    cluster.deliver_all(drop=lambda message: isinstance(message.body, FetchRequest | BeginQuorumEpoch))
    leader = cluster.nodes[1]
    assert leader.role is Role.LEADER
    assert leader.log.log_end_offset == 4
    ready = cluster.handle(1, Message(2, 1, FetchRequest(leader.epoch, 2, 3, 2, 1 << 20, 1)))
    assert leader.high_watermark == 0, "a majority holds 0..2, but they are of an older epoch"
    assert ready.committed == ()
    ready = cluster.handle(1, Message(2, 1, FetchRequest(leader.epoch, 2, 4, leader.epoch, 1 << 20, 2)))
    assert leader.high_watermark == 4
    assert [entry.offset for entry in ready.committed] == [0, 1, 2, 3]
    assert ready.committed[-1].control


def test_leader_resigns_without_fetches_from_a_majority(tmp_path: Path) -> None:
    """Goal: check-quorum. Method: elect 1, then only time passes: after 1.5 x the fetch timeout the
    leader resigns, keeps its epoch and fails its pending proposal with NOT_LEADER_OR_FOLLOWER."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    leader = cluster.nodes[1]
    epoch = leader.epoch
    cluster.handle(1, Propose(1, b"x"))
    cluster.outbox.clear()
    ready = cluster.tick(1, cluster.now_ms + FETCH_TIMEOUT_MS)
    assert leader.role is Role.LEADER, "one fetch timeout is not yet enough (KRaft waits 1.5x)"
    ready = cluster.tick(1, cluster.now_ms + FETCH_TIMEOUT_MS)
    assert leader.role is Role.UNATTACHED
    assert leader.epoch == epoch
    assert [(c.proposal_id, c.error) for c in ready.completions] == [(1, RaftError.NOT_LEADER_OR_FOLLOWER)]


def test_observer_neither_votes_nor_counts_towards_commit(tmp_path: Path) -> None:
    """Goal: observers follow the log but have no say. Method: observer 4 refuses a vote; the leader's
    HW does not move on the observer's fetch alone; the observer never stands and ends up following."""
    cluster = Cluster(tmp_path, observers=(4,))
    ready = cluster.handle(4, Message(1, 4, VoteRequest(1, 1, 0, 0, pre_vote=False)))
    response = only(list(ready.messages))
    assert isinstance(response, VoteResponse)
    assert not response.vote_granted
    assert response.error is RaftError.INCONSISTENT_VOTER_SET
    cluster.outbox.clear()
    cluster.elect(1)
    leader = cluster.nodes[1]
    cluster.handle(1, Propose(1, b"y"))
    cluster.outbox.clear()
    high_watermark = leader.high_watermark
    cluster.handle(1, Message(4, 1, FetchRequest(leader.epoch, 4, leader.log.log_end_offset, leader.epoch, 1 << 20, 9)))
    assert leader.high_watermark == high_watermark, "an observer's copy does not commit anything"
    for _ in range(5):
        cluster.now_ms += 10
        for node_id in (2, 3, 4):
            cluster.tick(node_id)
        cluster.deliver_all()
    observer = cluster.nodes[4]
    assert observer.role is Role.FOLLOWER
    assert observer.leader_id == 1
    assert observer.log.log_end_offset == leader.log.log_end_offset
    assert observer.applied_offset == leader.high_watermark


def test_far_behind_follower_installs_the_leaders_snapshot(tmp_path: Path) -> None:
    """Goal: a follower below the leader's log start catches up by snapshot (KIP-630). Method: the
    leader commits entries with node 2 only and snapshots; node 3 then fetches from offset 0, is told the
    snapshot id, downloads it in small chunks, installs it and gets a restore in its Ready."""
    cluster = Cluster(tmp_path, snapshot_interval_records=3, fetch_bytes_max=40)
    cluster.elect(1, drop=lambda message: 3 in (message.source_id, message.destination_id))
    leader = cluster.nodes[1]
    for index in range(6):
        cluster.handle(1, Propose(index, b"record %d" % index))
        for ready in cluster.run(20, drop=lambda message: 3 in (message.source_id, message.destination_id),
                                 nodes=(1, 2)):
            if ready.snapshot_request is not None:
                assert ready.snapshot_request.offset <= leader.high_watermark
        for node_id in (1, 2):
            request = cluster.nodes[node_id]._snapshot_pending
            if request is not None:
                cluster.handle(node_id, SnapshotCreated(request, b"state up to %d" % request.offset))
        cluster.outbox.clear()
    assert leader.log.log_start_offset > 0, leader.log.log
    follower = cluster.nodes[3]
    cluster.handle(3, Message(1, 3, BeginQuorumEpoch(leader.epoch, 1)))
    restores = [ready.restore for ready in cluster.run(100) if ready.restore is not None]
    assert len(restores) == 1
    snapshot_id = leader.log.snapshots.latest_id()
    assert restores[0].snapshot_id == snapshot_id
    assert restores[0].data == b"state up to %d" % snapshot_id.offset  # type: ignore[union-attr]
    assert follower.log.log_start_offset == snapshot_id.offset  # type: ignore[union-attr]
    assert follower.log.log_end_offset == leader.log.log_end_offset
    assert follower.high_watermark == leader.high_watermark


def test_snapshot_download_uses_fetch_snapshot_chunks(tmp_path: Path) -> None:
    """Goal: FetchSnapshot answers are bounded by fetch_bytes_max. Method: ask the leader directly."""
    cluster = Cluster(tmp_path, snapshot_interval_records=1, fetch_bytes_max=50)
    cluster.elect(1)
    leader = cluster.nodes[1]
    snapshot_id = OffsetAndEpoch(leader.epoch, 1)
    cluster.handle(1, SnapshotCreated(snapshot_id, b"s" * 500))
    assert leader.log.snapshots.latest_id() == snapshot_id
    ready = cluster.handle(1, Message(2, 1, FetchSnapshotRequest(leader.epoch, 2, snapshot_id, 0, 1 << 20, 5)))
    chunk = only(list(ready.messages))
    assert len(chunk.data) == 50  # type: ignore[union-attr]
    assert chunk.size == leader.log.snapshots.size(snapshot_id)  # type: ignore[union-attr]
    ready = cluster.handle(1, Message(2, 1, FetchSnapshotRequest(leader.epoch, 2, OffsetAndEpoch(9, 9), 0, 10, 6)))
    assert only(list(ready.messages)).error is RaftError.SNAPSHOT_NOT_FOUND  # type: ignore[union-attr]


def test_proposal_to_a_non_leader_is_an_error_value(tmp_path: Path) -> None:
    """Goal: Propose never raises on a non-leader. Method: propose to a follower and to an unattached node."""
    cluster = Cluster(tmp_path)
    ready = cluster.handle(2, Propose(1, b"z"))
    assert [(c.error, c.leader_id) for c in ready.completions] == [(RaftError.NOT_LEADER_OR_FOLLOWER, None)]
    cluster.elect(1)
    ready = cluster.handle(2, Propose(2, b"z"))
    completion = ready.completions[0]
    assert completion.error is RaftError.NOT_LEADER_OR_FOLLOWER
    assert (completion.leader_id, completion.leader_epoch) == (1, cluster.nodes[1].epoch)


def test_leader_parks_a_caught_up_fetch_until_there_is_news(tmp_path: Path) -> None:
    """Goal: long polling is bounded. Method: a caught-up fetch gets no answer until a proposal, and an
    idle one is answered at fetch_max_wait_ms."""
    cluster = Cluster(tmp_path, fetch_max_wait_ms=30)
    cluster.elect(1)
    leader = cluster.nodes[1]
    end, hw = leader.log.log_end_offset, leader.high_watermark
    ready = cluster.handle(1, Message(2, 1, FetchRequest(leader.epoch, 2, end, leader.epoch, 1 << 20, 1, hw)))
    assert ready.messages == ()
    assert ready.next_tick_ms <= cluster.now_ms + 30
    ready = cluster.handle(1, Propose(1, b"news"))
    assert 2 in [m.destination_id for m in ready.messages if isinstance(m.body, FetchResponse)]
    end = leader.log.log_end_offset
    ready = cluster.handle(1, Message(3, 1, FetchRequest(leader.epoch, 3, end, leader.epoch, 1 << 20, 2, end)))
    assert leader.high_watermark == end, "node 3's fetch made the new record committed"
    assert 3 not in [m.destination_id for m in ready.messages], "node 3 knows that HW already: parked"
    ready = cluster.tick(1, cluster.now_ms + 29)
    assert 3 not in [m.destination_id for m in ready.messages]
    ready = cluster.tick(1, cluster.now_ms + 1)
    assert [m.destination_id for m in ready.messages if isinstance(m.body, FetchResponse)] == [3]


def test_stale_and_duplicate_fetch_answers_are_ignored(tmp_path: Path) -> None:
    """Goal: the network may duplicate and reorder. Method: deliver one fetch answer twice; the second
    changes nothing and sends no new fetch."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    cluster.handle(1, Propose(1, b"once"))
    cluster.outbox.clear()
    cluster.now_ms += cluster.config.request_timeout_ms
    cluster.tick(2)
    fetch = cluster.take(FetchRequest, source=2)[0]
    answer = cluster_message(1, 2, cluster.handle(1, fetch))
    cluster.outbox.clear()
    ready = cluster.handle(2, answer)
    assert ready.must_sync, "fetched entries are fsynced before the next fetch acknowledges them"
    assert [type(message.body) for message in ready.messages] == [FetchRequest]
    end = cluster.nodes[2].log.log_end_offset
    cluster.outbox.clear()
    ready = cluster.handle(2, answer)
    assert cluster.nodes[2].log.log_end_offset == end
    assert ready.messages == ()


@pytest.mark.parametrize("voters", [(1,), (1, 2, 3, 4, 5)])
def test_any_quorum_size_elects_and_commits(tmp_path: Path, voters: tuple[int, ...]) -> None:
    """Goal: one voter commits alone; five need three. Method: elect, propose, let followers fetch."""
    cluster = Cluster(tmp_path, voters=voters)
    cluster.elect(voters[0])
    leader = cluster.nodes[voters[0]]
    ready = cluster.handle(voters[0], Propose(1, b"v"))
    if len(voters) == 1:
        assert [c.error for c in ready.completions] == [RaftError.NONE]
        return
    cluster.run(50, nodes=voters[:3], drop=lambda message: message.destination_id in voters[3:]
                or message.source_id in voters[3:])
    assert leader.high_watermark == leader.log.log_end_offset


def test_four_voters_commit_only_once_three_hold_an_entry(tmp_path: Path) -> None:
    """Goal: the majority of four voters is three (floor(n / 2) + 1), not half. Method: elect 1 of
    voters 1-4 and propose one entry; the leader then hears a fetch past it from node 2 only (two of
    four hold it: the HW stays), then from node 3 (three of four: the HW moves and the proposal
    completes)."""
    cluster = Cluster(tmp_path, voters=(1, 2, 3, 4))
    cluster.elect(1)
    leader = cluster.nodes[1]
    cluster.handle(1, Propose(1, b"four"))
    cluster.outbox.clear()
    end = leader.log.log_end_offset
    assert leader.high_watermark == end - 1, "the LeaderChange is committed, the proposal not yet"
    ready = cluster.handle(1, Message(2, 1, FetchRequest(leader.epoch, 2, end, leader.epoch, 1 << 20, 1)))
    assert leader.high_watermark == end - 1, "two of four voters are not a majority"
    assert ready.completions == ()
    ready = cluster.handle(1, Message(3, 1, FetchRequest(leader.epoch, 3, end, leader.epoch, 1 << 20, 1)))
    assert leader.high_watermark == end
    assert [(c.proposal_id, c.error, c.offset) for c in ready.completions] == [(1, RaftError.NONE, end - 1)]


def test_late_answers_keep_a_caught_up_follower_attached(tmp_path: Path) -> None:
    """Goal: a follower whose fetches are answered after its request timeout (a parked fetch, a slow
    link) still counts its leader as alive. Method: every answer to node 2 arrives one request timeout
    late; over several fetch timeouts node 2 stays a follower and sends one fetch at a time."""
    cluster = Cluster(tmp_path, fetch_max_wait_ms=0)
    cluster.elect(1)
    cluster.outbox.clear()
    late: list[Message] = []
    for _ in range(4 * FETCH_TIMEOUT_MS // cluster.config.request_timeout_ms):
        cluster.now_ms += cluster.config.request_timeout_ms
        cluster.tick(2)  # gives up on the fetch in flight and sends another
        cluster.tick(3)
        for message in late:
            cluster.handle(2, message)
        late = []
        for message in cluster.take(FetchRequest, source=2):
            late.extend(m for m in cluster.handle(1, message).messages if m.destination_id == 2)
        cluster.deliver_all(drop=lambda message: 2 in (message.source_id, message.destination_id))
        assert cluster.nodes[2].role is Role.FOLLOWER
    assert cluster.nodes[1].role is Role.LEADER


def test_driver_performs_each_ready_in_its_documented_order(tmp_path: Path) -> None:
    """Goal: persist, flush, send, restore, apply, snapshot, complete — in that order. Method: a
    one-voter node behind a RaftDriver whose effects append to one list; it elects itself, commits two
    proposals, snapshots, and then restarts from that snapshot."""
    order: list[str] = []

    class RecordingStateMachine(NullStateMachine):
        def apply(self, offset: int, epoch: int, data: bytes) -> None:
            order.append(f"apply {offset}")
            super().apply(offset, epoch, data)

        def snapshot(self) -> bytes:
            order.append("snapshot")
            return b"two records"

        def restore(self, offset: int, data: bytes) -> None:
            order.append(f"restore {offset} {data!r}")
            super().restore(offset, data)

    class RecordingDriver(RaftDriver):
        def persist_hard_state(self, state: ElectionState) -> None:
            order.append("persist")
            super().persist_hard_state(state)

        def flush_log(self, now_ms: int) -> None:
            order.append("flush")
            super().flush_log(now_ms)

    cluster = Cluster(tmp_path, voters=(1,), snapshot_interval_records=3)
    store = QuorumStateStore(tmp_path / "node-1")
    driver = RecordingDriver(cluster.nodes[1], store, RecordingStateMachine(), lambda message: order.append("send"))
    driver.step(Tick(), ELECTION_TIMEOUT_MS)
    assert order == ["persist", "flush"], "one write for candidate and leader; the LeaderChange is not applied"
    order.clear()
    completions = driver.step(Propose(1, b"a"), ELECTION_TIMEOUT_MS + 1)
    completions += driver.step(Propose(2, b"b"), ELECTION_TIMEOUT_MS + 2)
    assert order == ["flush", "apply 1", "flush", "apply 2", "snapshot"]
    assert [(c.proposal_id, c.offset) for c in completions] == [(1, 1), (2, 2)]
    assert driver.raft.log.log_start_offset == 3
    restarted = RaftDriver(cluster.open(1, store.read()), store, RecordingStateMachine(), lambda message: None)
    order.clear()
    restarted.step(Tick(), ELECTION_TIMEOUT_MS + 3)
    assert order == ["restore 2 b'two records'"]


def test_voter_refuses_a_candidate_whose_log_is_behind(tmp_path: Path) -> None:
    """Goal: Raft §5.4.1 (election restriction). Method: voter 2 holds epochs [1, 1, 2]; candidates
    ending in an older epoch, or in the same epoch at a smaller offset, are refused; an equal log wins."""
    cluster = Cluster(tmp_path)
    write_entries(cluster.nodes[2].log, [1, 1, 2])
    voter = cluster.open(2, ElectionState(4))
    for epoch, (last_epoch, end_offset, granted) in enumerate([(1, 9, False), (2, 2, False), (2, 3, True)], 5):
        ready = voter.handle(Message(1, 2, VoteRequest(epoch, 1, last_epoch, end_offset, pre_vote=False)), epoch)
        response = only(list(ready.messages))
        assert isinstance(response, VoteResponse)
        assert response.vote_granted is granted, (last_epoch, end_offset)


def test_an_unreachable_voter_is_given_up_at_once_and_another_asked(tmp_path: Path) -> None:
    """Goal: a killed voter refuses connections; an observer looking for the leader must not wait
    out the request timeout on it (Kafka's client sees the disconnect at once). Method: observer 4
    (LowestRandom: it asks voter 1 first) learns that its fetch to 1 never left; after the retry
    backoff, well before the request timeout, it asks voter 2, and follows the leader it names."""
    cluster = Cluster(tmp_path, observers=(4,), request_timeout_ms=1_000)
    cluster.elect(2, drop=lambda message: message.destination_id == 4)
    cluster.outbox.clear()
    cluster.tick(4)
    fetch = only(cluster.take(FetchRequest, source=4, destination=1))
    cluster.handle(4, Unreachable(1, fetch.correlation_id))  # type: ignore[union-attr]
    cluster.tick(4, cluster.now_ms + 10)  # the retry backoff
    assert [m.destination_id for m in cluster.outbox if isinstance(m.body, FetchRequest)] == [2]
    cluster.run(50, drop=lambda message: 1 in (message.source_id, message.destination_id))
    assert (cluster.nodes[4].role, cluster.nodes[4].leader_id) == (Role.FOLLOWER, 2)


def test_an_unreachable_answer_for_another_request_changes_nothing(tmp_path: Path) -> None:
    """Goal: only the awaited fetch is given up. Method: a stale Unreachable (another correlation
    id) leaves the observer waiting on its fetch: nothing is sent before the request timeout."""
    cluster = Cluster(tmp_path, observers=(4,), request_timeout_ms=1_000)
    cluster.tick(4)
    fetch = only(cluster.take(FetchRequest, source=4, destination=1))
    cluster.handle(4, Unreachable(1, fetch.correlation_id + 1))  # type: ignore[union-attr]
    cluster.tick(4, cluster.now_ms + 500)
    assert cluster.take(FetchRequest, source=4) == []


def follower_fetch_in_flight(cluster: Cluster, follower: int, leader: int) -> FetchRequest:
    """Let `follower` (after its retry backoff) send its next fetch to `leader`; take it undelivered."""
    cluster.outbox.clear()
    cluster.tick(follower, cluster.now_ms + cluster.config.retry_backoff_ms)
    fetch = only(cluster.take(FetchRequest, source=follower, destination=leader))
    assert isinstance(fetch, FetchRequest)
    return fetch


@pytest.mark.parametrize(("follower", "stands_after_ms"), [(2, 0), (3, 5)], ids=["first-voter", "second-voter"])
def test_a_follower_whose_leader_refuses_its_fetch_stands_at_once(tmp_path: Path, follower: int,
                                                                  stands_after_ms: int) -> None:
    """Goal: a refused connection proves the leader's process gone ("A refused leader"): the voter
    with the lowest id after the leader asks for pre-votes at once, the next one slot later (a tenth
    of election_backoff_max_ms, here 5 ms), not after the 200 ms fetch timeout. Method: follower 2's
    or 3's fetch to leader 1 is reported refused; 3 still follows 1 ms before its slot."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    fetch = follower_fetch_in_flight(cluster, follower, 1)
    refused_ms = cluster.now_ms
    cluster.handle(follower, Unreachable(1, fetch.correlation_id, refused=True))
    if stands_after_ms:
        cluster.tick(follower, refused_ms + stands_after_ms - 1)
        assert cluster.nodes[follower].role is Role.FOLLOWER
        cluster.outbox.clear()  # its fetch retries, refused again: they change nothing
    cluster.tick(follower, refused_ms + stands_after_ms)
    assert cluster.nodes[follower].role is Role.PROSPECTIVE
    pre_votes = cluster.take(VoteRequest, source=follower)
    assert sorted(m.destination_id for m in pre_votes) == sorted({1, 2, 3} - {follower})
    assert all(m.body.pre_vote and m.body.epoch == cluster.nodes[1].epoch for m in pre_votes)  # type: ignore[union-attr]


@pytest.mark.parametrize("failure", ["timed-out", "closed"])
def test_a_fetch_that_times_out_or_whose_connection_closes_keeps_the_fetch_timeout(tmp_path: Path,
                                                                                   failure: str) -> None:
    """Goal: only a refusal shortens the wait; a partition (time-out) or a reset or closed connection
    (a pause, a slow peer, or a process that just died: the retry tells) keeps today's path. Method:
    follower 2's fetch to leader 1 gets no answer, or is reported unreachable but not refused, and no
    later fetch reaches 1; 2 still follows 1 (and refuses node 3's pre-vote) 1 ms before its fetch
    timeout, and stands at it."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    fetch = follower_fetch_in_flight(cluster, 2, 1)
    heard_ms = cluster.now_ms - cluster.config.retry_backoff_ms  # the last answer 2 had from 1
    if failure == "closed":
        cluster.handle(2, Unreachable(1, fetch.correlation_id, refused=False))
    cluster.run(heard_ms + FETCH_TIMEOUT_MS - 1 - cluster.now_ms, step_ms=1, nodes=[2],
                drop=lambda message: message.destination_id == 1)
    assert cluster.nodes[2].role is Role.FOLLOWER
    end = cluster.nodes[3].log.end_offset_and_epoch()
    answer = cluster.handle(2, Message(3, 2, VoteRequest(cluster.nodes[3].epoch, 3, end.epoch, end.offset,
                                                         pre_vote=True)))
    response = cluster_message(2, 3, answer).body
    assert isinstance(response, VoteResponse) and not response.vote_granted
    cluster.tick(2, heard_ms + FETCH_TIMEOUT_MS)
    assert cluster.nodes[2].role is Role.PROSPECTIVE


@pytest.mark.parametrize("refused", [True, False], ids=["refused", "not-refused"])
def test_a_voter_whose_leader_refused_grants_a_pre_vote_it_would_otherwise_refuse(tmp_path: Path,
                                                                                  refused: bool) -> None:
    """Goal: the followers of a dead leader see its refusal at about the same moment; the first to
    stand must win the others' pre-votes at once (KIP-996's "not heard from a leader" counts the
    refusal), not only after their fetch timeout. Method: voter 3 (it would stand itself one slot
    later) has its fetch to leader 1 reported unreachable; node 2's pre-vote, arriving at that
    instant, is granted after a refusal and refused otherwise (3 heard from 1 just before)."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    fetch = follower_fetch_in_flight(cluster, 3, 1)
    cluster.handle(3, Unreachable(1, fetch.correlation_id, refused=refused))
    end = cluster.nodes[2].log.end_offset_and_epoch()
    answer = cluster.handle(3, Message(2, 3, VoteRequest(cluster.nodes[2].epoch, 2, end.epoch, end.offset,
                                                         pre_vote=True)))
    response = cluster_message(3, 2, answer).body
    assert isinstance(response, VoteResponse)
    assert response.vote_granted is refused
    assert answer.hard_state is None, "a pre-vote persists nothing, granted or not"


def test_a_second_leader_claimed_for_a_known_epoch_is_ignored(tmp_path: Path) -> None:
    """A BeginQuorumEpoch naming another leader of an epoch whose leader a node knows (a confused or
    forged peer: no correct one sends it) changes nothing; it used to trip an assertion that killed
    the node's quorum task."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    epoch = cluster.nodes[1].epoch
    for node_id in (1, 2):
        ready = cluster.handle(node_id, Message(3, node_id, BeginQuorumEpoch(epoch, 3)))
        assert ready.hard_state is None and ready.messages == ()
        assert (cluster.nodes[node_id].epoch, cluster.nodes[node_id].leader_id) == (epoch, 1)
    assert cluster.nodes[1].role is Role.LEADER and cluster.nodes[2].role is Role.FOLLOWER


def test_a_fetch_answer_no_correct_leader_sends_is_refused_and_the_log_kept(tmp_path: Path) -> None:
    """A fetch answer from the leader's id that no correct leader sends (a confused or forged peer:
    a diverging epoch below the high watermark, records that do not continue the log, records of
    an epoch older than the log's, records that do not parse) changes nothing and is reported in
    `Ready.refused`; each used to trip an assertion (or rewrite the epoch cache)."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    cluster.handle(1, Propose(1, b"committed"))
    cluster.run(50)
    follower = cluster.nodes[2]
    end, high_watermark = follower.log.log_end_offset, follower.high_watermark
    assert high_watermark == end == 2
    epoch = follower.epoch
    assert epoch == 1
    good = build_batch([(b"k", b"v")])
    forged = {
        "cut committed entries": {"diverging_epoch": OffsetAndEpoch(0, 0)},
        "does not continue": {"records": bytes(_stamped(good, end + 5, epoch))},
        "of epoch 0": {"records": bytes(_stamped(good, end, epoch - 1))},
        "parse": {"records": b"\x00\x00\x00\x00\x00\x00\x00\x02\xff\xff\xff\xff" + b"\x00" * 60},
    }
    for problem, fields in forged.items():
        cluster.outbox.clear()
        fetches: list[Message] = []
        for _ in range(10):  # the one in flight times out, then the follower fetches again
            cluster.tick(2, cluster.now_ms + cluster.config.request_timeout_ms)
            fetches = cluster.take(FetchRequest, source=2, destination=1)
            if fetches:
                break
        fetch = only(fetches)
        assert isinstance(fetch, FetchRequest)
        answer = FetchResponse(epoch, 1, RaftError.NONE, fetch.correlation_id, fetch.fetch_offset,
                               fetch.last_fetched_epoch, high_watermark, 0, **fields)  # type: ignore[arg-type]
        ready = cluster.handle(2, Message(1, 2, answer))
        assert len(ready.refused) == 1 and "fetch answer from 1" in ready.refused[0], (problem, ready.refused)
        assert problem in ready.refused[0], ready.refused
        assert (follower.log.log_end_offset, follower.high_watermark) == (end, high_watermark), problem
        assert follower.role is Role.FOLLOWER and follower.leader_id == 1
        cluster.run(20)  # the real leader's answers keep the follower attached


def _stamped(batch: bytes, base_offset: int, epoch: int) -> bytearray:
    """`batch` with its base offset and partition leader epoch set (as a leader's append does)."""
    stamped = bytearray(batch)
    stamped[0:8] = base_offset.to_bytes(8, "big")
    stamped[12:16] = epoch.to_bytes(4, "big", signed=True)
    return stamped
