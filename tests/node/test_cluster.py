"""Three real node processes on loopback (`tributary-node dev`'s DevCluster), driven by the client
library: replication to followers, kill -9 of a leader under acks=all load, a stopped follower
leaving and rejoining the ISR, retention and delete-records followed by every replica, bit rot in
a leader's log."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator

import pytest

from client.admin import Admin, NewTopic
from client.connection import NodeUnavailableError
from client.consumer import Consumer
from client.errors import TributaryError
from client.producer import Producer
from node.broker import LOG_DIR_FAILURE_EXIT_CODE
from node.dev import DevCluster
from storage.records import BATCH_HEADER_SIZE, iter_headers
from tests.node.cluster_harness import describe, eventually, read_replica, start_cluster, stopped
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("cluster")))


async def create_topic(cluster: DevCluster, name: str, partitions: int = 1, **configs: str) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 3, configs)])

    async def has_leaders() -> bool:
        description = await describe(cluster.bootstrap)
        states = [p for p in description.partitions if p.info.topic == name]
        return len(states) == partitions and all(p.info.leader >= 0 and len(p.info.isr) == 3 for p in states)

    await eventually(has_leaders, f"{name} has leaders and a full ISR")


async def leader_of(cluster: DevCluster, topic: str, partition: int = 0) -> tuple[int, tuple[int, ...]]:
    description = await describe(cluster.bootstrap)
    (state,) = [p for p in description.partitions if (p.info.topic, p.info.partition) == (topic, partition)]
    return state.info.leader, tuple(state.info.isr)


async def replicas_agree(cluster: DevCluster, topic: str, expected: list[tuple[int, bytes | None]]) -> bool:
    for node in cluster.nodes.values():
        records, high_watermark = await read_replica(node.address, topic, 0)
        if records != expected or high_watermark != (expected[-1][0] + 1 if expected else 0):
            return False
    return True


async def test_records_produced_to_the_leader_are_served_identically_by_every_follower(cluster: DevCluster) -> None:
    await create_topic(cluster, "replicated", **{"min.insync.replicas": "2"})
    async with Producer(cluster.bootstrap, acks="all") as producer:
        futures = [await producer.send("replicated", b"value-%d" % n, key=b"k") for n in range(300)]
        acked = [await future for future in futures]
    assert [m.offset for m in acked] == list(range(300))
    expected = [(n, b"value-%d" % n) for n in range(300)]
    await eventually(lambda: replicas_agree(cluster, "replicated", expected), "every replica serves all 300 records")

    consumer = Consumer(cluster.bootstrap, read_from="follower", auto_offset_reset="earliest")
    try:
        consumer.assign([("replicated", 0)])
        leader, _ = await leader_of(cluster, "replicated")
        seen: list[bytes | None] = []
        for _ in range(100):
            seen += [r.value for r in await consumer.poll(timeout_ms=500)]
            if len(seen) >= 300:
                break
        assert seen == [value for _, value in expected]
        assert consumer.fetch_node_for(TopicPartition("replicated", 0)) != leader
    finally:
        await consumer.close()


async def test_kill_9_of_the_leader_under_acks_all_loses_no_acknowledged_record(cluster: DevCluster) -> None:
    await create_topic(cluster, "failover", **{"min.insync.replicas": "2"})
    old_leader, _ = await leader_of(cluster, "failover")
    acked: dict[bytes, int] = {}
    failed = 0
    killed_at: float | None = None
    first_ack_after_kill: float | None = None
    async with Producer(cluster.bootstrap, acks="all", linger_ms=1, retry_backoff_ms=50,
                        request_timeout_ms=3000, delivery_timeout_ms=60000) as producer:
        for n in range(1500):
            if n == 400:
                cluster.kill_node(old_leader)
                killed_at = time.monotonic()
            value = b"record-%d" % n
            try:
                metadata = await (await producer.send("failover", value))
            except TributaryError:
                failed += 1
                continue
            acked[value] = metadata.offset
            if killed_at is not None and first_ack_after_kill is None:
                first_ack_after_kill = time.monotonic()
    assert killed_at is not None and first_ack_after_kill is not None
    failover_s = first_ack_after_kill - killed_at
    print(f"failover: first acks=all write accepted {failover_s * 1000:.0f} ms after kill -9 of the leader")
    new_leader, _ = await leader_of(cluster, "failover")
    assert new_leader not in (-1, old_leader)
    assert len(acked) == 1500 - failed and failed == 0, f"{failed} sends failed for good"

    records, _ = await read_replica(cluster.nodes[new_leader].address, "failover", 0)
    offsets_of: dict[bytes | None, list[int]] = {}
    for offset, value in records:
        offsets_of.setdefault(value, []).append(offset)
    for value, offset in acked.items():
        assert value in offsets_of, f"acknowledged {value!r} at {offset} is lost"
        # a retried send may be written twice (no idempotent producer), but the acknowledged one is at its offset
        assert offset in offsets_of[value], (value, offset, offsets_of[value])

    cluster.start_node(old_leader)

    async def rejoined() -> bool:
        _, isr = await leader_of(cluster, "failover")
        return old_leader in isr

    await eventually(rejoined, f"node {old_leader} rejoins the ISR")
    leader_records, _ = await read_replica(cluster.nodes[new_leader].address, "failover", 0)
    await eventually(lambda: replicas_agree(cluster, "failover", leader_records),
                     "the old leader truncated its unacknowledged tail and holds the new leader's log")


async def test_a_stopped_follower_leaves_the_isr_and_rejoins_when_continued(cluster: DevCluster) -> None:
    await create_topic(cluster, "strict", **{"min.insync.replicas": "3"})
    leader, isr = await leader_of(cluster, "strict")
    follower = next(node for node in isr if node != leader)
    cluster.signal_node(follower, signal.SIGSTOP)
    try:
        async def shrunk() -> bool:
            return follower not in (await leader_of(cluster, "strict"))[1]

        await eventually(shrunk, f"node {follower} leaves the ISR after replica.lag.time.max.ms")
        async with Producer(cluster.bootstrap, acks="all", retries=0, delivery_timeout_ms=5000) as producer:
            with pytest.raises(TributaryError) as refused:
                await (await producer.send("strict", b"needs three"))
        assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    finally:
        cluster.signal_node(follower, signal.SIGCONT)

    async def expanded() -> bool:
        return follower in (await leader_of(cluster, "strict"))[1]

    await eventually(expanded, f"node {follower} rejoins the ISR once it catches up")
    async with Producer(cluster.bootstrap, acks="all") as producer:
        assert (await (await producer.send("strict", b"three again"))).offset >= 0


async def test_retention_on_the_leader_moves_log_start_offset_on_every_replica(cluster: DevCluster) -> None:
    await create_topic(cluster, "expiring", **{"segment.bytes": "1024", "retention.ms": "60000"})
    old = int(time.time() * 1000) - 3_600_000
    async with Producer(cluster.bootstrap, acks="all", batch_size=200) as producer:
        futures = [await producer.send("expiring", b"x" * 100, timestamp_ms=old) for _ in range(60)]
        await asyncio.gather(*futures)

    async def trimmed() -> bool:
        description = await describe(cluster.bootstrap)
        (state,) = [p for p in description.partitions if p.info.topic == "expiring"]
        starts = {node: replica.log_start_offset for node, replica in state.replica_states.items()}
        return len(starts) == 3 and len(set(starts.values())) == 1 and min(starts.values()) > 0

    await eventually(trimmed, "retention deleted old segments and every replica follows the leader's logStartOffset")


async def test_delete_records_raises_log_start_offset_on_every_replica(cluster: DevCluster) -> None:
    await create_topic(cluster, "trimmed")
    async with Producer(cluster.bootstrap, acks="all") as producer:
        await asyncio.gather(*[await producer.send("trimmed", b"%d" % n) for n in range(20)])
    async with Admin(cluster.bootstrap) as admin:
        low_watermarks = await admin.delete_records({TopicPartition("trimmed", 0): 12})
    assert low_watermarks[TopicPartition("trimmed", 0)] == 12

    async def everyone_starts_at_12() -> bool:
        for node in cluster.nodes.values():
            records, _ = await read_replica(node.address, "trimmed", 0)
            if not records or records[0][0] != 12:
                return False
        return True

    await eventually(everyone_starts_at_12, "every replica serves from offset 12")


async def test_bit_rot_in_the_leaders_log_halts_it_and_loses_no_acknowledged_record(cluster: DevCluster) -> None:
    """A byte of a committed batch changes in the leader's segment file: the leader serves it to
    nobody, cuts its log there and exits; the others go on with every record, and the restarted
    node fetches back what it cut."""
    await create_topic(cluster, "rotting", **{"min.insync.replicas": "2"})
    async with Producer(cluster.bootstrap, acks="all") as producer:
        for n in range(20):
            await (await producer.send("rotting", b"value-%d" % n))  # one batch each
    expected = [(n, b"value-%d" % n) for n in range(20)]
    await eventually(lambda: replicas_agree(cluster, "rotting", expected), "every replica serves all 20 records")
    leader, _ = await leader_of(cluster, "rotting")
    node = cluster.nodes[leader]
    assert node.process is not None
    segment = node.directory / "data" / "rotting-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    position = next(position for position, header in iter_headers(data) if header.base_offset == 10)
    data[position + BATCH_HEADER_SIZE + 2] ^= 0x40
    with segment.open("r+b") as file:
        file.write(data)

    with pytest.raises((NodeUnavailableError, AssertionError)):
        await read_replica(node.address, "rotting", 0)  # offsets 0-9 come back, then the leader halts
    assert await asyncio.to_thread(node.process.wait, 30) == LOG_DIR_FAILURE_EXIT_CODE
    log_text = node.log_path.read_text(errors="replace")
    assert "halting because a log dir failed" in log_text and "offset 10 of rotting-0 is damaged" in log_text

    async def served_elsewhere() -> bool:
        new_leader, _ = await leader_of(cluster, "rotting")
        return new_leader not in (-1, leader) and (
            (await read_replica(cluster.nodes[new_leader].address, "rotting", 0))[0] == expected)

    await eventually(served_elsewhere, "a new leader serves all 20 records")
    cluster.start_node(leader)
    await eventually(lambda: replicas_agree(cluster, "rotting", expected),
                     f"node {leader} fetched back the records it cut at the damaged batch")


# Kafka's quorum and session timeouts (FAST shortens them): the failover below must not wait for them.
KAFKA_TIMEOUTS = {"controller.quorum.election.timeout.ms": "1000", "controller.quorum.fetch.timeout.ms": "2000",
                  "controller.quorum.election.backoff.max.ms": "1000", "broker.session.timeout.ms": "9000"}


async def test_kill_9_of_the_active_controller_leading_a_partition_loses_no_acknowledged_record(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Goal: when the killed leader is also the active controller (the Raft leader), a new
    controller is elected and fences it, and no acknowledged record is lost. Method: a cluster of
    its own with Kafka's quorum timeouts; awaited acks=all sends to the partition the controller
    leads, kill -9 of that node mid-way; every acknowledged record is on the new leader at its
    offset. The time to the first acknowledgement after the kill is printed, not asserted (README,
    "Failover after kill -9")."""
    for cluster in stopped(start_cluster(tmp_path_factory.mktemp("controller-failover"), **KAFKA_TIMEOUTS)):
        await create_topic(cluster, "controller-failover", partitions=3, **{"min.insync.replicas": "2"})
        description = await describe(cluster.bootstrap)
        controller = description.controller_id
        (partition,) = [p.info.partition for p in description.partitions
                        if p.info.topic == "controller-failover" and p.info.leader == controller]
        acked: dict[bytes, int] = {}
        killed_at: float | None = None
        first_ack_after_kill: float | None = None
        async with Producer(cluster.bootstrap, acks="all", linger_ms=1, retry_backoff_ms=20,
                            request_timeout_ms=3000, delivery_timeout_ms=60000) as producer:
            for n in range(1000):
                if n == 300:
                    cluster.kill_node(controller)
                    killed_at = time.monotonic()
                value = b"record-%d" % n
                metadata = await (await producer.send("controller-failover", value, partition=partition))
                acked[value] = metadata.offset
                if killed_at is not None and first_ack_after_kill is None:
                    first_ack_after_kill = time.monotonic()
        assert killed_at is not None and first_ack_after_kill is not None
        print(f"failover: first acks=all write accepted {(first_ack_after_kill - killed_at) * 1000:.0f} ms after "
              f"kill -9 of node {controller}, the active controller and leader of partition {partition}")
        new_leader, _ = await leader_of(cluster, "controller-failover", partition)
        assert new_leader not in (-1, controller)
        assert (await describe(cluster.bootstrap)).controller_id not in (-1, controller)
        records, _ = await read_replica(cluster.nodes[new_leader].address, "controller-failover", partition)
        offsets_of: dict[bytes | None, list[int]] = {}
        for offset, value in records:
            offsets_of.setdefault(value, []).append(offset)
        for value, offset in acked.items():
            assert offset in offsets_of.get(value, []), f"acknowledged {value!r} at {offset} is lost"
