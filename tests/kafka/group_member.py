"""A consumer-group member in a process of its own, with one of three Kafka clients, so that a test
can close it (SIGTERM: it leaves the group) or kill it with -9 (its session runs out).

    python -m tests.kafka.group_member CLIENT BOOTSTRAP TOPIC GROUP

CLIENT is confluent, kafka-python or aiokafka. It prints one JSON line per event, flushed:
{"assigned": [partitions]} after each rebalance, {"value": v} for each record processed (its offset
committed synchronously after each poll; {"commit_failed": why} when a rebalance refused that, and
the records come again to their next owner), {"closed": true} after leaving on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
from typing import Any

SESSION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 200


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def stop_on_sigterm() -> threading.Event:
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    return stopping


def run_confluent(bootstrap: str, topic: str, group: str) -> None:
    from confluent_kafka import Consumer, KafkaException

    stopping = stop_on_sigterm()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
                         "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, "topic.metadata.refresh.interval.ms": 1000})
    consumer.subscribe([topic], on_assign=lambda c, partitions: emit(assigned=sorted(p.partition for p in partitions)),
                       on_revoke=lambda c, partitions: None)
    while not stopping.is_set():
        messages = [m for m in consumer.consume(100, timeout=0.2) if m.error() is None]
        if messages:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as error:
                emit(commit_failed=str(error))
            for message in messages:
                emit(value=message.value().decode())
    consumer.close()
    emit(closed=True)


def run_kafka_python(bootstrap: str, topic: str, group: str) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit(assigned=sorted(tp.partition for tp in assigned))

    stopping = stop_on_sigterm()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
                             heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, metadata_max_age_ms=1000)
    consumer.subscribe([topic], listener=Listener())
    while not stopping.is_set():
        batches = consumer.poll(timeout_ms=200)
        if batches:
            try:
                consumer.commit()
            except KafkaError as error:
                emit(commit_failed=repr(error))
            for records in batches.values():
                for record in records:
                    emit(value=record.value.decode())
    consumer.close()
    emit(closed=True)


def run_aiokafka(bootstrap: str, topic: str, group: str) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.errors import KafkaError

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit(assigned=sorted(tp.partition for tp in assigned))

    async def main() -> None:
        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
                                    heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, metadata_max_age_ms=1000)
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        while not stopping.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            if batches:
                try:
                    await consumer.commit()
                except KafkaError as error:
                    emit(commit_failed=repr(error))
                for records in batches.values():
                    for record in records:
                        emit(value=record.value.decode())
        await consumer.stop()
        emit(closed=True)

    asyncio.run(main())


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}

if __name__ == "__main__":
    RUNNERS[sys.argv[1]](*sys.argv[2:5])
