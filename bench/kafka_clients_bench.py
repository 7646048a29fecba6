"""Produce and consume throughput over the Kafka listener (confluent-kafka, i.e. librdkafka) next to
Tributary's own client over HTTP (`tributary perf-produce` / `perf-consume`), against one running
dev cluster (`python -m node.main dev --base-port N`): 1,000,000 100-byte records, acks=all,
linger.ms=5, each into a fresh topic of 3 partitions, replication factor 3.

    .venv/bin/python -m bench.kafka_clients_bench --kafka 127.0.0.1:N --http 127.0.0.1:N+100

A measurement, not a test: the figures depend on the machine (2 shared cores here).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

from client.admin import Admin, NewTopic

RECORD = b"x" * 100


def confluent_produce(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False})
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, RECORD)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return count / (time.perf_counter() - started)


def confluent_consume(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    seen = 0
    started = time.perf_counter()
    while seen < count:
        seen += sum(1 for message in consumer.consume(10_000, timeout=1) if not message.error())
    elapsed = time.perf_counter() - started
    consumer.close()
    return count / elapsed


def tributary(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "client.cli", *args], capture_output=True, text=True,
                          check=True).stdout


async def create(http: str, topic: str) -> None:
    async with Admin(http) as admin:
        await admin.create_topics([NewTopic(topic, 3, 3)])
    await asyncio.sleep(1)  # let every node apply the creation


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kafka", required=True)
    parser.add_argument("--http", required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    suffix = str(int(time.time()))
    ours, theirs = f"bench-ours-{suffix}", f"bench-librdkafka-{suffix}"
    asyncio.run(create(args.http, theirs))
    print(f"confluent-kafka produce: {confluent_produce(args.kafka, theirs, args.records):,.0f} records/s", flush=True)
    print(f"confluent-kafka consume: {confluent_consume(args.kafka, theirs, args.records):,.0f} records/s", flush=True)
    asyncio.run(create(args.http, ours))
    print("tributary perf-produce:", tributary("perf-produce", "--bootstrap", args.http, "--topic", ours,
                                               "--num-records", str(args.records), "--record-size", "100",
                                               "--acks", "all", "--producer-props", "linger.ms=5"), flush=True)
    print("tributary perf-consume:", tributary("perf-consume", "--bootstrap", args.http, "--topic", ours,
                                               "--messages", str(args.records)), flush=True)


if __name__ == "__main__":
    main()
