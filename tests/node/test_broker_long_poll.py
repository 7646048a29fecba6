"""PartitionWatchers: a wait ends when a watched partition is notified, or at its timeout; a
finished wait leaves nothing behind. Method: one event loop, no I/O."""

from __future__ import annotations

import asyncio

from node.long_poll import PartitionWatchers
from storage.checkpoint import TopicPartition

A, B, C = (TopicPartition("orders", index) for index in range(3))


async def test_wait_ends_when_any_watched_partition_is_notified() -> None:
    watchers = PartitionWatchers()
    waiting = asyncio.create_task(watchers.wait([A, B], 60_000))
    await asyncio.sleep(0)
    watchers.notify(C)
    await asyncio.sleep(0)
    assert not waiting.done()
    watchers.notify(B)
    async with asyncio.timeout(5):
        assert await waiting is True
    assert watchers._watchers == {}


async def test_wait_times_out_and_unregisters() -> None:
    watchers = PartitionWatchers()
    assert await watchers.wait([A], 1) is False
    assert watchers._watchers == {}
    assert await watchers.wait([], 60_000) is False


async def test_notify_all_wakes_every_wait() -> None:
    watchers = PartitionWatchers()
    waits = [asyncio.create_task(watchers.wait([partition], 60_000)) for partition in (A, B)]
    await asyncio.sleep(0)
    watchers.notify_all()
    async with asyncio.timeout(5):
        assert await asyncio.gather(*waits) == [True, True]


async def test_notify_soon_wakes_after_the_current_callback_and_once_per_partition() -> None:
    watchers = PartitionWatchers()
    waiting = asyncio.create_task(watchers.wait([A], 60_000))
    await asyncio.sleep(0)
    watchers.notify_soon(A)
    watchers.notify_soon(A)
    assert watchers._watchers.keys() == {A}  # nothing woken yet: the step's completions go first
    async with asyncio.timeout(5):
        assert await waiting is True
    assert watchers._watchers == {}
    assert watchers._pending == set()
