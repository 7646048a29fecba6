"""ControllerOffice: when this node's Raft leader holds the office of active controller, and what
the office does with controller requests, as a pure state machine: `handle(event, now_ms) -> OfficeReady`.

Theory of operation
===================

Kafka's `QuorumController` runs one event loop beside its Raft client: it claims the controller
role when Raft elects it (`claim`, once the log is caught up), appends each operation's records
atomically, completes the operation when the high watermark passes it (its deferred event queue,
with `OffsetControlManager` tracking the offsets), and renounces on any surprise. This class is
that loop without the loop: the owner (controller/controller_driver.py, shared by the node and the
simulator) feeds it events and performs what it returns.

Events. `ControllerCall(token, request)`: a controller request; `token` is the caller's, handed
back with the answer. `RaftStepped`: Raft's state after each step of the core (role, epoch, leader,
applied offset, log end offset) and the proposal completions of that step; the owner sends one
after EVERY Raft step, including the steps that propose. `OfficeTick`: the time asked for in
`next_tick_ms` has come. `Shutdown`: the node stops.

Taking office. A node takes office when Raft leads AND the whole log is applied (applied offset =
log end offset): the new leader's LeaderChange record, and everything before it, is then committed
and applied, so the committed `ClusterMetadata` holds every record of earlier epochs, and the
`QuorumController` built on it (`reset_to(committed, now, next_offset=log end)` after the first
time) is exact. Raft's high watermark passes a new leader's first entry only together with the
entries of earlier epochs (Raft §5.4.2), which is why Kafka's controller also waits for it.

Waiting for office. A call that arrives while Raft leads but the office is not yet taken (the log
is still being applied) waits, at most CALLS_AWAITING_OFFICE_MAX of them; they run in arrival
order once the office is taken, or are answered NOT_CONTROLLER as soon as Raft stops leading. A
call that arrives while Raft does not lead, or when the wait is full, is answered NOT_CONTROLLER
at once, naming the leader this node knows of, so the caller retries there.

Requests. A request runs through `QuorumController.handle` at once, against its speculative
metadata. A result without records is answered at once when nothing is pending, else once every
earlier proposal commits: it was decided on their records (Kafka's controller defers it to the
last written offset), and an answer from records that a failover then loses misleads the caller
(replication sim seed 170: INVALID_UPDATE_VERSION from a partition epoch never committed left a
leader waiting for metadata that never came). A result with records becomes ONE Raft
batch (`ProposeBatch`: its records commit all together or not at all, KIP-868), proposed in order,
one per Ready: each must land at its result's `base_offset`, which the office checks against the
log end the owner reports after the previous proposal, before handing out the next. Its answer
is sent when Raft completes the proposal (committed and applied on this node), never before.

Leaving office. The office ends when Raft stops leading or changes epoch; when Raft refuses a
proposal while still leading (throttled, too large); and when a result would not land at its base
offset. In each case the speculative metadata no longer matches the log. Every proposal not yet
answered is answered NOT_CONTROLLER (or the refusal's own error): its records may still commit
under the next leader, which is why callers retry and requests are idempotent or checked. A node
that still leads takes office again, from committed state, once its log is wholly applied.

Ticks. In office, a `ControllerTick` (fence silent brokers, elect offline leaders) runs every
`tick_interval_ms`, the first one interval after taking office; its records are proposed like a
request's, and nobody is answered. `next_tick_ms` is NEVER_MS out of office.

Output (`OfficeReady`): answers to send, in order; at most one batch to propose, which the owner
must hand to Raft at once, then report with a `RaftStepped` before any other event; and when the
office wants its next `OfficeTick`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from controller.controller_api import BrokerProbe, ControllerTick
from controller.error_responses import error_response
from controller.metadata import ClusterMetadata
from controller.metadata_records import encode_record
from controller.quorum_controller import ControllerConfig, ControllerResult, QuorumController
from controller.raft import Raft
from controller.raft_messages import ProposalCompletion, ProposeBatch, RaftError, Role
from controller.replica_assignment import RandomSource
from wire.error_codes import ErrorCode

NEVER_MS = 2**62
CALLS_AWAITING_OFFICE_MAX = 1_000  # calls held while a new leader's log is still being applied

# RaftError of a refused proposal -> what the controller's caller is told.
_PROPOSAL_ERRORS = {
    RaftError.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_CONTROLLER,
    RaftError.RECORD_TOO_LARGE: ErrorCode.MESSAGE_TOO_LARGE,
    RaftError.THROTTLING_QUOTA_EXCEEDED: ErrorCode.THROTTLING_QUOTA_EXCEEDED,
}


# -- events ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ControllerCall:
    """A request for the active controller; `token` comes back with its answer."""

    token: object
    request: Any


@dataclass(frozen=True, slots=True)
class RaftStepped:
    """Raft's state after one of its steps, and the proposals that step completed."""

    role: Role
    epoch: int
    leader_id: int | None
    applied_offset: int
    log_end_offset: int
    completions: tuple[ProposalCompletion, ...] = ()

    @classmethod
    def after(cls, raft: Raft, completions: list[ProposalCompletion]) -> RaftStepped:
        return cls(raft.role, raft.epoch, raft.leader_id, raft.applied_offset, raft.log.log_end_offset,
                   tuple(completions))


@dataclass(frozen=True, slots=True)
class OfficeTick:
    """The time the last `OfficeReady.next_tick_ms` asked for has come (an early one does nothing)."""


@dataclass(frozen=True, slots=True)
class Shutdown:
    """The node stops: everything pending is answered, and every later call NOT_CONTROLLER."""


OfficeEvent = ControllerCall | RaftStepped | OfficeTick | Shutdown


# -- output ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Answer:
    """The response for the call of `token`."""

    token: object
    response: Any


@dataclass(frozen=True, slots=True)
class TookOffice:
    """This node became the active controller in `epoch`; its next record lands at `next_offset`."""

    epoch: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class LeftOffice:
    """This node stopped being the active controller of `epoch`, for `reason`."""

    epoch: int
    reason: str


OfficeChange = TookOffice | LeftOffice


@dataclass(frozen=True, slots=True)
class OfficeReady:
    """What one `handle` call hands back, in this order: `changes` (for the owner's log), `answers`
    to send, then `propose` (None: nothing), to hand to Raft at once and report with a
    `RaftStepped` before any other event. `next_tick_ms`: when to send the next `OfficeTick`."""

    changes: tuple[OfficeChange, ...]
    answers: tuple[Answer, ...]
    propose: ProposeBatch | None
    next_tick_ms: int


@dataclass(frozen=True, slots=True)
class _Proposal:
    """A controller result to propose, then to answer (`token` None: a ControllerTick's)."""

    token: object | None
    request: Any
    result: ControllerResult[Any]
    # Results without records decided after this one (token, request, response): answered once
    # this proposal commits, since they were decided on metadata that includes its records.
    after: list[tuple[object | None, Any, Any]] = field(default_factory=list)


class ControllerOffice:
    """One node's office of active controller (see the theory of operation above).

    Built from the node id, the committed `ClusterMetadata` (applied by the node's Raft driver; read
    here only when taking office), a seeded random source for the `QuorumController`, its config
    and the tick interval. Mutated only by `handle`. Readable: `office_epoch`, `in_office`,
    `next_tick_ms`, `controller` (for the simulator's checks of the speculative metadata)."""

    def __init__(self, node_id: int, committed: ClusterMetadata, rng: RandomSource, config: ControllerConfig,
                 tick_interval_ms: int) -> None:
        assert tick_interval_ms > 0, f"tick_interval_ms={tick_interval_ms}"
        self.node_id = node_id
        self.committed = committed
        self.config = config
        self.tick_interval_ms = tick_interval_ms
        self.controller: QuorumController | None = None
        self.office_epoch: int | None = None
        self.next_tick_ms = NEVER_MS
        self._rng = rng
        self._now_ms = -NEVER_MS
        self._raft: RaftStepped | None = None
        self._stopped = False
        self._awaiting_office: list[ControllerCall] = []
        self._to_propose: deque[_Proposal] = deque()
        self._in_flight: dict[int, _Proposal] = {}  # proposal id -> proposal
        self._proposing: int | None = None  # handed out, its RaftStepped not yet received
        self._next_proposal_id = 0
        self._answers: list[Answer] = []
        self._changes: list[OfficeChange] = []

    @property
    def in_office(self) -> bool:
        return self.office_epoch is not None

    def broker_probes(self) -> tuple[BrokerProbe, ...]:
        """The probes of brokers' listeners to run now (README, "Failover after kill -9"); none out of office. A
        refusal goes back in as a call like any request (`BrokerConnectionRefused`)."""
        if not self.in_office or self.controller is None:
            return ()
        return self.controller.broker_probes()

    # -- the entry point --------------------------------------------------------------------------

    def handle(self, event: OfficeEvent, now_ms: int) -> OfficeReady:
        """Take one event at `now_ms` (never earlier than the previous call's)."""
        assert now_ms >= self._now_ms, f"time went back: {self._now_ms} -> {now_ms} on node {self.node_id}"
        assert self._proposing is None or isinstance(event, RaftStepped), (
            f"node {self.node_id}: {event!r} before the RaftStepped of proposal {self._proposing}"
        )
        self._now_ms = now_ms
        self._answers, self._changes = [], []
        if isinstance(event, ControllerCall):
            self._on_call(event)
        elif isinstance(event, RaftStepped):
            self._on_raft_stepped(event)
        elif isinstance(event, OfficeTick):
            self._on_tick()
        else:
            self._on_shutdown()
        propose = self._next_proposal()
        return OfficeReady(tuple(self._changes), tuple(self._answers), propose, self.next_tick_ms)

    # -- events -----------------------------------------------------------------------------------

    def _on_call(self, call: ControllerCall) -> None:
        if self._stopped:
            self._answer_error(call.token, call.request, f"node {self.node_id} is stopping; retry at another")
        elif self.office_epoch is not None:
            self._run_controller(call.token, call.request)
        elif self._leading() and len(self._awaiting_office) < CALLS_AWAITING_OFFICE_MAX:
            self._awaiting_office.append(call)
        elif self._leading():
            self._answer_error(call.token, call.request,
                               f"node {self.node_id} leads the quorum but {CALLS_AWAITING_OFFICE_MAX} calls already "
                               "wait for it to take office; retry")
        else:
            leader_id = self._raft.leader_id if self._raft is not None else None
            self._answer_error(call.token, call.request, f"node {self.node_id} is not the active controller (it "
                                                         f"knows of {leader_id}); retry there")

    def _on_raft_stepped(self, raft: RaftStepped) -> None:
        self._raft = raft
        self._proposing = None
        for completion in raft.completions:
            self._complete(completion)
        self._update_office()

    def _on_tick(self) -> None:
        if self.office_epoch is None or self._now_ms < self.next_tick_ms:
            return
        self.next_tick_ms = self._now_ms + self.tick_interval_ms
        self._run_controller(None, ControllerTick())

    def _on_shutdown(self) -> None:
        self._stopped = True
        self._leave_office(f"node {self.node_id} is stopping")
        self._release_awaiting_office(f"node {self.node_id} is stopping")

    # -- the office -------------------------------------------------------------------------------

    def _leading(self) -> bool:
        return not self._stopped and self._raft is not None and self._raft.role is Role.LEADER

    def may_take_office(self, raft: RaftStepped) -> bool:
        """Raft leads (checked by the caller) and has applied its whole log: its LeaderChange record
        and everything before it are committed and in `committed`."""
        return raft.applied_offset == raft.log_end_offset

    def _update_office(self) -> None:
        """Leave office when Raft no longer leads in the office's epoch; take it when Raft leads and
        the whole log is applied."""
        raft = self._raft
        assert raft is not None, "updated before Raft stepped"
        if self.office_epoch is not None and (not self._leading() or raft.epoch != self.office_epoch):
            self._leave_office(f"node {self.node_id} no longer leads the quorum in epoch {self.office_epoch}")
        if not self._leading():
            self._release_awaiting_office(f"node {self.node_id} no longer leads the quorum")
            return
        if self.office_epoch is None and self.may_take_office(raft):
            self._take_office(raft)

    def _take_office(self, raft: RaftStepped) -> None:
        next_offset = raft.log_end_offset
        if self.controller is None:
            self.controller = QuorumController(self.committed, self._rng, self._now_ms, next_offset, self.config)
        else:
            self.controller.reset_to(self.committed, self._now_ms, next_offset)
        self.office_epoch = raft.epoch
        self.next_tick_ms = self._now_ms + self.tick_interval_ms
        self._changes.append(TookOffice(raft.epoch, next_offset))
        calls, self._awaiting_office = self._awaiting_office, []
        for call in calls:
            self._on_call(call)

    def _leave_office(self, reason: str) -> None:
        """End the office (if held) and answer every proposal not yet answered NOT_CONTROLLER."""
        if self.office_epoch is not None:
            self._changes.append(LeftOffice(self.office_epoch, reason))
        self.office_epoch = None
        self.next_tick_ms = NEVER_MS
        pending = [*self._in_flight.values(), *self._to_propose]
        self._in_flight.clear()
        self._to_propose.clear()
        for proposal in pending:
            self._fail(proposal, f"{reason}; the request may still take effect: retry at the new controller")

    def _release_awaiting_office(self, reason: str) -> None:
        calls, self._awaiting_office = self._awaiting_office, []
        for call in calls:
            self._answer_error(call.token, call.request, f"{reason}; retry at the new controller")

    # -- proposals --------------------------------------------------------------------------------

    def _run_controller(self, token: object | None, request: Any) -> None:
        assert self.controller is not None, "run while out of office"
        result = self.controller.handle(request, self._now_ms)
        if result.records:
            self._to_propose.append(_Proposal(token, request, result))
        elif self._to_propose or self._in_flight:
            last = self._to_propose[-1] if self._to_propose else self._in_flight[max(self._in_flight)]
            last.after.append((token, request, result.response))
        else:
            self._answer(token, result.response)

    def _next_proposal(self) -> ProposeBatch | None:
        """The next result's records as ONE batch, if it lands at its base offset; otherwise the
        speculative metadata is not the log's any more and the office ends."""
        if not self._to_propose:
            return None
        assert self.office_epoch is not None, "proposals queued out of office"
        assert self._raft is not None, "in office before Raft stepped"
        proposal = self._to_propose.popleft()
        if proposal.result.base_offset != self._raft.log_end_offset:
            self._fail(proposal, "the controller lost office; retry")
            self._leave_office(f"a controller result for offset {proposal.result.base_offset} would land at "
                               f"{self._raft.log_end_offset}")
            return None
        proposal_id = self._next_proposal_id
        self._next_proposal_id += 1
        self._in_flight[proposal_id] = proposal
        self._proposing = proposal_id
        return ProposeBatch(proposal_id, tuple(encode_record(record) for record in proposal.result.records))

    def _complete(self, completion: ProposalCompletion) -> None:
        proposal = self._in_flight.pop(completion.proposal_id, None)
        if proposal is None:
            return  # answered already (the office was left)
        if completion.error is RaftError.NONE:
            assert completion.offset == proposal.result.base_offset, f"{completion} for {proposal.result}"
            self._answer(proposal.token, proposal.result.response)
            for token, _, response in proposal.after:
                self._answer(token, response)
            return
        code = _PROPOSAL_ERRORS.get(completion.error, ErrorCode.NOT_CONTROLLER)
        self._fail(proposal, f"the metadata log refused the records: {completion.error.name}", code)
        self._leave_office(f"the metadata log refused a proposal ({completion.error.name})")

    # -- answers ----------------------------------------------------------------------------------

    def _answer(self, token: object | None, response: Any) -> None:
        if token is not None:
            self._answers.append(Answer(token, response))

    def _fail(self, proposal: _Proposal, message: str, code: ErrorCode = ErrorCode.NOT_CONTROLLER) -> None:
        """Answer a proposal that will not complete here, and the results that waited for it."""
        self._answer_error(proposal.token, proposal.request, message, code)
        for token, request, _ in proposal.after:
            self._answer_error(token, request, message, code)

    def _answer_error(self, token: object | None, request: Any, message: str,
                      code: ErrorCode = ErrorCode.NOT_CONTROLLER) -> None:
        if token is not None:
            self._answers.append(Answer(token, error_response(request, code, message)))
