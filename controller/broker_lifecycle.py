"""BrokerLifecycle: a broker's registration, heartbeats and controlled shutdown, as a pure core.

Theory of operation
-------------------
Kafka's BrokerLifecycleManager (KIP-631) without its thread: every input goes through
`handle(event, now_ms)` and the answer is a `LifecycleReady`; the owner sends the requests it lists
to the active controller and hands each answer back (`ControllerAnswer`, with an error response of
its own when the call failed). `node/lifecycle.py` and the simulator drive the same object. Time is
monotonic; the incarnation id is drawn by the owner at process start.

- Registration: with no broker epoch the broker registers (its endpoints, rack, the directory ids
  of its log dirs, KIP-858, and the broker epoch of its clean-shutdown marker, KIP-966: -1 after a
  crash). A success gives the broker epoch (`registered` in the Ready: the owner's broker core may
  now apply metadata at or past it); the broker then claims that epoch as its previous one, since a
  process that registers again has lost nothing it wrote. A refusal is retried every interval.
- Heartbeats: right after registering, then every `broker.heartbeat.interval.ms`, carrying the
  applied metadata offset, `want_fence` until the broker core has applied the metadata up to the
  registration (`MetadataApplied(caught_up=True)`: asks at once), and the log ends of replicas of
  partitions without leader, ISR or ELR. STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED (another
  registration moved the controller on) make it register again at once. `unfenced` follows the
  answers; `is_fenced(now)` is also true once the lease has run out.
- The lease (`LifecycleReady.lease_until_ms`; not in Kafka): as a partition leader the broker tells
  followers to truncate only until `broker.session.timeout.ms` after SENDING the last heartbeat
  (or controlled-shutdown request) answered unfenced (replication/lease.py). The controller heard
  that heartbeat no earlier, so it fences the broker, and moves its leaderships, no earlier than
  the lease ends; and it unfences a fenced broker only once the broker has applied its fencing
  record (controller/quorum_controller.py), so a new lease never covers a leadership the
  controller has moved. Without it a broker cut off from the controller, or back from a partition
  with stale metadata, leads an epoch the controller replaced and can make a follower truncate
  records the new leader committed (replication sim seed 214664264).
- One request in flight at a time; one unanswered for `request.timeout.ms` is given up (a late
  answer is ignored by its id), so a lost message never stalls the lifecycle.
- Controlled shutdown (`BeginControlledShutdown`): heartbeats end; ControlledShutdown requests are
  sent every interval (and at once on new metadata) until the controller answers
  `should_shut_down` (done), the controller no longer knows this process (nothing to hand over), no
  controller answered for a whole session (any returning controller fences the broker anyway), or
  the timeout passed. `Stop` ends heartbeats without a handover.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from wire.broker_lifecycle import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ReplicaLogInfo,
)
from wire.error_codes import ErrorCode
from wire.sentinels import NO_VALUE

NO_BROKER_EPOCH = NO_VALUE
_REREGISTER_ERRORS = frozenset({ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED})
NEVER_MS = 2**62


class BrokerState(enum.Enum):
    """Kafka's BrokerState, the values the lifecycle passes through."""

    NOT_RUNNING = "not_running"
    STARTING = "starting"  # registering, or registered and catching up
    RECOVERY = "recovery"  # caught up, still fenced
    RUNNING = "running"  # unfenced
    PENDING_CONTROLLED_SHUTDOWN = "pending_controlled_shutdown"
    SHUTTING_DOWN = "shutting_down"


@dataclass(frozen=True, slots=True)
class BrokerLifecycleConfig:
    """Kafka's keys in snake_case: `node.id`, the advertised endpoints (listener name -> host:port),
    `broker.rack`, the log dirs' directory ids, `broker.heartbeat.interval.ms`,
    `broker.session.timeout.ms` and `request.timeout.ms`."""

    broker_id: int
    endpoints: tuple[tuple[str, str], ...]
    rack: str | None
    log_dirs: tuple[str, ...]
    heartbeat_interval_ms: int
    session_timeout_ms: int
    request_timeout_ms: int


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartLifecycle:
    """Begin: register (`previous_broker_epoch` from the clean-shutdown marker, -1 after a crash)."""

    incarnation_id: str
    previous_broker_epoch: int


@dataclass(frozen=True, slots=True)
class LifecycleTick:
    """Time passed."""


@dataclass(frozen=True, slots=True)
class ControllerAnswer:
    """The answer to the request `request_id` (an error response when the call itself failed)."""

    request_id: int
    response: Any


@dataclass(frozen=True, slots=True)
class MetadataApplied:
    """The broker applied metadata up to `metadata_offset`; `caught_up`: it includes this broker's
    registration; `offline_log_ends`: what the next heartbeat reports."""

    metadata_offset: int
    caught_up: bool
    offline_log_ends: tuple[ReplicaLogInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class BeginControlledShutdown:
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class StopLifecycle:
    """End the heartbeats without a handover (the controller fences the broker after its session)."""


LifecycleEvent = (StartLifecycle | LifecycleTick | ControllerAnswer | MetadataApplied | BeginControlledShutdown
                  | StopLifecycle)


# -- the Ready ------------------------------------------------------------------------------------


class ShutdownOutcome(enum.Enum):
    HANDED_OVER = "handed_over"  # the controller said the broker may stop
    UNKNOWN = "unknown"  # never registered, or the controller no longer knows this process
    NO_CONTROLLER = "no_controller"  # no answer for a whole session
    TIMED_OUT = "timed_out"


@dataclass(frozen=True, slots=True)
class LifecycleReady:
    """Send `request` (if any) to the active controller and hand its answer back as
    `ControllerAnswer(request_id, ...)`; log `notices` (level, message); `lease_until_ms`: the broker
    may tell followers to truncate until then (-1: not at all); `registered` is a new broker epoch; `shutdown`
    is set once a controlled shutdown ended; tick no later than `next_tick_ms`."""

    state: BrokerState
    broker_epoch: int
    unfenced: bool
    lease_until_ms: int = -1
    request: tuple[int, Any] | None = None
    registered: int | None = None
    shutdown: ShutdownOutcome | None = None
    notices: tuple[tuple[str, str], ...] = ()
    next_tick_ms: int | None = None


@dataclass(slots=True)
class _InFlight:
    request_id: int
    request: Any
    sent_ms: int
    deadline_ms: int


class BrokerLifecycle:
    """See the module docstring. One owner; `handle` is the only mutator."""

    def __init__(self, config: BrokerLifecycleConfig, now_ms: int) -> None:
        self.config = config
        self.incarnation_id = ""
        self.previous_broker_epoch = NO_BROKER_EPOCH
        self.broker_epoch = NO_BROKER_EPOCH
        self.state = BrokerState.NOT_RUNNING
        self.unfenced = False
        self.lease_until_ms = -1
        self.metadata_offset = -1
        self.offline_log_ends: tuple[ReplicaLogInfo, ...] = ()
        self.now_ms = now_ms
        self._ready_to_unfence = False
        self._in_flight: _InFlight | None = None
        self._next_send_ms = NEVER_MS
        self._next_request_id = 0
        self._shutdown_deadline_ms = NEVER_MS
        self._last_answer_ms = now_ms
        self._shutdown: ShutdownOutcome | None = None

    def is_fenced(self, now_ms: int) -> bool:
        """Fenced, or as good as: the lease ran out (no heartbeat sent within a session was answered
        unfenced)."""
        return not self.unfenced or now_ms > self.lease_until_ms

    # -- the entry point ---------------------------------------------------------------------------

    def handle(self, event: LifecycleEvent, now_ms: int) -> LifecycleReady:
        assert now_ms >= self.now_ms, f"time went back: {now_ms} < {self.now_ms}"
        self.now_ms = now_ms
        notices: list[tuple[str, str]] = []
        registered = None
        if isinstance(event, StartLifecycle):
            assert self.state == BrokerState.NOT_RUNNING, self.state
            self.incarnation_id = event.incarnation_id
            self.previous_broker_epoch = event.previous_broker_epoch
            self.state = BrokerState.STARTING
            self._next_send_ms = now_ms
        elif isinstance(event, ControllerAnswer):
            registered = self._on_answer(event, notices)
        elif isinstance(event, MetadataApplied):
            self._on_metadata(event)
        elif isinstance(event, BeginControlledShutdown):
            self._begin_controlled_shutdown(event.timeout_ms)
        elif isinstance(event, StopLifecycle):
            self._stop(BrokerState.SHUTTING_DOWN)
        else:
            assert isinstance(event, LifecycleTick), f"not a lifecycle event: {event!r}"
        self._check_controlled_shutdown(notices)
        request = self._maybe_send()
        shutdown, self._shutdown = self._shutdown, None
        return LifecycleReady(
            state=self.state,
            broker_epoch=self.broker_epoch,
            unfenced=self.unfenced,
            lease_until_ms=self.lease_until_ms,
            request=request,
            registered=registered,
            shutdown=shutdown,
            notices=tuple(notices),
            next_tick_ms=self._next_tick_ms(),
        )

    # -- requests ----------------------------------------------------------------------------------

    def _maybe_send(self) -> tuple[int, Any] | None:
        now_ms = self.now_ms
        if self._in_flight is not None and self._in_flight.deadline_ms <= now_ms:
            self._in_flight = None  # given up: the answer was lost, or comes too late
            self._next_send_ms = min(self._next_send_ms, now_ms)
        if self._in_flight is not None or now_ms < self._next_send_ms or not self._sending:
            return None
        request = self._next_request()
        self._next_request_id += 1
        self._in_flight = _InFlight(self._next_request_id, request, now_ms, now_ms + self.config.request_timeout_ms)
        self._next_send_ms = now_ms + self.config.heartbeat_interval_ms
        return self._next_request_id, request

    @property
    def _sending(self) -> bool:
        return self.state in (BrokerState.STARTING, BrokerState.RECOVERY, BrokerState.RUNNING,
                              BrokerState.PENDING_CONTROLLED_SHUTDOWN)

    def _next_request(self) -> Any:
        config = self.config
        if self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            return ControlledShutdownRequest(config.broker_id, self.broker_epoch, self.metadata_offset)
        if self.broker_epoch == NO_BROKER_EPOCH:
            return BrokerRegistrationRequest(config.broker_id, self.incarnation_id, dict(config.endpoints),
                                             config.rack, config.log_dirs, self.previous_broker_epoch)
        return BrokerHeartbeatRequest(config.broker_id, self.broker_epoch, self.metadata_offset,
                                      want_fence=not self._ready_to_unfence,
                                      replica_log_info=self.offline_log_ends)

    def _now_please(self) -> None:
        """Send the next request as soon as none is in flight (Kafka's immediate heartbeat)."""
        self._next_send_ms = self.now_ms

    def _next_tick_ms(self) -> int | None:
        if not self._sending:
            return None
        times = [self._next_send_ms, self._shutdown_deadline_ms]
        if self._in_flight is not None:
            times = [self._in_flight.deadline_ms, self._shutdown_deadline_ms]
        return min(times)

    # -- answers -----------------------------------------------------------------------------------

    def _on_answer(self, answer: ControllerAnswer, notices: list[tuple[str, str]]) -> int | None:
        in_flight = self._in_flight
        if in_flight is None or in_flight.request_id != answer.request_id:
            return None  # late (given up), or a duplicate
        self._in_flight = None
        request, response = in_flight.request, answer.response
        if isinstance(request, BrokerRegistrationRequest):
            return self._on_registration(response, notices)
        if isinstance(request, ControlledShutdownRequest):
            self._on_controlled_shutdown_answer(response, notices)
        elif self.state != BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            self._on_heartbeat(response, notices)
        if response.error_code == ErrorCode.NONE and not response.is_fenced and self.state != BrokerState.SHUTTING_DOWN:
            self.lease_until_ms = max(self.lease_until_ms, in_flight.sent_ms + self.config.session_timeout_ms)
        elif response.error_code in _REREGISTER_ERRORS or response.error_code == ErrorCode.NONE:
            self.lease_until_ms = -1  # fenced, or unknown to the controller: no lease until unfenced
        return None

    def _on_registration(self, response: BrokerRegistrationResponse, notices: list[tuple[str, str]]) -> int | None:
        broker_id = self.config.broker_id
        if response.error_code != ErrorCode.NONE:
            notices.append(("warning", f"broker {broker_id}: registration refused: {response.error_code.name} "
                                       f"{response.error_message}"))
            return None
        notices.append(("info", f"broker {broker_id}: registered with broker epoch {response.broker_epoch}"))
        if response.warning is not None:
            notices.append(("warning", f"broker {broker_id}: the controller took this start as an unclean "
                                       f"restart: {response.warning}"))
        self.broker_epoch = response.broker_epoch
        self.previous_broker_epoch = response.broker_epoch
        self._ready_to_unfence = False
        self.unfenced = False
        self.lease_until_ms = -1
        self.state = BrokerState.STARTING
        self._now_please()  # heartbeat at once (Kafka sends the first one right after registering)
        return response.broker_epoch

    def _on_heartbeat(self, response: BrokerHeartbeatResponse, notices: list[tuple[str, str]]) -> None:
        broker_id = self.config.broker_id
        if response.error_code in _REREGISTER_ERRORS:
            notices.append(("warning", f"broker {broker_id}: heartbeat refused ({response.error_code.name}); "
                                       "registering again"))
            self.broker_epoch = NO_BROKER_EPOCH
            self.unfenced = False
            self._now_please()
            return
        if response.error_code != ErrorCode.NONE:
            notices.append(("info", f"broker {broker_id}: heartbeat failed: {response.error_code.name} "
                                    f"{response.error_message}"))
            return
        if response.is_fenced:
            self.unfenced = False
            self.state = BrokerState.RECOVERY if response.is_caught_up else BrokerState.STARTING
            return
        if self.state != BrokerState.RUNNING:
            notices.append(("info", f"broker {broker_id}: unfenced"))
        self.unfenced = True
        self.state = BrokerState.RUNNING

    def _on_metadata(self, event: MetadataApplied) -> None:
        self.metadata_offset = event.metadata_offset
        self.offline_log_ends = event.offline_log_ends
        if event.caught_up and not self._ready_to_unfence and self.broker_epoch != NO_BROKER_EPOCH:
            self._ready_to_unfence = True
            self._now_please()
        if self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            self._now_please()  # the handover may be complete: ask again at once

    # -- stopping ----------------------------------------------------------------------------------

    def _stop(self, state: BrokerState) -> None:
        self.state = state
        self.unfenced = False
        if state == BrokerState.SHUTTING_DOWN:
            self.lease_until_ms = -1  # a controlled shutdown keeps its lease until the handover
        self._in_flight = None
        self._next_send_ms = NEVER_MS

    def _begin_controlled_shutdown(self, timeout_ms: int) -> None:
        if self.broker_epoch == NO_BROKER_EPOCH:
            self._stop(BrokerState.SHUTTING_DOWN)
            self._shutdown = ShutdownOutcome.UNKNOWN  # never registered: leads nothing
            return
        self._stop(BrokerState.PENDING_CONTROLLED_SHUTDOWN)
        self._next_send_ms = self.now_ms
        self._shutdown_deadline_ms = self.now_ms + timeout_ms
        self._last_answer_ms = self.now_ms

    def _on_controlled_shutdown_answer(self, response: BrokerHeartbeatResponse,
                                       notices: list[tuple[str, str]]) -> None:
        if response.error_code == ErrorCode.NONE and response.should_shut_down:
            notices.append(("info", f"broker {self.config.broker_id}: controlled shutdown complete"))
            self._end_shutdown(ShutdownOutcome.HANDED_OVER)
        elif response.error_code in _REREGISTER_ERRORS:
            self._end_shutdown(ShutdownOutcome.UNKNOWN)
        elif response.error_code == ErrorCode.NONE:
            self._last_answer_ms = self.now_ms

    def _check_controlled_shutdown(self, notices: list[tuple[str, str]]) -> None:
        if self.state != BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            return
        broker_id, config = self.config.broker_id, self.config
        if self.now_ms - self._last_answer_ms >= config.session_timeout_ms:
            notices.append(("warning", f"broker {broker_id}: no controller answered for {config.session_timeout_ms} "
                                       "ms; stopping without controlled shutdown"))
            self._end_shutdown(ShutdownOutcome.NO_CONTROLLER)
        elif self.now_ms >= self._shutdown_deadline_ms:
            notices.append(("warning", f"broker {broker_id}: controlled shutdown not complete in time; stopping "
                                       "anyway"))
            self._end_shutdown(ShutdownOutcome.TIMED_OUT)

    def _end_shutdown(self, outcome: ShutdownOutcome) -> None:
        self._stop(BrokerState.SHUTTING_DOWN)
        self._shutdown_deadline_ms = NEVER_MS
        self._shutdown = outcome
