"""Consumer groups of Kafka clients (confluent-kafka, kafka-python, aiokafka, each on its own) over
the Kafka listener: members, each a process of its own, share a topic's six partitions disjointly
and rebalance when one joins, when one leaves (closes) and when one is killed with -9 (its session
runs out), with every produced record processed; the group's committed offsets, read back with the
client's committed(), are where the last member stopped, and a consumer started afterwards resumes
there (it sees only what was produced since). confluent's AdminClient lists and describes the group
(Stable, each member's partitions) and deletes it with its offsets once every member closed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client.admin import Admin, NewTopic
from client.producer import Producer
from node.dev import DevCluster
from tests.node.cluster_harness import eventually, start_cluster, stopped

pytestmark = pytest.mark.kafka_clients

PARTITIONS = 6
GROUP_SETTINGS = {"group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0"}
ROOT = Path(__file__).parents[2]
CLIENTS = ["confluent", "kafka-python", "aiokafka"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("kafka-groups"), **GROUP_SETTINGS))


class Member:
    """tests/kafka/group_member.py in a process of its own: what it was assigned last and processed."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.assigned: set[int] | None = None
        self.values: set[str] = set()
        self.closed = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, client: str, cluster: DevCluster, topic: str, group: str) -> Member:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.kafka.group_member", client, cluster.kafka_bootstrap, topic, group, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            event = json.loads(line)
            if "assigned" in event:
                self.assigned = set(event["assigned"])
            elif "value" in event:
                self.values.add(event["value"])
            elif "closed" in event:
                self.closed.set()

    async def close(self) -> None:
        """SIGTERM: the member leaves the group (LeaveGroup) and exits."""
        self.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(self.closed.wait(), 30)
        await asyncio.wait_for(self.process.wait(), 30)

    async def kill(self) -> None:
        self.process.kill()
        await self.process.wait()
        self.assigned = None


def settled(members: list[Member]) -> bool:
    """Each member holds partitions, none twice, all six between them."""
    held = [member.assigned for member in members]
    if any(not partitions for partitions in held):
        return False
    counts = Counter(partition for partitions in held for partition in partitions or ())
    return sorted(counts) == list(range(PARTITIONS)) and set(counts.values()) == {1}


async def produce(cluster: DevCluster, topic: str, batch: int, count: int = 60) -> set[str]:
    """`count` values, spread evenly over the partitions (by our own client, over HTTP)."""
    values = [f"{batch}-{n:03d}" for n in range(count)]
    async with Producer(cluster.bootstrap) as producer:
        futures = [await producer.send(topic, value.encode(), partition=n % PARTITIONS)
                   for n, value in enumerate(values)]
        await asyncio.gather(*futures)
    return set(values)


async def processed(members: list[Member], values: set[str], what: str) -> None:
    async def check() -> bool:
        return values <= set().union(*(member.values for member in members))
    await eventually(check, what)


async def group_settles(members: list[Member], what: str) -> None:
    async def check() -> bool:
        return settled(members)
    await eventually(check, what)


@pytest.mark.parametrize("client", CLIENTS)
async def test_members_share_partitions_rebalance_on_join_leave_and_kill_and_resume_at_commits(
        cluster: DevCluster, client: str) -> None:
    topic, group = f"{client}-shared", f"{client}-sharers"
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
    first, second = await Member.start(client, cluster, topic, group), await Member.start(client, cluster, topic, group)
    members = [first, second]
    try:
        await group_settles(members, "two members share the partitions")
        produced = await produce(cluster, topic, 1)
        await processed(members, produced, "the first batch processed by two members")

        third = await Member.start(client, cluster, topic, group)
        members.append(third)
        await group_settles(members, "a third member joined and got partitions")
        listed, described = await asyncio.to_thread(admin_view, cluster.kafka_bootstrap, group)
        assert listed == "STABLE" and described["state"] == "STABLE" and described["assignor"]
        assert sorted(map(sorted, described["members"])) == sorted(sorted(m.assigned or ()) for m in members)
        batch = await produce(cluster, topic, 2)
        produced |= batch
        await processed(members, batch, "the second batch processed by three members")

        await second.close()
        await group_settles([first, third], "the two left share the closed member's partitions")
        batch = await produce(cluster, topic, 3)
        produced |= batch
        await processed([first, third], batch, "the third batch processed after a member left")

        await third.kill()
        await group_settles([first], "the last member holds every partition once the killed one's session ran out")
        batch = await produce(cluster, topic, 4)
        produced |= batch
        await processed([first], batch, "the fourth batch processed after a member was killed")
        assert produced <= set().union(*(member.values for member in members))
        await first.close()

        per_partition = 4 * 60 // PARTITIONS
        assert await committed(client, cluster, topic, group) == dict.fromkeys(range(PARTITIONS), per_partition)
        resumed = await Member.start(client, cluster, topic, group)
        members.append(resumed)
        await group_settles([resumed], "a new member holds every partition")
        batch = await produce(cluster, topic, 5)
        await processed([resumed], batch, "the fifth batch processed by a member started after the others")
        assert resumed.values == batch  # it started at the committed offsets, not before
        await resumed.close()
        assert await asyncio.to_thread(delete_group, cluster.kafka_bootstrap, group) is None
        assert await committed(client, cluster, topic, group) == dict.fromkeys(range(PARTITIONS), None)
    finally:
        for member in members:
            if member.process.returncode is None:
                member.process.kill()
                await member.process.wait()


def admin_view(bootstrap: str, group: str) -> tuple[str | None, dict[str, Any]]:
    """The group's state as confluent's AdminClient lists it, and its description: state, assignor,
    each member's partitions."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listing = admin.list_consumer_groups(request_timeout=20).result()
    state = next((g.state.name for g in listing.valid if g.group_id == group), None)
    description = admin.describe_consumer_groups([group], request_timeout=20)[group].result()
    return state, {"state": description.state.name, "assignor": description.partition_assignor,
                   "members": [[tp.partition for tp in member.assignment.topic_partitions]
                               for member in description.members]}


def delete_group(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: it runs the request
    return admin.delete_consumer_groups([group], request_timeout=20)[group].result()


async def committed(client: str, cluster: DevCluster, topic: str, group: str) -> dict[int, int]:
    """The group's committed offsets of the topic's partitions, as the client's committed() reads them
    (None: none committed)."""
    if client == "aiokafka":
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as AioTopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, group_id=group)
        await consumer.start()
        try:
            return {p: await consumer.committed(AioTopicPartition(topic, p)) for p in range(PARTITIONS)}
        finally:
            await consumer.stop()
    return await asyncio.to_thread(_committed_blocking, client, cluster.kafka_bootstrap, topic, group)


def _committed_blocking(client: str, bootstrap: str, topic: str, group: str) -> dict[int, Any]:
    if client == "confluent":
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            return {tp.partition: tp.offset if tp.offset >= 0 else None  # OFFSET_INVALID: none committed
                    for tp in consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)}
        finally:
            consumer.close()
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(KafkaTopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()
