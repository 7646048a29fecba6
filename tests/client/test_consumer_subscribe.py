"""Consumers that subscribe, against the fake cluster (its group APIs are the node's own edge and
core): pause state across a rebalance, pattern subscriptions that pick up new topics.

Method: members poll side by side in tasks (`Polling`); a test awaits the state it waits for,
checked after every poll; the time limit is only a safety net.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from client.consumer import Consumer
from client.fetched_batch import ConsumerRecord
from client.producer import Producer
from tests.client.fake_node import FakeCluster
from wire.topic_partition import TopicPartition

SETTINGS = {"group_id": "g", "auto_offset_reset": "earliest", "heartbeat_interval_ms": 20, "fetch_max_wait_ms": 20,
            "retry_backoff_ms": 10, "max_poll_interval_ms": 5000}


class Polling:
    """Members polling side by side, each in its own task (a join waits for the others to join
    too); `until(condition)` waits until the condition holds after some member's poll."""

    def __init__(self, *members: Consumer) -> None:
        self.polled = asyncio.Condition()
        self.records: list[ConsumerRecord] = []
        self.tasks = [asyncio.create_task(self._run(member)) for member in members]

    async def _run(self, member: Consumer) -> None:
        while True:
            self.records += await member.poll(timeout_ms=20)
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


async def produce(cluster: FakeCluster, topic: str, count: int) -> None:
    async with Producer(cluster.bootstrap) as producer:
        await (await producer.send_many(topic, [b"v%d" % i for i in range(count)], partition=0))


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


async def test_a_pattern_subscription_picks_up_a_new_matching_topic(cluster: FakeCluster) -> None:
    cluster.create_topic("orders-eu")
    cluster.create_topic("orders-eu.archive")  # the whole name must match, as with Java's Matcher.matches()
    consumer = Consumer(cluster.bootstrap, metadata_max_age_ms=50, **SETTINGS)  # type: ignore[arg-type]
    consumer.subscribe(pattern=re.compile(r"orders-[a-z]+"))
    polling = Polling(consumer)
    try:
        await polling.until(lambda: settled(consumer) and consumer.assignment() == {TopicPartition("orders-eu", 0)},
                            "the matching topic is assigned")
        cluster.create_topic("orders-us", partitions=2)
        await produce(cluster, "orders-us", 3)
        await polling.until(lambda: len(polling.records) == 3, "the new topic's records are read")
        assert consumer.assignment() == {TopicPartition("orders-eu", 0), TopicPartition("orders-us", 0),
                                         TopicPartition("orders-us", 1)}
        assert {record.topic for record in polling.records} == {"orders-us"}
    finally:
        await polling.stop()
        await consumer.close()


async def test_a_pattern_subscription_leaves_out_internal_topics(cluster: FakeCluster) -> None:
    cluster.create_topic("__consumer_offsets", partitions=2)
    async with Consumer(cluster.bootstrap, **SETTINGS) as consumer:  # type: ignore[arg-type]
        consumer.subscribe(re.compile(".*"))
        polling = Polling(consumer)
        try:
            await polling.until(lambda: settled(consumer), "the consumer joined")
        finally:
            await polling.stop()
        assert {tp.topic for tp in consumer.assignment()} == {"t"}
