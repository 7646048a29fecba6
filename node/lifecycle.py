"""BrokerLifecycleManager: the broker's registration, heartbeats and controlled shutdown.

Kafka's BrokerLifecycleManager (KIP-631). At start the broker registers with the active controller
under a fresh incarnation id, its advertised endpoints and rack, the directory ids of its log dirs
(KIP-858) and the broker epoch its clean-shutdown marker named (KIP-966, KAFKA-15586: -1 after a
crash), so that the controller can tell a clean restart from one that may have lost unflushed
records or a whole dir; it gets a broker epoch, and logs the controller's warning when the
restart counted as unclean. It then
heartbeats every `broker.heartbeat.interval.ms` with the metadata offset it has applied, asking to
stay fenced (`want_fence`) until it has applied the metadata up to its own registration (the
owner says so with `set_ready_to_unfence`); the controller then unfences it and it may lead and
join ISRs. A heartbeat refused with STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED (another
registration moved the controller on) makes it register again. A controlled shutdown replaces
the heartbeats by ControlledShutdown requests until the controller answers `should_shut_down`
(it leads nothing and has seen the records that moved its leaderships), or the time is up.

Heartbeats carry the log ends of this broker's replicas of partitions that have no leader and an
empty ISR and ELR (the broker core's `offline_log_ends`): the controller elects the most complete
of them once every replica has reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from controller.controller_api import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ReplicaLogInfo,
)
from controller.metadata import ClusterMetadata
from node.broker_settings import BrokerSettings
from replication.broker_ready import ReplicaLogEnd
from storage.error_codes import ErrorCode

log = logging.getLogger(__name__)

NO_BROKER_EPOCH = -1
_REREGISTER_ERRORS = frozenset({ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED})


def replica_log_info(ends: tuple[ReplicaLogEnd, ...]) -> tuple[ReplicaLogInfo, ...]:
    """The broker core's offline log ends in the heartbeat's shape."""
    return tuple(ReplicaLogInfo(end.topic_id, end.partition_index, end.leader_epoch, end.last_written_leader_epoch,
                                end.log_end_offset) for end in ends)


class Quorum(Protocol):
    """What the broker needs of the node's quorum service."""

    @property
    def metadata(self) -> ClusterMetadata: ...

    @property
    def metadata_offset(self) -> int: ...

    def add_listener(self, callback: Callable[[], None]) -> None: ...

    async def controller_request(self, request: Any, timeout_ms: int) -> Any: ...


class BrokerState(enum.Enum):
    """Kafka's BrokerState, the states this broker passes through."""

    NOT_RUNNING = "not_running"
    STARTING = "starting"  # registering, or registered and catching up with metadata
    RECOVERY = "recovery"  # caught up, still fenced
    RUNNING = "running"  # unfenced
    PENDING_CONTROLLED_SHUTDOWN = "pending_controlled_shutdown"
    SHUTTING_DOWN = "shutting_down"


class BrokerLifecycleManager:
    """Registration and heartbeats of one broker process; owns the heartbeat task.

    `broker_epoch` is NO_BROKER_EPOCH until a registration succeeds. `on_registered` is called after
    each successful registration (the owner may now apply metadata at or past the new epoch).
    `previous_broker_epoch` is what the next registration claims: the epoch of the clean-shutdown
    marker at start, then this process's own latest epoch (a process that registers again has lost
    nothing it wrote).
    """

    def __init__(self, settings: BrokerSettings, quorum: Quorum, on_registered: Callable[[], None],
                 log_dirs: tuple[str, ...], previous_broker_epoch: int,
                 offline_log_ends: Callable[[], tuple[ReplicaLogEnd, ...]]) -> None:
        self.settings = settings
        self.incarnation_id = uuid.uuid4().hex  # new for every process start (KIP-631)
        self.broker_epoch = NO_BROKER_EPOCH
        self.log_dirs = log_dirs
        self.previous_broker_epoch = previous_broker_epoch
        self._offline_log_ends = offline_log_ends
        self.state = BrokerState.NOT_RUNNING
        self._quorum = quorum
        self._on_registered = on_registered
        self._ready_to_unfence = False
        self._wakeup = asyncio.Event()
        self._unfenced = asyncio.Event()
        self._last_unfenced_s = 0.0  # loop time of the last heartbeat answered "unfenced"
        self._task: asyncio.Task[None] | None = None

    @property
    def is_fenced(self) -> bool:
        """Fenced, or as good as: no heartbeat was answered unfenced within a broker session, so the
        controller has fenced this broker or will (after a pause or a partition, until it hears again)."""
        if not self._unfenced.is_set():
            return True
        session_s = self.settings.broker_session_timeout_ms / 1000
        return asyncio.get_running_loop().time() - self._last_unfenced_s > session_s

    def start(self) -> None:
        assert self._task is None, "lifecycle already started"
        self.state = BrokerState.STARTING
        self._task = asyncio.create_task(self._run(), name=f"broker-lifecycle-{self.settings.node_id}")

    def set_ready_to_unfence(self) -> None:
        """The owner applied the metadata up to its registration: ask to be unfenced at once."""
        if not self._ready_to_unfence:
            self._ready_to_unfence = True
            self._wakeup.set()

    def on_metadata(self) -> None:
        """New metadata was applied: a controlled shutdown re-asks at once."""
        if self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            self._wakeup.set()

    async def wait_unfenced(self) -> None:
        await self._unfenced.wait()

    async def stop(self) -> None:
        """End the heartbeats (the controller fences the broker after its session timeout)."""
        if self.state != BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            self.state = BrokerState.SHUTTING_DOWN
        self._unfenced.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- registration and heartbeats --------------------------------------------------------------

    async def _run(self) -> None:
        interval_s = self.settings.broker_heartbeat_interval_ms / 1000
        while True:
            self._wakeup.clear()
            try:
                if self.broker_epoch == NO_BROKER_EPOCH:
                    await self._register()
                else:
                    await self._heartbeat()
            except Exception:
                log.exception("broker %s: %s failed", self.settings.node_id,
                              "registration" if self.broker_epoch == NO_BROKER_EPOCH else "heartbeat")
            if self._wakeup.is_set():
                continue
            try:
                async with asyncio.timeout(interval_s):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    async def _register(self) -> None:
        settings = self.settings
        request = BrokerRegistrationRequest(settings.node_id, self.incarnation_id,
                                            dict(settings.advertised_endpoints), settings.broker_rack,
                                            self.log_dirs, self.previous_broker_epoch)
        response = await self._quorum.controller_request(request, settings.request_timeout_ms)
        assert isinstance(response, BrokerRegistrationResponse), response
        if response.error_code != ErrorCode.NONE:
            log.warning("broker %s: registration refused: %s %s", settings.node_id, response.error_code.name,
                        response.error_message)
            return
        log.info("broker %s: registered with broker epoch %s", settings.node_id, response.broker_epoch)
        if response.warning is not None:
            log.warning("broker %s: the controller took this start as an unclean restart: %s", settings.node_id,
                        response.warning)
        self.broker_epoch = response.broker_epoch
        self.previous_broker_epoch = response.broker_epoch
        self._ready_to_unfence = False
        self._unfenced.clear()
        self.state = BrokerState.STARTING
        self._wakeup.set()  # heartbeat at once (Kafka sends the first one right after registering)
        self._on_registered()

    async def _heartbeat(self) -> None:
        settings = self.settings
        request = BrokerHeartbeatRequest(settings.node_id, self.broker_epoch, self._quorum.metadata_offset,
                                         want_fence=not self._ready_to_unfence,
                                         replica_log_info=replica_log_info(self._offline_log_ends()))
        response = await self._quorum.controller_request(request, settings.request_timeout_ms)
        assert isinstance(response, BrokerHeartbeatResponse), response
        if response.error_code in _REREGISTER_ERRORS:
            log.warning("broker %s: heartbeat refused (%s); registering again", settings.node_id,
                        response.error_code.name)
            self.broker_epoch = NO_BROKER_EPOCH
            self._unfenced.clear()
            self._wakeup.set()
            return
        if response.error_code != ErrorCode.NONE:
            log.info("broker %s: heartbeat failed: %s %s", settings.node_id, response.error_code.name,
                     response.error_message)
            return
        if response.is_fenced:
            self._unfenced.clear()
            self.state = BrokerState.RECOVERY if response.is_caught_up else BrokerState.STARTING
        else:
            if self.state != BrokerState.RUNNING:
                log.info("broker %s: unfenced", settings.node_id)
            self._last_unfenced_s = asyncio.get_running_loop().time()
            self._unfenced.set()
            self.state = BrokerState.RUNNING

    # -- controlled shutdown -----------------------------------------------------------------------

    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Hand leaderships over before stopping; True when the controller says the broker may stop.
        Heartbeats end first: the ControlledShutdown requests keep the session alive meanwhile."""
        await self.stop()
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        if self.broker_epoch == NO_BROKER_EPOCH:
            return False  # never registered: leads nothing
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + timeout_ms / 1000
        interval_s = self.settings.broker_heartbeat_interval_ms / 1000
        session_s = self.settings.broker_session_timeout_ms / 1000
        last_answer_s = loop.time()
        try:
            while (remaining_s := deadline_s - loop.time()) > 0:
                self._wakeup.clear()
                request = ControlledShutdownRequest(self.settings.node_id, self.broker_epoch,
                                                    self._quorum.metadata_offset)
                timeout_request_ms = max(1, min(self.settings.request_timeout_ms, int(remaining_s * 1000),
                                                self.settings.broker_session_timeout_ms))
                response = await self._quorum.controller_request(request, timeout_request_ms)
                if response.error_code == ErrorCode.NONE and response.should_shut_down:
                    log.info("broker %s: controlled shutdown complete", self.settings.node_id)
                    return True
                if response.error_code in _REREGISTER_ERRORS:
                    return False  # the controller no longer knows this process: nothing to hand over
                if response.error_code == ErrorCode.NONE:
                    last_answer_s = loop.time()
                elif loop.time() - last_answer_s >= session_s:
                    # No controller for a whole session (the quorum is gone, e.g. every node is stopping):
                    # any controller that comes back fences this broker anyway, so waiting gains nothing.
                    log.warning("broker %s: no controller answered for %d ms; stopping without controlled "
                                "shutdown", self.settings.node_id, self.settings.broker_session_timeout_ms)
                    return False
                try:
                    async with asyncio.timeout(min(interval_s, max(deadline_s - loop.time(), 0))):
                        await self._wakeup.wait()
                except TimeoutError:
                    pass
            log.warning("broker %s: controlled shutdown not complete after %d ms; stopping anyway",
                        self.settings.node_id, timeout_ms)
            return False
        finally:
            self.state = BrokerState.SHUTTING_DOWN
