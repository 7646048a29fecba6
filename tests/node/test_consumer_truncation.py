"""KIP-320 against real brokers: a consumer has read records that an unclean leader election then
loses; the new leader's log takes other records at the same offsets. The consumer must find out
from the brokers' own answers (FENCED_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER from the old leader,
OffsetsForLeaderEpoch from the new one) and raise LogTruncationError, not read on at its old
position past records it never saw.

Method: three real Brokers over loopback (tests/node/broker_harness.py), whose fake quorum can
elect a leader outside the ISR; the harness serves no Metadata, so the consumer's metadata is the
quorum's, built on each refresh as a node would answer it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.consumer import Consumer
from client.errors import LogTruncationError
from controller.metadata_records import PartitionChange
from tests.node.broker_harness import CLUSTER_ID, Cluster, batch, started, until
from wire.error_codes import ErrorCode
from wire.metadata import MetadataBroker, MetadataPartition, MetadataResponse, MetadataTopic
from wire.topic_partition import TopicPartition

ORDERS = TopicPartition("orders", 0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with started(tmp_path) as cluster:
        yield cluster


def metadata_from_quorum(cluster: Cluster, consumer: Consumer) -> None:
    """Every refresh of the consumer's metadata reads the quorum's (what a node would answer)."""

    async def refresh(all_topics: bool = False) -> MetadataResponse:
        state = cluster.quorum.partition("orders", 0)
        response = MetadataResponse(
            CLUSTER_ID, 0, cluster.quorum.metadata_offset,
            tuple(MetadataBroker(node.broker_id, node.address.rsplit(":", 1)[0], int(node.address.rsplit(":", 1)[1]))
                  for node in cluster.nodes),
            (MetadataTopic("orders", ErrorCode.NONE, "", (MetadataPartition(
                0, state.leader, state.leader_epoch, tuple(state.replicas), tuple(state.isr)),)),))
        consumer.metadata.update(response)
        return response

    consumer.metadata.refresh = refresh  # type: ignore[method-assign]


async def poll_until(consumer: Consumer, count: int) -> list:
    records: list = []
    for _ in range(100):
        records += await consumer.poll(timeout_ms=100)
        if len(records) >= count:
            return records
    raise AssertionError(f"only {len(records)} of {count} records came")


async def test_a_consumer_finds_the_records_it_read_lost_by_an_unclean_election(cluster: Cluster) -> None:
    await cluster.create_topic("orders", {0: (0, 1)}, {"unclean.leader.election.enable": "true"})
    await cluster.quorum.until(lambda metadata: cluster.quorum.partition("orders", 0).leader == 0)
    old_leader, new_leader = cluster.broker(0), cluster.broker(1)
    await until(old_leader, ORDERS, lambda: ORDERS in old_leader.hosts)
    assert (await cluster.produce(0, ORDERS, batch(*(b"old-%d" % i for i in range(6))))).error_code is ErrorCode.NONE
    follower_log = new_leader.hosts[ORDERS].partition.log
    await until(new_leader, ORDERS, lambda: follower_log.log_end_offset == 6)
    # Broker 1 is cut off and leaves the ISR; broker 0 alone takes four more records.
    cluster.nodes[0].cut = True
    topic_id = cluster.quorum.metadata.topic_id("orders")
    assert topic_id is not None
    cluster.quorum.write(PartitionChange(topic_id, 0, isr=(0,)))
    assert (await cluster.produce(0, ORDERS, batch(*(b"old-%d" % i for i in range(6, 10))))).error_code is \
        ErrorCode.NONE

    async with Consumer(cluster.nodes[0].address, auto_offset_reset="none", retry_backoff_ms=20,
                        fetch_max_wait_ms=50, connections=cluster.connections) as consumer:
        metadata_from_quorum(cluster, consumer)
        consumer.assign([ORDERS])
        consumer.seek(ORDERS, 0)
        assert [r.value for r in await poll_until(consumer, 10)] == [b"old-%d" % i for i in range(10)]
        # Unclean election: broker 1, without offsets 6-9, leads and takes other records there.
        cluster.quorum.move_leader("orders", 0, leader=1, isr=(1,))
        await until(new_leader, ORDERS, lambda: new_leader.hosts[ORDERS].partition.leader_epoch == 1)
        assert (await cluster.produce(1, ORDERS, batch(*(b"new-%d" % i for i in range(6, 12))))).error_code is \
            ErrorCode.NONE
        with pytest.raises(LogTruncationError) as raised:
            await poll_until(consumer, 1)
        assert (raised.value.position, raised.value.diverging_offset) == (10, 6)
        consumer.seek(ORDERS, 6)
        assert [r.value for r in await poll_until(consumer, 6)] == [b"new-%d" % i for i in range(6, 12)]
