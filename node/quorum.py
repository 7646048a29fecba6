"""QuorumService: the node's controller quorum — its Raft replica, its metadata, and, while this
node leads, the active controller.

Theory of operation. One task (the owner) holds the Raft core through the shared `RaftDriver`
and is the only code that touches it, the metadata log, `metadata` and the `QuorumController`.
Everything reaches it as an event on one bounded queue: Raft messages from peers (`handle_raft`)
and controller calls (`controller_request`, `handle_controller`). Between events it sleeps until
the earliest of Raft's `next_tick_ms` and, in office, the next `ControllerTick`.

Metadata. The driver applies committed records to `metadata` (a `ClusterMetadata`), on voters and
observers alike; after every step that applied records or restored a snapshot the listeners run,
in the owner task, so the broker reacts to leader and ISR changes in log order.

The active controller. When this node takes and leaves the office, which calls wait for it and
which are answered NOT_CONTROLLER, how requests become Raft batches and when they are answered,
and the `ControllerTick` cadence are decided by the `ControllerOffice` core
(controller/controller_office.py, whose docstring gives the rules); the simulator runs the same
core. The owner performs both cores' output through the shared `ControllerDriver`
(controller/controller_driver.py): a controller call's answer resolves its future.

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
from controller.controller_driver import ControllerDriver
from controller.controller_office import ControllerOffice, LeftOffice, OfficeChange, TookOffice
from controller.error_responses import error_response, is_not_controller
from controller.metadata import ClusterMetadata
from controller.quorum_state import QuorumStateStore
from controller.raft import Raft
from controller.raft_driver import RaftDriver
from controller.raft_log import METADATA_LOG_DIR, RaftLog, metadata_log_config
from controller.raft_messages import Message, Role, Tick, Unreachable
from node.broker_prober import BrokerProber
from node.config import NodeConfig
from node.controller_channel import CONTROLLER_APIS, forward, request_from_envelope
from node.raft_transport import RaftTransport, from_envelope
from wire.api import Api
from wire.codec import encode
from wire.envelope import Envelope
from wire.error_codes import ErrorCode

log = logging.getLogger(__name__)

EVENTS_MAX = 10_000  # queued events; a Raft message over it is dropped (Raft resends), a call is refused
FORWARD_ATTEMPTS_MAX = 1_000  # bounds the retry loop; the timeout normally ends it first
RETRY_BACKOFF_MAX_MS = 1_000  # Kafka's retry.backoff.max.ms
IDLE_WAIT_MAX_MS = 60_000  # the owner re-arms a far-away timer at least this often


@dataclass(frozen=True, slots=True)
class _ControllerCall:
    """A request for the active controller, answered through `future` (the office's token)."""

    request: Any
    future: asyncio.Future[Any]


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
        # Raft's own streams: a Raft call that times out closes its stream with every call on it
        # (client/connection.py), which must not take forwarded controller requests along (Kafka's
        # KRaft client and broker-to-controller channel are separate network clients too).
        self._raft_connections = Connections()
        self._transport = RaftTransport(config, self._raft_connections, self._on_unreachable)
        self._source_address = config.advertised_address(config.inter_broker_listener_name)
        self._events: asyncio.Queue[Message | Unreachable | _ControllerCall] = asyncio.Queue(maxsize=EVENTS_MAX)
        self._driver: ControllerDriver | None = None
        self._owner: asyncio.Task[None] | None = None
        # Runs the office's probes of brokers (README, "Failover after kill -9").
        self._prober: BrokerProber | None = None
        self._listeners: list[Callable[[], None]] = []
        self._now_ms = 0
        self._changed = asyncio.Event()  # set (and replaced) when the leader or the office changes
        self._seen: tuple[int | None, int | None] = (None, None)
        self._controller_rng = random.Random(rng.getrandbits(64))

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
        return self._driver is not None and self._driver.office.in_office

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
        office = ControllerOffice(self.config.node_id, self.metadata, self._controller_rng,
                                  self.config.controller_config(),
                                  tick_interval_ms=max(1, self.config.broker_heartbeat_interval_ms // 2))
        self._driver = ControllerDriver(RaftDriver(raft, store, self.metadata, self._transport.send), office,
                                        _answer)
        if raft.restoring:
            log.info("node %s: no quorum-state in %s, or one still restoring (a new cluster or node, or a lost "
                     "disk or file): this voter follows the leader, but it votes and stands for election only once "
                     "every other voter (%s) has answered it, and then only above their epochs and for logs as up "
                     "to date as theirs",
                     self.config.node_id, directory, sorted(self.config.quorum.voter_ids - {self.config.node_id}))
        self._step(Tick(), now_ms)
        self._owner = asyncio.get_running_loop().create_task(self._run(), name=f"quorum-{self.config.node_id}")
        self._prober = BrokerProber(office.broker_probes, self._now,
                                    lambda request: self._call_locally(request, self.config.request_timeout_ms))
        self._prober.start()

    @property
    def is_running(self) -> bool:
        """The owner task is alive (it dies only of a bug, logged): this node follows the metadata."""
        return self._owner is not None and not self._owner.done()

    async def stop(self) -> None:
        """Stop the owner and the sends, answer what is pending with NOT_CONTROLLER, flush and close."""
        if self._prober is not None:
            await self._prober.stop()
            self._prober = None
        if self._owner is not None:
            self._owner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a failure was logged by `_run`
                await self._owner
            self._owner = None
        await self._transport.close()
        await self._raft_connections.close()
        if self._driver is not None:
            now_ms = self._now()
            self._log_changes(self._driver.stop(now_ms))
            while not self._events.empty():
                event = self._events.get_nowait()
                if isinstance(event, _ControllerCall):
                    self._driver.call(event.future, event.request, now_ms)  # NOT_CONTROLLER: stopping
            self._driver.raft.log.flush(now_ms)
            self._driver.raft.log.close()
            self._driver = None
        self._note_changes()

    # ---- inputs --------------------------------------------------------------------------------

    async def handle_raft(self, envelope: Envelope) -> None:
        """A Raft message from a peer; ProtocolError if it does not decode. Dropped when the queue
        is full or the service is stopped: Raft resends what matters."""
        message = from_envelope(envelope, self.config.node_id, self.config.quorum.voter_ids, self.config.cluster_id)
        if self._owner is None:
            return
        self._transport.learn(envelope.source_id, envelope.source_address)
        with contextlib.suppress(asyncio.QueueFull):
            self._events.put_nowait(message)

    def _on_unreachable(self, event: Unreachable) -> None:
        """The transport could not deliver a fetch: Raft hears of it as an event (dropped when the
        queue is full or the service is stopped: the request timeout covers it)."""
        if self._owner is not None:
            with contextlib.suppress(asyncio.QueueFull):
                self._events.put_nowait(event)

    async def handle_controller(self, api: Api, envelope: Envelope) -> Envelope:
        """A controller request forwarded by another node, for this node's office: answered when
        it commits here, or NOT_CONTROLLER naming the leader this node knows of, so the sender
        tries there next."""
        request = request_from_envelope(api, envelope, self.config.cluster_id)
        response = await self._call_locally(request, self.config.request_timeout_ms)
        return Envelope(type(response).__name__, encode(response), self.config.node_id, self._source_address,
                        self.config.cluster_id)

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
                                 self.config.node_id, self._source_address, self.config.cluster_id)
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
        """The clock (monotonic, given by the node), never going back: the Raft core asserts it."""
        self._now_ms = max(self._now_ms, self._clock())
        return self._now_ms

    async def _run(self) -> None:
        try:
            while True:
                event = await self._next_event()
                now_ms = self._now()
                if isinstance(event, Message | Unreachable):
                    self._step(event, now_ms)
                elif isinstance(event, _ControllerCall):
                    self._on_controller_call(event, now_ms)
                else:
                    self._on_timer(now_ms)
        except Exception:
            log.exception("node %s: the quorum task failed; this node no longer follows the metadata log",
                          self.config.node_id)
            raise

    async def _next_event(self) -> Message | Unreachable | _ControllerCall | None:
        """The next queued event, or None when a timer is due (timers first, so a steady stream
        of messages cannot starve elections and check-quorum)."""
        assert self._driver is not None, "the owner runs only while started"
        wait_ms = min(max(0, self._driver.next_tick_ms - self._now()), IDLE_WAIT_MAX_MS)
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
        self._after(lambda driver: driver.on_timer(now_ms))

    def _step(self, event: Message | Unreachable | Tick, now_ms: int) -> None:
        """Hand `event` to Raft through the driver, then everything that follows from it."""
        self._after(lambda driver: driver.step(event, now_ms))

    def _on_controller_call(self, call: _ControllerCall, now_ms: int) -> None:
        if call.future.done():
            return  # the caller gave up
        self._after(lambda driver: driver.call(call.future, call.request, now_ms))

    def _after(self, perform: Callable[[ControllerDriver], list[OfficeChange]]) -> None:
        """Run `perform` on the driver, then tell the listeners and the waiting callers."""
        assert self._driver is not None, "stepped while stopped"
        applied_before = self.metadata.last_applied_offset
        restoring = self._driver.raft.restoring
        self._log_changes(perform(self._driver))
        if restoring and not self._driver.raft.restoring:
            log.info("node %s: every other voter has answered and this voter's log is as up to date as theirs: "
                     "it may vote again", self.config.node_id)
        if self.metadata.last_applied_offset != applied_before:
            self._notify_listeners()
        self._note_changes()

    def _log_changes(self, changes: list[OfficeChange]) -> None:
        for change in changes:
            if isinstance(change, TookOffice):
                log.info("node %s is the active controller in epoch %s from offset %s", self.config.node_id,
                         change.epoch, change.next_offset)
            else:
                assert isinstance(change, LeftOffice), change
                log.info("node %s leaves the controller office of epoch %s: %s", self.config.node_id, change.epoch,
                         change.reason)

    def _notify_listeners(self) -> None:
        for callback in self._listeners:
            try:
                callback()
            except Exception:
                log.exception("node %s: metadata listener %r failed at offset %s", self.config.node_id, callback,
                              self.metadata.last_applied_offset)

    def _note_changes(self) -> None:
        """Wake the callers waiting for a leader or an office when either changed."""
        seen = (self.active_controller_id, self._driver.office.office_epoch if self._driver is not None else None)
        if seen != self._seen:
            if seen[0] != self._seen[0]:
                log.info("node %s: the metadata quorum's leader is %s in epoch %s", self.config.node_id,
                         "unknown" if seen[0] is None else seen[0], self.epoch)
            self._seen = seen
            self._changed.set()
            self._changed = asyncio.Event()


def _answer(future: object, response: Any) -> None:
    """The office's answer to a call: resolves the caller's future, unless it gave up."""
    assert isinstance(future, asyncio.Future), future
    if not future.done():
        future.set_result(response)
