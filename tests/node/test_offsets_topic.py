"""__consumer_offsets is created only with its configured replication factor: while fewer brokers
are active, the coordinator is not available (Kafka's answer), instead of a topic created smaller
that would stay under-replicated for good."""

from __future__ import annotations

import asyncio
from pathlib import Path

from client.admin import Admin
from client.connection import Connections
from node.dev import DevCluster
from tests.node.cluster_harness import describe, eventually, start_cluster
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_offsets import OffsetCommitPartition, OffsetCommitRequest, OffsetCommitResponse

COMMIT = OffsetCommitRequest("billing", (OffsetCommitPartition("orders", 0, 5),))


async def commit(address: str) -> ErrorCode:
    connections = Connections()
    try:
        response = await connections.call(address, Api.OFFSET_COMMIT, COMMIT, OffsetCommitResponse, 5000)
        return response.partitions[0].error_code
    finally:
        await connections.close()


async def offsets_topic_replicas(cluster: DevCluster) -> set[int]:
    async with Admin(cluster.bootstrap, request_timeout_ms=3000) as admin:
        description = await admin.describe_cluster(include_internal=True)
    return {len(p.info.replicas) for p in description.partitions if p.info.topic == "__consumer_offsets"}


async def broker_online(cluster: DevCluster, broker_id: int, online: bool) -> bool:
    description = await describe(cluster.nodes[1].address)
    return any(n.broker.node_id == broker_id and (n.state == "online") == online for n in description.nodes)


def test_the_offsets_topic_waits_for_its_replication_factor(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, 3)
    try:
        assert cluster.stop_node(3) == 0
        asyncio.run(eventually(lambda: broker_online(cluster, 3, False), "broker 3 fenced"))
        assert asyncio.run(commit(cluster.nodes[1].address)) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert asyncio.run(offsets_topic_replicas(cluster)) == set()

        cluster.start_node(3)
        asyncio.run(eventually(lambda: broker_online(cluster, 3, True), "broker 3 unfenced"))

        async def committed() -> bool:
            return await commit(cluster.nodes[1].address) == ErrorCode.NONE

        asyncio.run(eventually(committed, "the commit succeeds once three brokers are active"))
        assert asyncio.run(offsets_topic_replicas(cluster)) == {3}
    finally:
        cluster.stop()
