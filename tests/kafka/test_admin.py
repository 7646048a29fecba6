"""Topic and config admin over the Kafka listener, as three admin clients no one here wrote use it:
confluent-kafka's AdminClient (librdkafka), kafka-python's KafkaAdminClient and aiokafka's
AIOKafkaAdminClient create, describe, alter and delete topics and configs, add partitions,
describe the cluster and the log dirs; kcat -L lists what they made. Each test uses its own topics."""

from __future__ import annotations

import asyncio
import datetime
import shutil
import subprocess
from typing import Any

import pytest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.delete_topics.v6.response import DeleteTopicsResponse
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.primitive import i32Timedelta

from client.admin import Admin
from client.producer import Producer
from node.dev import DevCluster
from node.kafka.entities import topic_uuid
from tests.kafka.wire import exchange, read_response, request_frame
from tests.node.cluster_harness import eventually

pytestmark = pytest.mark.kafka_clients
SECONDS_30 = i32Timedelta.parse(datetime.timedelta(seconds=30))


def confluent_admin(cluster: DevCluster) -> Any:
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})


def outcomes(futures: dict[Any, Any]) -> dict[Any, str]:
    """Each future's Kafka error name, "NONE" on success."""
    from confluent_kafka import KafkaException
    named = {}
    for key, future in futures.items():
        try:
            future.result(timeout=30)
            named[key] = "NONE"
        except KafkaException as error:
            named[key] = error.args[0].name()
    return named


async def wait_for_partitions(cluster: DevCluster, topic: str, count: int) -> None:
    """Until a node's metadata shows `topic` with `count` partitions (nodes apply the metadata log a little apart)."""
    async def grown() -> bool:
        async with Admin(cluster.bootstrap) as admin:
            return len((await admin.describe_topics([topic])).get(topic, [])) == count

    await eventually(grown, f"{topic} has {count} partitions")


def test_confluent_creates_topics_with_kafkas_named_errors(cluster: DevCluster) -> None:
    from confluent_kafka.admin import NewTopic
    admin = confluent_admin(cluster)
    created = outcomes(admin.create_topics([
        NewTopic("cf-orders", 3, 2, config={"retention.ms": "12345"}),
        NewTopic("cf-defaults", -1, -1),  # the broker's num.partitions and default.replication.factor (KIP-464)
        NewTopic("cf-placed", 2, replica_assignment=[[1, 2], [3, 1]]),
        NewTopic("bad name", 1, 1),
        NewTopic("cf-too-wide", 1, 9),
        NewTopic("cf-bad-config", 1, 1, config={"retention.ms": "soon"}),
        NewTopic("cf-zero", 0, 1),
    ]))
    assert created == {"cf-orders": "NONE", "cf-defaults": "NONE", "cf-placed": "NONE",
                       "bad name": "TOPIC_EXCEPTION", "cf-too-wide": "INVALID_REPLICATION_FACTOR",
                       "cf-bad-config": "INVALID_CONFIG", "cf-zero": "INVALID_PARTITIONS"}
    assert outcomes(admin.create_topics([NewTopic("cf-orders", 1, 1)])) == {"cf-orders": "TOPIC_ALREADY_EXISTS"}
    assert outcomes(admin.create_topics([NewTopic("cf-checked", 2, 2)], validate_only=True)) == {"cf-checked": "NONE"}
    listed: dict[str, Any] = {}

    async def all_listed() -> bool:  # the node answering may apply the creations a little later
        listed.update(admin.list_topics(timeout=30).topics)
        return {"cf-orders", "cf-defaults", "cf-placed"} <= set(listed)

    asyncio.run(eventually(all_listed, "the created topics are listed"))
    assert "cf-checked" not in listed
    assert len(listed["cf-defaults"].partitions) == 1
    assert [p.replicas for _, p in sorted(listed["cf-placed"].partitions.items())] == [[1, 2], [3, 1]]


def test_confluent_adds_partitions_and_deletes_topics(cluster: DevCluster) -> None:
    from confluent_kafka.admin import NewPartitions, NewTopic
    admin = confluent_admin(cluster)
    assert outcomes(admin.create_topics([NewTopic("cf-grow", 2, 3), NewTopic("cf-gone", 1, 1)])) == {
        "cf-grow": "NONE", "cf-gone": "NONE"}
    assert outcomes(admin.create_partitions([NewPartitions("cf-grow", 5)])) == {"cf-grow": "NONE"}
    assert outcomes(admin.create_partitions([NewPartitions("cf-grow", 3), NewPartitions("cf-nope", 3)])) == {
        "cf-grow": "INVALID_PARTITIONS", "cf-nope": "UNKNOWN_TOPIC_OR_PART"}
    asyncio.run(wait_for_partitions(cluster, "cf-grow", 5))
    assert outcomes(admin.delete_topics(["cf-gone", "cf-never"])) == {"cf-gone": "NONE",
                                                                     "cf-never": "UNKNOWN_TOPIC_OR_PART"}

    async def deleted() -> bool:
        return "cf-gone" not in admin.list_topics(timeout=30).topics

    asyncio.run(eventually(deleted, "the deleted topic is gone from the metadata"))


def test_confluent_describes_and_alters_topic_configs_incrementally(cluster: DevCluster) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
    admin = confluent_admin(cluster)
    outcomes(admin.create_topics([NewTopic("cf-configs", 1, 3, config={"retention.ms": "60000"})]))
    resource = ConfigResource("topic", "cf-configs")

    def described() -> dict[str, Any]:
        (entries,) = admin.describe_configs([resource]).values()
        return entries.result(timeout=30)

    before = described()
    assert (before["retention.ms"].value, before["retention.ms"].source) == (
        "60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (before["segment.bytes"].value, before["segment.bytes"].source) == (
        "1073741824", ConfigSource.DEFAULT_CONFIG.value)
    ops = ConfigResource("topic", "cf-configs", incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("segment.ms", "100000", incremental_operation=AlterConfigOpType.SET),
    ])
    assert outcomes(admin.incremental_alter_configs([ops])) == {ops: "NONE"}

    async def applied() -> bool:
        return described()["segment.ms"].value == "100000"  # any node answers, from its metadata

    asyncio.run(eventually(applied, "the altered configs are described"))
    after = described()
    assert after["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert after["cleanup.policy"].value == "compact,delete"
    bad = ConfigResource("topic", "cf-configs", incremental_configs=[
        ConfigEntry("retention.ms", "-5x", incremental_operation=AlterConfigOpType.SET)])
    assert outcomes(admin.incremental_alter_configs([bad])) == {bad: "INVALID_CONFIG"}
    unknown = ConfigResource("topic", "cf-nope")
    (future,) = admin.describe_configs([unknown]).values()
    assert outcomes({unknown: future}) == {unknown: "UNKNOWN_TOPIC_OR_PART"}


def test_confluent_describes_a_brokers_config_and_the_cluster(cluster: DevCluster) -> None:
    from confluent_kafka.admin import ConfigResource, ConfigSource
    admin = confluent_admin(cluster)
    (future,) = admin.describe_configs([ConfigResource("broker", "2")]).values()
    entries = future.result(timeout=30)
    assert entries["node.id"].value == "2"
    assert entries["log.dirs"].value.endswith("node-2/data")
    assert entries["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    assert all(entry.is_read_only for entry in entries.values())
    described = admin.describe_cluster().result(timeout=30)
    assert sorted(node.id for node in described.nodes) == [1, 2, 3]
    assert {f"{node.host}:{node.port}" for node in described.nodes} == set(cluster.kafka_bootstrap.split(","))
    assert described.controller.id in (1, 2, 3)
    assert described.cluster_id == admin.list_topics(timeout=30).cluster_id


def test_kafka_python_alters_configs_with_legacy_alter_configs_and_describes_log_dirs(cluster: DevCluster) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        admin.create_topics([NewTopic("kp-topic", 2, 3, topic_configs={"retention.ms": "999"})])
        admin.create_partitions({"kp-topic": NewPartitions(3)})
        resource = ConfigResource(ConfigResourceType.TOPIC, "kp-topic", configs={"segment.ms": "100000"})
        # AlterConfigs replaces all overrides; kafka-python sends the ones it keeps (retention.ms) along.
        admin.alter_configs([resource], incremental=False)
        asyncio.run(_produce(cluster, "kp-topic", 3))

        async def overrides_replaced() -> bool:
            (described,) = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-topic")]).values()
            return _overrides(described["kp-topic"]) == {"segment.ms": "100000", "retention.ms": "999"}

        asyncio.run(eventually(overrides_replaced, "the legacy alter set the overrides"))
        sizes: dict[tuple[int, int], int] = {}

        async def every_replica_described() -> bool:  # each node creates the added partition's log as it applies it
            sizes.clear()
            sizes.update({(broker["broker"], partition["partition_index"]): partition["partition_size"]
                          for broker in admin.describe_log_dirs() for log_dir in broker["log_dirs"]
                          for topic in log_dir["topics"] if topic["name"] == "kp-topic"
                          for partition in topic["partitions"]})
            return len(sizes) == 9

        asyncio.run(eventually(every_replica_described, "DescribeLogDirs shows every replica"))
        assert sorted(sizes) == [(node, index) for node in (1, 2, 3) for index in range(3)]
        assert all(size > 0 for (_, index), size in sizes.items() if index == 0)
        assert all(size == 0 for (_, index), size in sizes.items() if index > 0)
        admin.delete_topics(["kp-topic"])
    finally:
        admin.close()


def _overrides(entries: dict[str, Any]) -> dict[str, str]:
    return {name: entry["value"] for name, entry in entries.items() if entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"}


async def _produce(cluster: DevCluster, topic: str, count: int) -> None:
    """Records into partition 0, acknowledged by every replica (the Kafka Produce API is not ours to use here)."""
    async with Producer(cluster.bootstrap, acks="all") as producer:
        for index in range(count):
            await producer.send_and_wait(topic, b"record %d" % index, partition=0)


async def test_aiokafka_admin_creates_alters_and_deletes(cluster: DevCluster) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("aio-topic", 1, 2, topic_configs={"retention.ms": "5000"})])
        await admin.create_partitions({"aio-topic": NewPartitions(4)})
        await wait_for_partitions(cluster, "aio-topic", 4)
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "aio-topic",
                                                  configs={"cleanup.policy": "compact"})])

        async def altered() -> bool:
            (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio-topic")])
            entries = {entry[0]: entry[1] for entry in response.resources[0][4]}
            return entries["cleanup.policy"] == "compact" and entries["retention.ms"] != "5000"

        await eventually(altered, "aiokafka's alter_configs replaced the overrides")
        await admin.delete_topics(["aio-topic"])

        async def deleted() -> bool:
            return "aio-topic" not in await admin.list_topics()  # the answering node may apply it a little later

        await eventually(deleted, "the topic is gone")
    finally:
        await admin.close()


async def test_create_topics_v7_answers_the_topic_id_and_delete_topics_v6_deletes_by_it(cluster: DevCluster) -> None:
    address = cluster.kafka_bootstrap.split(",")[0]
    create = CreateTopicsRequest(topics=(CreatableTopic(name="by-id", num_partitions=1, replication_factor=1,
                                                        assignments=(), configs=()),), timeout=SECONDS_30)
    answers, _ = await exchange(address, [request_frame(create, 8)], 1)
    (created,) = read_response(answers[0], CreateTopicsResponse)[1].topics
    assert created.error_code is KioErrorCode.none and created.topic_id is not None
    unknown = topic_uuid("AAAAAAAAAAAAAAAAAAAAAQ")  # an id no topic has
    delete = DeleteTopicsRequest(topics=(DeleteTopicState(name=None, topic_id=created.topic_id),
                                         DeleteTopicState(name=None, topic_id=unknown),
                                         DeleteTopicState(name="by-id", topic_id=created.topic_id)), timeout=SECONDS_30)
    answers, _ = await exchange(address, [request_frame(delete, 9)], 1)
    results = read_response(answers[0], DeleteTopicsResponse)[1].responses
    assert sorted((r.name or "", str(r.topic_id), r.error_code.name) for r in results) == sorted([
        ("by-id", str(created.topic_id), "none"),  # by id, answered with its name
        ("", str(unknown), "unknown_topic_id"),
        ("by-id", str(created.topic_id), "invalid_request"),  # a name and an id: Kafka takes exactly one
    ])


async def test_kcat_lists_topics_an_admin_client_created(cluster: DevCluster) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("kcat-seen", 2, 3)])
    finally:
        await admin.close()
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by `make test` (apt-get install kcat)"

    async def listed() -> bool:
        command = [kcat, "-b", cluster.kafka_bootstrap, "-L", "-t", "kcat-seen"]
        listing = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=30)
        return 'topic "kcat-seen" with 2 partitions' in listing.stdout

    await eventually(listed, "kcat -L lists the topic")
