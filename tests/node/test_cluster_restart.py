"""A whole cluster stopped with SIGTERM and started again from its dirs: clean-shutdown markers,
committed offsets and records survive; a node refuses a log dir of another cluster, one another
process holds and a quorum-state it cannot read, and refuses clients until it has caught up with the metadata log."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from client.admin import Admin, NewTopic
from client.connection import Connections, NodeUnavailableError
from client.consumer import Consumer
from client.errors import NetworkException
from client.producer import Producer
from controller.raft_log import METADATA_LOG_DIR
from node.dev import DevCluster, healthy
from tests.node.cluster_harness import FAST, eventually, free_port_block, read_replica, start_cluster
from wire.api import Api
from wire.metadata import MetadataRequest, MetadataResponse
from wire.topic_partition import TopicPartition

TOPIC = "durable"


async def write_and_commit(cluster: DevCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, 2, 3)])
    async with Producer(cluster.bootstrap, acks="all") as producer:
        await asyncio.gather(*[await producer.send(TOPIC, b"%d" % n, partition=n % 2) for n in range(40)])
    consumer = Consumer(cluster.bootstrap, group_id="billing")
    try:
        await consumer.commit({TopicPartition(TOPIC, 0): 7, TopicPartition(TOPIC, 1): 19})
    finally:
        await consumer.close()


async def committed(cluster: DevCluster) -> dict[TopicPartition, int | None]:
    consumer = Consumer(cluster.bootstrap, group_id="billing")
    try:
        return await consumer.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
    finally:
        await consumer.close()


def test_a_restarted_cluster_keeps_records_and_committed_offsets(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path)
    try:
        asyncio.run(write_and_commit(cluster))
        assert asyncio.run(committed(cluster)) == {TopicPartition(TOPIC, 0): 7, TopicPartition(TOPIC, 1): 19}
        cluster.stop()
        for node in cluster.nodes.values():
            assert node.process is not None and node.process.returncode == 0, cluster.log_tail(node.node_id)
            assert (node.directory / "data" / ".kafka_cleanshutdown").exists(), f"node {node.node_id}"
            assert "controlled shutdown" in node.log_path.read_text()

        cluster.start()
        assert asyncio.run(committed(cluster)) == {TopicPartition(TOPIC, 0): 7, TopicPartition(TOPIC, 1): 19}
        for node in cluster.nodes.values():
            records, _ = asyncio.run(read_replica(node.address, TOPIC, 0))
            assert [value for _, value in records] == [b"%d" % n for n in range(0, 40, 2)]
            assert not (node.directory / "data" / ".kafka_cleanshutdown").exists(), "removed at start"
    finally:
        cluster.stop()


def test_a_node_refuses_a_log_dir_of_another_cluster(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, 1)
    cluster.stop()
    config = tmp_path / "other.properties"
    config.write_text(cluster.nodes[1].config_path.read_text() + "cluster.id=AnotherClusterAAAAAAAAA\n")
    result = subprocess.run([sys.executable, "-m", "node.main", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "belongs to node 1 of cluster" in result.stderr and "AnotherClusterAAAAAAAAA" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_second_process_on_a_running_nodes_dirs_refuses_to_start_and_names_the_holder(tmp_path: Path) -> None:
    """Two processes on one log dir would append to the same segments: the second exits (2, no
    traceback) naming the running node and its pid, and leaves the running node's files alone."""
    cluster = start_cluster(tmp_path, 1)
    try:
        node = cluster.nodes[1]
        assert node.process is not None
        meta = (node.directory / "data" / "meta.properties").read_text()
        result = subprocess.run([sys.executable, "-m", "node.main", "--config", str(node.config_path)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2
        assert f"held by node 1, pid {node.process.pid}" in result.stderr
        assert "Traceback" not in result.stderr
        assert (node.directory / "data" / "meta.properties").read_text() == meta
        assert healthy(node.address), cluster.log_tail(1)
    finally:
        cluster.stop()


def test_a_node_refuses_a_quorum_state_it_cannot_read_and_says_what_is_safe(tmp_path: Path) -> None:
    """Goal: a damaged quorum-state stops the node (exit 2, no traceback) with the file's name and
    the safe way out: move it aside, and the node restores as a voter without state."""
    cluster = start_cluster(tmp_path, 1)
    cluster.stop()
    quorum_state = cluster.nodes[1].directory / "data" / METADATA_LOG_DIR / "quorum-state"
    quorum_state.write_text('{"leaderEpoch": 3')
    result = subprocess.run([sys.executable, "-m", "node.main", "--config", str(cluster.nodes[1].config_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "CorruptQuorumStateError" in result.stderr and str(quorum_state) in result.stderr
    assert "Move the file aside" in result.stderr
    assert "Traceback" not in result.stderr


async def metadata_of(connections: Connections, address: str) -> MetadataResponse | str:
    """The node's metadata answer, or why there was none."""
    try:
        return await connections.call(address, Api.METADATA, MetadataRequest(None), MetadataResponse, 5000)
    except NodeUnavailableError as error:
        return str(error)


async def refused_until_caught_up(cluster: DevCluster) -> None:
    first = cluster.nodes[1].address
    connections = Connections()
    try:
        async def answers() -> bool:
            answer = await metadata_of(connections, first)
            return not isinstance(answer, str) or "BROKER_NOT_AVAILABLE" in answer

        await eventually(answers, "node 1 answers on its port")
        answer = await metadata_of(connections, first)
        assert isinstance(answer, str) and "node 1 is starting" in answer, answer
        assert not healthy(first)
        async with Admin(first) as admin:
            with pytest.raises(NetworkException, match="not yet caught up with the metadata log"):
                await admin.create_topics([NewTopic("early", 1, 1)])

        cluster.start_node(2, wait=False)
        cluster.start_node(3, wait=False)
        await asyncio.to_thread(cluster.wait_healthy)
        answer = await metadata_of(connections, first)
        assert isinstance(answer, MetadataResponse), answer
        assert sorted(broker.node_id for broker in answer.brokers) == [1, 2, 3]
    finally:
        await connections.close()


def test_a_node_refuses_clients_until_it_has_caught_up_with_the_metadata_log(tmp_path: Path) -> None:
    """Kafka opens a broker's client listeners only after its initial metadata catch-up. Node 1
    starts alone, one of three voters: no quorum, so it cannot catch up, and refuses clients with
    503 BROKER_NOT_AVAILABLE (Raft is still served, or the quorum could never form)."""
    cluster = DevCluster(tmp_path, 3, free_port_block(3), FAST)
    try:
        cluster.start_node(1, wait=False)
        asyncio.run(refused_until_caught_up(cluster))
    finally:
        cluster.stop()
