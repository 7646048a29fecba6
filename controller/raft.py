"""Raft for the controller quorum, as a pure state machine: `Raft.handle(event, now_ms) -> Ready`.

Theory of operation
===================

Shape (etcd-raft's, STYLE §2 and §7). Every input is an event (controller/raft_messages.py): a
`Tick`, a received `Message`, a `Propose` or `ProposeBatch`, a `SnapshotCreated`. `handle` returns a `Ready`: the
hard state to persist, whether the log must be fsynced, messages to send, a snapshot to restore,
committed entries to apply, a snapshot to take, proposals to complete, and when to tick next. The
core reads no clock (time is `now_ms`), opens no socket and draws randomness only from the
generator it is given. It does its own storage writes through `RaftLog` (a `storage.Log`), which
only reach the page cache; durability is the driver's `flush` when `Ready.must_sync` says so,
before any message leaves. `RaftDriver` (controller/raft_driver.py) performs a Ready in order and
is shared by the node and the simulator.

Replication: KRaft's pull-based Fetch (KIP-595), not AppendEntries. Why: voters and observers
(brokers following the metadata) use one mechanism; a follower's fetch offset is its
acknowledgement, so the leader needs no per-follower send window or next-index guessing; log
repair reuses Kafka's leader-epoch machinery (the diverging-epoch answer computed from the
leader-epoch cache, KIP-320/595) that storage already implements; and it is what Kafka runs, so
Kafka's reasoning and tools transfer. The cost, a round trip per batch of entries and a parked
("long poll") fetch at the log end, is small for metadata.

Epochs and roles. The epoch is Raft's term: every batch carries the epoch that appended it
(partitionLeaderEpoch). Roles (`Role`): UNATTACHED (no leader known), PROSPECTIVE (KIP-996
pre-vote in progress; epoch unchanged), CANDIDATE (epoch + 1, voted for itself), LEADER,
FOLLOWER (fetches from the known leader of its epoch). Any message carrying a higher epoch moves
the node to that epoch first (Raft's term rule), as follower if the message names the leader.

Election. An unattached voter whose randomized election timeout (election_timeout_ms plus up to
as much again, drawn from the rng) expires, or a follower that has not had a successful fetch
within fetch_timeout_ms (or whose leader refused the connection, below), becomes PROSPECTIVE and
asks the voters for pre-votes with its current epoch. A voter grants a pre-vote iff it has not
heard from a leader within the fetch timeout (a refusal since counts as not heard) and
the prospective's log is at least as up to date as its own (last epoch, then end offset). Only
with a majority of pre-votes does a node bump the epoch and ask for real votes, which a voter
grants at most once per epoch — persisted before the answer leaves — and only to an up-to-date
log. So a node cut off from the majority never raises its epoch and cannot depose a working
leader when it returns; its pre-vote is refused with the leader's id, and it follows that leader.
A candidate (or prospective) that loses backs off up to election_backoff_max_ms; one that times
out starts over with a pre-vote. The winner writes a LeaderChange control record (KRaft's
LeaderChangeMessage) and tells the voters with BeginQuorumEpoch (resent until each fetches).

A refused leader (not in Kafka). A follower whose Fetch or FetchSnapshot to its leader was refused
(`Unreachable(refused=True)`: nothing listens at the leader's address, its process is gone) counts
the leader as not heard from at once: it grants pre-votes as if the fetch timeout had passed, and
it stands (or, if it may not, looks for the leader) at once if it has the lowest id of the voters
other than the leader, else one slot (a tenth of election_backoff_max_ms) later per voter below it,
instead of at the end of the fetch timeout. The followers see one leader die at the same moment:
standing together, they would grant each other's pre-votes, each vote for itself in the next epoch
and wait out an election timeout (with a random delay of 0-100 ms instead, two followers in a
loaded 3-node cluster stood 13 ms apart and did).
The order is KRaft's for a leader that resigns (EndQuorumEpoch's preferred successors: the first
stands at once, the others back off by position), with ids for the fetch offsets a dead leader
cannot send; the second stands only if the first has not won within a slot. A connection
that timed out, was reset or closed changes nothing here: a partition, a pause or a slow leader must
not start elections (the node's transport retries a fetch whose connection closed, and that retry
tells whether the process is gone). Why this is safe: Raft's safety (election safety, log matching,
leader completeness) rests on the vote and pre-vote rules and on epochs, none of which changes; it
never depends on when an election starts, which lost and delayed messages already make arbitrary.
The refusal decides only when this node stands and whether it still defers to its leader when
others stand. If the refusal is wrong (a live leader behind a firewall that REJECTs), the cost is
liveness: an election that deposes a working leader, as after a long pause.

Commit. The leader learns each voter's end offset from its fetch offset. The high watermark is
the largest offset a majority of voters (itself included) hold, and it advances only once it
passes the leader's LeaderChange record: entries of older epochs commit only together with one
of the current epoch (Raft §5.4.2). The high watermark never falls. Followers take
min(leader's HW, own log end) from each fetch answer. Committed entries are read back from the
log and handed out in order, in whole batches (a `ProposeBatch` is applied together, never in
part), about APPLY_BATCH_MAX entries per Ready at most; a proposal completes once its entries
are committed (after the driver applied them).

Log repair (leader side, `RaftLog.validate_offset_and_epoch`): a fetch at (offset, epoch) is valid
if the leader's log has `epoch` ending at or after `offset`; otherwise the answer is the leader's
end of the largest epoch <= `epoch` (diverging epoch) and the follower truncates to where the two
logs agree (KRaft's truncateToEndOffset) — never below its high watermark. A position below the
leader's log start is answered with the snapshot id to fetch. An answer no correct leader sends (a
diverging epoch below the high watermark, records that do not continue the log or whose epochs go
back, a snapshot below the high watermark, a chunk of another download) is ignored and reported in
`Ready.refused`: a peer's values are checked, not asserted (a bug in a peer, or a forgery).

Check-quorum. A leader that has not received fetches from a majority of voters (itself included)
within 1.5 x fetch_timeout_ms resigns (becomes UNATTACHED in its epoch, keeping its vote), as
KRaft does, so that a leader cut off from the majority stops accepting proposals and its
followers' pre-votes succeed elsewhere.

Snapshots. Every node counts the entries applied since its last snapshot; past
snapshot_interval_records, the Ready asks for a snapshot at the applied offset. Given the bytes
back (`SnapshotCreated`), the core stores the snapshot file atomically and raises the log start
offset, and retention drops the segments below it. A follower whose fetch position is below the
leader's log start downloads the leader's latest snapshot with FetchSnapshot, installs it
(`truncate_fully_and_start_at`) and the Ready carries a restore for the state machine.

Durability rules (why each Ready field is ordered): the epoch and the vote are persisted before
any message that depends on them (a vote granted, a request in a new epoch); appended entries
are fsynced before the follower's next fetch acknowledges them or before anything is derived
from the leader's own end offset (commit, completion); the driver finishes a Ready before the
next `handle`. A restarted node starts UNATTACHED (or FOLLOWER of the leader it persisted, unless
that was itself), with its high watermark at its latest snapshot, which it restores first.

Observers: nodes that are not voters fetch and apply like followers but never vote, never stand,
and never count towards a majority; without a known leader they ask a random voter.

A voter without state. Raft's safety rests on two things a voter keeps on disk: the epochs it voted
in (a second vote in one epoch can make two leaders of it) and the entries it acknowledged (a
majority that counted its acknowledgement of a committed entry may, without it, elect a leader that
lacks the entry, §5.4). A voter whose quorum-state is missing (a new node, a wiped or replaced
disk, a removed file) knows neither. KRaft with dynamic voters (KIP-853) makes such a replica a new
one, with a new log directory id, that is no voter until an operator adds it again; our voters are
static (controller.quorum.voters), so the voter restores instead (`Restoration` in quorum_state.py):

- It asks every other voter for its current epoch and its log end (QuorumProbe, answered at once
  and with no effect on the answerer; both values are durable before the answer leaves, by the
  Ready order). An answer counts only from that voter itself and only to a probe of this
  incarnation (its correlation id is drawn at start): an older answer may predate the loss.
- Until every other voter has answered it grants no vote or pre-vote and does not stand. It follows
  a leader (fetches and applies), and without one it asks a random voter, as an observer does.
  Following grants nothing: its fetches say `restoring`, and the leader counts them neither towards
  commit nor for check-quorum until every other voter has answered and the leader's epoch is at
  least theirs (`_fetch_counts`): the leader it follows may have been deposed in an epoch this
  voter had joined before the loss, and its acknowledgement would let it commit over entries
  committed in that later epoch.
- Then the epoch bound M (the largest epoch answered) and the log bound R (the most up-to-date log
  end answered) are known. It votes, and stands, only in epochs above M, and only for a log at least
  as up to date as R (its own, to stand; pre-votes alike, for the epoch after). What it learns is in
  the quorum-state with the epoch it writes anyway; R leaves the file once the voter's durable log
  reaches it, M once its durable epoch passes it (checked first in `handle`, where both are durable).

Why M suffices: a vote it gave for candidate C in epoch e before the loss matters only if C could
lead e; C has known an epoch >= e since it stood (persisted, never falling), so its answer makes
M >= e. A self-vote likewise: for another node to lead e, that node knows e. Why R suffices: an
entry it acknowledged that may be committed was, before the loss, in the durable log of the voter
that sent it (or, if it led, of a majority); that voter still holds it when it answers (a log loses
a committed entry only by following a leader without it, which leader completeness excludes, by
induction over epochs), so R is at least that log, and a candidate at least as up to date as R holds
the entry (§5.4.3). Raft's vote-intersection argument then goes through with the restored voter's
vote in place of its lost acknowledgement. A new cluster is the same case, with no "is this a new
cluster" guess: every voter starts without state, hears epoch 0 and empty logs, and the first
election is in epoch 1. The cost: a voter without state votes only after every other voter has
answered once, so a voter that is down keeps it from voting. The limit: both arguments need the
voters that answer to have kept their state, so voters restore one at a time (README); two that
lose their state together may each lose what the other would have told.

Differences from Kafka, and why:
- One fetch per follower in flight, matched by correlation id and checked against the echoed
  position, because our network (the simulator's) drops, duplicates and reorders where Kafka relies
  on TCP. A late answer for the follower's current position is still used — it refreshes the fetch
  timeout, and is acted on if it moves the follower — so round trips longer than the request
  timeout do not starve a follower; an empty duplicate starts no new fetch.
- The follower reports its high watermark in Fetch, so the leader parks only fetches with nothing
  new to say; a follower of a leader that does not park (fetch_max_wait_ms = 0) pauses
  retry_backoff_ms after an answer with nothing new instead of spinning.
- Only the leader itself (a fetch answer, BeginQuorumEpoch) makes a follower refuse pre-votes; a
  leader learned from hearsay (a vote response, a restart) does not, or two voters that each heard
  of a dead leader from the other would refuse each other for ever.
- A Vote or pre-vote with a higher epoch moves the voter to that epoch (Raft's term rule); only a
  node that once won a pre-vote majority can carry a higher epoch, so this ends, at the cost of one
  election, the case of a candidate whose epoch is above a working leader's.
- A fetch whose last epoch is older than every epoch left in the leader's log is answered with the
  snapshot id, not with the snapshot as a diverging epoch (KRaft): such a follower holds no entry of
  the snapshot's epoch to truncate to and would ask again for ever.
- Snapshots are counted in records, not bytes.
- A voter without quorum-state restores (above). KRaft's QuorumState.initialize reads a missing file
  as epoch 0 with no vote (and its early versions cleared an unreadable one), so with static voters
  a voter that lost its disk may vote again where it voted before.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from controller.leader_state import LeaderState, ParkedFetch
from controller.quorum_config import QuorumConfig
from controller.quorum_state import ElectionState, LogEnd
from controller.raft_log import FetchValidation, RaftLog
from controller.raft_messages import (
    BeginQuorumEpoch,
    CommittedEntry,
    Event,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    MessageBody,
    OffsetAndEpoch,
    ProposalCompletion,
    Propose,
    ProposeBatch,
    QuorumProbeRequest,
    QuorumProbeResponse,
    RaftError,
    Ready,
    Role,
    SnapshotCreated,
    SnapshotRestore,
    Tick,
    Unreachable,
    VoteRequest,
    VoteResponse,
)
from controller.snapshot import CorruptSnapshotError
from storage.errors import RecordTooLargeError, StorageError
from storage.records import iter_headers

APPLY_BATCH_MAX = 1000
# Followers whose leader refused stand election_backoff_max_ms // this apart ("A refused leader"):
# 100 ms by default (KRaft's election backoff base), several pre-vote and vote round trips on a
# loaded host, and a twentieth of the fetch timeout it replaces.
REFUSED_LEADER_SLOT_FRACTION = 10
NEVER_MS = 2**62


class StateMachine(Protocol):
    """What the Raft driver applies committed entries to (the metadata engineer's
    `ClusterMetadata`, or a test's list). Contract:

    - `apply(offset, epoch, data)`: apply one committed record, in offset order; `data` is the
      `Propose.data` (or one of `ProposeBatch.records`) that created it. Offsets increase but may
      skip (Raft's control records are not applied).
    - `snapshot() -> bytes`: the state after every applied record, to be restored later.
    - `restore(offset, data)`: replace the whole state with a snapshot's, which holds every record
      up to and including `offset`.
    - `last_applied_offset`: the offset of the last record applied or restored (-1: none).
    """

    last_applied_offset: int

    def apply(self, offset: int, epoch: int, data: bytes) -> None: ...

    def snapshot(self) -> bytes: ...

    def restore(self, offset: int, data: bytes) -> None: ...


class RandomSource(Protocol):
    """The slice of `random.Random` the core uses; the caller seeds it (no module-level random)."""

    def randint(self, a: int, b: int) -> int: ...

    def getrandbits(self, k: int) -> int: ...


@dataclass(slots=True)
class _Election:
    """A pre-vote or vote round: who granted, who refused, when to ask the silent ones again."""

    pre_vote: bool
    granted: set[int]
    rejected: set[int] = field(default_factory=set)
    resend_ms: int = NEVER_MS


@dataclass(frozen=True, slots=True)
class _InFlight:
    """The one Fetch or FetchSnapshot request a follower or observer waits for."""

    correlation_id: int
    destination_id: int
    sent_ms: int


@dataclass(slots=True)
class _SnapshotDownload:
    snapshot_id: OffsetAndEpoch
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class _Output:
    """The Ready under construction during one `handle` call."""

    must_sync: bool = False
    messages: list[Message] = field(default_factory=list)
    restore: SnapshotRestore | None = None
    committed: list[CommittedEntry] = field(default_factory=list)
    snapshot_request: OffsetAndEpoch | None = None
    completions: list[ProposalCompletion] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


class Raft:
    """One quorum member (voter or observer). See the theory of operation above.

    Built from the node id, the static `QuorumConfig`, the opened `RaftLog`, the persisted
    `ElectionState`, a seeded random source and the current time. Mutated only by `handle`.
    Readable state for drivers, tests and the simulator: `role`, `epoch`, `leader_id`,
    `voted_id`, `high_watermark`, `applied_offset`, `leader_ready`, `election_state`, `restoring`."""

    def __init__(self, node_id: int, config: QuorumConfig, log: RaftLog, election_state: ElectionState,
                 rng: RandomSource, now_ms: int) -> None:
        self.node_id = node_id
        self.config = config
        self.log = log
        self.is_voter = config.is_voter(node_id)
        self._rng = rng
        self._now_ms = now_ms
        self._other_voters = config.voter_ids - {node_id}
        self._state = election_state
        self._hard_state_dirty = False
        if not self.is_voter and election_state.restoration is not None:
            self._set_state(dataclasses.replace(election_state, restoration=None))  # an observer never votes
        self._out = _Output()
        self.role = Role.UNATTACHED
        self._deadline_ms = NEVER_MS
        self._election: _Election | None = None
        self._in_flight: _InFlight | None = None
        self._unreachable_id: int | None = None  # the voter whose connection failed last
        self._fetch_at_ms = now_ms
        self._leader_heard_ms = -NEVER_MS
        self._download: _SnapshotDownload | None = None
        self._leader: LeaderState | None = None
        self._next_correlation_id = rng.getrandbits(48)
        # One probe id per incarnation: an answer to an earlier incarnation's probe may predate the loss.
        self._probe_correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        self._probe_resend_ms = now_ms
        self._high_watermark_seen = log.high_watermark
        snapshot = log.snapshots.latest_id()
        self._applied_offset = log.log_start_offset
        self._applied_epoch = snapshot.epoch if snapshot is not None else 0
        self._records_since_snapshot = 0
        self._snapshot_pending: OffsetAndEpoch | None = None
        self._restore = SnapshotRestore(snapshot, log.snapshots.read(snapshot)) if snapshot is not None else None
        leader = election_state.leader_id
        if leader is not None and leader != node_id:
            self._enter_follower(leader)
        else:
            self._enter_unattached()

    # -- readable state ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def leader_id(self) -> int | None:
        return self._state.leader_id

    @property
    def voted_id(self) -> int | None:
        return self._state.voted_id

    @property
    def election_state(self) -> ElectionState:
        return self._state

    @property
    def restoring(self) -> bool:
        """This voter lost its state and may not vote yet as any other voter would: some other voter
        has not answered its probe, or its log is not yet as up to date as the log bound. (Its vote
        may stay limited to epochs above the epoch bound a while longer; that needs nothing more.)"""
        restoration = self._state.restoration
        return restoration is not None and (not restoration.is_complete(self._other_voters)
                                            or self._log_end() < restoration.log_bound)

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def leader_ready(self) -> bool:
        """This node leads and has applied its own epoch's first entry (the LeaderChange record):
        every entry of earlier epochs is committed and applied, so an active controller may take
        office on top of the state machine now (KRaft's controller waits for the same point)."""
        return self._leader is not None and self._applied_offset > self._leader.epoch_start_offset

    @property
    def applied_offset(self) -> int:
        """One past the last entry handed out in `Ready.committed` (or the restored snapshot)."""
        return self._applied_offset

    # -- the entry point --------------------------------------------------------------------------

    def handle(self, event: Event, now_ms: int) -> Ready:
        """Take one event at time `now_ms` (never earlier than the previous call's)."""
        assert now_ms >= self._now_ms, f"time went back: {self._now_ms} -> {now_ms} on node {self.node_id}"
        self._now_ms = now_ms
        self._out = _Output()
        if self._restore is not None:
            self._out.restore, self._restore = self._restore, None
        self._settle_restoration()
        if isinstance(event, Message):
            self._on_message(event)
        elif isinstance(event, Tick):
            self._on_tick()
        elif isinstance(event, Propose):
            self._on_propose(event.proposal_id, (event.data,))
        elif isinstance(event, ProposeBatch):
            self._on_propose(event.proposal_id, event.records)
        elif isinstance(event, SnapshotCreated):
            self._on_snapshot_created(event)
        elif isinstance(event, Unreachable):
            self._on_unreachable(event)
        else:
            raise TypeError(f"Raft.handle got {event!r}; events are Tick, Message, Propose, ProposeBatch, "
                            "SnapshotCreated, Unreachable")
        self._maybe_probe()
        self._deliver_committed()
        self._maybe_request_snapshot()
        self._check_invariants()
        return self._ready()

    def _ready(self) -> Ready:
        out = self._out
        hard_state = self._state if self._hard_state_dirty else None
        self._hard_state_dirty = False
        return Ready(
            hard_state=hard_state,
            must_sync=out.must_sync,
            messages=tuple(out.messages),
            restore=out.restore,
            committed=tuple(out.committed),
            snapshot_request=out.snapshot_request,
            completions=tuple(out.completions),
            refused=tuple(out.refused),
            next_tick_ms=self._next_tick_ms(),
        )

    def _next_tick_ms(self) -> int:
        deadlines = [self._deadline_ms]
        if self.role is Role.FOLLOWER or self._looks_for_leader:
            in_flight = self._in_flight  # a fetch left in flight in another role is not waited for
            timeout_ms = self.config.request_timeout_ms
            deadlines.append(self._fetch_at_ms if in_flight is None else in_flight.sent_ms + timeout_ms)
        if self._probe_pending:
            deadlines.append(self._probe_resend_ms)
        if self._election is not None:
            deadlines.append(self._election.resend_ms)
        if self._leader is not None:
            deadlines.append(self._leader.quorum_deadline_ms())
            deadlines.extend(parked.expires_ms for parked in self._leader.parked.values())
            deadlines.extend(self._leader.begin_epoch_sent_ms.get(voter, self._now_ms) + self._begin_epoch_interval_ms()
                             for voter in self._leader.voters_not_fetched())
        if self._applied_offset < self.log.high_watermark:
            deadlines.append(self._now_ms)
        return max(min(deadlines), self._now_ms)

    def _check_invariants(self) -> None:
        high_watermark = self.log.high_watermark
        assert high_watermark >= self._high_watermark_seen, (
            f"node {self.node_id}: high watermark fell {self._high_watermark_seen} -> {high_watermark}"
        )
        self._high_watermark_seen = high_watermark
        assert self._applied_offset <= high_watermark, f"applied {self._applied_offset} > HW {high_watermark}"
        assert high_watermark <= self.log.log_end_offset, f"HW {high_watermark} > LEO {self.log.log_end_offset}"
        if self.role is Role.LEADER:
            assert self._leader is not None, f"node {self.node_id} leads without LeaderState"
            assert self._leader.epoch == self.epoch, f"leader state epoch {self._leader.epoch} != {self.epoch}"
            assert self.leader_id == self.node_id, f"leader {self.node_id} records leader {self.leader_id}"
        else:
            assert self._leader is None, f"node {self.node_id} in role {self.role} keeps LeaderState"
        if self.role is Role.FOLLOWER:
            assert self.leader_id is not None, f"follower {self.node_id} without a leader in epoch {self.epoch}"
            assert self.leader_id != self.node_id, f"follower {self.node_id} follows itself"
        if self.role is Role.CANDIDATE:
            assert self.voted_id == self.node_id, f"candidate {self.node_id} voted for {self.voted_id}"
        if self.role in (Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER):
            restoration = self._state.restoration
            assert restoration is None or restoration.is_complete(self._other_voters), (
                f"node {self.node_id} is {self.role.value} before every voter answered its probe: {restoration}"
            )

    # -- state changes ----------------------------------------------------------------------------

    def _set_state(self, state: ElectionState) -> None:
        """Change the hard state; the next Ready asks to persist it before sending anything."""
        old = self._state
        assert state.epoch >= old.epoch, f"node {self.node_id}: epoch fell {old.epoch} -> {state.epoch}"
        if state.epoch == old.epoch and old.voted_id is not None:
            assert state.voted_id == old.voted_id, (
                f"node {self.node_id}: second vote in epoch {old.epoch}: {old.voted_id} -> {state.voted_id}"
            )
        elif state.voted_id is not None and state.restoration is not None:
            assert state.restoration.allows_vote_in(self._other_voters, state.epoch), (
                f"node {self.node_id}: vote for {state.voted_id} in epoch {state.epoch} while {state.restoration}"
            )
        if state != old:
            self._state = state
            self._hard_state_dirty = True

    def _leave_role(self) -> None:
        """Drop what belonged to the current role; a leader fails its pending proposals."""
        leader = self._leader
        self._leader = None
        self._election = None
        self._in_flight = None
        self._download = None
        if leader is not None:
            for proposal_id in leader.pending.values():
                self._complete_with_error(proposal_id, RaftError.NOT_LEADER_OR_FOLLOWER)

    def _become_unattached(self, epoch: int) -> None:
        """Move to `epoch` (or stay in it) with no known leader; a same-epoch vote is kept."""
        voted = self._state.voted_id if epoch == self.epoch else None
        self._leave_role_to(self._state_with(epoch, voted, None))
        self._enter_unattached()

    def _enter_unattached(self) -> None:
        self.role = Role.UNATTACHED
        if self.is_voter:
            self._deadline_ms = self._now_ms + self._randomized_election_timeout_ms()
        else:
            self._deadline_ms = NEVER_MS
        self._fetch_at_ms = self._now_ms

    def _become_follower(self, epoch: int, leader_id: int) -> None:
        assert leader_id != self.node_id, f"node {self.node_id} cannot follow itself (epoch {epoch})"
        voted = self._state.voted_id if epoch == self.epoch else None
        self._leave_role_to(self._state_with(epoch, voted, leader_id))
        self._enter_follower(leader_id)
        self._maybe_send_fetch()

    def _enter_follower(self, leader_id: int) -> None:
        """Follow `leader_id`. Only the leader itself (a fetch answer, BeginQuorumEpoch) counts as
        having heard from it: a follower that learned the leader from hearsay (a vote response, a
        restart) must not refuse pre-votes on its behalf, or two voters that each heard of a dead
        leader from the other would refuse each other for ever."""
        self.role = Role.FOLLOWER
        self._deadline_ms = self._now_ms + self.config.fetch_timeout_ms
        self._fetch_at_ms = self._now_ms

    def _leave_role_to(self, state: ElectionState) -> None:
        """Set the new hard state, then leave the old role (so failed proposals name the new leader)."""
        self._set_state(state)
        self._leave_role()

    def _state_with(self, epoch: int, voted_id: int | None, leader_id: int | None) -> ElectionState:
        """The hard state with these values and the restoration kept."""
        return ElectionState(epoch, voted_id, leader_id, self._state.restoration)

    def _become_prospective(self) -> None:
        """KIP-996: ask for pre-votes in the current epoch; nothing is persisted."""
        assert self.is_voter, f"observer {self.node_id} cannot stand for election"
        self._leave_role_to(self._state_with(self.epoch, self.voted_id, None))
        self.role = Role.PROSPECTIVE
        self._start_election(pre_vote=True)

    def _become_candidate(self) -> None:
        """Bump the epoch and vote for ourselves (persisted before the vote requests leave)."""
        assert self.role is Role.PROSPECTIVE, f"node {self.node_id} stands from {self.role}, not after a pre-vote"
        self._leave_role_to(self._state_with(self.epoch + 1, self.node_id, None))
        self.role = Role.CANDIDATE
        self._start_election(pre_vote=False)

    def _start_election(self, pre_vote: bool) -> None:
        self._election = _Election(pre_vote=pre_vote, granted={self.node_id})
        self._deadline_ms = self._now_ms + self._randomized_election_timeout_ms()
        self._send_vote_requests()
        self._count_votes()

    def _become_leader(self) -> None:
        assert self.role is Role.CANDIDATE, f"node {self.node_id} leads from {self.role}"
        self._leave_role_to(self._state_with(self.epoch, self.node_id, self.node_id))
        self.role = Role.LEADER
        self._deadline_ms = NEVER_MS
        payload = json.dumps({"leaderId": self.node_id, "epoch": self.epoch,
                              "voters": sorted(self.config.voter_ids)}).encode()
        info = self.log.append_leader_change(payload, self.epoch, self._now_ms)
        self._out.must_sync = True
        self._leader = LeaderState(self.node_id, self.epoch, info.first_offset, self.config.voter_ids,
                                   check_quorum_timeout_ms=self.config.fetch_timeout_ms * 3 // 2,
                                   elected_ms=self._now_ms)
        self._leader.update_local_end_offset(self.log.log_end_offset)
        for voter in self._leader.voters_not_fetched():
            self._send_begin_quorum_epoch(voter)
        self._maybe_advance_high_watermark()

    def _maybe_adopt_epoch(self, epoch: int, leader_id: int | None) -> bool:
        """Raft's term rule: a higher epoch in any message moves us there. True if we moved."""
        if epoch <= self.epoch:
            return False
        if leader_id is not None and leader_id != self.node_id:
            self._become_follower(epoch, leader_id)
        else:
            self._become_unattached(epoch)
        return True

    def _randomized_election_timeout_ms(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self._rng.randint(0, timeout)

    # -- dispatch ---------------------------------------------------------------------------------

    def _on_message(self, message: Message) -> None:
        assert message.destination_id == self.node_id, f"message for {message.destination_id} at {self.node_id}"
        body = message.body
        handler = self._HANDLERS.get(type(body))
        if handler is None:
            raise TypeError(f"node {self.node_id} got an unknown message body {body!r}")
        handler(self, message.source_id, body)

    def _send(self, destination_id: int, body: MessageBody) -> None:
        assert destination_id != self.node_id, f"node {self.node_id} sends {body!r} to itself"
        self._out.messages.append(Message(self.node_id, destination_id, body))

    def _on_tick(self) -> None:
        if self.role is Role.LEADER:
            self._leader_tick()
        elif self.role is Role.FOLLOWER:
            self._follower_tick()
        elif self.role in (Role.PROSPECTIVE, Role.CANDIDATE):
            self._election_tick()
        elif self._now_ms >= self._deadline_ms:
            self._on_election_timeout()
        else:
            self._maybe_send_fetch()

    def _on_election_timeout(self) -> None:
        """No leader for a while: stand (a KIP-996 pre-vote first); an observer, or a voter that may
        not stand yet (it restores), looks for the leader instead, as an observer does."""
        if self._may_stand():
            self._become_prospective()
        else:
            self._become_unattached(self.epoch)
            self._maybe_send_fetch()

    # -- elections --------------------------------------------------------------------------------

    def _send_vote_requests(self) -> None:
        election = self._election
        assert election is not None, f"node {self.node_id} sends votes outside an election"
        end = self.log.end_offset_and_epoch()
        request = VoteRequest(self.epoch, self.node_id, end.epoch, end.offset, election.pre_vote)
        for voter in sorted(self.config.voter_ids - election.granted - election.rejected):
            self._send(voter, request)
        election.resend_ms = self._now_ms + self.config.request_timeout_ms

    def _election_tick(self) -> None:
        election = self._election
        assert election is not None, f"node {self.node_id} in {self.role} without an election"
        if self._now_ms >= self._deadline_ms:
            self._on_election_timeout()
        elif self._now_ms >= election.resend_ms:
            self._send_vote_requests()

    def _on_vote_request(self, source_id: int, request: VoteRequest) -> None:
        if not self.is_voter or not self.config.is_voter(source_id) or source_id != request.candidate_id:
            self._send(source_id, VoteResponse(self.epoch, self.leader_id, False, request.pre_vote,
                                               RaftError.INCONSISTENT_VOTER_SET))
            return
        if request.epoch > self.epoch:
            # Raft's term rule, for pre-votes too: a prospective at a higher epoch proves that an
            # election of that epoch happened; an isolated node never bumps, so it disrupts nothing.
            self._become_unattached(request.epoch)
        granted = request.epoch == self.epoch and (
            self._may_grant_pre_vote(request) if request.pre_vote else self._may_grant_vote(request))
        if granted and not request.pre_vote:
            self._set_state(self._state_with(self.epoch, request.candidate_id, None))
            self._deadline_ms = self._now_ms + self._randomized_election_timeout_ms()
        self._send(source_id, VoteResponse(self.epoch, self.leader_id, granted, request.pre_vote))

    def _candidate_log_is_current(self, request: VoteRequest) -> bool:
        return OffsetAndEpoch(request.last_epoch, request.last_end_offset) >= self.log.end_offset_and_epoch()

    def _may_grant_vote(self, request: VoteRequest) -> bool:
        if self.role in (Role.LEADER, Role.FOLLOWER):
            return False
        if self.voted_id is not None and self.voted_id != request.candidate_id:
            return False
        return self._candidate_log_is_current(request) and self._may_vote(
            request.epoch, (request.last_epoch, request.last_end_offset))

    def _may_grant_pre_vote(self, request: VoteRequest) -> bool:
        """KIP-996: refuse while we have a leader we heard from within the fetch timeout, and where
        the vote that follows would be refused (a restoring voter's bounds, for epoch + 1)."""
        if self.role is Role.LEADER:
            return False
        if self.role is Role.FOLLOWER and self._now_ms < self._leader_heard_ms + self.config.fetch_timeout_ms:
            return False
        return self._candidate_log_is_current(request) and self._may_vote(
            request.epoch + 1, (request.last_epoch, request.last_end_offset))

    def _on_vote_response(self, source_id: int, response: VoteResponse) -> None:
        if self._maybe_adopt_epoch(response.epoch, response.leader_id):
            return
        election = self._election
        if election is None or response.epoch != self.epoch or response.pre_vote != election.pre_vote:
            return
        if not self.config.is_voter(source_id):
            return
        if response.vote_granted:
            election.granted.add(source_id)
        else:
            election.rejected.add(source_id)
            if response.leader_id is not None and response.leader_id != self.node_id:
                # KIP-996: a voter that still follows a leader of our epoch tells us who; follow it.
                self._become_follower(self.epoch, response.leader_id)
                return
        self._count_votes()

    def _count_votes(self) -> None:
        election = self._election
        assert election is not None, f"node {self.node_id} counts votes outside an election"
        if len(election.granted) >= self.config.majority:
            if election.pre_vote:
                self._become_candidate()
            else:
                self._become_leader()
        elif len(self.config.voter_ids) - len(election.rejected) < self.config.majority:
            # Lost: retry after a random backoff rather than the whole election timeout (KRaft).
            backoff_ms = self._rng.randint(0, self.config.election_backoff_max_ms)
            self._deadline_ms = min(self._deadline_ms, self._now_ms + backoff_ms)
            election.resend_ms = NEVER_MS

    def _on_begin_quorum_epoch(self, source_id: int, request: BeginQuorumEpoch) -> None:
        if source_id != request.leader_id or request.epoch < self.epoch:
            return
        if request.epoch == self.epoch and (self.role is Role.LEADER
                                            or self.leader_id not in (None, request.leader_id)):
            # A second leader of an epoch this node knows the leader of: no correct peer claims
            # that, so it is a peer's error (or a forgery), not this node's; ignored. Election
            # safety itself is checked over whole runs by the quorum simulation.
            return
        if request.epoch > self.epoch or self.role is not Role.FOLLOWER:
            self._become_follower(request.epoch, request.leader_id)
        self._leader_heard_ms = self._now_ms

    # -- leader -----------------------------------------------------------------------------------

    def _leader_tick(self) -> None:
        leader = self._leader
        assert leader is not None, f"leader {self.node_id} without LeaderState"
        if not leader.has_quorum(self._now_ms):
            # Check-quorum: resign; keep the epoch and our vote, forget that we led.
            self._become_unattached(self.epoch)
            return
        self._answer_parked_fetches()
        interval_ms = self._begin_epoch_interval_ms()
        for voter in leader.voters_not_fetched():
            if self._now_ms >= leader.begin_epoch_sent_ms.get(voter, -NEVER_MS) + interval_ms:
                self._send_begin_quorum_epoch(voter)

    def _begin_epoch_interval_ms(self) -> int:
        return max(self.config.fetch_timeout_ms // 2, 1)

    def _send_begin_quorum_epoch(self, voter: int) -> None:
        assert self._leader is not None, f"node {self.node_id} announces an epoch it does not lead"
        self._leader.begin_epoch_sent_ms[voter] = self._now_ms
        self._send(voter, BeginQuorumEpoch(self.epoch, self.node_id))

    def _on_propose(self, proposal_id: int, records: tuple[bytes, ...]) -> None:
        """Append the records of one proposal as one batch (see `ProposeBatch`)."""
        assert records, f"proposal {proposal_id} without records"
        leader = self._leader
        if leader is None:
            self._complete_with_error(proposal_id, RaftError.NOT_LEADER_OR_FOLLOWER)
            return
        if len(leader.pending) >= self.config.proposals_pending_max:
            self._complete_with_error(proposal_id, RaftError.THROTTLING_QUOTA_EXCEEDED)
            return
        try:
            info = self.log.append_batch_as_leader(records, self.epoch, self._now_ms)
        except RecordTooLargeError:
            self._complete_with_error(proposal_id, RaftError.RECORD_TOO_LARGE)
            return
        self._out.must_sync = True
        leader.pending[info.last_offset] = proposal_id
        if info.first_offset != info.last_offset:
            leader.first_offsets[info.last_offset] = info.first_offset
        leader.update_local_end_offset(self.log.log_end_offset)
        self._maybe_advance_high_watermark()
        self._answer_parked_fetches()

    def _complete_with_error(self, proposal_id: int, error: RaftError) -> None:
        leader_epoch = self.epoch if self.leader_id is not None else -1
        self._out.completions.append(
            ProposalCompletion(proposal_id, error, leader_id=self.leader_id, leader_epoch=leader_epoch))

    def _maybe_advance_high_watermark(self) -> None:
        leader = self._leader
        assert leader is not None, f"node {self.node_id} commits without leading"
        candidate = leader.high_watermark_candidate()
        if candidate is None or candidate <= self.log.high_watermark:
            return
        assert candidate <= self.log.log_end_offset, f"HW candidate {candidate} > LEO {self.log.log_end_offset}"
        self.log.log.maybe_increment_high_watermark(candidate)
        self._answer_parked_fetches()

    def _leader_request_error(self, epoch: int) -> RaftError | None:
        """KRaft's validateLeaderOnlyRequest."""
        if epoch < self.epoch:
            return RaftError.FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            return RaftError.UNKNOWN_LEADER_EPOCH
        if self.role is not Role.LEADER:
            return RaftError.NOT_LEADER_OR_FOLLOWER
        return None

    def _on_fetch_request(self, source_id: int, request: FetchRequest) -> None:
        error = self._leader_request_error(request.epoch)
        if error is not None:
            self._send(source_id, self._fetch_response(request, error))
            return
        leader = self._leader
        assert leader is not None, f"node {self.node_id} answers a fetch without leading"
        # A restoring voter's fetch is served as an observer's, and counted neither towards commit
        # nor for check-quorum (`_fetch_counts`).
        replica = None if request.restoring else leader.record_fetch(source_id, self._now_ms)
        position = self.log.validate_offset_and_epoch(request.fetch_offset, request.last_fetched_epoch)
        if position.kind is FetchValidation.DIVERGING:
            self._send(source_id, self._fetch_response(request, diverging_epoch=position.offset_and_epoch))
            return
        if position.kind is FetchValidation.SNAPSHOT:
            self._send(source_id, self._fetch_response(request, snapshot_id=position.offset_and_epoch))
            return
        leader.parked.pop(source_id, None)
        if replica is not None:
            replica.end_offset = request.fetch_offset
            if source_id in leader.voters:
                self._maybe_advance_high_watermark()
        nothing_new = (request.fetch_offset >= self.log.log_end_offset
                       and request.high_watermark >= self.log.high_watermark)
        if nothing_new and self.config.fetch_max_wait_ms > 0:
            leader.parked[source_id] = ParkedFetch(source_id, request, self._now_ms + self.config.fetch_max_wait_ms,
                                                   self.log.high_watermark)
            return
        self._send_records(source_id, request)

    def _send_records(self, source_id: int, request: FetchRequest) -> None:
        records = b""
        if request.fetch_offset < self.log.log_end_offset:
            records = self.log.read(request.fetch_offset, min(request.max_bytes, self.config.fetch_bytes_max))
        self._send(source_id, self._fetch_response(request, records=records))

    def _answer_parked_fetches(self) -> None:
        leader = self._leader
        assert leader is not None, f"node {self.node_id} has parked fetches without leading"
        for source_id, parked in list(leader.parked.items()):
            if (self.log.log_end_offset > parked.request.fetch_offset
                    or self.log.high_watermark > parked.high_watermark or self._now_ms >= parked.expires_ms):
                del leader.parked[source_id]
                self._send_records(source_id, parked.request)

    def _fetch_response(self, request: FetchRequest, error: RaftError = RaftError.NONE, records: bytes = b"",
                        diverging_epoch: OffsetAndEpoch | None = None,
                        snapshot_id: OffsetAndEpoch | None = None) -> FetchResponse:
        return FetchResponse(
            self.epoch, self.leader_id, error, request.correlation_id, request.fetch_offset,
            request.last_fetched_epoch, self.log.high_watermark, self.log.log_start_offset, records,
            diverging_epoch, snapshot_id,
        )

    def _on_fetch_snapshot_request(self, source_id: int, request: FetchSnapshotRequest) -> None:
        error = self._leader_request_error(request.epoch)
        snapshot_id = request.snapshot_id
        if error is None:
            assert self._leader is not None, f"node {self.node_id} serves a snapshot without leading"
            if not request.restoring:
                self._leader.record_fetch(source_id, self._now_ms)
            if snapshot_id not in self.log.snapshots.ids():
                error = RaftError.SNAPSHOT_NOT_FOUND
            elif not 0 <= request.position < self.log.snapshots.size(snapshot_id):
                error = RaftError.POSITION_OUT_OF_RANGE
        if error is not None:
            self._send(source_id, FetchSnapshotResponse(self.epoch, self.leader_id, error, request.correlation_id,
                                                        snapshot_id, request.position))
            return
        max_bytes = max(1, min(request.max_bytes, self.config.fetch_bytes_max))
        chunk = self.log.snapshots.read_chunk(snapshot_id, request.position, max_bytes)
        self._send(source_id, FetchSnapshotResponse(
            self.epoch, self.node_id, RaftError.NONE, request.correlation_id, snapshot_id, request.position,
            self.log.snapshots.size(snapshot_id), chunk))

    # -- follower and observer --------------------------------------------------------------------

    def _follower_tick(self) -> None:
        if self._now_ms >= self._deadline_ms:
            self._on_election_timeout()  # fetch timeout: the leader is gone (or we are cut off)
            return
        self._maybe_send_fetch()

    def _maybe_send_fetch(self) -> None:
        """Send the next Fetch (or FetchSnapshot) unless one is in flight or we are backing off."""
        in_flight = self._in_flight
        if in_flight is not None and self._now_ms < in_flight.sent_ms + self.config.request_timeout_ms:
            return
        if self._now_ms < self._fetch_at_ms:
            return
        if self.role is Role.FOLLOWER:
            destination = self.leader_id
        elif self._looks_for_leader:
            voters = sorted(self._other_voters - {self._unreachable_id}) or sorted(self._other_voters)
            destination = voters[self._rng.randint(0, len(voters) - 1)]
        else:
            return
        assert destination is not None, f"node {self.node_id} fetches from nobody"
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        self._in_flight = _InFlight(correlation_id, destination, self._now_ms)
        max_bytes = self.config.fetch_bytes_max
        if self._download is not None:
            body: MessageBody = FetchSnapshotRequest(self.epoch, self.node_id, self._download.snapshot_id,
                                                     len(self._download.data), max_bytes, correlation_id,
                                                     not self._fetch_counts())
        else:
            body = FetchRequest(self.epoch, self.node_id, self.log.log_end_offset, self.log.last_fetched_epoch(),
                                max_bytes, correlation_id, self.log.high_watermark, not self._fetch_counts())
        self._send(destination, body)

    def _on_unreachable(self, event: Unreachable) -> None:
        """The awaited fetch never arrived: retry after the backoff, and when looking for the
        leader, ask another voter than this one (Kafka backs off per node); a refusal by our leader
        means it is gone ("A refused leader"). A quorum probe that
        never arrived is sent again after the backoff: a voter without state may not vote until
        every other voter has answered, so a probe lost to a peer still starting must not wait a
        request timeout (the peer may be gone by then, and the quorum with it)."""
        if event.correlation_id == self._probe_correlation_id and self._probe_pending:
            self._probe_resend_ms = min(self._probe_resend_ms, self._now_ms + self.config.retry_backoff_ms)
            return
        if not self._awaited(event.destination_id, event.correlation_id):
            return
        self._unreachable_id = event.destination_id
        self._fetch_at_ms = self._now_ms + self.config.retry_backoff_ms
        if event.refused and self.role is Role.FOLLOWER and event.destination_id == self.leader_id:
            self._lose_refused_leader()

    def _lose_refused_leader(self) -> None:
        """Our leader refused the connection ("A refused leader"): no longer heard from, and the
        fetch timeout cut to one slot per voter (other than the leader) with a lower id than ours;
        a leader refusing again does not move it."""
        self._leader_heard_ms = -NEVER_MS
        below = [voter for voter in self._other_voters if voter < self.node_id and voter != self.leader_id]
        rank = len(below) if self.is_voter else 0  # an observer only looks for the new leader
        slot_ms = self.config.election_backoff_max_ms // REFUSED_LEADER_SLOT_FRACTION
        self._deadline_ms = min(self._deadline_ms, self._now_ms + rank * slot_ms)

    def _awaited(self, source_id: int, correlation_id: int) -> bool:
        """Is this the answer to the request we wait for? If so, stop waiting."""
        in_flight = self._in_flight
        if in_flight is None or in_flight.correlation_id != correlation_id or in_flight.destination_id != source_id:
            return False
        self._in_flight = None
        return True

    def _answers_current_position(self, source_id: int, response: FetchResponse) -> bool:
        """A late answer (to a request we gave up on) is as good as the awaited one if it is from our
        leader in our epoch for exactly our current position: within one epoch the leader's answer
        to a position never changes. This keeps followers going when round trips exceed the request
        timeout."""
        return (self.role is Role.FOLLOWER and source_id == self.leader_id and response.epoch == self.epoch
                and response.error is RaftError.NONE and self._download is None
                and response.fetch_offset == self.log.log_end_offset
                and response.last_fetched_epoch == self.log.last_fetched_epoch())

    def _moves(self, response: FetchResponse) -> bool:
        """Does acting on this answer change anything? A late answer is acted on only then: otherwise
        duplicated empty answers would each start another fetch, and the number of fetches in flight
        would grow without bound."""
        return (bool(response.records) or response.diverging_epoch is not None or response.snapshot_id is not None
                or min(response.high_watermark, self.log.log_end_offset) > self.log.high_watermark)

    def _fetch_succeeded(self) -> None:
        self._unreachable_id = None
        self._leader_heard_ms = self._now_ms
        self._deadline_ms = self._now_ms + self.config.fetch_timeout_ms
        self._fetch_at_ms = self._now_ms

    def _on_fetch_error(self, source_id: int, epoch: int, leader_id: int | None) -> None:
        """An error answer to our fetch: follow the leader it names, or back off and retry."""
        if self._maybe_adopt_epoch(epoch, leader_id):
            return
        known = leader_id is not None and leader_id != self.node_id
        if epoch == self.epoch and known and (self.role is not Role.FOLLOWER or self.leader_id != leader_id):
            assert leader_id is not None, "checked by known"
            self._become_follower(epoch, leader_id)
            return
        self._fetch_at_ms = self._now_ms + self.config.retry_backoff_ms

    def _on_fetch_response(self, source_id: int, response: FetchResponse) -> None:
        if not self._awaited(source_id, response.correlation_id):
            if not self._answers_current_position(source_id, response):
                return
            self._fetch_succeeded()  # a late answer still proves that our leader is there
            if not self._moves(response):
                return
            self._in_flight = None
        if response.error is not RaftError.NONE:
            self._on_fetch_error(source_id, response.epoch, response.leader_id)
            return
        if self.role is not Role.FOLLOWER or response.epoch != self.epoch:
            # An observer that asked a random voter reached the leader itself: follow it, fetch again.
            if not self._maybe_adopt_epoch(response.epoch, source_id) and response.epoch == self.epoch:
                self._become_follower(self.epoch, source_id)
            return
        problem = self._fetch_answer_problem(response)
        if problem is None and response.records and response.diverging_epoch is None and response.snapshot_id is None:
            try:
                self.log.append_as_follower(response.records, self._now_ms)
                self._out.must_sync = True
            except StorageError as error:
                problem = f"its records were refused: {error}"
        if problem is not None:
            self._out.refused.append(f"fetch answer from {source_id} in epoch {response.epoch} ignored: {problem}")
            self._fetch_at_ms = self._now_ms + self.config.retry_backoff_ms
            return
        self._fetch_succeeded()
        if response.diverging_epoch is not None:
            self.log.truncate_to_end_offset(response.diverging_epoch, self._now_ms)
        elif response.snapshot_id is not None:
            self._download = _SnapshotDownload(response.snapshot_id)
        if response.diverging_epoch is None and response.snapshot_id is None:
            moved = self._follow_high_watermark(response.high_watermark)
            if not response.records and not moved and self.config.fetch_max_wait_ms == 0:
                # Nothing new and the leader does not park fetches: pause rather than spin.
                self._fetch_at_ms = self._now_ms + self.config.retry_backoff_ms
        self._maybe_send_fetch()

    def _fetch_answer_problem(self, response: FetchResponse) -> str | None:
        """Why our leader's answer cannot be one (a correct leader's never is), or None. Checked
        here, against this node's log, because the envelope cannot know it."""
        log = self.log
        if response.fetch_offset != log.log_end_offset:
            return f"it answers offset {response.fetch_offset}, the log ends at {log.log_end_offset}"
        if response.diverging_epoch is not None:
            point = log.truncation_point(response.diverging_epoch)
            if point < log.high_watermark:
                return (f"its diverging epoch {response.diverging_epoch} would cut committed entries below the "
                        f"high watermark {log.high_watermark}")
            return None
        if response.snapshot_id is not None:
            if response.snapshot_id.offset < log.high_watermark or response.snapshot_id.epoch > response.epoch:
                return f"its snapshot {response.snapshot_id} lies below the high watermark or after its epoch"
            return None
        previous = log.last_fetched_epoch()
        expected = log.log_end_offset
        try:
            for _, header in iter_headers(response.records):
                epoch = header.partition_leader_epoch
                if header.base_offset != expected or not previous <= epoch <= response.epoch:
                    return (f"a batch at {header.base_offset} of epoch {epoch} does not continue the log at "
                            f"{expected} (epoch {previous}) in leader epoch {response.epoch}")
                previous, expected = epoch, header.next_offset
        except StorageError as error:
            return f"its records do not parse: {error}"
        if response.records and expected == log.log_end_offset:
            return "its records hold no whole batch"
        return None

    def _fetch_counts(self) -> bool:
        """May the leader count this voter's fetches (towards commit, for check-quorum)? Not while it
        restores, until every other voter has answered its probe and it follows a leader of an
        epoch at least the largest they reported: before that it may be following a leader deposed
        in an epoch it had itself joined, whose entries its acknowledgement would then commit over
        committed ones (quorum seed 530201574: a wiped voter's fetches let the isolated leader of
        epoch 1 commit over the LeaderChange epoch 2 had committed with that voter's lost copy)."""
        restoration = self._state.restoration
        return restoration is None or (restoration.is_complete(self._other_voters)
                                       and self.epoch >= restoration.epoch_bound)

    def _follow_high_watermark(self, leader_high_watermark: int) -> bool:
        """Take the leader's HW, bounded by our log end; True if ours moved."""
        target = min(leader_high_watermark, self.log.log_end_offset)
        if target <= self.log.high_watermark:
            return False
        self.log.log.maybe_increment_high_watermark(target)
        return True

    def _on_fetch_snapshot_response(self, source_id: int, response: FetchSnapshotResponse) -> None:
        if not self._awaited(source_id, response.correlation_id):
            return
        download = self._download
        if response.error is not RaftError.NONE or download is None or self.role is not Role.FOLLOWER:
            self._download = None
            if response.error is not RaftError.NONE:
                self._on_fetch_error(source_id, response.epoch, response.leader_id)
            return
        if response.snapshot_id != download.snapshot_id or response.position != len(download.data):
            self._out.refused.append(
                f"snapshot chunk from {source_id} ignored: it is of {response.snapshot_id} at byte "
                f"{response.position}, the download is of {download.snapshot_id} at byte {len(download.data)}")
            self._fetch_at_ms = self._now_ms + self.config.retry_backoff_ms
            return
        self._fetch_succeeded()
        download.data += response.data
        if len(download.data) >= response.size or not response.data:
            self._install_snapshot(download)
        self._maybe_send_fetch()

    def _install_snapshot(self, download: _SnapshotDownload) -> None:
        self._download = None
        snapshot_id = download.snapshot_id
        assert self._applied_offset <= snapshot_id.offset, f"applied {self._applied_offset} past {snapshot_id}"
        try:
            data = self.log.install_snapshot(snapshot_id, bytes(download.data), self._now_ms)
        except CorruptSnapshotError:
            return  # damaged in transit: fetch again, the leader answers with the snapshot id again
        self._out.restore = SnapshotRestore(snapshot_id, data)
        self._applied_offset = snapshot_id.offset
        self._applied_epoch = snapshot_id.epoch
        self._records_since_snapshot = 0
        self._snapshot_pending = None

    # -- applying and snapshots -------------------------------------------------------------------

    def _deliver_committed(self) -> None:
        """Hand out committed entries (bounded per Ready) and complete the proposals they carry."""
        out = self._out
        while self._applied_offset < self.log.high_watermark and len(out.committed) < APPLY_BATCH_MAX:
            entries = self.log.read_committed(self._applied_offset, APPLY_BATCH_MAX - len(out.committed))
            assert entries, f"node {self.node_id}: no entries at {self._applied_offset} < HW {self.log.high_watermark}"
            assert entries[0].offset == self._applied_offset, f"{entries[0].offset} != {self._applied_offset}"
            out.committed.extend(entries)
            self._applied_offset = entries[-1].offset + 1
            self._applied_epoch = entries[-1].epoch
            self._records_since_snapshot += len(entries)
        leader = self._leader
        if leader is None:
            return
        for offset in [offset for offset in leader.pending if offset < self._applied_offset]:
            first_offset = leader.first_offsets.pop(offset, offset)
            out.completions.append(ProposalCompletion(leader.pending.pop(offset), RaftError.NONE, first_offset,
                                                      self.epoch, self.node_id, self.epoch))

    def _maybe_request_snapshot(self) -> None:
        if self._snapshot_pending is not None or self._records_since_snapshot < self.config.snapshot_interval_records:
            return
        if self._applied_offset <= self.log.log_start_offset:
            return
        self._snapshot_pending = OffsetAndEpoch(self._applied_epoch, self._applied_offset)
        self._out.snapshot_request = self._snapshot_pending

    def _on_snapshot_created(self, event: SnapshotCreated) -> None:
        if event.snapshot_id != self._snapshot_pending:
            return  # superseded (an installed snapshot) or not ours
        self._snapshot_pending = None
        if event.snapshot_id.offset <= self.log.log_start_offset:
            return
        self.log.create_snapshot(event.snapshot_id, event.data, self._now_ms)
        self._records_since_snapshot = self._applied_offset - event.snapshot_id.offset

    # -- a voter without state -------------------------------------------------------------------

    def _log_end(self) -> LogEnd:
        end = self.log.end_offset_and_epoch()
        return end.epoch, end.offset

    def _may_vote(self, epoch: int, log_end: LogEnd) -> bool:
        """May this voter vote in `epoch` for a log ending at `log_end`? Always, unless it restores."""
        restoration = self._state.restoration
        return restoration is None or restoration.allows_vote(self._other_voters, epoch, log_end)

    def _may_stand(self) -> bool:
        """May this node stand for election (vote for itself in the next epoch)?"""
        return self.is_voter and self._may_vote(self.epoch + 1, self._log_end())

    @property
    def _looks_for_leader(self) -> bool:
        """Without a leader, observers and voters that may not stand fetch from a random voter,
        whose answer names the leader."""
        return self.role is Role.UNATTACHED and not self._may_stand()

    @property
    def _probe_pending(self) -> bool:
        restoration = self._state.restoration
        return restoration is not None and not restoration.is_complete(self._other_voters)

    def _maybe_probe(self) -> None:
        """Ask the voters that have not answered yet; again every request timeout until they have."""
        restoration = self._state.restoration
        if restoration is None or not self._probe_pending or self._now_ms < self._probe_resend_ms:
            return
        for voter in sorted(self._other_voters - restoration.answered):
            self._send(voter, QuorumProbeRequest(self._probe_correlation_id))
        self._probe_resend_ms = self._now_ms + self.config.request_timeout_ms

    def _settle_restoration(self) -> None:
        """Drop the bounds a restored voter no longer needs. Called first in `handle`, where the
        epoch and the log are durable (the driver performed the previous Ready): the file must keep
        a bound until the durable state makes it redundant, or a crash would lose it."""
        restoration = self._state.restoration
        if restoration is None or not restoration.is_complete(self._other_voters):
            return
        settled = restoration.settled(self.epoch, self._log_end())
        if settled != restoration:
            self._set_state(dataclasses.replace(self._state, restoration=settled))

    def _on_quorum_probe_request(self, source_id: int, request: QuorumProbeRequest) -> None:
        """Answer with our own epoch and log end, both durable before the answer leaves (Ready order)."""
        last_epoch, last_end_offset = self._log_end()
        self._send(source_id, QuorumProbeResponse(self.epoch, self.leader_id, last_epoch, last_end_offset,
                                                  request.correlation_id))

    def _on_quorum_probe_response(self, source_id: int, response: QuorumProbeResponse) -> None:
        restoration = self._state.restoration
        if (restoration is not None and source_id in self._other_voters
                and response.correlation_id == self._probe_correlation_id):
            learned = restoration.learn(source_id, response.epoch, (response.last_epoch, response.last_end_offset))
            self._set_state(dataclasses.replace(self._state, restoration=learned))
        if self._maybe_adopt_epoch(response.epoch, response.leader_id):
            return
        leader_id = response.leader_id
        if response.epoch == self.epoch and self.role is Role.UNATTACHED and leader_id not in (None, self.node_id):
            assert leader_id is not None, "checked above"
            self._become_follower(self.epoch, leader_id)

    _HANDLERS: ClassVar[dict[type, Callable[..., None]]] = {
        VoteRequest: _on_vote_request,
        VoteResponse: _on_vote_response,
        BeginQuorumEpoch: _on_begin_quorum_epoch,
        FetchRequest: _on_fetch_request,
        FetchResponse: _on_fetch_response,
        FetchSnapshotRequest: _on_fetch_snapshot_request,
        FetchSnapshotResponse: _on_fetch_snapshot_response,
        QuorumProbeRequest: _on_quorum_probe_request,
        QuorumProbeResponse: _on_quorum_probe_response,
    }
