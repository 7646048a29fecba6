"""Metadata cache and named errors: bootstrap parsing, shared refreshes, lookups, error classes."""

from __future__ import annotations

import asyncio

import pytest

from client.connection import Connections
from client.errors import ERRORS, TributaryError, error_for
from client.metadata import Metadata, parse_bootstrap
from tests.client.fake_node import FakeCluster
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition


def test_bootstrap_lists_are_comma_separated_host_ports() -> None:
    assert parse_bootstrap("a:1, b:2,") == ("a:1", "b:2")
    for bad in ("", "a", "a:x", ":1", "a:70000"):
        with pytest.raises(ValueError):
            parse_bootstrap(bad)


def test_every_error_code_has_a_class_named_after_it() -> None:
    error = error_for(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert type(error).__name__ == "NotLeaderOrFollowerError"
    assert isinstance(error, TributaryError)
    assert (error.code, error.retriable, error.invalid_metadata) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, True, True)
    assert str(error) == "NOT_LEADER_OR_FOLLOWER: moved"
    assert not error_for(ErrorCode.TOPIC_ALREADY_EXISTS).retriable
    assert set(ERRORS) == set(ErrorCode) - {ErrorCode.NONE}


async def test_metadata_learns_brokers_topics_and_leaders(cluster: FakeCluster) -> None:
    connections = Connections()
    metadata = Metadata(cluster.bootstrap, connections)
    try:
        metadata.add_topics(["t", "missing"])
        await metadata.refresh()
        assert sorted(metadata.brokers) == [0, 1, 2]
        assert metadata.leader_for(TopicPartition("t", 2)) == 2
        assert metadata.partition_info(TopicPartition("t", 1)).replicas == (1, 2, 0)
        assert metadata.topic_errors["missing"] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(ERRORS[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]):
            metadata.require_topic("missing")
    finally:
        await connections.close()


async def test_concurrent_refreshes_share_one_request(cluster: FakeCluster) -> None:
    connections = Connections()
    metadata = Metadata(cluster.bootstrap, connections)
    try:
        await asyncio.gather(*(metadata.refresh() for _ in range(5)))
        assert len(cluster.requests_of(Api.METADATA)) == 1
    finally:
        await connections.close()


async def test_all_topics_refreshes_run_beside_a_shared_one(cluster: FakeCluster) -> None:
    connections = Connections()
    metadata = Metadata(cluster.bootstrap, connections)
    try:
        answers = await asyncio.gather(metadata.refresh(), metadata.refresh(all_topics=True),
                                       metadata.refresh(all_topics=True), metadata.refresh())
        assert all(answer.brokers for answer in answers)
        assert len(cluster.requests_of(Api.METADATA)) == 3
        await metadata.refresh()  # nothing left behind: a new refresh asks again
        assert len(cluster.requests_of(Api.METADATA)) == 4
    finally:
        await connections.close()


async def test_a_stopped_node_is_skipped_for_any_other(cluster: FakeCluster) -> None:
    connections = Connections()
    metadata = Metadata(cluster.bootstrap, connections)
    try:
        await metadata.refresh()
        await cluster.stop_node(0)
        for _ in range(5):  # whichever node the shuffle tries first, an answer comes
            await metadata.refresh()
        assert {node for node, _ in cluster.requests_of(Api.METADATA)} <= {0, 1, 2}
    finally:
        await connections.close()
