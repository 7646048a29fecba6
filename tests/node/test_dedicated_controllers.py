"""Three controller-only and three broker-only node processes on loopback (`tributary-node dev
--controllers 3 --brokers 3`), the shape Kafka deploys: partitions live on the brokers only; the
quorum survives kill -9 of its active controller; and brokers cut off from every controller while
they still reach each other keep replicating acks=all writes, then recover when the controllers
come back.

Method: the cut is SIGSTOP of every controller process (by PID), which loopback allows without
root: brokers' heartbeats, Raft fetches and AlterPartition requests go unanswered, while their
replica fetches between themselves go on. Waits for other processes are the harness's bounded
polls; nothing sleeps.
"""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from client.admin import Admin, NewTopic
from client.connection import Connections, NodeUnavailableError
from client.consumer import Consumer
from client.producer import Producer
from node.dev import DevCluster
from tests.node.cluster_harness import describe, eventually, read_replica, start_cluster, stopped
from wire.api import Api
from wire.fetch import FetchPartition, FetchRequest, FetchResponse
from wire.metadata import MetadataRequest, MetadataResponse

CONTROLLERS, BROKERS = [1, 2, 3], [4, 5, 6]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("dedicated"), len(BROKERS), len(CONTROLLERS)))


def health(cluster: DevCluster, node_id: int) -> dict[str, object]:
    """A node's /health body (200 or 503 alike)."""
    try:
        with urllib.request.urlopen(f"http://{cluster.nodes[node_id].address}/health", timeout=2) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        return json.loads(error.read())


async def create_topic(cluster: DevCluster, name: str) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(name, 1, 3, {"min.insync.replicas": "2"})])
    await eventually(lambda: fully_replicated(cluster, name), f"{name} has a leader and all three brokers in its ISR")


async def fully_replicated(cluster: DevCluster, topic: str) -> bool:
    states = [p.info for p in (await describe(cluster.bootstrap)).partitions if p.info.topic == topic]
    return len(states) == 1 and states[0].leader in BROKERS and sorted(states[0].isr) == BROKERS


async def produce(cluster: DevCluster, topic: str, values: list[bytes]) -> dict[bytes, int]:
    """Send every value with acks=all; the offset of each (all must be acknowledged)."""
    async with Producer(cluster.bootstrap, acks="all", linger_ms=1, retry_backoff_ms=50, request_timeout_ms=3000,
                        delivery_timeout_ms=30_000) as producer:
        futures = [await producer.send(topic, value) for value in values]
        return {value: (await future).offset for value, future in zip(values, futures, strict=True)}


async def all_brokers_unfenced(cluster: DevCluster) -> bool:
    return all(health(cluster, broker_id)["broker_unfenced"] is True for broker_id in BROKERS)


async def every_broker_serves(cluster: DevCluster, topic: str, acked: dict[bytes, int]) -> bool:
    """Each broker's replica holds every acknowledged value at its offset, below its HW."""
    for broker_id in BROKERS:
        records, _ = await read_replica(cluster.nodes[broker_id].address, topic, 0)
        served = dict((offset, value) for offset, value in records)
        if any(served.get(offset) != value for value, offset in acked.items()):
            return False
    return True


async def active_controller(cluster: DevCluster) -> int:
    return (await describe(cluster.bootstrap)).controller_id


async def test_controllers_host_no_partition_and_are_not_brokers_in_metadata(cluster: DevCluster) -> None:
    await create_topic(cluster, "placed")
    values = [b"placed-%d" % n for n in range(200)]
    acked = await produce(cluster, "placed", values)
    assert sorted(acked.values()) == list(range(200))
    consumer = Consumer(cluster.bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([("placed", 0)])
        seen: list[bytes | None] = []
        for _ in range(100):
            seen += [record.value for record in await consumer.poll(timeout_ms=500)]
            if len(seen) >= len(values):
                break
        assert seen == values
    finally:
        await consumer.close()

    description = await describe(cluster.bootstrap)
    assert description.controller_id in CONTROLLERS
    assert sorted(node.broker.node_id for node in description.nodes) == BROKERS
    for partition in description.partitions:
        assert set(partition.info.replicas) <= set(BROKERS), partition.info
    connections = Connections()
    try:
        for broker_id in BROKERS:
            answer = await connections.call(cluster.nodes[broker_id].address, Api.METADATA, MetadataRequest(None),
                                            MetadataResponse, 5000)
            assert sorted(broker.node_id for broker in answer.brokers) == BROKERS
        for controller_id in CONTROLLERS:
            fetch = FetchRequest((FetchPartition("placed", 0, 0, 1 << 20),), max_wait_ms=0, min_bytes=0)
            with pytest.raises(NodeUnavailableError, match=r"BROKER_NOT_AVAILABLE.*controller only.*send it to a br"):
                await connections.call(cluster.nodes[controller_id].address, Api.FETCH, fetch, FetchResponse, 5000)
            # On disk: the metadata log and the dir's identity, no partition.
            data = cluster.nodes[controller_id].directory / "data"
            assert sorted(path.name for path in data.iterdir()) == [".lock", "__cluster_metadata-0", "meta.properties"]
            assert health(cluster, controller_id)["process_roles"] == ["controller"]
    finally:
        await connections.close()


async def test_brokers_keep_replicating_through_controller_failover_and_while_cut_off_from_every_controller(
        cluster: DevCluster) -> None:
    await create_topic(cluster, "steady")
    acked = await produce(cluster, "steady", [b"before-%d" % n for n in range(100)])

    # kill -9 of the active controller: another voter takes office and serves (a new topic needs it).
    old_controller = await active_controller(cluster)
    cluster.kill_node(old_controller)
    acked |= await produce(cluster, "steady", [b"after-kill-%d" % n for n in range(100)])

    async def another_controller() -> bool:
        return await active_controller(cluster) in set(CONTROLLERS) - {old_controller}

    election_s = await eventually(another_controller, f"a controller other than {old_controller} takes office")
    # A broker that found the new controller only after its session is fenced until it catches up.
    await eventually(lambda: all_brokers_unfenced(cluster), "every broker unfenced by the new controller")
    await create_topic(cluster, "created-after-failover")
    cluster.start_node(old_controller)

    # Every controller stopped: brokers reach each other only. They stay leaders and followers as
    # last told, past their session (nobody can fence them), and acks=all writes still replicate.
    for controller_id in CONTROLLERS:
        cluster.signal_node(controller_id, signal.SIGSTOP)
    try:
        acked |= await produce(cluster, "steady", [b"cut-off-%d" % n for n in range(100)])

        async def sessions_lapsed() -> bool:
            return all(health(cluster, broker_id)["broker_unfenced"] is False for broker_id in BROKERS)

        lapsed_s = await eventually(sessions_lapsed, "no broker's heartbeat is answered within a session")
        acked |= await produce(cluster, "steady", [b"session-lapsed-%d" % n for n in range(100)])
        await eventually(lambda: every_broker_serves(cluster, "steady", acked),
                         "every broker serves every record acknowledged while the controllers were stopped")
    finally:
        for controller_id in CONTROLLERS:
            cluster.signal_node(controller_id, signal.SIGCONT)

    async def recovered() -> bool:
        return all(health(cluster, node_id)["healthy"] for node_id in cluster.nodes) and await fully_replicated(
            cluster, "steady")

    recovery_s = await eventually(recovered, "every node healthy again and the ISR full")
    print(f"dedicated controllers: brokers learned the new active controller {election_s * 1000:.0f} ms after "
          f"kill -9; sessions lapsed {lapsed_s * 1000:.0f} ms into the cut; all healthy with a full ISR "
          f"{recovery_s * 1000:.0f} ms after SIGCONT")
    acked |= await produce(cluster, "steady", [b"recovered-%d" % n for n in range(100)])
    assert sorted(acked.values()) == list(range(500)), "an acks=all send was written twice or lost"
    await eventually(lambda: every_broker_serves(cluster, "steady", acked), "every broker serves all 500 records")
