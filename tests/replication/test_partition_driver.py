"""PartitionDriver performs a Ready in the order Ready's docstring fixes (STYLE §7: written once)."""

from __future__ import annotations

from collections.abc import Callable

from replication.events import ProduceRequest
from replication.partition_driver import PartitionDriver
from replication.ready import (
    AlterPartitionProposal,
    Completion,
    FollowerFetchPosition,
    HighWatermarkChange,
    LogChange,
)
from tests.replication.harness import Broker, batch, make_leader


class Recorder(PartitionDriver):
    def __init__(self, broker: Broker) -> None:
        super().__init__(broker.partition)
        self.calls: list[str] = []

    def on_log_change(self, change: LogChange) -> None:
        self.calls.append(f"log {type(change).__name__}")

    def on_high_watermark(self, change: HighWatermarkChange) -> None:
        self.calls.append(f"hw {change.old}->{change.new}")

    def send_alter_partition(self, proposal: AlterPartitionProposal) -> None:
        self.calls.append("alter")

    def complete(self, completion: Completion) -> None:
        self.calls.append(f"complete {completion.request_id}")

    def fetch(self, position: FollowerFetchPosition | None) -> None:
        self.calls.append(f"fetch {position is not None}")

    def schedule_tick(self, at_ms: int | None) -> None:
        self.calls.append(f"tick {at_ms}")


def test_driver_performs_ready_in_order(brokers: Callable[..., list[Broker]]) -> None:
    leader, *_ = brokers()
    make_leader(leader, 1, isr=(1,))
    driver = Recorder(leader)
    driver.step(ProduceRequest(5, batch(b"a"), -1, 100), now_ms=0)
    assert driver.calls == ["log Appended", "hw 0->1", "complete 5", "fetch False", "tick None"]
