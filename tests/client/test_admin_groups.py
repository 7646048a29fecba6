"""Admin.list_groups and Admin.describe_groups against fake nodes that serve the group APIs with the
node's own edges and cores: a group of subscribed consumers is Stable with each partition owned by
one member, a group that only committed offsets is Empty, an unknown one Dead; a broker still
loading its groups, or a coordinator moving, is asked again."""

from __future__ import annotations

from client.admin import Admin, GroupListing
from client.consumer import Consumer
from client.metadata import TopicPartition
from client.protocol import Api, ConsumerGroupState, ErrorCode
from tests.client.fake_node import FakeCluster
from tests.client.group_helpers import start_members


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
