"""The node's ListGroups and DescribeGroups edge (node/group_queries.py) with its routing stubbed: a
group coordinated elsewhere is asked of its coordinator, one with no `__consumer_offsets` yet is
Dead, a partition still loading makes ListGroups answer COORDINATOR_LOAD_IN_PROGRESS with the groups
it has; and where a JoinGroup's client host comes from."""

from __future__ import annotations

import random
from typing import Any

from node.group_membership import GroupMembership, with_client_host
from node.group_queries import GroupQueries
from replication.consumer_groups import GroupsConfig
from replication.group_coordinator import OffsetGroupsAnswer, coordinator_partition
from replication.group_metadata import GroupMetadata
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_admin import (
    ConsumerGroupState,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from wire.group_membership import JoinGroupProtocol, JoinGroupRequest

PARTITIONS = 2


class Stubs:
    """Node 1 leads `led` partitions of __consumer_offsets; node 2 the others (None: no topic)."""

    def __init__(self, led: set[int] | None, offsets: dict[int, OffsetGroupsAnswer] | None = None) -> None:
        self.led = led
        self.offsets = offsets or {}
        self.forwarded: list[tuple[str, Api, Any]] = []

    def leader_of(self, partition: int) -> int | None:
        return None if self.led is None else 1 if partition in self.led else 2

    async def route(self, partition: int, create: bool) -> ErrorCode | None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if self.led is None else None

    async def forward(self, address: str, api: Api, request: Any, response_type: type) -> Any:
        self.forwarded.append((address, api, request))
        return DescribeGroupsResponse(tuple(
            DescribedGroup(ErrorCode.NONE, group, ConsumerGroupState.STABLE, coordinator_id=2)
            for group in request.groups))

    async def store(self, partition: int, group_id: str, value: GroupMetadata | None) -> tuple[ErrorCode, str]:
        return ErrorCode.NONE, ""

    async def load_groups(self, partition: int) -> tuple[ErrorCode, int, tuple[tuple[str, GroupMetadata], ...]]:
        return ErrorCode.NONE, 0, ()  # no group stored

    async def offset_groups(self, partition: int) -> OffsetGroupsAnswer:
        return self.offsets.get(partition, OffsetGroupsAnswer(0, ErrorCode.NONE))

    def queries(self) -> GroupQueries:
        membership = GroupMembership(1, PARTITIONS, GroupsConfig(), self.leader_of, lambda partition: 0, self.route,
                                     lambda partition: "node-2:9092", self.forward, self.store, self.load_groups,
                                     lambda: 0, random.Random(0))
        return GroupQueries(1, PARTITIONS, self.leader_of, self.route, lambda partition: "node-2:9092", self.forward,
                            membership, self.offset_groups)


def group_on(partition: int) -> str:
    return next(name for n in range(100) if coordinator_partition(name := f"group-{n}", PARTITIONS) == partition)


async def test_a_group_coordinated_elsewhere_is_described_by_its_coordinator() -> None:
    stubs = Stubs(led={0})
    here, there = group_on(0), group_on(1)
    stubs.offsets[0] = OffsetGroupsAnswer(0, ErrorCode.NONE, frozenset({here}))
    response = await stubs.queries().describe_groups(DescribeGroupsRequest((here, there, "")))
    assert [(g.group_id, g.error_code, g.group_state, g.coordinator_id) for g in response.groups] == [
        (here, ErrorCode.NONE, ConsumerGroupState.EMPTY, 1),  # only offsets: Empty, here
        (there, ErrorCode.NONE, ConsumerGroupState.STABLE, 2),
        ("", ErrorCode.INVALID_GROUP_ID, None, -1)]
    assert stubs.forwarded == [("node-2:9092", Api.DESCRIBE_GROUPS, DescribeGroupsRequest((there,)))]


async def test_without_the_offsets_topic_a_group_is_dead_and_none_is_listed() -> None:
    stubs = Stubs(led=None)
    response = await stubs.queries().describe_groups(DescribeGroupsRequest(("g",)))
    assert [(g.error_code, g.group_state, g.members) for g in response.groups] == [
        (ErrorCode.NONE, ConsumerGroupState.DEAD, ())]
    listed = await stubs.queries().list_groups(ListGroupsRequest())
    assert listed == ListGroupsResponse(ErrorCode.NONE)


async def test_listing_answers_load_in_progress_with_the_groups_it_could_read() -> None:
    stubs = Stubs(led={0, 1}, offsets={
        0: OffsetGroupsAnswer(0, ErrorCode.NONE, frozenset({"solo"})),
        1: OffsetGroupsAnswer(0, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, message="lags")})
    response = await stubs.queries().list_groups(ListGroupsRequest())
    assert (response.error_code, response.groups) == (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, (ListedGroup("solo", "", ConsumerGroupState.EMPTY),))
    filtered = await stubs.queries().list_groups(ListGroupsRequest((ConsumerGroupState.STABLE,)))
    assert filtered.groups == ()


def test_a_join_group_names_its_clients_host_even_when_forwarded() -> None:
    join = JoinGroupRequest("g", 10_000, 30_000, "", "consumer", (JoinGroupProtocol("range", b""),))
    assert with_client_host(join, "10.0.0.7", from_a_node=False).client_host == "/10.0.0.7"
    claimed = with_client_host(join, "10.0.0.7", from_a_node=False)
    assert with_client_host(claimed, "10.0.0.2", from_a_node=True).client_host == "/10.0.0.7", \
        "the node that forwards it named the client's host"
    spoofed = JoinGroupRequest("g", 10_000, 30_000, "", "consumer", (), client_host="/elsewhere")
    assert with_client_host(spoofed, "10.0.0.7", from_a_node=False).client_host == "/10.0.0.7"
    assert with_client_host(join, "10.0.0.2", from_a_node=True).client_host == "/10.0.0.2"
