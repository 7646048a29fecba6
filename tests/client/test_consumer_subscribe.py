"""Consumers that subscribe, against the fake cluster (its group APIs are the node's own edge and
core): pause state across a rebalance, pattern subscriptions that pick up new topics.

Method: members poll side by side in tasks (`Polling`); a test awaits the state it waits for,
checked after every poll; the time limit is only a safety net.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from client.consumer import Consumer
from tests.client.fake_node import FakeCluster

SETTINGS = {"group_id": "g", "auto_offset_reset": "earliest", "heartbeat_interval_ms": 20, "fetch_max_wait_ms": 20,
            "retry_backoff_ms": 10, "max_poll_interval_ms": 5000}


class Polling:
    """Members polling side by side, each in its own task (a join waits for the others to join
    too); `until(condition)` waits until the condition holds after some member's poll."""

    def __init__(self, *members: Consumer) -> None:
        self.polled = asyncio.Condition()
        self.tasks = [asyncio.create_task(self._run(member)) for member in members]

    async def _run(self, member: Consumer) -> None:
        while True:
            await member.poll(timeout_ms=20)
            async with self.polled:
                self.polled.notify_all()

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        async with self.polled:
            try:
                await asyncio.wait_for(self.polled.wait_for(condition), 10)
            except TimeoutError:
                raise AssertionError(f"not reached in 10 s: {what}") from None

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def settled(member: Consumer) -> bool:
    return member.member is not None and not member.member.needs_join


async def test_a_rebalance_forgets_the_pause_of_partitions_taken_away(cluster: FakeCluster) -> None:
    first = Consumer(cluster.bootstrap, **SETTINGS)  # type: ignore[arg-type]
    second = Consumer(cluster.bootstrap, **SETTINGS)  # type: ignore[arg-type]
    first.subscribe(["t"])
    polling = Polling(first)
    try:
        await polling.until(lambda: settled(first) and len(first.assignment()) == 3, "first holds all three")
        first.pause(first.assignment())
        second.subscribe(["t"])
        await polling.stop()
        polling = Polling(first, second)
        await polling.until(lambda: settled(first) and settled(second) and len(second.assignment()) > 0,
                            "the second member gets its share")
        kept = first.assignment()
        assert 0 < len(kept) < 3
        assert first.paused() == kept  # the partitions it kept stay paused
        await polling.stop()
        await second.close()
        polling = Polling(first)
        await polling.until(lambda: settled(first) and len(first.assignment()) == 3, "first takes back every partition")
        assert first.paused() == kept  # those it got back had been taken away: not paused any more
    finally:
        await polling.stop()
        await first.close()
        await second.close()
