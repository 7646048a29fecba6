"""Admin.list_groups and Admin.describe_groups against fake nodes that serve the group APIs with the
node's own edges and cores: a group of subscribed consumers is Stable with each partition owned by
one member, a group that only committed offsets is Empty, an unknown one Dead; a broker still
loading its groups, or a coordinator moving, is asked again. Deleting: a group with members is kept
(NON_EMPTY_GROUP), one without goes with its offsets; a member's subscribed topic keeps its offsets."""

from __future__ import annotations

import pytest

from client.admin import Admin, GroupListing
from client.consumer import Consumer
from client.errors import TributaryError
from tests.client.fake_node import FakeCluster
from tests.client.group_helpers import start_members
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_admin import ConsumerGroupState
from wire.topic_partition import TopicPartition


async def test_groups_are_listed_and_described_with_each_partitions_owner(cluster: FakeCluster) -> None:
    consumers = await start_members(cluster.bootstrap, "g", "t", 3, 2)
    try:
        async with Consumer(cluster.bootstrap, group_id="solo") as solo:
            await solo.commit({TopicPartition("t", 0): 1})
        async with Admin(cluster.bootstrap) as admin:
            assert await admin.list_groups() == [GroupListing("g", "consumer", ConsumerGroupState.STABLE),
                                                 GroupListing("solo", "", ConsumerGroupState.EMPTY)]
            assert [g.group_id for g in await admin.list_groups([ConsumerGroupState.EMPTY])] == ["solo"]
            described = await admin.describe_groups(["g", "solo", "nobody"])
        group = described["g"]
        assert (group.state, group.protocol_type, group.assignor) == (
            ConsumerGroupState.STABLE, "consumer", "cooperative-sticky")
        assert group.coordinator is not None and group.coordinator.node_id == 0
        members = {consumer.member.member_id for consumer in consumers if consumer.member is not None}
        assert {member.member_id for member in group.members} == members
        assert {(member.client_id, member.client_host) for member in group.members} == {("tributary", "/127.0.0.1")}
        owners = group.owners()
        assert set(owners) == {TopicPartition("t", p) for p in range(3)}
        for consumer in consumers:
            assert consumer.member is not None
            assert {tp for tp, owner in owners.items() if owner.member_id == consumer.member.member_id} == \
                consumer.assignment()
        assert (described["solo"].state, described["solo"].protocol_type, described["solo"].members) == (
            ConsumerGroupState.EMPTY, "", ())
        assert (described["nobody"].state, described["nobody"].members) == (ConsumerGroupState.DEAD, ())
    finally:
        for consumer in consumers:
            await consumer.close()


async def test_a_broker_loading_its_groups_and_a_moving_coordinator_are_asked_again(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap, group_id="solo") as solo:
        await solo.commit({TopicPartition("t", 0): 1})
    cluster.inject(Api.LIST_GROUPS, "", 1, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    cluster.inject(Api.DESCRIBE_GROUPS, "solo", -1, ErrorCode.NOT_COORDINATOR)
    async with Admin(cluster.bootstrap) as admin:
        admin.metadata.retry_backoff_ms = 1
        assert [group.group_id for group in await admin.list_groups()] == ["solo"]
        assert (await admin.describe_groups(["solo"]))["solo"].state is ConsumerGroupState.EMPTY
    assert [node for node, _ in cluster.requests_of(Api.LIST_GROUPS)].count(1) == 2
    assert len(cluster.requests_of(Api.DESCRIBE_GROUPS)) == 2


async def test_groups_without_members_are_deleted_with_their_offsets_and_others_say_why_not(
        cluster: FakeCluster) -> None:
    consumers = await start_members(cluster.bootstrap, "g", "t", 3, 2)
    try:
        async with Consumer(cluster.bootstrap, group_id="solo") as solo:
            await solo.commit({TopicPartition("t", 0): 1})
        async with Admin(cluster.bootstrap) as admin:
            outcomes = await admin.delete_groups(["g", "solo", "nobody", ""])
            assert {group: None if error is None else error.code for group, error in outcomes.items()} == {
                "g": ErrorCode.NON_EMPTY_GROUP, "solo": None, "nobody": ErrorCode.GROUP_ID_NOT_FOUND,
                "": ErrorCode.INVALID_GROUP_ID}
            assert [group.group_id for group in await admin.list_groups()] == ["g"]
            assert (await admin.describe_groups(["solo"]))["solo"].state is ConsumerGroupState.DEAD
        async with Consumer(cluster.bootstrap, group_id="solo") as solo:
            assert await solo.committed() == {}
    finally:
        for consumer in consumers:
            await consumer.close()


async def test_offsets_of_a_topic_the_members_subscribe_to_are_kept(cluster: FakeCluster) -> None:
    cluster.create_topic("u", partitions=1)
    consumers = await start_members(cluster.bootstrap, "g", "t", 3, 2)
    try:
        owner = next(consumer for consumer in consumers if TopicPartition("t", 0) in consumer.assignment())
        await owner.commit({TopicPartition("t", 0): 2, TopicPartition("u", 0): 3})
        async with Admin(cluster.bootstrap) as admin:
            outcomes = await admin.delete_offsets("g", [TopicPartition("t", 0), TopicPartition("u", 0),
                                                        TopicPartition("gone", 0)])
            assert {tp: None if error is None else error.code for tp, error in outcomes.items()} == {
                TopicPartition("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, TopicPartition("u", 0): None,
                TopicPartition("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            with pytest.raises(TributaryError) as refused:
                await admin.delete_offsets("nobody", [TopicPartition("t", 0)])
            assert refused.value.code is ErrorCode.GROUP_ID_NOT_FOUND
        assert await owner.committed() == {TopicPartition("t", 0): 2}
    finally:
        for consumer in consumers:
            await consumer.close()
