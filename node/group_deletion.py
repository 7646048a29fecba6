"""GroupDeletion: DeleteGroups and OffsetDelete, the node's edge (kafka-consumer-groups.sh's --delete
and --delete-offsets).

Any node takes either request and asks each group's coordinator, the leader of its
`__consumer_offsets` partition, as DescribeGroups is routed (node/group_queries.py). On the
coordinator the cores decide: the offsets core says which groups have committed offsets (read up to
the partition's HW), the membership core whether the group may go (node/group_membership.py), and
the offsets core writes the tombstones. Input is checked here first: an empty group id is
INVALID_GROUP_ID, a partition the metadata does not know UNKNOWN_TOPIC_OR_PARTITION (as Kafka's
KafkaApis answers OffsetDelete). With no `__consumer_offsets` yet no group was ever stored:
GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from node.group_membership import GroupMembership, Route
from replication.group_coordinator import OffsetGroupsAnswer, coordinator_partition
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_admin import DeletableGroupResult, DeleteGroupsRequest, DeleteGroupsResponse
from wire.group_offsets import OffsetDeletePartitionResponse, OffsetDeleteRequest, OffsetDeleteResponse

DeleteOffsets = Callable[[int, str, tuple[tuple[str, int], ...]], Awaitable[tuple[ErrorCode, str]]]


class GroupDeletion:
    """`leader_of`, `route`, `coordinator_address`, `forward`, `membership` and `offset_groups` as
    GroupQueries takes them; `delete_offsets` is GroupOffsets.delete_offsets; `partition_exists(topic,
    partition)` reads the metadata."""

    def __init__(self, node_id: int, partition_count: int, leader_of: Callable[[int], int | None], route: Route,
                 coordinator_address: Callable[[int], str | None],
                 forward: Callable[[str, Api, Any, type], Awaitable[Any]], membership: GroupMembership,
                 offset_groups: Callable[[int], Awaitable[OffsetGroupsAnswer]], delete_offsets: DeleteOffsets,
                 partition_exists: Callable[[str, int], bool]) -> None:
        self._node_id = node_id
        self._partition_count = partition_count
        self._leader_of = leader_of
        self._route = route
        self._coordinator_address = coordinator_address
        self._forward = forward
        self._membership = membership
        self._offset_groups = offset_groups
        self._delete_offsets = delete_offsets
        self._partition_exists = partition_exists

    # -- DeleteGroups -----------------------------------------------------------------------------

    async def delete_groups(self, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
        wanted = tuple(dict.fromkeys(request.groups_names))
        results = {"": DeletableGroupResult("", ErrorCode.INVALID_GROUP_ID, "the group id is empty")}
        by_partition: dict[int, list[str]] = {}
        for group_id in wanted:
            if group_id:
                by_partition.setdefault(coordinator_partition(group_id, self._partition_count), []).append(group_id)
        for answered in await asyncio.gather(*(self._delete_on(partition, tuple(group_ids))
                                               for partition, group_ids in by_partition.items())):
            results.update((result.group_id, result) for result in answered)
        return DeleteGroupsResponse(tuple(results[group_id] for group_id in wanted))

    async def _delete_on(self, partition: int,
                         group_ids: tuple[str, ...]) -> tuple[DeletableGroupResult, ...]:
        """The groups of one `__consumer_offsets` partition, deleted by its coordinator."""
        code = await self._route(partition, False)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return _every(group_ids, ErrorCode.GROUP_ID_NOT_FOUND, "no group exists: no offsets topic yet")
        if code is not None:
            return _every(group_ids, code, _message(code))
        if self._leader_of(partition) != self._node_id:
            address = self._coordinator_address(partition)
            assert address is not None, "routed: the coordinator's address is known"
            response = await self._forward(address, Api.DELETE_GROUPS, DeleteGroupsRequest(group_ids),
                                           DeleteGroupsResponse)
            if sorted(result.group_id for result in response.results) != sorted(group_ids):
                return _every(group_ids, ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator answered for "
                              f"{[result.group_id for result in response.results]}; retry")
            return response.results
        with_offsets = await self._offset_groups(partition)
        if with_offsets.error != ErrorCode.NONE:
            return _every(group_ids, with_offsets.error, _message(with_offsets.error, with_offsets.message))
        answers = await asyncio.gather(*(self._membership.delete_group(group_id, group_id in with_offsets.group_ids)
                                         for group_id in group_ids))
        return tuple(DeletableGroupResult(group_id, code, message)
                     for group_id, (code, message) in zip(group_ids, answers, strict=True))

    # -- OffsetDelete -----------------------------------------------------------------------------

    async def delete_offsets(self, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
        if not request.group_id:
            return OffsetDeleteResponse(ErrorCode.INVALID_GROUP_ID, (), "the group id is empty")
        wanted = tuple(dict.fromkeys(request.partitions))
        known = tuple(tp for tp in wanted if self._partition_exists(*tp))
        unknown = tuple(OffsetDeletePartitionResponse(
            topic, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist")
            for topic, partition in wanted if (topic, partition) not in known)
        if not known:
            return OffsetDeleteResponse(ErrorCode.NONE, unknown)
        code, message, answered = await self._delete_known(request.group_id, known)
        return OffsetDeleteResponse(code, unknown + answered, message)

    async def _delete_known(self, group_id: str, known: tuple[tuple[str, int], ...]) -> tuple[
            ErrorCode, str, tuple[OffsetDeletePartitionResponse, ...]]:
        """The group's error, or each partition's answer, from the group's coordinator."""
        partition = coordinator_partition(group_id, self._partition_count)
        code = await self._route(partition, False)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist (no offsets topic yet)", ()
        if code is not None:
            return code, _message(code), ()
        if self._leader_of(partition) != self._node_id:
            address = self._coordinator_address(partition)
            assert address is not None, "routed: the coordinator's address is known"
            response = await self._forward(address, Api.OFFSET_DELETE,
                                           OffsetDeleteRequest(group_id, known), OffsetDeleteResponse)
            return response.error_code, response.error_message, response.partitions
        with_offsets = await self._offset_groups(partition)
        if with_offsets.error != ErrorCode.NONE:
            return with_offsets.error, _message(with_offsets.error, with_offsets.message), ()
        code, message, subscribed = self._membership.offsets_deletable(group_id, {topic for topic, _ in known},
                                                                       group_id in with_offsets.group_ids)
        if code != ErrorCode.NONE:
            return code, message, ()
        eligible = tuple(tp for tp in known if tp[0] not in subscribed)
        written, why = await self._delete_offsets(partition, group_id, eligible)
        return ErrorCode.NONE, "", tuple(
            OffsetDeletePartitionResponse(topic, number, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                                                   f"a member of group {group_id} subscribes to {topic}")
            if topic in subscribed else OffsetDeletePartitionResponse(topic, number, written, why)
            for topic, number in known)


def _every(group_ids: tuple[str, ...], code: ErrorCode, message: str) -> tuple[DeletableGroupResult, ...]:
    return tuple(DeletableGroupResult(group_id, code, message) for group_id in group_ids)


def _message(code: ErrorCode, detail: str = "") -> str:
    suffix = f" ({detail})" if detail else ""
    return f"the group coordinator is loading, moving or starting ({code.name}); retry after a short backoff{suffix}"
