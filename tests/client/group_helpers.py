"""Consumers that subscribe to one group against the fake nodes, waited for until they share the
partitions (the admin and CLI tests describe such a live group)."""

from __future__ import annotations

import asyncio

from client.consumer import Consumer
from wire.topic_partition import TopicPartition


class Assigned:
    """A rebalance listener: `changed` is set at every assignment."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.changed.set()


async def share(consumers: list[Consumer], listener: Assigned, partitions: int) -> None:
    """Each consumer polls in its own task (a join waits for the rebalance) until, after some
    assignment, they hold disjoint, non-empty shares of all partitions."""
    async def run(consumer: Consumer) -> None:
        while True:
            await consumer.poll(timeout_ms=50)

    def shared() -> bool:
        held = [consumer.assignment() for consumer in consumers
                if consumer.member is not None and not consumer.member.needs_join]
        every = set().union(*held)
        return len(held) == len(consumers) and all(held) and sum(map(len, held)) == len(every) == partitions

    tasks = [asyncio.create_task(run(consumer)) for consumer in consumers]
    try:
        async with asyncio.timeout(20):
            while not shared():
                listener.changed.clear()
                await listener.changed.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def start_members(bootstrap: str, group: str, topic: str, partitions: int, count: int) -> list[Consumer]:
    """`count` consumers of `group` subscribed to `topic`, returned once they share its partitions;
    they keep heartbeating (close them). Auto-commit is off, so only explicit commits are seen."""
    consumers = [Consumer(bootstrap, group_id=group, fetch_max_wait_ms=10, heartbeat_interval_ms=50,
                          enable_auto_commit=False) for _ in range(count)]
    listener = Assigned()
    for consumer in consumers:
        consumer.subscribe([topic], listener)
    await share(consumers, listener, partitions)
    return consumers
