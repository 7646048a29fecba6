"""An idempotent librdkafka producer (enable.idempotence=true, acks=all; its id from InitProducerId on
the Kafka listener) keeps producing while the leader of a partition is killed with -9 and is
restarted afterwards: every acknowledged record is in the log exactly once, and no record twice
(the retries of batches whose answer was lost are recognised by their producer id and sequence)."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from client.admin import Admin, NewTopic
from client.errors import UnknownTopicOrPartitionError
from node.dev import DevCluster
from tests.node.cluster_harness import eventually, read_replica, start_cluster, stopped

pytestmark = pytest.mark.kafka_clients

TOPIC = "idempotent"
PARTITIONS = 3
RECORDS = 20000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("kafka-idempotence")))


class Production:
    """The producer's thread: every record handed over at once (small batches, five in flight per
    partition), then a flush; the test kills a leader once half are acknowledged, the rest in flight."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acknowledged: list[str] = []
        self.failed: list[str] = []
        self.half_acknowledged = threading.Event()

    def run(self) -> int:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "batch.num.messages": 100, "message.timeout.ms": 90000,
                             "retry.backoff.ms": 100,
                             "topic.metadata.refresh.interval.ms": 1000})

        def delivered(error: object, message: object) -> None:
            value = message.value().decode()  # type: ignore[attr-defined]
            (self.failed if error is not None else self.acknowledged).append(value)
            if len(self.acknowledged) >= RECORDS // 2:
                self.half_acknowledged.set()

        for n in range(RECORDS):
            producer.produce(TOPIC, value=f"v{n:05d}".encode(), partition=n % PARTITIONS, on_delivery=delivered)
            producer.poll(0)
        return producer.flush(120)


async def led(admin: Admin, isr_size: int = 1) -> dict[int, int]:
    """Each partition's leader, once every partition has one and `isr_size` replicas in its ISR."""
    leaders: dict[int, int] = {}

    async def every_partition_led() -> bool:
        try:
            partitions = (await admin.describe_topics([TOPIC]))[TOPIC]
        except UnknownTopicOrPartitionError:  # the answering node has not applied the creation yet
            return False
        leaders.update((p.partition, p.leader) for p in partitions)
        return len(partitions) == PARTITIONS and all(p.leader >= 0 and len(p.isr) >= isr_size for p in partitions)

    await eventually(every_partition_led, f"every partition of {TOPIC} led, {isr_size} in its ISR")
    return leaders


async def test_every_acknowledged_record_is_read_back_once_after_a_leader_is_killed(cluster: DevCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})])
        victim = (await led(admin))[0]
    production = Production(cluster.kafka_bootstrap)
    producing = asyncio.create_task(asyncio.to_thread(production.run))
    assert await asyncio.to_thread(production.half_acknowledged.wait, 60), "half the records acknowledged"
    await asyncio.to_thread(cluster.kill_node, victim)
    assert await producing == 0, "every record delivered or failed"
    await asyncio.to_thread(cluster.start_node, victim)

    async with Admin(cluster.bootstrap) as admin:
        leaders = await led(admin, isr_size=3)
    values: Counter[str] = Counter()
    for partition, leader in leaders.items():
        records, _ = await read_replica(cluster.nodes[leader].address, TOPIC, partition)
        values.update(value.decode() for _, value in records if value is not None)
    assert [value for value, count in values.items() if count > 1] == []
    assert set(production.acknowledged) <= set(values)
    assert len(production.acknowledged) + len(production.failed) == RECORDS
