"""KIP-392 with librdkafka: a consumer with `client.rack` is sent by the leader to the follower in
its rack and reads every record there (librdkafka's statistics name the broker it fetches from)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.admin import Admin, NewTopic
from client.errors import UnknownTopicOrPartitionError
from node.config import environment_variable
from node.dev import DevCluster
from tests.node.cluster_harness import FAST, eventually, free_port_block, stopped

pytestmark = pytest.mark.kafka_clients


@pytest.fixture(scope="module")
def racks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """Three nodes, node N in rack-N."""
    base = free_port_block(6)
    environments = {node_id: {environment_variable("broker.rack"): f"rack-{node_id}"} for node_id in (1, 2, 3)}
    cluster = DevCluster(Path(tmp_path_factory.mktemp("racks")), 3, base, FAST, kafka_base_port=base + 3,
                         environments=environments)
    cluster.start()
    yield from stopped(cluster)


def consume_in_rack(bootstrap: str, topic: str, follower: int, count: int) -> tuple[list[bytes], set[int], int]:
    """(values read, brokers the partition was fetched from per librdkafka's statistics, its leader),
    reading from `follower`'s rack until `count` values are read and the statistics name `follower`
    (librdkafka reports every `statistics.interval.ms`; the reads may be over before a report)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    fetched_from: set[int] = set()
    leaders: list[int] = []

    def statistics(text: str) -> None:
        partition = json.loads(text)["topics"].get(topic, {}).get("partitions", {}).get("0")
        if partition is not None and partition["broker"] >= 0:
            fetched_from.add(partition["broker"])
            leaders.append(partition["leader"])

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "racked", "client.rack": f"rack-{follower}",
                         "enable.auto.commit": False, "statistics.interval.ms": 100, "stats_cb": statistics})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while (len(values) < count or follower not in fetched_from) and time.monotonic() < deadline:
            values += [message.value() for message in consumer.consume(count, timeout=0.2) if not message.error()]
    finally:
        consumer.close()
    return values, fetched_from, leaders[-1] if leaders else -1


async def test_a_consumer_in_a_followers_rack_reads_from_that_follower(racks: DevCluster) -> None:
    from confluent_kafka import Producer

    leaders: list[int] = []
    async with Admin(racks.bootstrap) as admin:
        await admin.create_topics([NewTopic("racked", 1, 3)])

        async def led() -> bool:
            try:
                leaders.append((await admin.describe_topics(["racked"]))["racked"][0].leader)
            except UnknownTopicOrPartitionError:  # the answering node has not applied the creation yet
                return False
            return leaders[-1] in (1, 2, 3)

        await eventually(led, "racked has a leader")
    leader = leaders[-1]
    follower = next(node_id for node_id in (1, 2, 3) if node_id != leader)

    def produce() -> None:
        producer = Producer({"bootstrap.servers": racks.kafka_bootstrap, "acks": "all"})
        for i in range(50):
            producer.produce("racked", value=b"r%d" % i)
        assert producer.flush(10) == 0

    await asyncio.to_thread(produce)
    values, fetched_from, seen_leader = await asyncio.to_thread(
        consume_in_rack, racks.kafka_bootstrap, "racked", follower, 50)
    assert values == [b"r%d" % i for i in range(50)]
    assert seen_leader == leader
    assert follower in fetched_from  # the leader named the follower; librdkafka fetched there
