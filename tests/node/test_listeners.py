"""Listeners by purpose, in a real node process: node-to-node traffic (Raft, the broker-to-controller
requests, replica fetches) only on the inter-broker listener; a client listener refuses it with
CLUSTER_AUTHORIZATION_FAILED and serves clients. A replica fetch from another cluster is refused
with INCONSISTENT_CLUSTER_ID."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import aiohttp
import pytest

from client.admin import Admin, NewTopic
from client.consumer import Consumer
from client.producer import Producer
from node.dev import DevCluster
from tests.node.cluster_harness import FAST, free_port_block, stopped
from wire.api import Api, ErrorResponse
from wire.codec import pack, unpack
from wire.envelope import Envelope
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchRequest, FetchResponse
from wire.metadata import MetadataRequest, MetadataResponse

TOPIC = "listened"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DevCluster, str]]:
    """One combined node: INTERNAL (inter-broker, the voters' address) and EXTERNAL (clients)."""
    base = free_port_block(2)
    external = f"127.0.0.1:{base + 1}"
    cluster = DevCluster(tmp_path_factory.mktemp("listeners"), 1, base, {
        **FAST, "listeners": f"INTERNAL://127.0.0.1:{base},EXTERNAL://{external}",
        "inter.broker.listener.name": "INTERNAL",
    })
    cluster.start()
    for started in stopped(cluster):
        yield started, external


async def post(address: str, api: Api, body: bytes) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session, session.post(f"http://{address}{api.path}", data=body) as response:
        return response.status, await response.read()


REPLICA_FETCH = FetchRequest((FetchPartition(TOPIC, 0, 0, 1 << 20),), replica_id=2, broker_epoch=1, max_wait_ms=0)
RAFT = Envelope("FetchRequest", {}, 2, "127.0.0.1:1")


@pytest.mark.parametrize(("api", "request_body"), [(Api.FETCH, REPLICA_FETCH), (Api.RAFT, RAFT)],
                         ids=["replica fetch", "raft"])
async def test_node_to_node_requests_on_a_client_listener_are_refused(node: tuple[DevCluster, str], api: Api,
                                                                      request_body: object) -> None:
    _, external = node
    status, body = await post(external, api, pack(request_body))
    assert status == 403
    answer = unpack(ErrorResponse, body)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and "INTERNAL" in answer.message


async def test_a_replica_fetch_on_the_inter_broker_listener_reaches_the_broker(node: tuple[DevCluster, str]) -> None:
    cluster, _ = node
    internal = cluster.nodes[1].address
    status, body = await post(internal, Api.METADATA, pack(MetadataRequest()))
    cluster_id = unpack(MetadataResponse, body).cluster_id
    status, body = await post(internal, Api.FETCH, pack(dataclasses.replace(REPLICA_FETCH, cluster_id=cluster_id)))
    assert status == 200
    (part,) = unpack(FetchResponse, body).partitions
    assert part.error_code != ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@pytest.mark.parametrize("cluster_id", [None, "another-cluster"])
async def test_a_replica_fetch_from_another_cluster_is_refused(node: tuple[DevCluster, str],
                                                               cluster_id: str | None) -> None:
    cluster, _ = node
    status, body = await post(cluster.nodes[1].address, Api.FETCH,
                              pack(dataclasses.replace(REPLICA_FETCH, cluster_id=cluster_id)))
    assert status == 400
    assert unpack(ErrorResponse, body).error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


async def test_clients_produce_and_consume_through_the_client_listener(node: tuple[DevCluster, str]) -> None:
    _, external = node
    async with Admin(external) as admin:
        await admin.create_topics([NewTopic(TOPIC, 1, 1)])
    async with Producer(external) as producer:
        await (await producer.send(TOPIC, b"through EXTERNAL"))
    async with Consumer(external) as consumer:
        consumer.assign([(TOPIC, 0)])
        consumer.seek((TOPIC, 0), 0)
        records = await consumer.poll(timeout_ms=10_000)
    assert [record.value for record in records] == [b"through EXTERNAL"]
