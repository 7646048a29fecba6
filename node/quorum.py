"""QuorumService: the node's controller quorum — its Raft replica, its metadata, and, while this
node leads, the active controller.

Theory of operation. One task (the owner) holds the Raft core through the shared `RaftDriver`
and is the only code that touches it, the metadata log, `metadata` and the `QuorumController`.
Everything reaches it as an event on one bounded queue: Raft messages from peers (`handle_raft`)
and controller calls (`controller_request`, `handle_controller`). Between events it sleeps until
the earliest of the core's `next_tick_ms` and, in office, the next `ControllerTick`.

Metadata. The driver applies committed records to `metadata` (a `ClusterMetadata`), on voters and
observers alike; after every step that applied records or restored a snapshot the listeners run,
in the owner task, so the broker reacts to leader and ISR changes in log order.

The active controller. A Raft leader takes office once its log is wholly applied (its
LeaderChange record and everything before it are committed): then `metadata` holds every record
of earlier epochs, and `reset_to(metadata, now, next_offset=log end)` makes the speculative copy
exact. A request runs through `QuorumController.handle`; its records are proposed as ONE Raft
batch (`ProposeBatch`: all commit or none), and the response is sent when the batch commits. The
controller leaves office when Raft stops leading or changes epoch (pending requests answer
NOT_CONTROLLER: their records may still commit under the next leader, which is why callers
retry and requests are idempotent or checked), and also when Raft refuses a proposal while still
leading (throttled, too large): the speculative copy then no longer matches the log, so it is
rebuilt by taking office again once the log is wholly applied.

Elsewhere, `controller_request` forwards to the active controller (controller_channel.py), with
backoff and retries until its timeout, waiting for a leader when none is known.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from client.connection import Connections, NodeUnavailableError
from client.protocol import Api, Envelope, encode
from controller.controller_api import ControllerTick
from controller.metadata import ClusterMetadata
from controller.metadata_records import encode_record
from controller.quorum_controller import ControllerResult, QuorumController
from controller.quorum_state import QuorumStateStore
from controller.raft import Raft
from controller.raft_driver import RaftDriver
from controller.raft_log import METADATA_LOG_DIR, RaftLog, metadata_log_config
from controller.raft_messages import Event, Message, ProposalCompletion, ProposeBatch, RaftError, Role, Tick
from node.config import NodeConfig
from node.controller_channel import CONTROLLER_APIS, error_response, forward, is_not_controller, request_from_envelope
from node.raft_transport import RaftTransport, from_envelope
from storage.error_codes import ErrorCode

log = logging.getLogger(__name__)

EVENTS_MAX = 10_000  # queued events; a Raft message over it is dropped (Raft resends), a call is refused
CALLS_AWAITING_OFFICE_MAX = 1_000  # calls held while a new leader's log is still being applied
STEPS_PER_EVENT_MAX = CALLS_AWAITING_OFFICE_MAX + 2  # an event, then at most one proposal per released call
FORWARD_ATTEMPTS_MAX = 1_000  # bounds the retry loop; the timeout normally ends it first
RETRY_BACKOFF_MAX_MS = 1_000  # Kafka's retry.backoff.max.ms
NEVER_MS = 2**62
IDLE_WAIT_MAX_MS = 60_000  # the owner re-arms a far-away timer at least this often

# RaftError of a refused proposal -> what the controller's caller is told.
_PROPOSAL_ERRORS = {
    RaftError.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_CONTROLLER,
    RaftError.RECORD_TOO_LARGE: ErrorCode.MESSAGE_TOO_LARGE,
    RaftError.THROTTLING_QUOTA_EXCEEDED: ErrorCode.THROTTLING_QUOTA_EXCEEDED,
}


@dataclass(slots=True)
class _ControllerCall:
    """A request for the active controller, answered through `future` (None: a ControllerTick)."""

    request: Any
    future: asyncio.Future[Any] | None


@dataclass(frozen=True, slots=True)
class _Proposal:
    """A controller result waiting to be proposed, then committed."""

    call: _ControllerCall
    result: ControllerResult[Any]


class QuorumService:
    """See the module docstring. Read-only for others: `metadata`, `metadata_offset`,
    `active_controller_id`, `epoch`, `is_active_controller`."""

    def __init__(self, config: NodeConfig, connections: Connections, clock: Callable[[], int],
                 rng: random.Random) -> None:
        self.config = config
        self.metadata = ClusterMetadata()
        self._connections = connections
        self._clock = clock
        self._rng = rng
        self._transport = RaftTransport(config, connections)
        self._source_address = config.advertised_address(config.inter_broker_listener_name)
        self._events: asyncio.Queue[Message | _ControllerCall] = asyncio.Queue(maxsize=EVENTS_MAX)
        self._driver: RaftDriver | None = None
        self._owner: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[], None]] = []
        self._now_ms = 0
        self._changed = asyncio.Event()  # set (and replaced) when the leader or the office changes
        self._seen: tuple[int | None, int | None] = (None, None)
        # The active controller (owner task only).
        self._controller: QuorumController | None = None
        self._controller_rng = random.Random(rng.getrandbits(64))
        self._office_epoch: int | None = None
        self._next_controller_tick_ms = NEVER_MS
        self._awaiting_office: list[_ControllerCall] = []
        self._to_propose: list[_Proposal] = []
        self._in_flight: dict[int, _Proposal] = {}  # proposal id -> proposal
        self._next_proposal_id = 0

    # ---- readable state ------------------------------------------------------------------------

    @property
    def metadata_offset(self) -> int:
        return self.metadata.last_applied_offset

    @property
    def active_controller_id(self) -> int | None:
        """The Raft leader this node knows of (None: unknown or not started). A restarted node may
        have persisted itself as leader of its last epoch; it is not leading until elected again."""
        if self._driver is None:
            return None
        leader = self._driver.raft.leader_id
        if leader == self.config.node_id and self._driver.raft.role is not Role.LEADER:
            return None
        return leader

    @property
    def epoch(self) -> int:
        return self._driver.raft.epoch if self._driver is not None else 0

    @property
    def is_active_controller(self) -> bool:
        return self._office_epoch is not None

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Run `callback()` in the owner task after each step that applied records or a snapshot."""
        self._listeners.append(callback)

    # ---- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the metadata log and the quorum state, restore the latest snapshot, start the owner."""
        assert self._driver is None, f"node {self.config.node_id}: quorum service started twice"
        directory = self.config.metadata_log_dir / METADATA_LOG_DIR
        directory.mkdir(parents=True, exist_ok=True)
        now_ms = self._now()
        # The metadata log keeps no recovery point, so it is always re-validated: it is small.
        raft_log = RaftLog.open(directory, now_ms, metadata_log_config(), had_clean_shutdown=False)
        store = QuorumStateStore(directory)
        raft = Raft(self.config.node_id, self.config.quorum, raft_log, store.read(), self._rng, now_ms)
        self._driver = RaftDriver(raft, store, self.metadata, self._transport.send)
        self._step(Tick(), now_ms)
        self._step_proposals(now_ms)
        self._owner = asyncio.get_running_loop().create_task(self._run(), name=f"quorum-{self.config.node_id}")

    @property
    def is_running(self) -> bool:
        """The owner task is alive (it dies only of a bug, logged): this node follows the metadata."""
        return self._owner is not None and not self._owner.done()

    async def stop(self) -> None:
        """Stop the owner and the sends, answer what is pending with NOT_CONTROLLER, flush and close."""
        if self._owner is not None:
            self._owner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a failure was logged by `_run`
                await self._owner
            self._owner = None
        await self._transport.close()
        self._leave_office("this node is stopping")
        self._release_awaiting_office("this node is stopping")
        while not self._events.empty():
            event = self._events.get_nowait()
            if isinstance(event, _ControllerCall):
                self._answer_error(event, ErrorCode.NOT_CONTROLLER, "this node is stopping; retry at another")
        if self._driver is not None:
            self._driver.raft.log.flush(self._now())
            self._driver.raft.log.close()
            self._driver = None
        self._note_changes()

    # ---- inputs --------------------------------------------------------------------------------

    async def handle_raft(self, envelope: Envelope) -> None:
        """A Raft message from a peer; ProtocolError if it does not decode. Dropped when the queue
        is full or the service is stopped: Raft resends what matters."""
        message = from_envelope(envelope, self.config.node_id, self.config.quorum.voter_ids)
        if self._owner is None:
            return
        self._transport.learn(envelope.source_id, envelope.source_address)
        with contextlib.suppress(asyncio.QueueFull):
            self._events.put_nowait(message)

    async def handle_controller(self, api: Api, envelope: Envelope) -> Envelope:
        """A controller request forwarded by another node: answered here if this node leads the
        quorum (NOT_CONTROLLER otherwise, so the sender tries the controller it knows next)."""
        request = request_from_envelope(api, envelope)
        if self.active_controller_id == self.config.node_id:
            response = await self._call_locally(request, self.config.request_timeout_ms)
        else:
            response = error_response(request, ErrorCode.NOT_CONTROLLER,
                                      f"node {self.config.node_id} is not the active controller "
                                      f"(it knows of {self.active_controller_id}); retry there")
        return Envelope(type(response).__name__, encode(response), self.config.node_id, self._source_address)

    async def controller_request(self, request: Any, timeout_ms: int) -> Any:
        """Run `request` on the active controller, here or by forwarding, retrying NOT_CONTROLLER and
        unreachable controllers with backoff until `timeout_ms`; then REQUEST_TIMED_OUT."""
        assert type(request) in CONTROLLER_APIS, f"not a controller request: {request!r}"
        deadline_ms = self._now() + timeout_ms
        backoff_ms = max(1, self.config.quorum.retry_backoff_ms)
        last_problem = "no active controller is known"
        for _ in range(FORWARD_ATTEMPTS_MAX):
            remaining_ms = deadline_ms - self._now()
            if remaining_ms <= 0:
                break
            leader = self.active_controller_id
            if leader is None:
                last_problem = "no active controller is known"
                await self._wait_for_change(remaining_ms)
                continue
            response = await self._call_controller(leader, request, remaining_ms)
            if response is not None and not is_not_controller(response):
                return response
            last_problem = f"controller {leader} did not answer as active controller"
            await self._wait_for_change(min(backoff_ms, max(0, deadline_ms - self._now())))
            backoff_ms = min(backoff_ms * 2, RETRY_BACKOFF_MAX_MS)
        return error_response(request, ErrorCode.REQUEST_TIMED_OUT,
                              f"{last_problem} within {timeout_ms} ms; retry when the quorum has a leader")

    async def _call_controller(self, leader: int, request: Any, timeout_ms: int) -> Any | None:
        """The response of controller `leader`, or None if it could not be reached."""
        if leader == self.config.node_id:
            return await self._call_locally(request, timeout_ms)
        # A paused controller loses its quorum within the fetch timeout; capping one attempt lets
        # the next go to its successor instead of spending the caller's whole timeout on it.
        quorum = self.config.quorum
        attempt_timeout_ms = min(timeout_ms, quorum.fetch_timeout_ms + quorum.request_timeout_ms)
        try:
            return await forward(self._connections, self.config.voter_address(leader), request, attempt_timeout_ms,
                                 self.config.node_id, self._source_address)
        except NodeUnavailableError as error:
            log.debug("node %s: controller %s unreachable: %s", self.config.node_id, leader, error)
            return None

    async def _call_locally(self, request: Any, timeout_ms: int) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._owner is None:
            return error_response(request, ErrorCode.NOT_CONTROLLER, f"node {self.config.node_id} is not running")
        try:
            self._events.put_nowait(_ControllerCall(request, future))
        except asyncio.QueueFull:
            return error_response(request, ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                  f"node {self.config.node_id} has {EVENTS_MAX} events queued; retry later")
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await future
        except TimeoutError:
            return error_response(request, ErrorCode.REQUEST_TIMED_OUT,
                                  f"the controller did not commit the request within {timeout_ms} ms; it may "
                                  "still take effect: check before retrying")

    async def _wait_for_change(self, timeout_ms: int) -> None:
        """Until the leader or the office changes, or `timeout_ms` passes."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_ms / 1000):
                await self._changed.wait()

    # ---- the owner task ------------------------------------------------------------------------

    def _now(self) -> int:
        """The clock, never going back (the Raft core asserts it; a wall clock may step back)."""
        self._now_ms = max(self._now_ms, self._clock())
        return self._now_ms

    async def _run(self) -> None:
        try:
            while True:
                event = await self._next_event()
                now_ms = self._now()
                if isinstance(event, Message):
                    self._step(event, now_ms)
                elif isinstance(event, _ControllerCall):
                    self._on_controller_call(event)
                else:
                    self._on_timer(now_ms)
                self._step_proposals(now_ms)
        except Exception:
            log.exception("node %s: the quorum task failed; this node no longer follows the metadata log",
                          self.config.node_id)
            raise

    async def _next_event(self) -> Message | _ControllerCall | None:
        """The next queued event, or None when a timer is due (timers first, so a steady stream
        of messages cannot starve elections and check-quorum)."""
        assert self._driver is not None, "the owner runs only while started"
        wake_ms = min(self._driver.next_tick_ms, self._next_controller_tick_ms)
        wait_ms = min(max(0, wake_ms - self._now()), IDLE_WAIT_MAX_MS)
        if wait_ms == 0:
            return None
        if not self._events.empty():
            return self._events.get_nowait()
        try:
            async with asyncio.timeout(wait_ms / 1000):
                return await self._events.get()
        except TimeoutError:
            return None

    def _on_timer(self, now_ms: int) -> None:
        assert self._driver is not None, "the owner runs only while started"
        if self._office_epoch is not None and now_ms >= self._next_controller_tick_ms:
            self._next_controller_tick_ms = now_ms + max(1, self.config.broker_heartbeat_interval_ms // 2)
            self._run_controller(_ControllerCall(ControllerTick(), None))
        if now_ms >= self._driver.next_tick_ms:
            self._step(Tick(), now_ms)

    def _step(self, event: Event, now_ms: int) -> None:
        """Hand `event` to the core through the driver, then everything that follows from it."""
        assert self._driver is not None, "stepped while stopped"
        applied_before = self.metadata.last_applied_offset
        completions = self._driver.step(event, now_ms)
        self._complete(completions)
        self._update_office(now_ms)
        if self.metadata.last_applied_offset != applied_before:
            self._notify_listeners()
        self._note_changes()

    def _step_proposals(self, now_ms: int) -> None:
        """Propose what `_run_controller` queued. Called after a step, never from inside one: a step
        may take office and release many waiting calls at once, each proposing in turn."""
        for _ in range(STEPS_PER_EVENT_MAX):
            if not self._to_propose:
                return
            self._propose(self._to_propose.pop(0), now_ms)
        raise AssertionError(f"node {self.config.node_id}: over {STEPS_PER_EVENT_MAX} proposals after one event")

    def _propose(self, proposal: _Proposal, now_ms: int) -> None:
        """Append one controller result's records as ONE Raft batch (all commit or none)."""
        assert self._driver is not None, "proposed while stopped"
        raft_log = self._driver.raft.log
        if self._office_epoch is None or proposal.result.base_offset != raft_log.log_end_offset:
            # Office lost, or an earlier proposal was refused: this result was computed on a
            # speculative state the log will not have.
            self._answer_error(proposal.call, ErrorCode.NOT_CONTROLLER, "the controller lost office; retry")
            return
        proposal_id = self._next_proposal_id
        self._next_proposal_id += 1
        self._in_flight[proposal_id] = proposal
        records = tuple(encode_record(record) for record in proposal.result.records)
        self._step(ProposeBatch(proposal_id, records), now_ms)

    def _complete(self, completions: list[ProposalCompletion]) -> None:
        for completion in completions:
            proposal = self._in_flight.pop(completion.proposal_id, None)
            if proposal is None:
                continue  # answered already (office lost)
            if completion.error is RaftError.NONE:
                assert completion.offset == proposal.result.base_offset, f"{completion} for {proposal.result}"
                self._answer(proposal.call, proposal.result.response)
                continue
            code = _PROPOSAL_ERRORS.get(completion.error, ErrorCode.NOT_CONTROLLER)
            self._answer_error(proposal.call, code, f"the metadata log refused the records: {completion.error.name}")
            self._leave_office(f"the metadata log refused a proposal ({completion.error.name})")

    def _on_controller_call(self, call: _ControllerCall) -> None:
        assert self._driver is not None, "called while stopped"
        if call.future is not None and call.future.done():
            return  # the caller gave up
        if self._office_epoch is not None:
            self._run_controller(call)
        elif self._driver.raft.role is Role.LEADER and len(self._awaiting_office) < CALLS_AWAITING_OFFICE_MAX:
            self._awaiting_office.append(call)
        else:
            self._answer_error(call, ErrorCode.NOT_CONTROLLER,
                               f"node {self.config.node_id} is not the active controller; retry there")

    def _run_controller(self, call: _ControllerCall) -> None:
        assert self._controller is not None, "run while out of office"
        result = self._controller.handle(call.request, self._now_ms)
        if result.records:
            self._to_propose.append(_Proposal(call, result))
        else:
            self._answer(call, result.response)

    def _update_office(self, now_ms: int) -> None:
        """Leave office when Raft no longer leads in the office's epoch; take it when leading and
        the whole log is applied (see the module docstring)."""
        assert self._driver is not None, "updated while stopped"
        raft = self._driver.raft
        leading = raft.role is Role.LEADER
        if self._office_epoch is not None and (not leading or raft.epoch != self._office_epoch):
            self._leave_office(f"node {self.config.node_id} no longer leads the quorum")
        if not leading:
            self._release_awaiting_office(f"node {self.config.node_id} no longer leads the quorum")
            return
        if self._office_epoch is None and raft.applied_offset == raft.log.log_end_offset:
            self._take_office(raft, now_ms)

    def _take_office(self, raft: Raft, now_ms: int) -> None:
        next_offset = raft.log.log_end_offset
        if self._controller is None:
            self._controller = QuorumController(self.metadata, self._controller_rng, now_ms, next_offset,
                                                self.config.controller_config())
        else:
            self._controller.reset_to(self.metadata, now_ms, next_offset)
        self._office_epoch = raft.epoch
        self._next_controller_tick_ms = now_ms + max(1, self.config.broker_heartbeat_interval_ms // 2)
        log.info("node %s is the active controller in epoch %s from offset %s", self.config.node_id, raft.epoch,
                 next_offset)
        calls, self._awaiting_office = self._awaiting_office, []
        for call in calls:
            self._on_controller_call(call)

    def _leave_office(self, reason: str) -> None:
        if self._office_epoch is not None:
            log.info("node %s leaves the controller office: %s", self.config.node_id, reason)
        self._office_epoch = None
        self._next_controller_tick_ms = NEVER_MS
        pending = list(self._in_flight.values()) + self._to_propose
        self._in_flight.clear()
        self._to_propose.clear()
        for proposal in pending:
            self._answer_error(proposal.call, ErrorCode.NOT_CONTROLLER,
                               f"{reason}; the request may still take effect: retry at the new controller")

    def _release_awaiting_office(self, reason: str) -> None:
        calls, self._awaiting_office = self._awaiting_office, []
        for call in calls:
            self._answer_error(call, ErrorCode.NOT_CONTROLLER, f"{reason}; retry at the new controller")

    def _answer(self, call: _ControllerCall, response: Any) -> None:
        if call.future is not None and not call.future.done():
            call.future.set_result(response)

    def _answer_error(self, call: _ControllerCall, code: ErrorCode, message: str) -> None:
        if call.future is not None and not call.future.done():
            call.future.set_result(error_response(call.request, code, message))

    def _notify_listeners(self) -> None:
        for callback in self._listeners:
            try:
                callback()
            except Exception:
                log.exception("node %s: metadata listener %r failed at offset %s", self.config.node_id, callback,
                              self.metadata.last_applied_offset)

    def _note_changes(self) -> None:
        """Wake the callers waiting for a leader or an office when either changed."""
        seen = (self.active_controller_id, self._office_epoch)
        if seen != self._seen:
            self._seen = seen
            self._changed.set()
            self._changed = asyncio.Event()
