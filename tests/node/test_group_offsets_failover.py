"""Committed group offsets across a change of coordinator: an OffsetFetch never answers less than
an acknowledged OffsetCommit (DESIGN §6.10).

Method: three real Brokers over loopback (tests/node/broker_harness.py) host `__consumer_offsets`
with one partition, so every group maps to it; each test builds the node's `GroupOffsets` over a
broker's own request methods, as `Node` does, and moves the partition's leadership by writing the
metadata a controller would. Cuts between brokers are placed on replica fetch answers, so what a
follower knows at the leader change is fixed, not raced.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from controller.metadata_records import PartitionChange
from node.group_membership import GroupMembership
from node.group_offsets import OFFSETS_TOPIC, GroupOffsets
from node.group_queries import GroupQueries
from replication.consumer_groups import GroupsConfig
from tests.node.broker_harness import TIMEOUT_S, Cluster, log_bytes, monotonic_ms, started, until, wall_clock_ms
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_admin import ConsumerGroupState, DescribedGroup, DescribeGroupsRequest
from wire.group_membership import (
    GroupResponse,
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupAssignment,
    SyncGroupRequest,
)
from wire.group_offsets import OffsetCommitPartition, OffsetCommitRequest, OffsetFetchRequest
from wire.topic_partition import TopicPartition

T = TypeVar("T")
OFFSETS_TP = TopicPartition(OFFSETS_TOPIC, 0)
GROUP = "billing"
ORDERS = ("orders", 0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with started(tmp_path) as cluster:
        yield cluster


def coordinator(cluster: Cluster, broker_id: int) -> GroupOffsets:
    """The coordinator role of broker `broker_id`, wired as `Node._make_broker` wires it, for a
    group without members (commits are not fenced)."""
    return coordinated(cluster, broker_id, with_members=False)[0]


def coordinated(cluster: Cluster, broker_id: int, with_members: bool = True) -> tuple[GroupOffsets, GroupMembership]:
    """Broker `broker_id`'s offsets and membership edges, wired as `Node._make_broker` wires them."""
    broker = cluster.broker(broker_id)

    def leader_of(partition: int) -> int:
        return cluster.quorum.partition(OFFSETS_TOPIC, partition).leader

    def leader_epoch_of(partition: int) -> int:
        return cluster.quorum.partition(OFFSETS_TOPIC, partition).leader_epoch

    def address_of(partition: int) -> str:
        return cluster.nodes[leader_of(partition)].address

    async def forward(address: str, api: Api, request: Any, response_type: type) -> Any:
        raise AssertionError(f"broker {broker_id} forwarded {api.value}: the test asks the leader only")

    async def create_topic() -> ErrorCode:
        raise AssertionError("the test creates __consumer_offsets itself")

    def commit_error(group: str, generation: int, member: str, instance: str | None) -> tuple[ErrorCode, str]:
        return membership.commit_error(group, generation, member, instance) if with_members else (ErrorCode.NONE, "")

    offsets = GroupOffsets(broker_id, 1, leader_of, address_of, broker.produce, broker.fetch, broker.list_offsets,
                           forward, create_topic, wall_clock_ms, 5_000, commit_error)
    membership = GroupMembership(broker_id, 1, GroupsConfig(group_initial_rebalance_delay_ms=0), leader_of,
                                 leader_epoch_of, offsets.route, address_of, forward, offsets.write_group,
                                 offsets.load_groups, monotonic_ms, random.Random(broker_id))
    return offsets, membership


def queries(cluster: Cluster, broker_id: int, offsets: GroupOffsets, membership: GroupMembership) -> GroupQueries:
    """Broker `broker_id`'s ListGroups/DescribeGroups edge over its offsets and membership edges."""
    async def forward(address: str, api: Api, request: Any, response_type: type) -> Any:
        raise AssertionError(f"broker {broker_id} forwarded {api.value}: the test asks the leader only")

    return GroupQueries(broker_id, 1, lambda partition: cluster.quorum.partition(OFFSETS_TOPIC, partition).leader,
                        offsets.route, lambda partition: "", forward, membership, offsets.group_ids)


async def commit(coordinator: GroupOffsets, offset: int) -> ErrorCode:
    request = OffsetCommitRequest(GROUP, (OffsetCommitPartition(*ORDERS, offset),))
    response = await coordinator.commit(request)
    return response.partitions[0].error_code


async def committed(coordinator: GroupOffsets) -> tuple[ErrorCode, int]:
    """The top-level error and the committed offset of orders-0 (-1 when there is none)."""
    response = await coordinator.fetch(OffsetFetchRequest(GROUP, (ORDERS,)))
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
    # The answer with the HW comes to the follower's next fetch, held until its wait runs out (Kafka's delayed fetch).
    async with asyncio.timeout(TIMEOUT_S):
        await cluster.nodes[0].cut_now.wait()
    # Broker 1 takes over; broker 0, now its follower, cannot fetch from it yet.
    cluster.nodes[1].cut = True
    cluster.quorum.move_leader(OFFSETS_TOPIC, 0, leader=1, isr=(0, 1))
    state = cluster.broker(1).hosts[OFFSETS_TP].partition.state
    assert (follower_log.log_end_offset, follower_log.high_watermark, state.leader_epoch_start_offset) == (2, 1, 2)

    assert await committed(new) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
    cluster.nodes[1].cut = False
    await until(cluster.broker(1), OFFSETS_TP, lambda: follower_log.high_watermark == 2)
    assert await committed(new) == (ErrorCode.NONE, 10)


async def test_coordinator_that_leads_again_reloads_instead_of_continuing_its_old_replay(cluster: Cluster) -> None:
    """Broker 0 coordinates and replays offset 10 at log offset 1; an unclean election hands the
    partition to broker 1, which lacks it, and the group commits 12 there, at that same log offset.
    When broker 0 leads again its log holds 12 at offset 1; a replay continued from where its old one
    stopped (offset 2) keeps 10 and answers it: an acknowledged commit going backwards. Kafka unloads
    a group's offsets when the coordinator resigns and loads them afresh when it is elected."""
    await cluster.create_topic(OFFSETS_TOPIC, {0: (0, 1)},
                               {"cleanup.policy": "compact", "unclean.leader.election.enable": "true"})
    topic_id = cluster.quorum.metadata.topic_id(OFFSETS_TOPIC)
    assert topic_id is not None
    first, second = coordinator(cluster, 0), coordinator(cluster, 1)
    assert await commit(first, 5) == ErrorCode.NONE
    # Broker 1 falls out of the ISR, cut off; broker 0 alone takes the second commit.
    cluster.nodes[0].cut = True
    cluster.quorum.write(PartitionChange(topic_id, 0, isr=(0,)))
    assert await commit(first, 10) == ErrorCode.NONE
    assert await committed(first) == (ErrorCode.NONE, 10)
    # Unclean election of broker 1, which lacks the second commit; the group commits 12 there.
    cluster.quorum.move_leader(OFFSETS_TOPIC, 0, leader=1, isr=(1,))
    assert await commit(second, 12) == ErrorCode.NONE
    assert await committed(second) == (ErrorCode.NONE, 12)
    # Broker 0 follows: it truncates the second commit and fetches the third.
    old_log = cluster.broker(0).hosts[OFFSETS_TP].partition.log
    await until(cluster.broker(0), OFFSETS_TP, lambda: old_log.high_watermark == 2 and log_bytes(
        cluster.broker(0), OFFSETS_TP) == log_bytes(cluster.broker(1), OFFSETS_TP))
    # Broker 0 leads again, with the same log as broker 1.
    cluster.nodes[0].cut = False
    cluster.quorum.move_leader(OFFSETS_TOPIC, 0, leader=0, isr=(0, 1))
    assert await committed(first) == (ErrorCode.NONE, 12)


async def loaded(call: Callable[[], Awaitable[T]]) -> T:
    """`call()` again while the coordinator answers that it is still loading its groups (it loads in
    the background; a client retries after a backoff, as here)."""
    for _ in range(500):
        answer = await call()
        code = answer.error_code if hasattr(answer, "error_code") else answer.partitions[0].error_code  # type: ignore[attr-defined]
        if code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return answer
        await asyncio.sleep(0.01)
    raise AssertionError("the coordinator never finished loading")


def join(membership: GroupMembership, member_id: str = "") -> Awaitable[JoinGroupResponse]:
    return loaded(lambda: membership.join(JoinGroupRequest(
        GROUP, 10_000, 30_000, member_id, "consumer", (JoinGroupProtocol("range", b"orders"),))))


def heartbeat(membership: GroupMembership, generation: int, member_id: str) -> Awaitable[GroupResponse]:
    return loaded(lambda: membership.heartbeat(HeartbeatRequest(GROUP, generation, member_id)))


async def _describe_one(view: GroupQueries) -> DescribedGroup:
    return (await view.describe_groups(DescribeGroupsRequest((GROUP,)))).groups[0]


async def member_commit(offsets: GroupOffsets, generation: int, member_id: str) -> ErrorCode:
    response = await loaded(lambda: offsets.commit(OffsetCommitRequest(
        GROUP, (OffsetCommitPartition(*ORDERS, 3),), generation, member_id)))
    return response.partitions[0].error_code


async def test_a_stable_group_keeps_its_generation_on_the_new_coordinator(cluster: Cluster) -> None:
    """Two members reach generation 2 on broker 0; broker 1 takes over. Kafka's new coordinator
    loads the group from __consumer_offsets: the members' heartbeats and commits go on in generation
    2, a commit of generation 1 is still fenced, and no member has to join again."""
    await cluster.create_topic(OFFSETS_TOPIC, {0: (0, 1)}, {"cleanup.policy": "compact"})
    old_offsets, old = coordinated(cluster, 0)
    one = (await join(old)).member_id
    assert (await join(old, one)).generation_id == 1
    await old.sync(SyncGroupRequest(GROUP, 1, one, (SyncGroupAssignment(one, b"p0 p1"),)))
    two = (await join(old)).member_id
    joined = await asyncio.gather(join(old, two), join(old, one))
    assert [answer.generation_id for answer in joined] == [2, 2] and joined[1].leader == one
    synced = await asyncio.gather(
        old.sync(SyncGroupRequest(GROUP, 2, two)),
        old.sync(SyncGroupRequest(GROUP, 2, one, (SyncGroupAssignment(one, b"p0"),
                                                           SyncGroupAssignment(two, b"p1")))))
    assert [answer.assignment for answer in synced] == [b"p1", b"p0"]
    assert await member_commit(old_offsets, 2, one) == ErrorCode.NONE

    cluster.quorum.move_leader(OFFSETS_TOPIC, 0, leader=1, isr=(0, 1))
    new_offsets, new = coordinated(cluster, 1)
    view = queries(cluster, 1, new_offsets, new)
    described = await loaded(lambda: _describe_one(view))
    assert (described.group_state, sorted(member.member_id for member in described.members)) == (
        ConsumerGroupState.STABLE, sorted([one, two])), "described as loaded, before any member speaks"
    assert [(await heartbeat(new, 2, member)).error_code for member in (one, two)] == [ErrorCode.NONE] * 2
    assert await member_commit(new_offsets, 2, two) == ErrorCode.NONE
    assert await member_commit(new_offsets, 1, two) == ErrorCode.ILLEGAL_GENERATION
    rejoined = await join(new, two)
    assert (rejoined.error_code, rejoined.generation_id) == (ErrorCode.NONE, 2), "a follower rejoins, no rebalance"
