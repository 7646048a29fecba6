"""`process.roles` decides what a node runs and serves (KRaft): a controller-only node keeps only its
metadata log, registers no broker and serves what Kafka's controller listener serves (Raft, the
broker-to-controller requests, topic admin); every broker request is refused with 503
BROKER_NOT_AVAILABLE naming the brokers to use. Its /health and /metrics have no broker part.

Method: dispatch and health on `Node`s that were never started, with the quorum replaced by a
stand-in (as test_dispatch_gate.py); then one real controller-only node in this process (a
single-voter quorum on a loopback port), started, asked over HTTP, scraped and stopped.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from client.connection import Connections, NodeUnavailableError
from node.config import NodeConfig
from node.node import CONTROLLER_ADMIN_APIS, NODE_TO_NODE_APIS, Node
from node.server import NotABroker
from tests.node.cluster_harness import free_port_block
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchRequest, FetchResponse
from wire.topics import CreatableTopic, CreateTopicsRequest

VOTERS = "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"
BROKER_APIS = [api for api in Api if api not in NODE_TO_NODE_APIS | CONTROLLER_ADMIN_APIS]


class StandInQuorum:
    """Names the active controller and knows two brokers (one fenced); records what it was asked."""

    metadata_offset = 7
    is_running = True

    def __init__(self, active_controller_id: int | None = 1) -> None:
        self.active_controller_id = active_controller_id
        self.metadata = SimpleNamespace(brokers=lambda: [
            SimpleNamespace(broker_id=4, fenced=False, endpoints={"HTTP": "127.0.0.1:9095"}),
            SimpleNamespace(broker_id=5, fenced=True, endpoints={"HTTP": "127.0.0.1:9096"}),
        ])
        self.asked: list[str] = []

    async def handle_raft(self, envelope: Any) -> None:
        self.asked.append("raft")

    async def handle_controller(self, api: Api, envelope: Any) -> str:
        self.asked.append(api.value)
        return "answered by the quorum"

    async def controller_request(self, request: Any, timeout_ms: int) -> str:
        self.asked.append("controller_request")
        return "answered by the controller"


def node_of(roles: str, node_id: int = 1) -> Node:
    node = Node(NodeConfig.from_properties({"node.id": str(node_id), "process.roles": roles,
                                            "controller.quorum.voters": VOTERS}))
    node.quorum = StandInQuorum()  # type: ignore[assignment]
    return node


@pytest.mark.parametrize("api", BROKER_APIS, ids=lambda api: api.value)
async def test_a_controller_only_node_refuses_broker_requests_naming_the_unfenced_brokers(api: Api) -> None:
    node = node_of("controller")
    with pytest.raises(NotABroker, match=rf"node 1 is a controller only .*no {api.value} requests") as refused:
        await node.dispatch(api, object(), "HTTP")
    assert "send it to a broker: 127.0.0.1:9095" in str(refused.value)
    assert "9096" not in str(refused.value)
    assert node.quorum.asked == []  # type: ignore[attr-defined]


async def test_a_controller_only_node_with_no_broker_yet_says_to_start_one() -> None:
    node = node_of("controller")
    node.quorum.metadata = SimpleNamespace(brokers=lambda: [])  # type: ignore[attr-defined]
    with pytest.raises(NotABroker, match=r"no broker is registered and unfenced yet; start nodes with process\.roles"):
        await node.dispatch(Api.METADATA, object(), "HTTP")


async def test_a_controller_only_node_serves_raft_broker_to_controller_requests_and_topic_admin() -> None:
    node = node_of("controller")
    node.quorum.active_controller_id = 2  # type: ignore[misc]  # not the active controller: admin is forwarded
    assert (await node.dispatch(Api.RAFT, object(), "HTTP")).type == "Ack"
    for api in (Api.BROKER_REGISTRATION, Api.BROKER_HEARTBEAT, Api.CONTROLLED_SHUTDOWN, Api.ALTER_PARTITION):
        assert await node.dispatch(api, object(), "HTTP") == "answered by the quorum"
    for api in (Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.INCREMENTAL_ALTER_CONFIGS):
        assert await node.dispatch(api, SimpleNamespace(timeout_ms=1000), "HTTP") == "answered by the controller"
    assert node.quorum.asked == ["raft", "broker_registration", "broker_heartbeat",  # type: ignore[attr-defined]
                                 "controlled_shutdown", "alter_partition"] + ["controller_request"] * 3


async def test_a_broker_only_node_serves_broker_requests_once_caught_up() -> None:
    node = node_of("broker", node_id=4)
    metadata = object()
    node.broker = SimpleNamespace(is_caught_up=True, describe_replicas=lambda request: ("replicas", request))  # type: ignore[assignment]
    assert await node.dispatch(Api.DESCRIBE_REPLICAS, metadata, "HTTP") == ("replicas", metadata)


def test_health_of_a_controller_only_node_has_no_broker_part() -> None:
    controller = node_of("controller").health()
    assert controller == {"healthy": True, "node_id": 1, "process_roles": ["controller"], "following_metadata": True,
                          "active_controller": 1, "metadata_offset": 7}
    broker = node_of("broker", node_id=4).health()  # never started: no broker registered
    assert broker["process_roles"] == ["broker"] and broker["broker_unfenced"] is False and not broker["healthy"]


async def test_a_controller_only_node_keeps_only_its_metadata_log_and_refuses_fetches_over_http(
        tmp_path: Path) -> None:
    port = free_port_block(1)
    log_dir, metadata_dir = tmp_path / "logs", tmp_path / "metadata"
    node = Node(NodeConfig.from_properties({
        "node.id": "1", "process.roles": "controller", "controller.quorum.voters": f"1@127.0.0.1:{port}",
        "listeners": f"HTTP://127.0.0.1:{port}", "log.dirs": str(log_dir), "metadata.log.dir": str(metadata_dir),
        "controller.quorum.election.timeout.ms": "150", "controller.quorum.fetch.timeout.ms": "500",
        "controller.quorum.request.timeout.ms": "500", "controller.quorum.fetch.max.wait.ms": "100",
    }))
    connections = Connections()
    try:
        await node.start()
        assert node.broker is None and node.log_manager is None and node.group_offsets is None
        # Topic admin is the active controller's own: with no broker registered, no replica can be placed.
        request = CreateTopicsRequest((CreatableTopic("orders", 1, 1),), timeout_ms=10_000)
        response = await node.dispatch(Api.CREATE_TOPICS, request, "HTTP")
        assert node.quorum.is_active_controller
        assert response.topics[0].error_code is ErrorCode.INVALID_REPLICATION_FACTOR, response
        fetch = FetchRequest((FetchPartition("orders", 0, 0, 1024),), max_wait_ms=0, min_bytes=0)
        with pytest.raises(NodeUnavailableError, match="BROKER_NOT_AVAILABLE: fetch: node 1 is a controller only"):
            await connections.call(f"127.0.0.1:{port}", Api.FETCH, fetch, FetchResponse, 5000)
        assert node.health()["healthy"] and "broker_unfenced" not in node.health()
        text = node.metrics.render()[0].decode()
        samples = {sample.name: sample.value for family in text_string_to_metric_families(text)
                   for sample in family.samples}
        assert samples["tributary_active_controller"] == 1 and samples["tributary_quorum_leader_id"] == 1
        assert "tributary_under_replicated_partitions" not in samples  # no replica part
    finally:
        await connections.close()
        await node.stop(controlled=True)
    assert (metadata_dir / "meta.properties").exists() and (log_dir / "meta.properties").exists()
    assert [path.name for path in metadata_dir.iterdir() if path.is_dir()] == ["__cluster_metadata-0"]
    assert any(path.suffix == ".log" for path in (metadata_dir / "__cluster_metadata-0").iterdir())
    assert sorted(path.name for path in log_dir.iterdir()) == [".lock", "meta.properties"]


async def test_one_dir_named_twice_is_locked_once_and_released_at_stop(tmp_path: Path) -> None:
    """`metadata.log.dir` names the log dir by another path: the node locks it once (it used to
    refuse itself, holding the lock), and a stopped node leaves it free for the next."""
    port = free_port_block(1)
    (tmp_path / "other").mkdir()
    properties = {
        "node.id": "1", "process.roles": "controller", "controller.quorum.voters": f"1@127.0.0.1:{port}",
        "listeners": f"HTTP://127.0.0.1:{port}", "log.dirs": str(tmp_path / "data"),
        "metadata.log.dir": str(tmp_path / "other" / ".." / "data"),
    }
    for _ in range(2):
        node = Node(NodeConfig.from_properties(properties))
        try:
            await node.start()
        finally:
            await node.stop(controlled=True)
