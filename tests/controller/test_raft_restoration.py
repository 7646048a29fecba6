"""A voter without state (controller/raft.py, "A voter without state"): the Raft core driven by hand.

Each test states its goal. Method: the `Cluster` of test_raft.py (real `RaftLog`s in a temp dir,
messages handed from one node's Ready to another's `handle`), with one or more voters opened from
a missing quorum-state (`LOST`, what `QuorumStateStore.read` gives for a missing file).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from controller.quorum_state import ElectionState, QuorumStateStore, Restoration
from controller.raft import Raft
from controller.raft_driver import RaftDriver
from controller.raft_messages import (
    BeginQuorumEpoch,
    FetchRequest,
    Message,
    Propose,
    QuorumProbeRequest,
    QuorumProbeResponse,
    RaftError,
    Role,
    Unreachable,
    VoteRequest,
    VoteResponse,
)
from tests.controller.test_raft import (
    ELECTION_TIMEOUT_MS,
    FETCH_TIMEOUT_MS,
    Cluster,
    HighestRandom,
    LowestRandom,
    NullStateMachine,
    only,
    write_entries,
)

LOST = ElectionState(0, restoration=Restoration())


def restoring(cluster: Cluster, node_id: int = 3) -> Raft:
    """Reopen `node_id` as a voter whose quorum-state is missing."""
    cluster.nodes[node_id] = cluster.open(node_id, LOST)
    return cluster.nodes[node_id]


def probe_id(cluster: Cluster, node_id: int = 3) -> int:
    """Tick `node_id` once and return the correlation id of the probes it sends."""
    cluster.tick(node_id)
    probes = cluster.take(QuorumProbeRequest, source=node_id)
    assert probes, f"node {node_id} sent no probe"
    ids = {message.body.correlation_id for message in probes}  # type: ignore[union-attr]
    assert len(ids) == 1, ids
    return ids.pop()


def answer(cluster: Cluster, voter: int, asker: int, correlation_id: int) -> None:
    """Voter `voter` answers `asker`'s probe itself (through its core) and the answer is delivered."""
    cluster.handle(voter, Message(asker, voter, QuorumProbeRequest(correlation_id)))
    cluster.deliver_round()


def vote(cluster: Cluster, voter: int, epoch: int, candidate: int, last_epoch: int = 0, end_offset: int = 0,
         pre_vote: bool = False) -> bool:
    """Ask `voter` for a vote; True if granted."""
    ready = cluster.handle(voter, Message(candidate, voter, VoteRequest(epoch, candidate, last_epoch, end_offset,
                                                                        pre_vote)))
    response = only([message for message in ready.messages if isinstance(message.body, VoteResponse)])
    assert isinstance(response, VoteResponse)
    return response.vote_granted


def test_missing_quorum_state_reads_as_a_voter_without_state(tmp_path: Path) -> None:
    """Goal: the only way into restoring is a missing file, and a file written since says so too."""
    store = QuorumStateStore(tmp_path)
    assert store.read() == LOST
    learned = Restoration(frozenset({1, 2}), epoch_bound=7, log_bound=(7, 120))
    store.write(ElectionState(7, leader_id=2, restoration=learned), voters=[1, 2, 3])
    assert store.read() == ElectionState(7, leader_id=2, restoration=learned)
    text = (tmp_path / "quorum-state").read_text()
    assert '"restoration":{"answeredVoters":[1,2],"epochBound":7,"logBoundEpoch":7,"logBoundOffset":120}' in text
    store.write(ElectionState(8, voted_id=1), voters=[1, 2, 3])
    assert "restoration" not in (tmp_path / "quorum-state").read_text(), "a restored voter's file is KRaft's"


def test_voter_without_state_neither_votes_nor_stands_until_every_other_voter_answered(tmp_path: Path) -> None:
    """Goal: until it has heard every other voter, a voter without state grants no vote or pre-vote
    (in any epoch) and does not stand when its election timeout passes; it looks for a leader
    instead. Method: restoring voter 3 asked before any answer, after voter 1's, after both."""
    cluster = Cluster(tmp_path)
    voter = restoring(cluster)
    correlation_id = probe_id(cluster)
    for pre_vote in (True, False):
        assert not vote(cluster, 3, 1, 1, pre_vote=pre_vote)
    assert voter.voted_id is None
    cluster.outbox.clear()
    cluster.tick(3, 10 * ELECTION_TIMEOUT_MS)
    assert voter.role is Role.UNATTACHED, "it does not stand"
    assert not cluster.take(VoteRequest)
    assert cluster.take(FetchRequest, source=3), "it looks for the leader, as an observer does"
    answer(cluster, 1, 3, correlation_id)
    assert not vote(cluster, 3, 1, 1), "voter 2 has not answered"
    assert voter.restoring
    answer(cluster, 2, 3, correlation_id)
    assert not voter.restoring
    assert vote(cluster, 3, 1, 1, pre_vote=True)
    assert vote(cluster, 3, 1, 1)
    assert voter.voted_id == 1


def test_only_each_voters_own_answer_to_this_incarnations_probe_counts(tmp_path: Path) -> None:
    """Goal: every learned epoch comes from the voter itself, after the loss. Method: a delayed answer
    to another probe id (an earlier incarnation's, maybe from before the loss) and an observer's
    answer teach nothing; voter 1's own answer does; a restart keeps it and asks only voter 2."""
    cluster = Cluster(tmp_path, observers=(4,))
    voter = restoring(cluster)
    correlation_id = probe_id(cluster)
    cluster.handle(3, Message(1, 3, QuorumProbeResponse(9, None, 9, 50, correlation_id + 1)))
    cluster.handle(3, Message(4, 3, QuorumProbeResponse(9, None, 9, 50, correlation_id)))
    assert voter.election_state.restoration == Restoration()
    cluster.handle(3, Message(1, 3, QuorumProbeResponse(0, None, 0, 0, correlation_id)))
    learned = voter.election_state.restoration
    assert learned == Restoration(frozenset({1}))
    restarted = cluster.nodes[3] = cluster.open(3, voter.election_state, HighestRandom())
    restarted_id = probe_id(cluster)
    assert restarted_id != correlation_id, "a new incarnation asks with a new probe id"
    assert restarted.election_state.restoration == learned
    cluster.tick(3, cluster.now_ms + cluster.config.request_timeout_ms)
    asked = [message.destination_id for message in cluster.take(QuorumProbeRequest)]
    assert asked == [2], "asked again until it answers"


def test_votes_only_in_epochs_above_every_epoch_answered(tmp_path: Path) -> None:
    """Goal: the epoch bound. Voter 3 may have voted in any epoch up to the largest the others report
    (a candidate it voted for knows an epoch at least that high). Method: voters 1 and 2 at epochs 5
    and 3; restoring voter 3 refuses every vote in epoch 5 and grants one in epoch 6."""
    cluster = Cluster(tmp_path)
    cluster.nodes[1] = cluster.open(1, ElectionState(5, voted_id=2))
    cluster.nodes[2] = cluster.open(2, ElectionState(3))
    voter = restoring(cluster)
    correlation_id = probe_id(cluster)
    answer(cluster, 1, 3, correlation_id)
    answer(cluster, 2, 3, correlation_id)
    assert voter.epoch == 5, "the term rule applies to answers too"
    assert voter.election_state.restoration == Restoration(frozenset({1, 2}), epoch_bound=5)
    assert not voter.restoring, "it has heard every voter; only the epoch bound remains"
    assert not vote(cluster, 3, 5, 2)
    assert vote(cluster, 3, 5, 2, pre_vote=True), "a pre-vote in epoch 5 is for a vote in epoch 6"
    assert vote(cluster, 3, 6, 2)
    assert voter.election_state == ElectionState(6, voted_id=2, restoration=Restoration(frozenset({1, 2}), 5))


def test_votes_only_for_logs_as_up_to_date_as_every_log_answered(tmp_path: Path) -> None:
    """Goal: the log bound. Entries the lost voter acknowledged may be committed with its help, and
    they are in the log of the voter that sent them: so it votes only for a log at least as up to
    date as every log answered, and stands only once its own is. Method: voter 1 holds epochs
    [1, 1, 2], voter 2 [1, 1]; restoring voter 3 (empty log) refuses candidate 2 although 2's log is
    ahead of its own, grants candidate 1, and does not stand with its empty log."""
    cluster = Cluster(tmp_path)
    write_entries(cluster.nodes[1].log, [1, 1, 2])
    write_entries(cluster.nodes[2].log, [1, 1])
    cluster.nodes[1] = cluster.open(1, ElectionState(2))
    cluster.nodes[2] = cluster.open(2, ElectionState(2))
    voter = restoring(cluster)
    correlation_id = probe_id(cluster)
    answer(cluster, 1, 3, correlation_id)
    answer(cluster, 2, 3, correlation_id)
    assert voter.election_state.restoration == Restoration(frozenset({1, 2}), epoch_bound=2, log_bound=(2, 3))
    assert voter.restoring, "its own log is behind the log bound"
    assert not vote(cluster, 3, 3, 2, last_epoch=1, end_offset=2)
    assert vote(cluster, 3, 3, 1, last_epoch=2, end_offset=3)
    cluster.outbox.clear()
    cluster.tick(3, 10 * ELECTION_TIMEOUT_MS)
    assert voter.role is Role.UNATTACHED
    assert not cluster.take(VoteRequest), "it does not stand with a log behind the bound"


def test_what_a_voter_without_state_learns_is_persisted_before_anything_depends_on_it(tmp_path: Path) -> None:
    """Goal: a crash never turns a restoring voter into one that votes as if it had its state.
    Method: voter 3 through a RaftDriver with a real store. Each answer is in the file once the
    step is done; an epoch adopted while restoring is written with the restoration (else a restart
    would read an ordinary state in an epoch it may have voted in); the state that allows a vote is
    written before the vote leaves; the bounds leave the file only once the durable epoch and log
    make them redundant, at the next step."""
    cluster = Cluster(tmp_path)
    store = QuorumStateStore(tmp_path / "node-3")
    sent: list[Message] = []
    order: list[str] = []

    class RecordingStore(QuorumStateStore):
        def write(self, state: ElectionState, voters: object) -> None:
            order.append(f"persist {state}")
            super().write(state, voters)  # type: ignore[arg-type]

    def send(message: Message) -> None:
        order.append(f"send {type(message.body).__name__}")
        sent.append(message)

    driver = RaftDriver(cluster.open(3, store.read()), RecordingStore(store.path.parent), NullStateMachine(), send)
    driver.step(Message(1, 3, BeginQuorumEpoch(4, 1)), 0)
    assert store.read() == ElectionState(4, leader_id=1, restoration=Restoration())
    correlation_id = next(message.body.correlation_id for message in sent
                          if isinstance(message.body, QuorumProbeRequest))
    driver.step(Message(1, 3, QuorumProbeResponse(4, 1, 4, 10, correlation_id)), 1)
    assert store.read().restoration == Restoration(frozenset({1}), epoch_bound=4, log_bound=(4, 10))
    driver = RaftDriver(cluster.open(3, store.read(), HighestRandom()), RecordingStore(store.path.parent),
                        NullStateMachine(), send)
    assert driver.raft.restoring, "a restart goes on restoring"
    sent.clear()
    driver.step(Message(2, 3, QuorumProbeResponse(4, 1, 4, 10, correlation_id)), 2)
    assert driver.raft.restoring, "an answer to the previous incarnation's probe does not count"
    new_id = next(message.body.correlation_id for message in sent if isinstance(message.body, QuorumProbeRequest))
    driver.step(Message(2, 3, QuorumProbeResponse(4, 1, 0, 0, new_id)), 3)
    complete = Restoration(frozenset({1, 2}), epoch_bound=4, log_bound=(4, 10))
    assert store.read().restoration == complete
    order.clear()
    driver.step(Message(1, 3, VoteRequest(5, 1, 4, 10, pre_vote=False)), 4)
    assert order[0] == f"persist {ElectionState(5, voted_id=1, restoration=complete)}"
    assert order[1] == "send VoteResponse"
    assert store.read() == ElectionState(5, voted_id=1, restoration=complete), "its log is still behind the bound"
    write_entries(driver.raft.log, [4] * 10)
    driver.step(Message(1, 3, BeginQuorumEpoch(5, 1)), 5)
    assert store.read() == ElectionState(5, voted_id=1, leader_id=1), "restored: the file is KRaft's again"


def test_a_new_cluster_of_voters_without_state_elects(tmp_path: Path) -> None:
    """Goal: no "is this a new cluster" guess: every voter starts without state, hears the others'
    epoch 0 and empty logs, and the first election is in epoch 1. Method: three voters opened from
    missing files, let run; then every file is KRaft's."""
    cluster = Cluster(tmp_path)
    for node_id in (1, 2, 3):  # node 1 draws the shortest election timeout
        cluster.nodes[node_id] = cluster.open(node_id, LOST, LowestRandom() if node_id == 1 else HighestRandom())
    cluster.run(4 * ELECTION_TIMEOUT_MS + FETCH_TIMEOUT_MS)
    leaders = [node for node in cluster.nodes.values() if node.role is Role.LEADER]
    assert len(leaders) == 1
    assert leaders[0].epoch == 1
    cluster.run(50)
    for node in cluster.nodes.values():
        assert node.election_state.restoration is None, node.election_state
        assert node.epoch == 1


def test_a_voter_without_state_follows_the_leader_but_is_not_counted_until_every_voter_answered(
        tmp_path: Path) -> None:
    """Goal: following grants nothing: a restoring voter fetches and catches up at once, but the
    leader counts it neither towards commit nor for check-quorum until every other voter has
    answered it and the leader's epoch is at least theirs. Counting it earlier let a leader deposed
    in an epoch the voter had joined before the loss commit over entries committed in that epoch
    (quorum seed 530201574). Method: leader 1 elected, voter 3's disk wiped; voter 2 is cut off
    and voter 3's probe to it is lost: a proposal does not commit on 1 and 3; once 2 is back, it
    commits."""
    cluster = Cluster(tmp_path)
    cluster.elect(1)
    cluster.handle(1, Propose(1, b"before the wipe"))
    cluster.run(50)
    shutil.rmtree(tmp_path / "node-3")
    voter = restoring(cluster)

    def cut_off(message: Message) -> bool:
        return 2 in (message.source_id, message.destination_id)

    cluster.run(FETCH_TIMEOUT_MS, drop=cut_off, nodes=(1, 3))
    assert voter.restoring, "voter 2 never answered"
    assert voter.role is Role.FOLLOWER and voter.leader_id == 1
    ready = cluster.handle(1, Propose(2, b"after the wipe"))
    assert not ready.completions
    completions = [completion for ready in cluster.run(50, drop=cut_off, nodes=(1, 3))
                   for completion in ready.completions]
    assert completions == [], "voter 3's fetches are not counted while it restores"
    assert voter.log.log_end_offset == cluster.nodes[1].log.log_end_offset, "but it follows"
    completions = [completion for ready in cluster.run(100) for completion in ready.completions]
    assert [(completion.proposal_id, completion.error) for completion in completions] == [(2, RaftError.NONE)]


def test_a_probe_that_never_left_is_sent_again_after_the_backoff(tmp_path: Path) -> None:
    """Goal: a voter without state may vote only once every other voter answered, so a probe lost
    to a peer that was still starting must not wait out the request timeout: if that peer dies
    meanwhile, the quorum cannot elect until it returns (a new cluster whose active controller
    was killed a second after start stayed leaderless for 30 s). Method: restoring voter 3's probe
    to voter 1 is reported Unreachable; after the retry backoff (well before the request timeout)
    it is probed again, and once both answer it may vote."""
    cluster = Cluster(tmp_path, request_timeout_ms=1_000)
    voter = restoring(cluster)
    correlation_id = probe_id(cluster)
    cluster.handle(3, Unreachable(1, correlation_id))
    cluster.tick(3, cluster.now_ms + 10)  # the retry backoff
    assert [m.destination_id for m in cluster.take(QuorumProbeRequest, source=3)] == [1, 2]
    answer(cluster, 1, 3, correlation_id)
    answer(cluster, 2, 3, correlation_id)
    assert not voter.restoring
