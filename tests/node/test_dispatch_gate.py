"""Which requests a starting node serves (Kafka opens client listeners only after the broker's
initial metadata catch-up): before it, Raft and forwarded controller requests, and topic admin
when the node is the active controller; every other request is refused with NotServingYet.

Method: a `Node` that was never started, with its broker and quorum replaced by stand-ins that
say "not caught up" and name the active controller."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from node.config import NodeConfig
from node.node import Node
from node.server import NotServingYet
from wire.api import Api
from wire.metadata import MetadataRequest

CONFIG = {"node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"}


class StandInQuorum:
    metadata_offset = 7

    def __init__(self, active_controller_id: int) -> None:
        self.active_controller_id = active_controller_id

    async def controller_request(self, request: Any, timeout_ms: int) -> str:
        return "answered by the controller"

    async def handle_controller(self, api: Api, envelope: Any) -> str:
        return "forwarded request answered"


def starting_node(active_controller_id: int) -> Node:
    node = Node(NodeConfig.from_properties(CONFIG))
    node.broker = SimpleNamespace(is_caught_up=False)  # type: ignore[assignment]
    node.quorum = StandInQuorum(active_controller_id)  # type: ignore[assignment]
    return node


async def test_the_active_controller_serves_topic_admin_and_forwarded_requests_before_catching_up() -> None:
    node = starting_node(active_controller_id=1)
    create = SimpleNamespace(timeout_ms=1000)
    for api in (Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.INCREMENTAL_ALTER_CONFIGS):
        assert await node.dispatch(api, create, "HTTP") == "answered by the controller"
    assert await node.dispatch(Api.BROKER_HEARTBEAT, object(), "HTTP") == "forwarded request answered"
    with pytest.raises(NotServingYet, match=r"node 1 is starting.*offset 7"):
        await node.dispatch(Api.METADATA, MetadataRequest(None), "HTTP")


async def test_a_node_that_is_not_the_controller_refuses_topic_admin_before_catching_up() -> None:
    node = starting_node(active_controller_id=2)
    with pytest.raises(NotServingYet):
        await node.dispatch(Api.CREATE_TOPICS, SimpleNamespace(timeout_ms=1000), "HTTP")
    assert await node.dispatch(Api.ALTER_PARTITION, object(), "HTTP") == "forwarded request answered"
