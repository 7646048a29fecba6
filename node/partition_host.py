"""PartitionHost: one partition core on this broker, driven from the asyncio event loop.

The shared `PartitionDriver` fixes the order of a `Ready`'s work; this subclass supplies the real
effects: completions resolve the `asyncio.Future` of the request that asked (keyed by
`request_id`), AlterPartition proposals go to the active controller through the broker, the
follower's fetch position goes to the replica fetchers, timers are `loop.call_at`, and every
change to the log, HW, role or epoch wakes the long polls watching the partition (log and HW
changes after the step's completions: `PartitionWatchers.notify_soon`).

One owner without a task of its own: `Partition.handle` is synchronous and the event loop runs
one callback at a time, so calling `step` from any coroutine of this broker never interleaves
two events of one core (no lock, no queue).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from node.long_poll import PartitionWatchers
from replication.events import (
    ConsumerFetch,
    DeleteRecords,
    Event,
    FollowerFetch,
    ListOffsets,
    OffsetsForLeaderEpoch,
    ProduceRequest,
    StopReplica,
    Tick,
)
from replication.partition import Partition
from replication.partition_driver import PartitionDriver
from replication.ready import (
    AlterPartitionProposal,
    Completion,
    FollowerFetchPosition,
    HighWatermarkChange,
    LogChange,
    Ready,
    Role,
)
from storage.checkpoint import TopicPartition

AlterPartitionSender = Callable[["PartitionHost", AlterPartitionProposal], None]
FetchPositionListener = Callable[[TopicPartition, FollowerFetchPosition | None], None]
RequestEvent = ProduceRequest | ConsumerFetch | FollowerFetch | ListOffsets | OffsetsForLeaderEpoch | DeleteRecords


class PartitionHost(PartitionDriver):
    """A `Partition` core with its futures, tick timer and the metadata version applied to it.

    `topic_id` is the topic's id when the host was made: a topic deleted and created again under
    the same name is a new host. `applied` is the (leader_epoch, partition_epoch) of the last
    MakeLeader / MakeFollower stepped, so unchanged metadata is not stepped again.
    """

    def __init__(self, partition: Partition, topic_id: str, clock: Callable[[], int], watchers: PartitionWatchers,
                 send_alter_partition: AlterPartitionSender, on_fetch_position: FetchPositionListener) -> None:
        super().__init__(partition)
        self.topic_partition = partition.topic_partition
        self.topic_id = topic_id
        self.applied: tuple[int, int] | None = None
        self._clock = clock
        self._watchers = watchers
        self._send_alter_partition = send_alter_partition
        self._on_fetch_position = on_fetch_position
        self._loop = asyncio.get_running_loop()
        self._futures: dict[int, asyncio.Future[Completion]] = {}
        self._tick_handle: asyncio.TimerHandle | None = None
        self._tick_at_ms: int | None = None

    # -- stepping -------------------------------------------------------------------------------

    def handle_event(self, event: Event) -> Ready:
        """Step `event` at the broker's current time and wake watchers if anything they read moved."""
        before = (self.partition.role, self.partition.leader_epoch)
        ready = self.step(event, self._clock())
        if (ready.role, ready.leader_epoch) != before:
            self._watchers.notify(self.topic_partition)
        return ready

    def submit(self, event: RequestEvent) -> asyncio.Future[Completion]:
        """Step a request event; its future resolves with the completion carrying its `request_id`."""
        assert event.request_id not in self._futures, f"request id {event.request_id} reused on {self.topic_partition}"
        future: asyncio.Future[Completion] = self._loop.create_future()
        self._futures[event.request_id] = future
        try:
            self.handle_event(event)
        except BaseException:
            # A bug, or an OSError the log could not take back (a failed flush after the append, a
            # failed undo); a write the log took back is a KafkaStorageError answer. The caller's
            # request fails (500); no future may stay behind to be "unanswered" at stop.
            self._futures.pop(event.request_id, None)
            raise
        return future

    def stop(self) -> None:
        """StopReplica (parked produces and DeleteRecords are answered NOT_LEADER_OR_FOLLOWER) and
        drop the timer; the log stays with the LogManager."""
        self.handle_event(StopReplica())
        self._cancel_tick()
        assert not self._futures, f"{self.topic_partition}: {len(self._futures)} requests unanswered after stop"

    @property
    def is_stopped(self) -> bool:
        return self.partition.role == Role.STOPPED

    # -- the driver's effects --------------------------------------------------------------------

    def on_log_change(self, change: LogChange) -> None:
        self._watchers.notify_soon(self.topic_partition)

    def on_high_watermark(self, change: HighWatermarkChange) -> None:
        self._watchers.notify_soon(self.topic_partition)

    def send_alter_partition(self, proposal: AlterPartitionProposal) -> None:
        self._send_alter_partition(self, proposal)

    def complete(self, completion: Completion) -> None:
        future = self._futures.pop(completion.request_id, None)
        assert future is not None, f"{self.topic_partition}: completion for unknown request {completion.request_id}"
        if not future.done():  # the asker may have been cancelled (client gone)
            future.set_result(completion)

    def fetch(self, position: FollowerFetchPosition | None) -> None:
        self._on_fetch_position(self.topic_partition, position)

    def schedule_tick(self, at_ms: int | None) -> None:
        """One timer per core, at the time the core asked for (ticking early is harmless)."""
        if at_ms == self._tick_at_ms or self.is_stopped:
            return
        self._cancel_tick()
        if at_ms is None:
            return
        delay_s = max(at_ms - self._clock(), 0) / 1000
        self._tick_at_ms = at_ms
        self._tick_handle = self._loop.call_at(self._loop.time() + delay_s, self._on_tick_timer)

    def _cancel_tick(self) -> None:
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self._tick_handle = None
        self._tick_at_ms = None

    def _on_tick_timer(self) -> None:
        self._tick_handle = None
        self._tick_at_ms = None
        if not self.is_stopped:
            self.handle_event(Tick())
