"""Rebalances of subscribed consumers against the fake cluster (the node's own group edge and core):
cooperative-sticky hands over only what moves, in two generations, while the members go on
reading what they keep (KIP-429); range and roundrobin revoke everything first (eager); a member
the group went on without hands its partitions over as lost.

Method: each member polls in a task and records what it read and what its rebalance listener was
told; tests await the listener's calls (an event per call), never a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from client.consumer import Consumer
from client.errors import TributaryError
from client.producer import Producer
from tests.client.fake_node import FakeCluster
from wire.group_membership import LeaveGroupRequest
from wire.topic_partition import TopicPartition

TOPIC = "shared"
PARTITIONS = 4
EVERY = {TopicPartition(TOPIC, n) for n in range(PARTITIONS)}
WAIT_S = 20


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    async with FakeCluster(tmp_path) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS)
        yield cluster


class Member:
    """A subscribed consumer polling in a task; `calls` are its listener's (name, partitions)."""

    def __init__(self, bootstrap: str, strategy: str = "cooperative-sticky") -> None:
        self.consumer = Consumer(bootstrap, group_id="g", auto_offset_reset="earliest", heartbeat_interval_ms=50,
                                 fetch_max_wait_ms=50, partition_assignment_strategy=strategy)
        self.calls: list[tuple[str, set[TopicPartition]]] = []
        self.seen: list[tuple[TopicPartition, int]] = []
        self.called = asyncio.Event()
        self.consumer.subscribe([TOPIC], self)
        self.task = asyncio.create_task(self._run())

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self._record("revoked", partitions)

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self._record("assigned", partitions)

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self._record("lost", partitions)

    def _record(self, name: str, partitions: set[TopicPartition]) -> None:
        self.calls.append((name, set(partitions)))
        self.called.set()

    async def _run(self) -> None:
        while True:
            for record in await self.consumer.poll(timeout_ms=100):
                self.seen.append((TopicPartition(record.topic, record.partition), record.offset))

    async def until(self, check: Callable[[], bool], what: str) -> None:
        """Wait for the listener's calls until `check()` holds."""
        async with asyncio.timeout(WAIT_S):
            while not check():
                if self.task.done():
                    raise AssertionError(f"the member stopped before {what}") from self.task.exception()
                self.called.clear()
                await self.called.wait()

    def holds(self) -> set[TopicPartition]:
        return self.consumer.assignment()

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.consumer.close()


async def produce(fake: FakeCluster, per_partition: int) -> None:
    async with Producer(fake.bootstrap) as producer:
        for n in range(PARTITIONS):
            await (await producer.send_many(TOPIC, [b"v"] * per_partition, partition=n))


async def read_all(members: list[Member], count: int) -> None:
    async with asyncio.timeout(WAIT_S):
        while sum(len(member.seen) for member in members) < count:
            await asyncio.sleep(0.01)  # records arrive through polls: there is no event to await


async def test_a_joining_member_takes_its_share_while_the_first_keeps_reading_the_rest(fake: FakeCluster) -> None:
    await produce(fake, 5)
    first = Member(fake.bootstrap)
    await first.until(lambda: first.holds() == EVERY, "the first member holds every partition")
    await read_all([first], 20)
    second = Member(fake.bootstrap)
    try:
        await second.until(lambda: len(second.holds()) == 2, "the second member gets its share")
        await first.until(lambda: len(first.calls) >= 4, "the first member is told of the second generation")
        kept, moved = first.holds(), second.holds()
        assert kept | moved == EVERY and not kept & moved
        # The first gave up only what moved, once, and was never told it lost or was revoked the rest.
        assert first.calls == [("assigned", EVERY), ("revoked", moved), ("assigned", set()), ("assigned", set())]
        # The second got nothing while the first still owned it (KIP-429), then its share.
        assert second.calls == [("assigned", set()), ("assigned", moved)]
        await produce(fake, 5)
        await read_all([first, second], 40)
        # What the first read before giving a partition up was committed: nothing was read twice.
        assert len(first.seen) + len(second.seen) == len(set(first.seen) | set(second.seen)) == 40
        assert {tp for tp, _ in second.seen} == moved
    finally:
        await second.close()
        await first.close()


@pytest.mark.parametrize("strategy", ["range", "org.apache.kafka.clients.consumer.RoundRobinAssignor"])
async def test_eager_strategies_revoke_every_partition_before_joining(fake: FakeCluster, strategy: str) -> None:
    first = Member(fake.bootstrap, strategy)
    await first.until(lambda: first.holds() == EVERY, "the first member holds every partition")
    second = Member(fake.bootstrap, strategy)
    try:
        await second.until(lambda: len(second.holds()) == 2, "the second member gets its share")
        await first.until(lambda: len(first.calls) >= 3, "the first member is told of the new generation")
        assert first.calls == [("assigned", EVERY), ("revoked", EVERY), ("assigned", first.holds())]
        assert second.calls == [("assigned", second.holds())]
    finally:
        await second.close()
        await first.close()


async def test_partitions_of_a_member_the_group_went_on_without_are_lost_not_revoked(fake: FakeCluster) -> None:
    member = Member(fake.bootstrap)
    try:
        await member.until(lambda: member.holds() == EVERY, "the member holds every partition")
        assert member.consumer.member is not None
        await fake.groups.leave(LeaveGroupRequest("g", (member.consumer.member.member_id,)))  # as a session expiry
        await member.until(lambda: len(member.calls) == 3, "the member is told, and joins again")
        assert member.calls == [("assigned", EVERY), ("lost", EVERY), ("assigned", EVERY)]
    finally:
        await member.close()


async def test_members_with_no_assignor_in_common_cannot_share_a_group(fake: FakeCluster) -> None:
    first = Member(fake.bootstrap, "cooperative-sticky")
    try:
        await first.until(lambda: first.holds() == EVERY, "the first member holds every partition")
        async with Consumer(fake.bootstrap, group_id="g", partition_assignment_strategy=["range"]) as other:
            other.subscribe([TOPIC])
            with pytest.raises(TributaryError, match="INCONSISTENT_GROUP_PROTOCOL"):
                await other.poll(timeout_ms=WAIT_S * 1000)
    finally:
        await first.close()


def test_the_strategy_takes_kafkas_names_and_refuses_others() -> None:
    consumer = Consumer("127.0.0.1:1", partition_assignment_strategy=(
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor, roundrobin"))
    assert [assignor.name for assignor in consumer.assignors] == ["cooperative-sticky", "roundrobin"]
    assert [assignor.name for assignor in Consumer("127.0.0.1:1").assignors] == ["cooperative-sticky"]
    with pytest.raises(ValueError, match="'sticky' is not an assignor we have; use one of range"):
        Consumer("127.0.0.1:1", partition_assignment_strategy="sticky")
