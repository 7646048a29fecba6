"""Committed group offsets across a change of coordinator: an OffsetFetch never answers less than
an acknowledged OffsetCommit (DESIGN §6.10).

Method: three real Brokers over loopback (tests/node/broker_harness.py) host `__consumer_offsets`
with one partition, so every group maps to it; each test builds the node's `GroupOffsets` over a
broker's own request methods, as `Node` does, and moves the partition's leadership by writing the
metadata a controller would. Cuts between brokers are placed on replica fetch answers, so what a
follower knows at the leader change is fixed, not raced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from client import protocol
from node.group_offsets import OFFSETS_TOPIC, GroupOffsets
from storage.checkpoint import TopicPartition
from storage.error_codes import ErrorCode
from tests.node.broker_harness import Cluster, started, until, wall_clock_ms

OFFSETS_TP = TopicPartition(OFFSETS_TOPIC, 0)
GROUP = "billing"
ORDERS = ("orders", 0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with started(tmp_path) as cluster:
        yield cluster


def coordinator(cluster: Cluster, broker_id: int) -> GroupOffsets:
    """The coordinator role of broker `broker_id`, wired as `Node._make_broker` wires it."""
    broker = cluster.broker(broker_id)

    def leader_of(partition: int) -> int:
        return cluster.quorum.partition(OFFSETS_TOPIC, partition).leader

    def address_of(partition: int) -> str:
        return cluster.nodes[leader_of(partition)].address

    async def forward(address: str, api: protocol.Api, request: Any, response_type: type) -> Any:
        raise AssertionError(f"broker {broker_id} forwarded {api.value}: the test asks the leader only")

    async def create_topic() -> ErrorCode:
        raise AssertionError("the test creates __consumer_offsets itself")

    return GroupOffsets(broker_id, 1, leader_of, address_of, broker.produce, broker.fetch, broker.list_offsets,
                        forward, create_topic, wall_clock_ms, 5_000)


async def commit(coordinator: GroupOffsets, offset: int) -> ErrorCode:
    request = protocol.OffsetCommitRequest(GROUP, (protocol.OffsetCommitPartition(*ORDERS, offset),))
    response = await coordinator.commit(request)
    return response.partitions[0].error_code


async def committed(coordinator: GroupOffsets) -> tuple[ErrorCode, int]:
    """The top-level error and the committed offset of orders-0 (-1 when there is none)."""
    response = await coordinator.fetch(protocol.OffsetFetchRequest(GROUP, (ORDERS,)))
    if response.error_code != ErrorCode.NONE:
        return response.error_code, -1
    return response.error_code, response.partitions[0].committed_offset


async def test_new_coordinator_whose_hw_lags_its_epoch_start_answers_load_in_progress(cluster: Cluster) -> None:
    """Broker 1 follows; it has the second commit (acks=all) but not yet the HW that covers it when it
    becomes leader. Replaying up to its HW would answer the first commit: the committed offset would
    go back from 10 to 5. Kafka's coordinator is still loading then (COORDINATOR_LOAD_IN_PROGRESS,
    retriable); once its follower fetches, the HW passes the epoch start and the answer is 10."""
    await cluster.create_topic(OFFSETS_TOPIC, {0: (0, 1)}, {"cleanup.policy": "compact"})
    old, new = coordinator(cluster, 0), coordinator(cluster, 1)
    follower_log = cluster.broker(1).hosts[OFFSETS_TP].partition.log
    assert await commit(old, 5) == ErrorCode.NONE
    await until(cluster.broker(1), OFFSETS_TP, lambda: follower_log.high_watermark == 1)
    # Broker 1 gets the second commit, then loses the answer that would carry the HW past it.
    cluster.nodes[0].cut_when = lambda answer: answer.partitions[0].high_watermark >= 2
    assert await commit(old, 10) == ErrorCode.NONE
    assert cluster.nodes[0].cut
    # Broker 1 takes over; broker 0, now its follower, cannot fetch from it yet.
    cluster.nodes[1].cut = True
    cluster.quorum.move_leader(OFFSETS_TOPIC, 0, leader=1, isr=(0, 1))
    state = cluster.broker(1).hosts[OFFSETS_TP].partition.state
    assert (follower_log.log_end_offset, follower_log.high_watermark, state.leader_epoch_start_offset) == (2, 1, 2)

    assert await committed(new) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
    cluster.nodes[1].cut = False
    await until(cluster.broker(1), OFFSETS_TP, lambda: follower_log.high_watermark == 2)
    assert await committed(new) == (ErrorCode.NONE, 10)

