"""Metadata cache and named errors: bootstrap parsing, shared refreshes, lookups, error classes,
and that the view never goes back to an older answer (by `metadata_offset`, Kafka's KIP-320).

Method: `update` is fed hand-built answers; refreshes run against the fake cluster, where a
frozen node answers from behind and the order of candidate nodes is fixed by the test."""

from __future__ import annotations

import asyncio

import pytest

from client.connection import Connections
from client.errors import ERRORS, TributaryError, error_for
from client.metadata import Metadata, TopicPartition, parse_bootstrap
from client.protocol import Api, ErrorCode, MetadataBroker, MetadataPartition, MetadataResponse, MetadataTopic
from tests.client.fake_node import FakeCluster


def answer(metadata_offset: int, leader: int, brokers: tuple[int, ...] = (0, 1, 2), topic: str = "t",
           cluster_id: str = "cluster-a") -> MetadataResponse:
    """A node's answer: `topic` with one partition led by `leader` (leader epoch = `leader`)."""
    partition = MetadataPartition(0, leader, leader, brokers, brokers)
    return MetadataResponse(
        cluster_id, 0, metadata_offset, tuple(MetadataBroker(n, "127.0.0.1", 9000 + n) for n in brokers),
        (MetadataTopic(topic, ErrorCode.NONE, f"id-{topic}", (partition,)),),
    )


def address_of(cluster: FakeCluster, node_id: int) -> str:
    return f"127.0.0.1:{cluster.ports[node_id]}"


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


def test_an_older_answer_does_not_roll_back_leaders_or_brokers() -> None:
    """A node behind the others (cut off, or just restarted) answers with an old leader and without
    a new broker; the view keeps the newer leader and broker and stays stale, to be asked again."""
    metadata = Metadata("127.0.0.1:9000", Connections())
    assert metadata.update(answer(10, leader=2, brokers=(0, 1, 2, 3))) is True
    assert metadata.update(answer(5, leader=0)) is False
    assert metadata.leader_for(TopicPartition("t", 0)) == 2
    assert metadata.partition_info(TopicPartition("t", 0)).leader_epoch == 2
    assert sorted(metadata.brokers) == [0, 1, 2, 3]
    assert metadata.metadata_offset == 10
    assert metadata.stale


def test_an_answer_at_the_same_offset_is_taken() -> None:
    """Equal offsets are the same metadata state (here answered for another topic list): taken."""
    metadata = Metadata("127.0.0.1:9000", Connections())
    metadata.update(answer(10, leader=2))
    metadata.invalidate()
    assert metadata.update(answer(10, leader=1, topic="u")) is True
    assert metadata.leader_for(TopicPartition("u", 0)) == 1
    assert not metadata.stale


def test_an_answer_of_another_cluster_replaces_the_view() -> None:
    """A new cluster at a known address starts its metadata log again: its lower offset is taken,
    and nothing of the old cluster's topics is kept."""
    metadata = Metadata("127.0.0.1:9000", Connections())
    metadata.update(answer(10, leader=2))
    assert metadata.update(answer(2, leader=0, brokers=(0,), topic="u", cluster_id="cluster-b")) is True
    assert (metadata.cluster_id, metadata.metadata_offset) == ("cluster-b", 2)
    assert set(metadata.topics) == {"u"}
    assert metadata.partition_info(TopicPartition("t", 0)) is None
    assert sorted(metadata.brokers) == [0]


async def test_a_refresh_answered_from_behind_asks_another_node(cluster: FakeCluster, monkeypatch) -> None:
    """Node 1 is frozen before the leader of t-0 moves and node 3 joins. A refresh that asks node 1
    first skips its older answer and takes node 0's."""
    connections = Connections()
    metadata = Metadata(cluster.bootstrap, connections)
    try:
        cluster.freeze_metadata(1)
        await metadata.refresh()  # nothing known yet: the first bootstrap address, node 0
        assert metadata.leader_for(TopicPartition("t", 0)) == 0
        cluster.move_leader("t", 0, 2)
        cluster.node_ids.append(3)
        await cluster.start_node(3)
        monkeypatch.setattr(metadata, "candidate_addresses", lambda: [address_of(cluster, 1), address_of(cluster, 0)])
        await metadata.refresh()
        assert [node for node, _ in cluster.requests_of(Api.METADATA)][-2:] == [1, 0]
        assert metadata.leader_for(TopicPartition("t", 0)) == 2
        assert 3 in metadata.brokers
        assert not metadata.stale
    finally:
        await connections.close()


async def test_a_refresh_answered_only_from_behind_keeps_the_view_and_says_so(cluster: FakeCluster) -> None:
    """Nodes 1 and 2 are frozen, the client learns from node 0, then node 0 stops: every answer is
    older, so the refresh fails retriably (each node asked once) and the view stays, stale."""
    connections = Connections()
    metadata = Metadata(cluster.bootstrap, connections)
    try:
        cluster.freeze_metadata(1)
        cluster.freeze_metadata(2)
        cluster.move_leader("t", 0, 1)
        await metadata.refresh()  # node 0
        await cluster.stop_node(0)
        with pytest.raises(ERRORS[ErrorCode.NETWORK_EXCEPTION], match="as fresh as this client's") as raised:
            await metadata.refresh()
        assert raised.value.retriable
        assert sorted(node for node, _ in cluster.requests_of(Api.METADATA)[1:]) == [1, 2]
        assert metadata.leader_for(TopicPartition("t", 0)) == 1
        assert metadata.stale
    finally:
        await connections.close()
