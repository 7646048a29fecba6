"""The deploy/ compose cluster in real containers (issue 5 §2), driven from the host through the
published EXTERNAL listeners with the project's client and CLI: replication served by every
follower, `docker kill` of a leader under acks=all load, `docker network disconnect` of a
follower, `docker pause` of the active controller. The tests share one cluster (conftest) and
each leaves every node healthy and in every ISR."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from client.admin import Admin, NewTopic, PartitionStatus
from client.consumer import Consumer
from client.errors import UnknownTopicOrPartitionError
from client.producer import Producer
from tests.docker.compose_harness import REPLICA_LAG_TIME_MAX_MS, ComposeCluster
from tests.node.cluster_harness import describe, eventually, read_replica
from wire.topic_partition import TopicPartition

pytestmark = pytest.mark.docker

Records = list[tuple[int, bytes | None]]
Report = Callable[[str], None]


async def partition_state(bootstrap: str, topic: str, partition: int = 0) -> PartitionStatus:
    """The partition as the cluster describes it. A node that has just restarted answers metadata
    before it has applied the topic; it is asked again until the partition is there."""
    found: list[PartitionStatus] = []

    async def described() -> bool:
        description = await describe(bootstrap)
        found[:] = [p for p in description.partitions if (p.info.topic, p.info.partition) == (topic, partition)]
        return bool(found)

    await eventually(described, f"metadata describes {topic}-{partition}")
    return found[0]


async def create_topic(cluster: ComposeCluster, name: str, partitions: int = 1, replication_factor: int = 3,
                       bootstrap: str | None = None, **configs: str) -> None:
    bootstrap = bootstrap or cluster.bootstrap
    async with Admin(bootstrap, request_timeout_ms=5000) as admin:
        await admin.create_topics([NewTopic(name, partitions, replication_factor, configs)])

    async def has_leaders() -> bool:
        async with Admin(bootstrap, request_timeout_ms=3000) as admin:
            try:
                described = await admin.describe_topics([name])
            except UnknownTopicOrPartitionError:
                return False  # the node asked has not applied the creation yet
        return all(p.leader >= 0 and len(p.isr) == replication_factor for p in described[name])

    await eventually(has_leaders, f"{name} has leaders and a full ISR")


async def replicas_agree(cluster: ComposeCluster, topic: str, partition: int, expected: Records) -> bool:
    """Every node serves exactly `expected` for the partition, with its HW right after the last."""
    for node_id in cluster.ports:
        records, high_watermark = await read_replica(cluster.address(node_id), topic, partition)
        if records != expected or high_watermark != (expected[-1][0] + 1 if expected else 0):
            return False
    return True


async def consume_all(consumer: Consumer, count: int) -> dict[int, list[bytes | None]]:
    """Poll until `count` records have arrived; the values by partition, in offset order."""
    seen: dict[int, list[bytes | None]] = {}
    for _ in range(200):
        for record in await consumer.poll(timeout_ms=500):
            seen.setdefault(record.partition, []).append(record.value)
        if sum(map(len, seen.values())) >= count:
            break
    return seen


def in_isr(cluster: ComposeCluster, topic: str, node_id: int, expected: bool) -> Callable[[], Awaitable[bool]]:
    """A check for `eventually`: the node is (expected=True) or is not in the partition's ISR, as
    the other nodes see it. The node itself is not asked: cut off or just restarted, it answers
    metadata from its own stale copy, where it may still be in the ISR."""
    others = cluster.bootstrap_without(node_id)

    async def check() -> bool:
        return (node_id in (await partition_state(others, topic)).info.isr) == expected

    return check


def cli_status(bootstrap: str) -> dict:
    """`tributary cluster status --json`, run as a user would from the host."""
    result = subprocess.run([sys.executable, "-m", "client.cli", "--bootstrap", bootstrap, "cluster", "status",
                             "--json"], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)


def kafka_brokers(bootstrap: str) -> dict[int, str]:
    """The brokers librdkafka learns from the Kafka listeners' Metadata."""
    from confluent_kafka.admin import AdminClient

    brokers = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).brokers
    return {node_id: f"{broker.host}:{broker.port}" for node_id, broker in brokers.items()}


def node_health(address: str) -> dict:
    """The node's /health answer (200 or 503), as JSON."""
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=2) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        return json.loads(error.read())


async def test_records_produced_to_the_leaders_are_served_identically_by_every_follower(
        compose_cluster: ComposeCluster) -> None:
    cluster = compose_cluster
    status = cli_status(cluster.bootstrap)
    # Metadata answers a host client with the EXTERNAL listener's advertised addresses (the published ports).
    assert {(n["id"], f"{n['host']}:{n['port']}", n["state"]) for n in status["nodes"]} == {
        (node_id, cluster.address(node_id), "online") for node_id in cluster.ports}
    # A Kafka client on the host is answered with the published Kafka ports.
    listing = await asyncio.to_thread(kafka_brokers, cluster.kafka_bootstrap)
    assert listing == {node_id: f"127.0.0.1:{port}" for node_id, port in cluster.kafka_ports.items()}

    await create_topic(cluster, "replicated", 3, **{"min.insync.replicas": "2"})
    count = 900
    async with Producer(cluster.bootstrap, acks="all") as producer:
        futures = [await producer.send("replicated", b"value-%d" % n, partition=n % 3) for n in range(count)]
        acked = [await future for future in futures]
    expected: dict[int, Records] = {partition: [] for partition in range(3)}
    for n, metadata in enumerate(acked):
        expected[metadata.partition].append((metadata.offset, b"value-%d" % n))
    for partition, records in expected.items():
        assert [offset for offset, _ in records] == list(range(count // 3)), partition
        # read_replica asks one node directly: each follower serves (up to its HW) what its leader was sent.
        await eventually(lambda p=partition, r=records: replicas_agree(cluster, "replicated", p, r),
                         f"every replica of replicated-{partition} serves its {count // 3} records")

    leaders = {p: (await partition_state(cluster.bootstrap, "replicated", p)).info.leader for p in expected}
    for read_from in ("follower", "leader"):
        consumer = Consumer(cluster.bootstrap, read_from=read_from, auto_offset_reset="earliest")
        try:
            consumer.assign([("replicated", partition) for partition in expected])
            seen = await consume_all(consumer, count)
            assert seen == {p: [value for _, value in records] for p, records in expected.items()}, read_from
            for partition, leader in leaders.items():
                fetched_from = consumer.fetch_node_for(TopicPartition("replicated", partition))
                assert (fetched_from == leader) == (read_from == "leader"), (read_from, partition, fetched_from)
        finally:
            await consumer.close()


@dataclass
class Ack:
    value: bytes
    offset: int
    sent_at: float
    acked_at: float


async def test_docker_kill_of_a_leader_under_acks_all_load_fails_over_and_the_old_leader_rejoins(
        compose_cluster: ComposeCluster, measured: Report) -> None:
    cluster = compose_cluster
    await create_topic(cluster, "failover", **{"min.insync.replicas": "2"})
    old_leader = (await partition_state(cluster.bootstrap, "failover")).info.leader
    # When the leader is also the active controller, failover waits for a controller election too.
    also_controller = (await describe(cluster.bootstrap)).controller_id == old_leader
    total, kill_after = 600, 150
    acks: list[Ack] = []

    async def produce() -> None:
        async with Producer(cluster.bootstrap, acks="all", linger_ms=1, retry_backoff_ms=50,
                            request_timeout_ms=3000, delivery_timeout_ms=60000) as producer:
            for n in range(total):
                value, sent_at = b"record-%d" % n, time.monotonic()
                metadata = await (await producer.send("failover", value))
                acks.append(Ack(value, metadata.offset, sent_at, time.monotonic()))

    producing = asyncio.create_task(produce())
    await eventually(lambda: _at_least(acks, kill_after), f"{kill_after} acks=all writes before the kill")
    await asyncio.to_thread(cluster.docker, "kill", old_leader)
    killed_at = time.monotonic()
    await producing  # every send must succeed: retries carry the writes to the new leader
    produced_s = acks[-1].acked_at - acks[0].sent_at

    new_leader = (await partition_state(cluster.bootstrap_without(old_leader), "failover")).info.leader
    assert new_leader not in (-1, old_leader)
    failover_ms = (min(ack.acked_at for ack in acks if ack.acked_at > killed_at) - killed_at) * 1000
    killed = f"leader node {old_leader}" + (" (also the active controller)" if also_controller else "")
    measured(f"failover: docker kill of {killed}; node {new_leader} accepted the next acks=all "
             f"write {failover_ms:.0f} ms later (broker.session.timeout.ms=2500); {total} writes in {produced_s:.1f} s")

    records, _ = await read_replica(cluster.address(new_leader), "failover", 0)
    offsets_of: dict[bytes | None, list[int]] = {}
    for offset, value in records:
        offsets_of.setdefault(value, []).append(offset)
    assert len(acks) == total
    for ack in acks:
        assert ack.offset in offsets_of.get(ack.value, []), f"acknowledged {ack.value!r} at {ack.offset} is lost"
    # Without an idempotent producer only a send in flight at the kill may be written twice: the old
    # leader replicated it, died before answering, and the retry appended it again at the new leader.
    in_doubt = {ack.value for ack in acks if ack.sent_at <= killed_at < ack.acked_at}
    duplicated = {value for value, offsets in offsets_of.items() if len(offsets) > 1}
    assert duplicated <= in_doubt, (duplicated, in_doubt)
    assert len(records) == total + len(duplicated)

    await asyncio.to_thread(cluster.docker, "start", old_leader)
    started_at = time.monotonic()
    await eventually(in_isr(cluster, "failover", old_leader, True), f"node {old_leader} rejoins the ISR")
    rejoin_ms = (time.monotonic() - started_at) * 1000
    # The old leader truncated any tail it had that the new leader does not (KIP-101) and holds the same log.
    await eventually(lambda: replicas_agree(cluster, "failover", 0, records),
                     f"node {old_leader} serves exactly the new leader's log")
    state = await partition_state(cluster.bootstrap_without(old_leader), "failover")
    assert set(state.replica_states) == {1, 2, 3}
    assert {r.high_watermark for r in state.replica_states.values()} == {records[-1][0] + 1}
    assert {r.log_start_offset for r in state.replica_states.values()} == {0}
    await asyncio.to_thread(cluster.wait_healthy, [old_leader])
    measured(f"failover: node {old_leader} back in the ISR {rejoin_ms:.0f} ms after docker start; "
             f"{len(duplicated)} in-flight record(s) written twice by producer retry")


async def test_a_disconnected_follower_leaves_the_isr_writes_continue_and_it_rejoins_on_reconnect(
        compose_cluster: ComposeCluster, measured: Report) -> None:
    cluster = compose_cluster
    await create_topic(cluster, "partitioned", **{"min.insync.replicas": "2"})
    state = await partition_state(cluster.bootstrap, "partitioned")
    controller = (await describe(cluster.bootstrap)).controller_id
    # A follower that is not the active controller: this test is about the ISR, not the quorum.
    follower = next(n for n in state.info.replicas if n not in (state.info.leader, controller))

    await asyncio.to_thread(cluster.disconnect, follower)
    disconnected_at = time.monotonic()
    try:
        await eventually(in_isr(cluster, "partitioned", follower, False),
                         f"node {follower} leaves the ISR after replica.lag.time.max.ms")
        shrink_ms = (time.monotonic() - disconnected_at) * 1000
        async with Producer(cluster.bootstrap, acks="all", request_timeout_ms=5000) as producer:
            futures = [await producer.send("partitioned", b"while-cut-%d" % n) for n in range(200)]
            acked = [await future for future in futures]
        assert [m.offset for m in acked] == list(range(200))
        assert len((await partition_state(cluster.bootstrap_without(follower), "partitioned")).info.isr) == 2
    finally:
        await asyncio.to_thread(cluster.connect, follower)
    reconnected_at = time.monotonic()
    await eventually(in_isr(cluster, "partitioned", follower, True), f"node {follower} rejoins the ISR")
    rejoin_ms = (time.monotonic() - reconnected_at) * 1000
    expected = [(n, b"while-cut-%d" % n) for n in range(200)]
    await eventually(lambda: replicas_agree(cluster, "partitioned", 0, expected),
                     f"node {follower} caught up with the 200 records written while it was cut off")
    measured(f"partition: node {follower} left the ISR {shrink_ms:.0f} ms after docker network disconnect "
             f"(replica.lag.time.max.ms={REPLICA_LAG_TIME_MAX_MS}); back in the ISR {rejoin_ms:.0f} ms after "
             "reconnect")


async def test_a_paused_active_controller_is_replaced_and_follows_the_new_one_when_unpaused(
        compose_cluster: ComposeCluster, measured: Report) -> None:
    cluster = compose_cluster
    old_controller = (await asyncio.to_thread(cli_status, cluster.bootstrap))["controller"]
    assert old_controller in cluster.ports
    others = cluster.bootstrap_without(old_controller)

    async def elected_and_fenced() -> bool:
        # Asked of the live nodes only: the paused one accepts connections and never answers.
        async with Admin(others, request_timeout_ms=2000) as admin:
            response = await admin.metadata.refresh(all_topics=True)
        fenced = {broker.node_id for broker in response.brokers if broker.fenced}
        # The others are unfenced too: one the new controller fenced under load (a late heartbeat)
        # is unfenced once it has applied its fencing, a heartbeat or two later.
        return response.controller_id not in (-1, old_controller) and fenced == {old_controller}

    await asyncio.to_thread(cluster.docker, "pause", old_controller)
    paused_at = time.monotonic()
    try:
        await eventually(elected_and_fenced, f"a new controller is elected and fences node {old_controller} only")
        election_ms = (time.monotonic() - paused_at) * 1000
        # Metadata operations go through the new controller: create a topic, change its config, write to it.
        await create_topic(cluster, "after-pause", replication_factor=2, bootstrap=others,
                           **{"min.insync.replicas": "2"})
        async with Admin(others, request_timeout_ms=5000) as admin:
            await admin.incremental_alter_configs("after-pause", {"retention.ms": "3600000"})

        async def altered() -> bool:
            # The node asked may apply the committed change a moment after the controller answered.
            async with Admin(others, request_timeout_ms=3000) as admin:
                configs = await admin.describe_configs(["after-pause"])
            return configs["after-pause"].overrides.get("retention.ms") == "3600000"

        await eventually(altered, "the config change is applied")
        async with Producer(others, acks="all") as producer:
            assert (await (await producer.send("after-pause", b"written without the old controller"))).offset == 0
    finally:
        await asyncio.to_thread(cluster.docker, "unpause", old_controller)

    new_controller = node_health(cluster.address(next(n for n in cluster.ports if n != old_controller)))[
        "active_controller"]

    async def follows() -> bool:
        health = node_health(cluster.address(old_controller))
        if not (health["healthy"] and health["active_controller"] == new_controller):
            return False
        # ... and has applied the metadata committed while it was paused (asked of it alone).
        async with Admin(cluster.address(old_controller), request_timeout_ms=3000) as admin:
            return "after-pause" in await admin.list_topics()

    await eventually(follows, f"node {old_controller} follows controller {new_controller} and applies its records")
    await asyncio.to_thread(cluster.wait_healthy, list(cluster.ports))
    measured(f"pause: docker pause of active controller node {old_controller}; node {new_controller} elected "
             f"and node {old_controller} fenced within {election_ms:.0f} ms; after unpause it follows")


async def _at_least(acks: list[Ack], count: int) -> bool:
    return len(acks) >= count
