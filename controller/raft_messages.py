"""What goes into and comes out of the Raft core: events, messages, errors and `Ready`.

Everything here is a frozen dataclass (h11's `_events.py` shape): the core reads them and never
mutates them; the node encodes them at the edge. Field names follow KIP-595's RPCs (Vote,
BeginQuorumEpoch, Fetch) and KIP-630's FetchSnapshot, in snake_case; QuorumProbe is ours (a voter
that lost its state asks before it votes again). Epochs are Raft terms.

Inputs (`Event`): `Tick`, a received `Message`, `Propose`, `ProposeBatch`, `SnapshotCreated`.
Outputs: one `Ready` per `Raft.handle` call; its docstring fixes the order of the work.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from controller.quorum_state import ElectionState


class RaftError(IntEnum):
    """Errors the quorum can answer, with Kafka's names and numeric codes.

    The node maps these by name to the wire's `ErrorCode` (`wire/error_codes.py`)."""

    NONE = 0
    NOT_LEADER_OR_FOLLOWER = 6
    RECORD_TOO_LARGE = 10
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    THROTTLING_QUOTA_EXCEEDED = 89
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {RaftError.NOT_LEADER_OR_FOLLOWER, RaftError.FENCED_LEADER_EPOCH, RaftError.UNKNOWN_LEADER_EPOCH,
     RaftError.THROTTLING_QUOTA_EXCEEDED}
)


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """An end offset (exclusive) and the epoch of the entry just before it; orders like KRaft's
    OffsetAndEpoch, epoch first. Used for snapshot ids, diverging epochs and log comparisons."""

    epoch: int
    offset: int


# -- messages -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """KIP-595 Vote, with KIP-996's `pre_vote`. `epoch` is the candidate's epoch: for a pre-vote,
    its current epoch (it has not bumped it); for a vote, the epoch it is campaigning in.
    `last_epoch`/`last_end_offset` describe the candidate's log (its `OffsetAndEpoch` of the end)."""

    epoch: int
    candidate_id: int
    last_epoch: int
    last_end_offset: int
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """The voter's answer, with its own epoch and the leader it knows (None: unknown)."""

    epoch: int
    leader_id: int | None
    vote_granted: bool
    pre_vote: bool
    error: RaftError = RaftError.NONE


@dataclass(frozen=True, slots=True)
class BeginQuorumEpoch:
    """KIP-595: the new leader tells the voters that it won `epoch`, so they start fetching now
    rather than at their election timeout. Resent until the voter fetches; no response."""

    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """KIP-595 Fetch: the follower has every entry below `fetch_offset`, and the entry at
    `fetch_offset - 1` (or its snapshot's end) has `last_fetched_epoch`. `correlation_id` lets the
    follower ignore answers to requests it no longer waits for (duplicates, late replies).
    `high_watermark` is the follower's: the leader parks (long-polls) a fetch that is at the log end
    only while the follower already knows the leader's high watermark (not in Kafka's RPC; it saves
    a round of waiting when a commit has just happened). `restoring`: the voter lost its
    quorum-state and does not yet know it may count (`Raft._fetch_counts`): the leader serves it as
    an observer, and counts it neither towards commit nor for check-quorum (KIP-853 has a replica
    with a new directory id fetch as an observer until it is a voter again)."""

    epoch: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    max_bytes: int
    correlation_id: int
    high_watermark: int = -1
    restoring: bool = False


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """The leader's answer: an error, or exactly one of records (maybe empty), `diverging_epoch`
    (truncate to its offset, then fetch again) or `snapshot_id` (fetch that snapshot).

    Echoes the request's position so that a follower acts only on the answer to the request it
    is waiting for."""

    epoch: int
    leader_id: int | None
    error: RaftError
    correlation_id: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """KIP-630 FetchSnapshot: up to `max_bytes` of snapshot `snapshot_id` from byte `position`.
    `restoring`: as in `FetchRequest` (the leader does not count it for check-quorum)."""

    epoch: int
    replica_id: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int
    correlation_id: int
    restoring: bool = False


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """A chunk of the snapshot file: bytes [position, position + len(data)) of `size`."""

    epoch: int
    leader_id: int | None
    error: RaftError
    correlation_id: int
    snapshot_id: OffsetAndEpoch
    position: int
    size: int = 0
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class QuorumProbeRequest:
    """Not in Kafka: a voter that lost its quorum-state asks another voter for its current epoch and
    log end (controller/raft.py, "A voter without state"). It changes nothing at the receiver.
    `correlation_id` is drawn once per incarnation of the asker: only answers to its own count."""

    correlation_id: int


@dataclass(frozen=True, slots=True)
class QuorumProbeResponse:
    """The answerer's own current epoch and the leader it knows (None: unknown), and where its log
    ends (`last_epoch`, `last_end_offset`, as a VoteRequest describes the candidate's log)."""

    epoch: int
    leader_id: int | None
    last_epoch: int
    last_end_offset: int
    correlation_id: int


MessageBody = (
    VoteRequest | VoteResponse | BeginQuorumEpoch | FetchRequest | FetchResponse | FetchSnapshotRequest
    | FetchSnapshotResponse | QuorumProbeRequest | QuorumProbeResponse
)


@dataclass(frozen=True, slots=True)
class Message:
    """A message between quorum members; an event when received, an output when sent."""

    source_id: int
    destination_id: int
    body: MessageBody


# -- local events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed. The core reads time only from `handle`'s `now_ms`; a Tick gives it a turn to
    act on timers (elections, fetch timeouts, check-quorum, parked fetches)."""


@dataclass(frozen=True, slots=True)
class Propose:
    """Append `data` (one opaque record) to the log. Answered by a `ProposalCompletion` with the
    same `proposal_id`, chosen by the caller: once committed, or with an error."""

    proposal_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ProposeBatch:
    """Append `records` (opaque records, at least one) as ONE log batch: they get consecutive
    offsets, replicate, survive crashes and are truncated together, so they commit all together or
    not at all (Kafka's atomic append of a controller result, KIP-868). This is how the active
    controller proposes the records of one request. Answered by one `ProposalCompletion` whose
    `offset` is the first record's."""

    proposal_id: int
    records: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class SnapshotCreated:
    """The state machine's bytes for the snapshot `Ready.snapshot_request` asked for."""

    snapshot_id: OffsetAndEpoch
    data: bytes


@dataclass(frozen=True, slots=True)
class Unreachable:
    """The fetch or quorum probe with `correlation_id` to `destination_id` never left, or the
    connection it went over closed before the answer came (Kafka's NetworkClient reports a
    disconnect at once). Without this a node would wait out the request timeout on a killed peer
    before asking another.

    `refused`: the connection was refused (ECONNREFUSED: nothing listens at the address, the
    process is gone), as opposed to timed out, reset or closed (a partition, a pause, a slow peer
    or one that just died: the next attempt tells). A follower whose leader refuses stops counting
    it as heard from and stands soon (controller/raft.py, "A refused leader")."""

    destination_id: int
    correlation_id: int
    refused: bool = False


Event = Tick | Message | Propose | ProposeBatch | SnapshotCreated | Unreachable


# -- outputs --------------------------------------------------------------------------------------


class Role(Enum):
    """A node's role in its current epoch (KRaft's EpochState classes, KIP-996's Prospective)."""

    UNATTACHED = "unattached"  # no leader known (an observer looking for one, or a voter waiting)
    PROSPECTIVE = "prospective"  # a voter asking for pre-votes; its epoch is unchanged
    CANDIDATE = "candidate"  # a voter that bumped the epoch and voted for itself
    LEADER = "leader"
    FOLLOWER = "follower"  # knows the leader of its epoch and fetches from it


@dataclass(frozen=True, slots=True)
class CommittedEntry:
    """One committed record, in offset order. `control` marks Raft's own records (the
    LeaderChange record each leader appends); the driver does not apply those."""

    offset: int
    epoch: int
    data: bytes
    control: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotRestore:
    """Replace the state machine's state with snapshot `snapshot_id` (entries below
    `snapshot_id.offset`): call `restore(snapshot_id.offset - 1, data)`."""

    snapshot_id: OffsetAndEpoch
    data: bytes


@dataclass(frozen=True, slots=True)
class ProposalCompletion:
    """The outcome of a `Propose` or `ProposeBatch`. On success, `offset`/`epoch` say where the
    record (a batch's first record) was committed. On error nothing is promised:
    NOT_LEADER_OR_FOLLOWER after an append may still commit under the next leader.
    `leader_id`/`leader_epoch` are where to retry (None: unknown)."""

    proposal_id: int
    error: RaftError
    offset: int = -1
    epoch: int = -1
    leader_id: int | None = None
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Ready:
    """The work one `Raft.handle` call hands back. The driver does it in this order, completing
    each step before the next and the whole `Ready` before the next `handle` call:

    1. `hard_state`: if not None, persist it (QuorumStateStore.write, fsynced). Messages below may
       carry a vote or an epoch that must survive a crash first.
    2. `must_sync`: if True, flush the log (`RaftLog.flush`): entries appended by this call are
       acknowledged by the messages below (a follower's next fetch offset) or counted by the
       leader towards a majority.
    3. `messages`: send (best effort; the core retries what matters).
    4. `restore`: if not None, `StateMachine.restore` from it, before any entry below.
    5. `committed`: apply each non-control entry in order (`StateMachine.apply`).
    6. `snapshot_request`: if not None, take `StateMachine.snapshot()` (which now reflects every
       entry below `snapshot_request.offset`) and hand it back as `SnapshotCreated`.
    7. `completions`: answer the proposals (their entries are applied above).

    `refused`: peer messages this call ignored because no correct peer sends them (a bug in a
    peer, or a forgery), and why: the driver logs them. `next_tick_ms`: the core needs a `Tick`
    no later than this (it may be ticked earlier)."""

    hard_state: ElectionState | None = None
    must_sync: bool = False
    messages: tuple[Message, ...] = ()
    restore: SnapshotRestore | None = None
    committed: tuple[CommittedEntry, ...] = ()
    snapshot_request: OffsetAndEpoch | None = None
    completions: tuple[ProposalCompletion, ...] = ()
    refused: tuple[str, ...] = ()
    next_tick_ms: int = 0
