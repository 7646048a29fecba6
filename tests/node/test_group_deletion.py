"""The node's DeleteGroups and OffsetDelete edge (node/group_deletion.py) with its routing stubbed: a
group coordinated elsewhere is deleted by its coordinator, one here by the cores (its tombstone
written through `store`); an empty group id is INVALID_GROUP_ID, a partition the metadata does not
know UNKNOWN_TOPIC_OR_PARTITION, and with no `__consumer_offsets` yet no group exists."""

from __future__ import annotations

import random
from typing import Any

from node.group_deletion import GroupDeletion
from node.group_membership import GroupMembership
from replication.consumer_groups import GroupsConfig
from replication.group_coordinator import OffsetGroupsAnswer, coordinator_partition
from replication.group_metadata import GroupMetadata
from tests.node.test_group_queries import PARTITIONS, Stubs, group_on
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_admin import DeletableGroupResult, DeleteGroupsRequest, DeleteGroupsResponse
from wire.group_offsets import OffsetDeletePartitionResponse, OffsetDeleteRequest, OffsetDeleteResponse


class DeletionStubs(Stubs):
    """The coordinator elsewhere deletes what it is asked; stores and offset tombstones are recorded."""

    def __init__(self, led: set[int] | None, offsets: dict[int, OffsetGroupsAnswer] | None = None) -> None:
        super().__init__(led, offsets)
        self.stored: list[tuple[str, GroupMetadata | None]] = []
        self.offsets_deleted: list[tuple[str, tuple[tuple[str, int], ...]]] = []

    async def forward(self, address: str, api: Api, request: Any, response_type: type) -> Any:
        self.forwarded.append((address, api, request))
        if api is Api.DELETE_GROUPS:
            return DeleteGroupsResponse(tuple(DeletableGroupResult(group, ErrorCode.NONE)
                                                       for group in request.groups_names))
        return OffsetDeleteResponse(ErrorCode.NONE, tuple(
            OffsetDeletePartitionResponse(topic, partition, ErrorCode.NONE)
            for topic, partition in request.partitions))

    async def store(self, partition: int, group_id: str, value: GroupMetadata | None) -> tuple[ErrorCode, str]:
        self.stored.append((group_id, value))
        return ErrorCode.NONE, ""

    async def delete_offsets(self, partition: int, group_id: str,
                             topic_partitions: tuple[tuple[str, int], ...]) -> tuple[ErrorCode, str]:
        self.offsets_deleted.append((group_id, topic_partitions))
        return ErrorCode.NONE, ""

    async def deletion(self) -> GroupDeletion:
        membership = GroupMembership(1, PARTITIONS, GroupsConfig(), self.leader_of, lambda partition: 0, self.route,
                                     lambda partition: "node-2:9092", self.forward, self.store, self.load_groups,
                                     lambda: 0, random.Random(0))
        for partition in self.led or ():
            await membership.take_office(partition)
        return GroupDeletion(1, PARTITIONS, self.leader_of, self.route, lambda partition: "node-2:9092",
                             self.forward, membership, self.offset_groups, self.delete_offsets,
                             lambda topic, partition: topic == "orders" and partition >= 0)


def unknown_on(partition: int) -> str:
    """A group of `partition` that neither holds offsets nor was ever stored."""
    return next(name for n in range(100) if coordinator_partition(name := f"nobody-{n}", PARTITIONS) == partition)


async def test_groups_are_deleted_by_their_coordinators() -> None:
    here, there = group_on(0), group_on(1)
    stubs = DeletionStubs(led={0}, offsets={0: OffsetGroupsAnswer(0, ErrorCode.NONE, frozenset({here}))})
    response = await (await stubs.deletion()).delete_groups(DeleteGroupsRequest((here, there, "", here)))
    assert [(result.group_id, result.error_code) for result in response.results] == [
        (here, ErrorCode.NONE), (there, ErrorCode.NONE), ("", ErrorCode.INVALID_GROUP_ID)]
    assert stubs.stored == [(here, None)], "the group's tombstone, through the store"
    assert stubs.forwarded == [("node-2:9092", Api.DELETE_GROUPS, DeleteGroupsRequest((there,)))]
    nobody = unknown_on(0)
    again = await (await stubs.deletion()).delete_groups(DeleteGroupsRequest((nobody,)))
    assert again.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


async def test_offsets_are_deleted_by_the_coordinator_and_unknown_partitions_refused_first() -> None:
    here, there = group_on(0), group_on(1)
    stubs = DeletionStubs(led={0}, offsets={0: OffsetGroupsAnswer(0, ErrorCode.NONE, frozenset({here}))})
    deletion = await stubs.deletion()
    response = await deletion.delete_offsets(OffsetDeleteRequest(here, (("orders", 0), ("orders", -1))))
    assert (response.error_code, [(p.topic, p.partition, p.error_code) for p in response.partitions]) == (
        ErrorCode.NONE, [("orders", -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ("orders", 0, ErrorCode.NONE)])
    assert stubs.offsets_deleted == [(here, (("orders", 0),))]
    forwarded = await deletion.delete_offsets(OffsetDeleteRequest(there, (("orders", 1),)))
    assert forwarded.error_code == ErrorCode.NONE and stubs.forwarded == [
        ("node-2:9092", Api.OFFSET_DELETE, OffsetDeleteRequest(there, (("orders", 1),)))]
    unknown = await deletion.delete_offsets(OffsetDeleteRequest(unknown_on(0), (("orders", 0),)))
    assert (unknown.error_code, unknown.partitions) == (ErrorCode.GROUP_ID_NOT_FOUND, ())
    empty = await deletion.delete_offsets(OffsetDeleteRequest("", (("orders", 0),)))
    assert empty.error_code == ErrorCode.INVALID_GROUP_ID


async def test_without_the_offsets_topic_no_group_exists() -> None:
    deletion = await DeletionStubs(led=None).deletion()
    deleted = await deletion.delete_groups(DeleteGroupsRequest(("g",)))
    assert deleted.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    offsets = await deletion.delete_offsets(OffsetDeleteRequest("g", (("orders", 0),)))
    assert offsets.error_code == ErrorCode.GROUP_ID_NOT_FOUND
