"""GroupQueries: ListGroups and DescribeGroups, the node's read-only views of consumer groups.

ListGroups answers with the groups of the `__consumer_offsets` partitions this node leads, as a
Kafka broker lists the groups it coordinates (a client asks every broker and merges). DescribeGroups
goes to any node, which asks each group's coordinator as it forwards the other group requests. On
the coordinator both read its two cores: the membership core (node/group_membership.py) for groups
of members, the offsets core (node/group_offsets.py) for groups that only have committed offsets,
which it reads up to the partition's high watermark first; replication/group_listing.py merges them.
A load that cannot finish (a new leader whose HW lags its epoch) is answered
COORDINATOR_LOAD_IN_PROGRESS, as Kafka answers while it loads a partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from node.group_membership import GroupMembership, Route
from replication.consumer_groups import GroupState, GroupSummary
from replication.group_coordinator import OffsetGroupsAnswer, coordinator_partition
from replication.group_listing import dead_group, merge_overviews, offsets_only_group
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_admin import (
    ConsumerGroupState,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)


class GroupQueries:
    """`leader_of`, `route`, `coordinator_address` and `forward` as GroupMembership takes them;
    `offset_groups(partition)` is GroupOffsets.group_ids."""

    def __init__(self, node_id: int, partition_count: int, leader_of: Callable[[int], int | None], route: Route,
                 coordinator_address: Callable[[int], str | None],
                 forward: Callable[[str, Api, Any, type], Awaitable[Any]], membership: GroupMembership,
                 offset_groups: Callable[[int], Awaitable[OffsetGroupsAnswer]]) -> None:
        self._node_id = node_id
        self._partition_count = partition_count
        self._leader_of = leader_of
        self._route = route
        self._coordinator_address = coordinator_address
        self._forward = forward
        self._membership = membership
        self._offset_groups = offset_groups

    async def list_groups(self, request: ListGroupsRequest) -> ListGroupsResponse:
        states = {GroupState(state.value) for state in request.states_filter}
        led = [partition for partition in range(self._partition_count) if self._leader_of(partition) == self._node_id]
        await asyncio.gather(*(self._membership.take_office(partition) for partition in led))
        answers = await asyncio.gather(*(self._offset_groups(partition) for partition in led))
        listed = []
        for partition, answer in zip(led, answers, strict=True):
            listed += merge_overviews(self._membership.overview(partition), answer.group_ids, states)
        failed = next((answer for answer in answers if answer.error != ErrorCode.NONE), None)
        groups = tuple(ListedGroup(overview.group_id, overview.protocol_type,
                                            ConsumerGroupState(overview.state.value)) for overview in listed)
        if failed is not None:
            return ListGroupsResponse(failed.error, groups, _message(failed.error, failed.message))
        return ListGroupsResponse(ErrorCode.NONE, groups)

    async def describe_groups(self, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
        return DescribeGroupsResponse(tuple(await asyncio.gather(*map(self._describe, request.groups))))

    async def _describe(self, group_id: str) -> DescribedGroup:
        if not group_id:
            return DescribedGroup(ErrorCode.INVALID_GROUP_ID, group_id, error_message="the group id is empty")
        partition = coordinator_partition(group_id, self._partition_count)
        code = await self._route(partition, False)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # no __consumer_offsets yet: no group has ever been
            return _described(dead_group(group_id), self._node_id)
        if code is not None:
            return DescribedGroup(code, group_id, error_message=_message(code))
        if self._leader_of(partition) != self._node_id:
            address = self._coordinator_address(partition)
            assert address is not None, "routed: the coordinator's address is known"
            response = await self._forward(address, Api.DESCRIBE_GROUPS,
                                           DescribeGroupsRequest((group_id,)), DescribeGroupsResponse)
            if [group.group_id for group in response.groups] != [group_id]:
                return DescribedGroup(ErrorCode.COORDINATOR_NOT_AVAILABLE, group_id, error_message=(
                    f"the coordinator answered for {[group.group_id for group in response.groups]}; retry"))
            return response.groups[0]
        await self._membership.take_office(partition)  # a group is described as loaded, not as offsets alone
        summary = self._membership.describe(group_id)
        if summary is None:
            answer = await self._offset_groups(partition)
            if answer.error != ErrorCode.NONE:
                return DescribedGroup(answer.error, group_id, error_message=_message(answer.error,
                                                                                              answer.message))
            summary = offsets_only_group(group_id) if group_id in answer.group_ids else dead_group(group_id)
        return _described(summary, self._node_id)


def _described(summary: GroupSummary, coordinator_id: int) -> DescribedGroup:
    members = tuple(DescribedGroupMember(member.member_id, member.group_instance_id, member.client_id,
                                                  member.client_host, member.metadata, member.assignment)
                    for member in summary.members)
    return DescribedGroup(ErrorCode.NONE, summary.group_id, ConsumerGroupState(summary.state.value),
                                   summary.protocol_type, summary.protocol, members, coordinator_id=coordinator_id)


def _message(code: ErrorCode, detail: str = "") -> str:
    suffix = f" ({detail})" if detail else ""
    return f"the group coordinator is loading, moving or starting ({code.name}); retry after a short backoff{suffix}"
