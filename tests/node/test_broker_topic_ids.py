"""The replica manager and partition.metadata (KIP-516): a topic deleted and created again under
the same name while a broker was down never meets its old log.

Method: a two-broker cluster of broker_harness (real Brokers, fake quorum, loopback HTTP).
`orders`-0 is led by broker 1 and followed by broker 0. Each test writes records, stops broker 0
(controlled), changes the metadata or broker 0's partition directory as the scenario needs,
restarts broker 0 on the same directory and checks, once it has applied the metadata (the restart
returns after its unfencing), which log its partition opened and what its partition.metadata
holds. Waits are on events (unfencing, partition changes); timeouts are safety nets.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from node.broker import Broker
from storage.partition_metadata import PartitionMetadata, PartitionMetadataFile
from storage.records import build_batch_from_values
from tests.node.broker_harness import Cluster, log_bytes, started, until, wall_clock_ms
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
LEADER, FOLLOWER = 1, 0
REPLICAS = {0: (LEADER, FOLLOWER)}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with started(tmp_path, 2) as cluster:
        yield cluster


async def produce(cluster: Cluster, *values: bytes) -> None:
    answer = await cluster.produce(LEADER, TP, build_batch_from_values(list(values), timestamp_ms=wall_clock_ms()))
    assert answer.error_code == ErrorCode.NONE, answer


async def topic_with_records_then_follower_stopped(cluster: Cluster) -> tuple[str, Path]:
    """Create `orders`, append 3 records on both replicas, stop the follower; its topic id and
    the follower's log directory."""
    await cluster.create_topic(TOPIC, REPLICAS)
    for value in (b"old-0", b"old-1", b"old-2"):
        # One batch each: a truncation to offset 1 keeps old-0 (it cannot cut inside a batch).
        await produce(cluster, value)
    topic_id = cluster.quorum.metadata.topic_id(TOPIC)
    assert topic_id is not None
    follower = cluster.broker(FOLLOWER)
    directory = follower.hosts[TP].partition.log.directory
    assert PartitionMetadataFile(directory).read() == PartitionMetadata(0, topic_id), "written when hosted"
    await follower.stop(controlled=True)
    return topic_id, directory


def hosted_log_end_offset(broker: Broker) -> int:
    """The LEO of the log the broker hosts (the one its LogManager opened)."""
    log = broker.hosts[TP].partition.log
    assert broker.log_manager.get_log(TP) is log
    return log.log_end_offset


async def test_a_log_of_an_older_topic_of_the_same_name_is_deleted_and_a_fresh_log_copies_the_new_topic(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="node.broker")
    old_topic_id, directory = await topic_with_records_then_follower_stopped(cluster)
    await cluster.delete_topic(TOPIC)
    await cluster.create_topic(TOPIC, REPLICAS)
    new_topic_id = cluster.quorum.metadata.topic_id(TOPIC)
    assert new_topic_id is not None
    assert new_topic_id != old_topic_id
    await produce(cluster, b"new-0")
    assert PartitionMetadataFile(directory).read() == PartitionMetadata(0, old_topic_id), "the broker was down"

    restarted = await cluster.restart(FOLLOWER)
    assert restarted.hosts[TP].topic_id == new_topic_id
    assert PartitionMetadataFile(directory).read() == PartitionMetadata(0, new_topic_id)
    assert f"deleted the log of {TP} (stray: a log of an older topic" in caplog.text
    # The old records (offsets 0-2, leader epoch 0, like the new topic's first record) would pass
    # for the new topic's: the follower would keep old-0 at offset 0 where the leader has new-0.
    log = restarted.hosts[TP].partition.log
    await until(restarted, TP, lambda: log.log_end_offset == 1 and log.high_watermark == 1)
    assert log_bytes(restarted, TP) == log_bytes(cluster.broker(LEADER), TP)


async def test_a_log_of_the_same_topic_id_keeps_its_records(cluster: Cluster) -> None:
    topic_id, directory = await topic_with_records_then_follower_stopped(cluster)
    restarted = await cluster.restart(FOLLOWER)
    assert hosted_log_end_offset(restarted) == 3
    assert PartitionMetadataFile(directory).read() == PartitionMetadata(0, topic_id)


async def test_a_log_without_partition_metadata_adopts_the_topic_id_and_keeps_its_records(cluster: Cluster) -> None:
    # A log written by a version before topic ids: it cannot be told apart, so, as in Kafka, the
    # current topic adopts it.
    topic_id, directory = await topic_with_records_then_follower_stopped(cluster)
    PartitionMetadataFile(directory).path.unlink()
    restarted = await cluster.restart(FOLLOWER)
    assert hosted_log_end_offset(restarted) == 3
    assert PartitionMetadataFile(directory).read() == PartitionMetadata(0, topic_id)
