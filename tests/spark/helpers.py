"""Topic setup and plain-client reads for the Spark tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from client.admin import Admin, NewTopic
from client.consumer import Consumer
from client.producer import Producer
from tests.node.cluster_harness import describe, eventually
from wire.topic_partition import TopicPartition


def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    async def create() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic(name, partitions, 3, configs)])

        async def ready() -> bool:
            states = [p for p in (await describe(bootstrap)).partitions if p.info.topic == name]
            return len(states) == partitions and all(p.info.leader >= 0 and len(p.info.isr) == 3 for p in states)

        await eventually(ready, f"{name} has leaders and a full ISR")

    asyncio.run(create())


def produce(bootstrap: str, topic: str, partition: int, values: Sequence[bytes], timestamp_ms: int | None = None,
            keys: Sequence[bytes] | None = None) -> None:
    async def send() -> None:
        async with Producer(bootstrap, acks="all") as producer:
            await (await producer.send_many(topic, values, keys, partition=partition, timestamp_ms=timestamp_ms))

    asyncio.run(send())


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record below the HW, read with the Python consumer."""

    async def read() -> list[tuple[int, int, bytes | None, bytes | None]]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            rows = []
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                rows.extend((r.partition, r.offset, r.key, r.value) for r in await consumer.poll(1000, 10_000))
            return sorted(rows)

    return asyncio.run(read())
