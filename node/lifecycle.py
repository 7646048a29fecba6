"""BrokerLifecycleManager: the broker's registration, heartbeats and controlled shutdown, on asyncio.

The decisions are the core's (`controller.broker_lifecycle.BrokerLifecycle`: when to register or
heartbeat, what to claim, fenced or not, when a controlled shutdown ends); this module only sends
the requests it asks for to the active controller (through the quorum service, one task each) and
hands the answers back, ticks it when it asked, logs its notices, and lets the broker await
unfencing and the end of a controlled shutdown. The heartbeat's log ends of leaderless replicas
(KIP-966) come from the broker core with each metadata change (`on_metadata`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from controller.broker_lifecycle import (
    BeginControlledShutdown,
    BrokerLifecycle,
    BrokerLifecycleConfig,
    BrokerState,
    ControllerAnswer,
    LifecycleEvent,
    LifecycleTick,
    MetadataApplied,
    ShutdownOutcome,
    StartLifecycle,
    StopLifecycle,
)
from controller.metadata import ClusterMetadata
from node.broker_settings import BrokerSettings
from replication.broker_ready import ReplicaLogEnd
from wire.broker_lifecycle import ReplicaLogInfo

log = logging.getLogger(__name__)

def replica_log_info(ends: tuple[ReplicaLogEnd, ...]) -> tuple[ReplicaLogInfo, ...]:
    """The broker core's offline log ends in the heartbeat's shape."""
    return tuple(ReplicaLogInfo(end.topic_id, end.partition_index, end.leader_epoch, end.last_written_leader_epoch,
                                end.log_end_offset, end.log_start_offset, end.epoch_start_offsets,
                                end.may_be_committed_end_offset) for end in ends)


class Quorum(Protocol):
    """What the broker needs of the node's quorum service."""

    @property
    def metadata(self) -> ClusterMetadata: ...

    @property
    def metadata_offset(self) -> int: ...

    def add_listener(self, callback: Callable[[], None]) -> None: ...

    async def controller_request(self, request: Any, timeout_ms: int) -> Any: ...


class BrokerLifecycleManager:
    """The lifecycle core of one broker process and its I/O. `on_registered` is called after each
    successful registration (the owner may now apply metadata at or past the new epoch), `on_lease`
    with each new end of its lease (controller/broker_lifecycle.py)."""

    def __init__(self, settings: BrokerSettings, quorum: Quorum, on_registered: Callable[[], None],
                 on_lease: Callable[[int], None], log_dirs: tuple[str, ...], previous_broker_epoch: int,
                 clock: Callable[[], int]) -> None:
        self.settings = settings
        self.incarnation_id = uuid.uuid4().hex  # new for every process start (KIP-631)
        self._previous_broker_epoch = previous_broker_epoch
        self._quorum = quorum
        self._on_registered = on_registered
        self._on_lease = on_lease
        self._lease_until_ms = -1
        self._clock = clock
        config = BrokerLifecycleConfig(
            broker_id=settings.node_id,
            endpoints=tuple(sorted(settings.advertised_endpoints.items())),
            rack=settings.broker_rack,
            log_dirs=log_dirs,
            heartbeat_interval_ms=settings.broker_heartbeat_interval_ms,
            session_timeout_ms=settings.broker_session_timeout_ms,
            request_timeout_ms=settings.request_timeout_ms,
        )
        self.core = BrokerLifecycle(config, clock())
        self._unfenced = asyncio.Event()
        self._shutdown: asyncio.Future[ShutdownOutcome] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def broker_epoch(self) -> int:
        return self.core.broker_epoch

    @property
    def state(self) -> BrokerState:
        return self.core.state

    @property
    def is_fenced(self) -> bool:
        """Fenced, or as good as: no heartbeat was answered unfenced within a broker session, so the
        controller has fenced this broker or will (after a pause or a partition, until it hears again)."""
        return self.core.is_fenced(self._clock())

    def start(self) -> None:
        self._step(StartLifecycle(self.incarnation_id, self._previous_broker_epoch))

    def on_metadata(self, metadata_offset: int, caught_up: bool, offline_log_ends: tuple[ReplicaLogEnd, ...]) -> None:
        """The broker applied metadata up to `metadata_offset` (`caught_up`: including its
        registration, so it asks to be unfenced)."""
        self._step(MetadataApplied(metadata_offset, caught_up, replica_log_info(offline_log_ends)))

    async def wait_unfenced(self) -> None:
        await self._unfenced.wait()

    async def stop(self) -> None:
        """End the heartbeats (the controller fences the broker after its session timeout)."""
        self._step(StopLifecycle())
        await self._cancel_all()

    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Hand leaderships over before stopping; True when the controller says the broker may stop."""
        self._shutdown = asyncio.get_running_loop().create_future()
        self._step(BeginControlledShutdown(timeout_ms))
        try:
            outcome = await self._shutdown
        finally:
            await self._cancel_all()
        return outcome == ShutdownOutcome.HANDED_OVER

    # -- the core and its Ready --------------------------------------------------------------------

    def _step(self, event: LifecycleEvent) -> None:
        ready = self.core.handle(event, self._clock())
        for level, message in ready.notices:
            log.log(logging.WARNING if level == "warning" else logging.INFO, message)
        if ready.request is not None:
            task = asyncio.create_task(self._send(*ready.request), name=f"broker-lifecycle-{self.settings.node_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if ready.unfenced:
            self._unfenced.set()
        else:
            self._unfenced.clear()
        if ready.shutdown is not None and self._shutdown is not None and not self._shutdown.done():
            self._shutdown.set_result(ready.shutdown)
        self._schedule(ready.next_tick_ms)
        if ready.lease_until_ms != self._lease_until_ms:
            self._lease_until_ms = ready.lease_until_ms
            self._on_lease(ready.lease_until_ms)
        if ready.registered is not None:
            self._on_registered()

    async def _send(self, request_id: int, request: Any) -> None:
        try:
            response = await self._quorum.controller_request(request, self.settings.request_timeout_ms)
        except Exception:
            log.exception("broker %s: %s failed", self.settings.node_id, type(request).__name__)
            return  # the core gives the request up at its deadline
        self._step(ControllerAnswer(request_id, response))

    def _schedule(self, at_ms: int | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if at_ms is None:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(loop.time() + max(at_ms - self._clock(), 0) / 1000,
                                   lambda: self._step(LifecycleTick()))

    async def _cancel_all(self) -> None:
        self._schedule(None)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
