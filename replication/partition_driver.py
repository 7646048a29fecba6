"""PartitionDriver: performs each `Ready` of a `Partition` in the order `Ready` fixes.

The order is written once, here, and shared by the node (asyncio tasks, real sockets and clock
around it) and the simulator (a fake network): STYLE §7. The driver is synchronous and does no I/O
itself; the owner subclasses the effect methods. The default effects do nothing, so an owner
overrides only what it needs.
"""

from __future__ import annotations

from replication.events import Event
from replication.partition import Partition
from replication.ready import (
    AlterPartitionProposal,
    Completion,
    FollowerFetchPosition,
    HighWatermarkChange,
    LogChange,
    Ready,
)


class PartitionDriver:
    """Owns one partition core: `step(event, now_ms)` hands the event to the core, then:

    1. `on_log_change` for each change (already done on the log): checkpoints, metrics;
    2. `on_high_watermark` if the HW moved: checkpoint lazily, wake the owner's long polls;
    3. `send_alter_partition` for each proposal (answer: an `AlterPartitionResponse` event);
    4. `complete` for each completion, in order;
    5. `fetch` with the follower's next position (None: stop fetching);
    6. `schedule_tick` with the time the core wants its next `Tick` (None: no timer).
    """

    def __init__(self, partition: Partition) -> None:
        self.partition = partition

    def step(self, event: Event, now_ms: int) -> Ready:
        ready = self.partition.handle(event, now_ms)
        self.perform(ready)
        return ready

    def perform(self, ready: Ready) -> None:
        for change in ready.log_changes:
            self.on_log_change(change)
        if ready.high_watermark is not None:
            self.on_high_watermark(ready.high_watermark)
        for proposal in ready.messages:
            self.send_alter_partition(proposal)
        for completion in ready.completions:
            self.complete(completion)
        self.fetch(ready.fetch)
        self.schedule_tick(ready.next_tick_ms)

    def on_log_change(self, change: LogChange) -> None:
        """A change the core made to the log."""

    def on_high_watermark(self, change: HighWatermarkChange) -> None:
        """The HW moved."""

    def send_alter_partition(self, proposal: AlterPartitionProposal) -> None:
        """Send the proposal to the active controller."""

    def complete(self, completion: Completion) -> None:
        """Answer the request `completion.request_id`."""

    def fetch(self, position: FollowerFetchPosition | None) -> None:
        """Fetch from the leader at `position` unless a fetch is in flight (None: stop fetching)."""

    def schedule_tick(self, at_ms: int | None) -> None:
        """Tick the core no later than `at_ms`."""
