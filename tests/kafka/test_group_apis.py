"""The group and producer-id APIs on the Kafka listener, in raw frames of the versions clients send:
FindCoordinator names the leader of the group's `__consumer_offsets` partition at its address on the
listener asked (one answer per key from v4, none for transactions), JoinGroup before v4 admits a new
member at once while v4+ asks for a member id first (KIP-394), LeaveGroup v3+ answers each member,
OffsetCommit refuses partitions no topic has and OffsetFetch v8 answers several groups at once, and
InitProducerId gives idempotent producers ids and refuses transactional ones."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.find_coordinator.v3 import request as find_v3
from kio.schema.find_coordinator.v3 import response as find_v3_response
from kio.schema.find_coordinator.v4 import request as find_v4
from kio.schema.find_coordinator.v4 import response as find_v4_response
from kio.schema.init_producer_id.v4 import request as init_v4
from kio.schema.init_producer_id.v4 import response as init_v4_response
from kio.schema.join_group.v3 import request as join_v3
from kio.schema.join_group.v3 import response as join_v3_response
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.join_group.v5 import response as join_v5_response
from kio.schema.leave_group.v4 import request as leave_v4
from kio.schema.leave_group.v4 import response as leave_v4_response
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.offset_commit.v8 import request as commit_v8
from kio.schema.offset_commit.v8 import response as commit_v8_response
from kio.schema.offset_fetch.v8 import request as fetch_v8
from kio.schema.offset_fetch.v8 import response as fetch_v8_response

from client.admin import Admin, NewTopic
from node.dev import DevCluster
from node.kafka.apis import RequestContext
from node.kafka.coordinator import handle_find_coordinator
from replication.group_coordinator import OFFSETS_TOPIC, coordinator_partition
from tests.kafka.wire import exchange, read_response, request_frame
from tests.node.cluster_harness import eventually

pytestmark = pytest.mark.kafka_clients

SESSION = datetime.timedelta(seconds=10)


async def call(address: str, request: Any, response_type: type) -> Any:
    answers, closed = await exchange(address, [request_frame(request, 1)], 1)
    assert answers and not closed, f"{type(request).__name__}: no answer"
    return read_response(answers[0], response_type)[1]


async def call_loaded(address: str, request: Any, response_type: type) -> Any:
    """The answer once the coordinator has loaded its partition's groups (its first request loads them;
    clients retry COORDINATOR_LOAD_IN_PROGRESS)."""
    answer = None

    async def loaded() -> bool:
        nonlocal answer
        answer = await call(address, request, response_type)
        codes = [answer.error_code] if hasattr(answer, "error_code") else [
            p.error_code for topic in answer.topics for p in topic.partitions]
        return KioErrorCode.coordinator_load_in_progress not in codes

    await eventually(loaded, f"{type(request).__name__} past COORDINATOR_LOAD_IN_PROGRESS")
    return answer


def kafka_address(cluster: DevCluster) -> str:
    return cluster.kafka_bootstrap.split(",")[0]


async def coordinator_of(cluster: DevCluster, group_id: str) -> Any:
    """The group's FindCoordinator v3 answer, once the offsets topic has a leader for it."""
    answer = None

    async def found() -> bool:
        nonlocal answer
        answer = await call(kafka_address(cluster), find_v3.FindCoordinatorRequest(key=group_id, key_type=0),
                            find_v3_response.FindCoordinatorResponse)
        return answer.error_code is KioErrorCode.none

    await eventually(found, f"a coordinator for {group_id}")
    return answer


async def test_find_coordinator_names_the_offsets_partition_leader_at_its_kafka_address(cluster: DevCluster) -> None:
    groups = ["finders", "seekers", "lookers"]
    single = await coordinator_of(cluster, groups[0])
    metadata = await call(kafka_address(cluster), MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=OFFSETS_TOPIC),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), MetadataResponse)
    (topic,) = metadata.topics
    leaders = {p.partition_index: p.leader_id for p in topic.partitions}
    kafka_addresses = {node.node_id: node.kafka_address for node in cluster.nodes.values()}
    expected = [leaders[coordinator_partition(group, len(leaders))] for group in groups]
    assert single.node_id == expected[0]
    assert f"{single.host}:{single.port}" == kafka_addresses[single.node_id]  # not its HTTP listener

    batched = await call(kafka_address(cluster), find_v4.FindCoordinatorRequest(key_type=0, coordinator_keys=tuple(
        groups)), find_v4_response.FindCoordinatorResponse)
    assert [(c.key, c.error_code, c.node_id) for c in batched.coordinators] == [
        (group, KioErrorCode.none, leader) for group, leader in zip(groups, expected, strict=True)]
    assert [f"{c.host}:{c.port}" for c in batched.coordinators] == [kafka_addresses[leader] for leader in expected]

    transactions = await call(kafka_address(cluster), find_v4.FindCoordinatorRequest(
        key_type=1, coordinator_keys=("orders-tx",)), find_v4_response.FindCoordinatorResponse)
    assert [(c.key, c.error_code, c.node_id) for c in transactions.coordinators] == [
        ("orders-tx", KioErrorCode.coordinator_not_available, -1)]


async def test_find_coordinator_answers_with_the_endpoint_of_the_listener_asked() -> None:
    """Brokers register an endpoint per listener; the answer is the coordinator's on the one asked."""
    broker = SimpleNamespace(broker_id=2, fenced=False, endpoints={"PLAINTEXT": "10.0.0.2:9092",
                                                                   "EXTERNAL": "kafka-2.example:19092"})
    metadata = SimpleNamespace(topic_id=lambda name: "offsets-id", partition=lambda topic_id, p: SimpleNamespace(
        leader=2), broker=lambda broker_id: broker if broker_id == 2 else None)

    async def route(partition: int, create: bool) -> None:
        return None

    node: Any = SimpleNamespace(config=SimpleNamespace(offsets_topic_num_partitions=50),
                                group_offsets=SimpleNamespace(route=route), quorum=SimpleNamespace(metadata=metadata))
    answers = {}
    for listener in ("PLAINTEXT", "EXTERNAL", "OTHER"):
        context = RequestContext(node, listener, "test", "127.0.0.1", 3)
        answer = await handle_find_coordinator(context, find_v3.FindCoordinatorRequest(key="g", key_type=0))
        answers[listener] = (answer["error_code"], answer["host"], answer["port"])
    assert answers["PLAINTEXT"][1:] == ("10.0.0.2", 9092)
    assert answers["EXTERNAL"][1:] == ("kafka-2.example", 19092)
    assert answers["OTHER"][0].name == "COORDINATOR_NOT_AVAILABLE"


def join_request(module: Any, group_id: str, member_id: str = "") -> Any:
    protocol = module.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff")
    fields = {"group_id": group_id, "session_timeout": SESSION, "rebalance_timeout": SESSION,
              "member_id": member_id, "protocol_type": "consumer", "protocols": (protocol,)}
    if module is join_v5:
        fields["group_instance_id"] = None
    return module.JoinGroupRequest(**fields)


async def test_join_group_before_v4_admits_a_new_member_at_once_and_v5_asks_for_its_id_first(
        cluster: DevCluster) -> None:
    coordinator = await coordinator_of(cluster, "old-joiners")
    address = f"{coordinator.host}:{coordinator.port}"
    old = await call_loaded(address, join_request(join_v3, "old-joiners"), join_v3_response.JoinGroupResponse)
    assert old.error_code is KioErrorCode.none
    assert old.member_id and old.leader == old.member_id and old.generation_id >= 1
    assert [member.member_id for member in old.members] == [old.member_id]

    await coordinator_of(cluster, "new-joiners")
    new = await call_loaded(address, join_request(join_v5, "new-joiners"), join_v5_response.JoinGroupResponse)
    assert new.error_code is KioErrorCode.member_id_required and new.member_id


async def test_leave_group_v4_answers_each_member(cluster: DevCluster) -> None:
    coordinator = await coordinator_of(cluster, "leavers")
    address = f"{coordinator.host}:{coordinator.port}"
    joined = await call_loaded(address, join_request(join_v3, "leavers"), join_v3_response.JoinGroupResponse)
    assert joined.error_code is KioErrorCode.none
    members = (leave_v4.MemberIdentity(member_id=joined.member_id, group_instance_id=None),
               leave_v4.MemberIdentity(member_id="never-joined", group_instance_id=None))
    left = await call(address, leave_v4.LeaveGroupRequest(group_id="leavers", members=members),
                      leave_v4_response.LeaveGroupResponse)
    assert left.error_code is KioErrorCode.none
    assert [(m.member_id, m.error_code) for m in left.members] == [
        (joined.member_id, KioErrorCode.none), ("never-joined", KioErrorCode.unknown_member_id)]


async def test_offset_commit_refuses_unknown_partitions_and_offset_fetch_v8_answers_each_group(
        cluster: DevCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic("committed", 2, 3)])
    for group_id, offset in (("committers-a", 11), ("committers-b", 22)):
        await coordinator_of(cluster, group_id)
        partitions = (commit_v8.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                             committed_leader_epoch=-1, committed_metadata="m"),
                      commit_v8.OffsetCommitRequestPartition(partition_index=7, committed_offset=offset,
                                                             committed_leader_epoch=-1, committed_metadata=None))
        committed = await call_loaded(kafka_address(cluster), commit_v8.OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=(commit_v8.OffsetCommitRequestTopic(name="committed", partitions=partitions),)),
            commit_v8_response.OffsetCommitResponse)
        assert [(t.name, p.partition_index, p.error_code) for t in committed.topics for p in t.partitions] == [
            ("committed", 7, KioErrorCode.unknown_topic_or_partition), ("committed", 0, KioErrorCode.none)]

    wanted = (fetch_v8.OffsetFetchRequestTopics(name="committed", partition_indexes=(0, 1)),)
    fetched = await call(kafka_address(cluster), fetch_v8.OffsetFetchRequest(groups=(
        fetch_v8.OffsetFetchRequestGroup(group_id="committers-a", topics=wanted),
        fetch_v8.OffsetFetchRequestGroup(group_id="committers-b", topics=None)), require_stable=False),
        fetch_v8_response.OffsetFetchResponse)
    assert [(g.group_id, g.error_code, [(t.name, p.partition_index, p.committed_offset, p.metadata)
                                        for t in g.topics for p in t.partitions]) for g in fetched.groups] == [
        ("committers-a", KioErrorCode.none, [("committed", 0, 11, "m"), ("committed", 1, -1, "")]),
        ("committers-b", KioErrorCode.none, [("committed", 0, 22, "m")])]


async def test_init_producer_id_gives_idempotent_producers_ids_and_refuses_transactional_ones(
        cluster: DevCluster) -> None:
    def request(transactional_id: str | None) -> Any:
        return init_v4.InitProducerIdRequest(transactional_id=transactional_id,
                                             transaction_timeout=datetime.timedelta(seconds=60))

    first = await call(kafka_address(cluster), request(None), init_v4_response.InitProducerIdResponse)
    second = await call(kafka_address(cluster), request(None), init_v4_response.InitProducerIdResponse)
    assert (first.error_code, first.producer_epoch, second.error_code) == (KioErrorCode.none, 0, KioErrorCode.none)
    assert 0 <= first.producer_id != second.producer_id
    refused = await call(kafka_address(cluster), request("orders-tx"), init_v4_response.InitProducerIdResponse)
    assert (refused.error_code, refused.producer_id) == (KioErrorCode.invalid_request, -1)
