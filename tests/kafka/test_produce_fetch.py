"""Produce, Fetch, ListOffsets and DeleteRecords with clients no one here wrote: confluent-kafka
(librdkafka) and kafka-python produce with acks 0/1/all and every codec, aiokafka and kcat read it
back; offsets by timestamp; delete-records moves where a consumer starts; fetch sessions (KIP-227)
and OffsetForLeaderEpoch (KIP-320) as raw frames."""

from __future__ import annotations

import asyncio
import datetime
import functools
import shutil
import subprocess
import time
from collections import Counter

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from kio.static.primitive import i32Timedelta

from client.admin import Admin, NewTopic
from node.dev import DevCluster
from tests.kafka.wire import exchange, read_response, request_frame

pytestmark = pytest.mark.kafka_clients

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = ("0", "1", "all")
PER_RUN = 20


async def create_topic(cluster: DevCluster, name: str, partitions: int = 3) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 3)])


def leader_address(cluster: DevCluster, topic: str, partition: int) -> str:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap}).list_topics(topic, timeout=10)
    leader = metadata.topics[topic].partitions[partition].leader
    broker = metadata.brokers[leader]
    return f"{broker.host}:{broker.port}"


def produce_with_confluent(bootstrap: str, topic: str) -> list[str]:
    from confluent_kafka import Producer

    sent = []
    failures: list[tuple[str, str, object]] = []
    for codec in CODECS:
        for acks in ACKS:
            producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "compression.type": codec,
                                 "linger.ms": 5, "enable.idempotence": False})
            for i in range(PER_RUN):
                value = f"confluent-{codec}-{acks}-{i}"
                producer.produce(topic, value=value.encode(), key=str(i).encode(), on_delivery=functools.partial(
                    lambda run, error, message: failures.append((*run, error)) if error else None, (codec, acks)))
                sent.append(value)
            assert producer.flush(30) == 0
    assert failures == []
    return sent


def produce_with_kafka_python(bootstrap: str, topic: str) -> list[str]:
    from kafka import KafkaProducer

    sent = []
    for codec in CODECS:
        for acks in ACKS:
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks if acks == "all" else int(acks),
                                     compression_type=None if codec == "none" else codec, linger_ms=5,
                                     enable_idempotence=False)  # InitProducerId is served elsewhere
            try:
                futures = []
                for i in range(PER_RUN):
                    value = f"kafka-python-{codec}-{acks}-{i}"
                    futures.append(producer.send(topic, value=value.encode(), key=str(i).encode()))
                    sent.append(value)
                offsets = [future.get(timeout=30).offset for future in futures]
                if acks != "0":  # acks=0 has no answer to take offsets from
                    assert all(offset >= 0 for offset in offsets), (codec, acks, offsets)
            finally:
                producer.close()
    return sent


async def read_with_aiokafka(bootstrap: str, topic: str, count: int) -> list[str]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    values: list[str] = []
    try:
        async with asyncio.timeout(30):
            while len(values) < count:
                batches = await consumer.getmany(timeout_ms=500)
                values += [record.value.decode() for records in batches.values() for record in records]
    finally:
        await consumer.stop()
    return values


def read_with_kcat(bootstrap: str, topic: str) -> list[str]:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by `make test` (apt-get install kcat)"
    output = subprocess.run([kcat, "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%s\n"],
                            capture_output=True, text=True, timeout=60, check=True).stdout
    return output.splitlines()


async def test_every_acks_and_codec_of_confluent_and_kafka_python_is_read_back_by_aiokafka_and_kcat(
        cluster: DevCluster) -> None:
    await create_topic(cluster, "codecs")
    sent = await asyncio.to_thread(produce_with_confluent, cluster.kafka_bootstrap, "codecs")
    sent += await asyncio.to_thread(produce_with_kafka_python, cluster.kafka_bootstrap, "codecs")
    assert len(sent) == 2 * len(CODECS) * len(ACKS) * PER_RUN
    # Exactly once each: acks=0 on a healthy loopback cluster loses nothing either.
    assert Counter(await read_with_aiokafka(cluster.kafka_bootstrap, "codecs", len(sent))) == Counter(sent)
    assert Counter(await asyncio.to_thread(read_with_kcat, cluster.kafka_bootstrap, "codecs")) == Counter(sent)


def offsets_by_time_confluent(bootstrap: str, topic: str, timestamps: list[int]) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "by-time"})
    try:
        return [consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0].offset for ts in timestamps]
    finally:
        consumer.close()


def offsets_by_time_kafka_python(bootstrap: str, topic: str, timestamp: int) -> tuple[int, int] | None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        found = consumer.offsets_for_times({TopicPartition(topic, 0): timestamp})[TopicPartition(topic, 0)]
        return None if found is None else (found.offset, found.timestamp)
    finally:
        consumer.close()


async def test_offsets_by_timestamp_with_confluent_and_kafka_python(cluster: DevCluster) -> None:
    from confluent_kafka import Producer

    await create_topic(cluster, "by-time", 1)
    base = time.time_ns() // 1_000_000 - 60_000  # recent: older records would go to retention.ms

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all", "linger.ms": 0})
        for i in range(10):  # one batch per record: timestamps base, base + 1000, ...
            producer.produce("by-time", value=b"v%d" % i, timestamp=base + 1000 * i)
            producer.flush(10)

    await asyncio.to_thread(produce)
    offsets = await asyncio.to_thread(offsets_by_time_confluent, cluster.kafka_bootstrap, "by-time",
                                      [base - 1, base + 3500])
    assert offsets == [0, 4]
    assert await asyncio.to_thread(offsets_by_time_kafka_python, cluster.kafka_bootstrap, "by-time",
                                   base + 7000) == (7, base + 7000)
    # Past the last record: no offset (kafka-python's None; Kafka answers offset -1).
    assert await asyncio.to_thread(offsets_by_time_kafka_python, cluster.kafka_bootstrap, "by-time",
                                   base + 99_000) is None


async def test_delete_records_moves_where_a_consumer_from_the_beginning_starts(cluster: DevCluster) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    await create_topic(cluster, "trimmed", 1)

    def produce_delete_consume() -> tuple[int, int, list[bytes]]:
        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce("trimmed", value=b"r%d" % i)
        assert producer.flush(10) == 0
        admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
        futures = admin.delete_records([TopicPartition("trimmed", 0, 6)], request_timeout=10)
        deleted = futures[TopicPartition("trimmed", 0, 6)].result(timeout=10)
        consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "trimmed",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            low, _ = consumer.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=10)
            consumer.assign([TopicPartition("trimmed", 0, OFFSET_BEGINNING)])
            values: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(values) < 4 and time.monotonic() < deadline:
                values += [message.value() for message in consumer.consume(4 - len(values), timeout=1)]
        finally:
            consumer.close()
        return deleted.low_watermark, low, values

    low_watermark, low, values = await asyncio.to_thread(produce_delete_consume)
    assert (low_watermark, low) == (6, 6)
    assert values == [b"r6", b"r7", b"r8", b"r9"]


async def test_fetch_sessions_answer_only_what_changed_and_refuse_a_wrong_epoch_or_id(cluster: DevCluster) -> None:
    from confluent_kafka import Producer

    await create_topic(cluster, "sessions", 2)
    address = await asyncio.to_thread(leader_address, cluster, "sessions", 0)

    def fetch(session_id: int, epoch: int, partitions: tuple[int, ...]) -> FetchRequest:
        return FetchRequest(
            replica_id=-1, max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=0,
            isolation_level=1, session_id=session_id, session_epoch=epoch, rack_id="",
            topics=(FetchTopic(topic="sessions", partitions=tuple(
                FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in partitions)),)
            if partitions else (),
            forgotten_topics_data=())

    async def ask(request: FetchRequest) -> FetchResponse:
        answers, _ = await exchange(address, [request_frame(request, 1)], 1)
        return read_response(answers[0], FetchResponse)[1]

    full = await ask(fetch(0, 0, (0,)))
    session = full.session_id
    assert full.error_code is KioErrorCode.none and session != 0
    assert [p.partition_index for t in full.responses for p in t.partitions] == [0]
    quiet = await ask(fetch(session, 1, ()))
    assert (quiet.error_code, quiet.session_id, quiet.responses) == (KioErrorCode.none, session, ())

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
        producer.produce("sessions", value=b"news", partition=0)
        assert producer.flush(10) == 0

    await asyncio.to_thread(produce)
    news = await ask(fetch(session, 2, ()))
    [part] = [p for t in news.responses for p in t.partitions]
    assert (part.partition_index, part.high_watermark, part.last_stable_offset) == (0, 1, 1)
    assert b"news" in bytes(part.records or b"")
    assert (await ask(fetch(session, 2, ()))).error_code is KioErrorCode.invalid_fetch_session_epoch
    assert (await ask(fetch(session + 1, 1, ()))).error_code is KioErrorCode.fetch_session_id_not_found
    sessionless = await ask(fetch(0, -1, (0,)))
    assert sessionless.session_id == 0 and len(sessionless.responses) == 1


async def test_offset_for_leader_epoch_tells_a_consumer_the_end_of_its_epoch(cluster: DevCluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    await create_topic(cluster, "epochs", 1)

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
        for i in range(3):
            producer.produce("epochs", value=b"e%d" % i)
        assert producer.flush(10) == 0

    await asyncio.to_thread(produce)
    metadata = await asyncio.to_thread(
        lambda: AdminClient({"bootstrap.servers": cluster.kafka_bootstrap}).list_topics("epochs", timeout=10))
    address = await asyncio.to_thread(leader_address, cluster, "epochs", 0)
    assert metadata.topics["epochs"].partitions[0].leader >= 0
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=(OffsetForLeaderTopic(
        topic="epochs", partitions=(OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),)),))
    answers, _ = await exchange(address, [request_frame(request, 9)], 1)
    [part] = read_response(answers[0], OffsetForLeaderEpochResponse)[1].topics[0].partitions
    assert (part.error_code, part.leader_epoch, part.end_offset) == (KioErrorCode.none, 0, 3)
