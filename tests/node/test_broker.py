"""Three real Brokers over loopback HTTP with a fake quorum: the data path end to end.

Method: each test starts a cluster (tests/node/broker_harness.py), creates a topic with a fixed
assignment, and drives produce and fetch through the brokers' HTTP routes. Waits are on events
(a long-poll answer, a partition change on a broker); timeouts are only safety nets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from node.broker import Broker, _alter_partition_requests
from replication.broker_ready import AlterPartitionSend
from replication.config import ReplicationConfig
from replication.ready import AlterPartitionProposal, Role
from storage.log_manager import CLEAN_SHUTDOWN_FILE
from storage.records import iter_headers
from tests.node.broker_harness import TIMEOUT_S, Cluster, batch, log_bytes, started, until, wall_clock_ms
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchRequest, LeaderIdAndEpoch
from wire.log_offsets import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from wire.metadata import DescribeReplicasRequest
from wire.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from wire.topic_partition import TopicPartition
from wire.topics import CreatableTopic, CreateTopicsRequest

TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
ACKS_ALL = -1



@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with started(tmp_path) as cluster:
        yield cluster


def base_offsets(records: bytes) -> list[int]:
    return [header.base_offset for _, header in iter_headers(records)]


async def test_acks_all_produce_is_read_back_from_every_follower_with_identical_bytes(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    first = await cluster.produce(0, TP, batch(b"a", b"b", b"c"))
    second = await cluster.produce(0, TP, batch(b"d"))
    assert (first.error_code, first.base_offset) == (ErrorCode.NONE, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.NONE, 3)
    on_leader = await cluster.fetch(0, TP, 0)
    assert on_leader.error_code == ErrorCode.NONE
    assert on_leader.high_watermark == 4
    assert base_offsets(on_leader.records) == [0, 3]
    for follower in (1, 2):
        # The follower serves consumers up to its own HW, which its next fetch from the leader
        # brings up: a long poll until the bytes are there.
        answer = await cluster.fetch(follower, TP, 0, max_wait_ms=TIMEOUT_S * 1000,
                                     min_bytes=len(on_leader.records))
        assert answer.error_code == ErrorCode.NONE
        assert answer.records == on_leader.records
        assert answer.high_watermark == 4
        assert log_bytes(cluster.broker(follower), TP) == log_bytes(cluster.broker(0), TP)


async def test_follower_high_watermark_catches_up_after_acks_1_produce(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    answer = await cluster.produce(0, TP, batch(b"a", b"b"), acks=1)
    assert answer.error_code == ErrorCode.NONE
    for follower in (1, 2):
        broker = cluster.broker(follower)
        log = broker.hosts[TP].partition.log
        await until(broker, TP, lambda log=log: log.high_watermark == 2)
        assert log.log_end_offset == 2
    assert cluster.broker(0).hosts[TP].partition.log.high_watermark == 2


async def test_long_poll_fetch_wakes_on_produce(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    leader = cluster.broker(0)
    request = FetchRequest(partitions=(FetchPartition(TOPIC, 0, 0),), max_wait_ms=60_000,
                                    min_bytes=1)
    poll = asyncio.create_task(leader.fetch(request))
    await asyncio.sleep(0)  # one turn of the loop: the fetch reads nothing and parks
    assert not poll.done()
    produced = await cluster.produce(0, TP, batch(b"x"))
    assert produced.error_code == ErrorCode.NONE
    async with asyncio.timeout(TIMEOUT_S):
        response = await poll
    (answer,) = response.partitions
    assert answer.error_code == ErrorCode.NONE
    assert base_offsets(answer.records) == [0]


async def test_multi_partition_fetch_answers_when_any_partition_has_data(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2), 1: (0, 2, 1)})
    leader = cluster.broker(0)
    partitions = (FetchPartition(TOPIC, 0, 0), FetchPartition(TOPIC, 1, 0))
    poll = asyncio.create_task(leader.fetch(FetchRequest(partitions=partitions, max_wait_ms=60_000)))
    await asyncio.sleep(0)
    assert not poll.done()
    await cluster.produce(0, TopicPartition(TOPIC, 1), batch(b"y"))
    async with asyncio.timeout(TIMEOUT_S):
        response = await poll
    first, second = response.partitions
    assert (first.error_code, first.records) == (ErrorCode.NONE, b"")
    assert base_offsets(second.records) == [0]


async def test_errors_name_unknown_partitions_and_point_to_the_leader(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1)})
    unknown_topic = await cluster.fetch(0, TopicPartition("nope", 0), 0)
    assert unknown_topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    unknown_partition = await cluster.produce(0, TopicPartition(TOPIC, 7), batch(b"a"))
    assert unknown_partition.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    not_hosted = await cluster.fetch(2, TP, 0)
    assert not_hosted.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert not_hosted.current_leader == LeaderIdAndEpoch(0, 0)
    to_follower = await cluster.produce(1, TP, batch(b"a"))
    assert to_follower.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    future_epoch = await cluster.produce(0, TP, batch(b"a"), current_leader_epoch=5)
    assert future_epoch.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


async def test_leader_change_truncates_the_old_leaders_unreplicated_tail(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    assert (await cluster.produce(0, TP, batch(b"a", b"b", b"c"))).error_code == ErrorCode.NONE
    for follower in (1, 2):
        log = cluster.broker(follower).hosts[TP].partition.log
        await until(cluster.broker(follower), TP, lambda log=log: log.log_end_offset == 3)
    # Cut the leader off from its followers; it appends with acks=1 what nobody else gets.
    cluster.nodes[0].cut = True
    tail = await cluster.produce(0, TP, batch(b"lost-1", b"lost-2"), acks=1)
    assert (tail.error_code, tail.base_offset) == (ErrorCode.NONE, 3)
    # The controller fails the partition over to broker 1 (epoch 1) without broker 0 in the ISR.
    state = cluster.quorum.move_leader(TOPIC, 0, leader=1, isr=(1, 2))
    assert state.leader_epoch == 1
    assert cluster.broker(1).hosts[TP].partition.role == Role.LEADER
    assert cluster.broker(0).hosts[TP].partition.role == Role.FOLLOWER
    cluster.nodes[0].cut = False
    new = await cluster.produce(1, TP, batch(b"d", b"e", b"f"))
    assert (new.error_code, new.base_offset) == (ErrorCode.NONE, 3)
    old_leader = cluster.broker(0)
    log = old_leader.hosts[TP].partition.log
    await until(old_leader, TP, lambda: log.log_end_offset == 6 and log.high_watermark == 6)
    assert log_bytes(old_leader, TP) == log_bytes(cluster.broker(1), TP)
    # A request in the old epoch is fenced, and told who leads now.
    stale = await cluster.fetch(1, TP, 0, current_leader_epoch=0)
    assert stale.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert stale.current_leader == LeaderIdAndEpoch(1, 1)
    # The old leader rejoins the ISR through AlterPartition.
    await until(old_leader, TP, lambda: 0 in cluster.quorum.partition(TOPIC, 0).isr)


async def test_consumer_fetch_from_leader_names_a_preferred_replica_in_the_consumers_rack(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    await cluster.produce(0, TP, batch(b"a"))
    nearest = await cluster.fetch(0, TP, 0, rack_id="rack-2")
    assert (nearest.error_code, nearest.preferred_read_replica, nearest.records) == (ErrorCode.NONE, 2, b"")
    local = await cluster.fetch(0, TP, 0, rack_id="rack-0")
    assert local.preferred_read_replica == -1
    assert base_offsets(local.records) == [0]


async def test_retention_on_the_leader_moves_log_start_offset_on_followers(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, log_retention_check_interval_ms=50)
    await cluster.start()
    try:
        await cluster.create_topic(TOPIC, {0: (0, 1, 2)}, {"retention.ms": "60000", "segment.bytes": "200"})
        old_ms = wall_clock_ms() - 3_600_000
        for value in (b"a", b"b", b"c"):
            assert (await cluster.produce(0, TP, batch(value * 100, timestamp_ms=old_ms))).error_code == ErrorCode.NONE
        fresh = await cluster.produce(0, TP, batch(b"fresh"))
        assert (fresh.error_code, fresh.base_offset) == (ErrorCode.NONE, 3)
        leader_log = cluster.broker(0).hosts[TP].partition.log
        await until(cluster.broker(0), TP, lambda: leader_log.log_start_offset == 3)
        for follower in (1, 2):
            log = cluster.broker(follower).hosts[TP].partition.log
            await until(cluster.broker(follower), TP, lambda log=log: log.log_start_offset == 3)
            assert log.log_end_offset == 4
    finally:
        await cluster.stop()


async def test_delete_records_raises_the_low_watermark_on_every_replica(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    await cluster.produce(0, TP, batch(b"a", b"b", b"c"))
    request = DeleteRecordsRequest((DeleteRecordsPartition(TOPIC, 0, 2),), timeout_ms=10_000)
    response = await cluster.call(0, Api.DELETE_RECORDS, request, DeleteRecordsResponse)
    (answer,) = response.partitions
    assert (answer.error_code, answer.low_watermark) == (ErrorCode.NONE, 2)
    earliest = ListOffsetsRequest((ListOffsetsPartition(TOPIC, 0, EARLIEST_TIMESTAMP),),
                                           from_follower=True)
    for broker_id in (0, 1, 2):
        listed = await cluster.call(broker_id, Api.LIST_OFFSETS, earliest, ListOffsetsResponse)
        assert (listed.partitions[0].error_code, listed.partitions[0].offset) == (ErrorCode.NONE, 2)


async def test_list_offsets_and_offsets_for_leader_epoch(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    await cluster.produce(0, TP, batch(b"a", b"b"))
    latest = ListOffsetsRequest((ListOffsetsPartition(TOPIC, 0, LATEST_TIMESTAMP),))
    listed = await cluster.call(0, Api.LIST_OFFSETS, latest, ListOffsetsResponse)
    assert (listed.partitions[0].error_code, listed.partitions[0].offset) == (ErrorCode.NONE, 2)
    on_follower = await cluster.call(1, Api.LIST_OFFSETS, latest, ListOffsetsResponse)
    assert on_follower.partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    request = OffsetsForLeaderEpochRequest((OffsetForLeaderPartition(TOPIC, 0, 0),))
    response = await cluster.call(0, Api.OFFSETS_FOR_LEADER_EPOCH, request,
                                  OffsetsForLeaderEpochResponse)
    answer = response.partitions[0]
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.NONE, 0, 2)


async def test_describe_replicas_and_metrics_report_each_hosted_replica(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    await cluster.produce(0, TP, batch(b"a"))
    leader = cluster.broker(0)
    (replica,) = leader.describe_replicas(DescribeReplicasRequest()).replicas
    assert (replica.role, replica.leader_id, replica.log_end_offset, replica.high_watermark) == ("leader", 0, 1, 1)
    assert replica.isr == (0, 1, 2)
    (metrics,) = leader.replica_metrics()
    assert metrics.is_leader
    assert (metrics.isr_size, metrics.under_replicated, metrics.under_min_isr) == (3, False, False)
    (follower_metrics,) = cluster.broker(1).replica_metrics()
    assert not follower_metrics.is_leader


async def test_deleted_topic_stops_the_replicas_and_deletes_their_logs(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    await cluster.produce(0, TP, batch(b"a"))
    directories = [cluster.broker(broker_id).hosts[TP].partition.log.directory for broker_id in (0, 1, 2)]
    await cluster.delete_topic(TOPIC)
    for broker_id, directory in enumerate(directories):
        assert TP not in cluster.broker(broker_id).hosts
        assert not directory.exists()
    gone = await cluster.fetch(0, TP, 0)
    assert gone.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_topic_deleted_while_a_broker_was_down_leaves_no_stray_log_after_its_restart(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    await cluster.produce(0, TP, batch(b"a"))
    directory = cluster.broker(2).hosts[TP].partition.log.directory
    await cluster.broker(2).stop(controlled=True)
    await cluster.delete_topic(TOPIC)
    assert directory.exists(), "the stopped broker could not see the deletion"
    restarted = await cluster.restart(2)
    assert TP not in restarted.hosts
    assert restarted.log_manager.get_log(TP) is None
    assert not directory.exists()


async def test_controlled_stop_hands_over_leadership_and_writes_the_clean_shutdown_marker(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    await cluster.produce(0, TP, batch(b"a"))
    stopping: Broker = cluster.broker(0)
    await stopping.stop(controlled=True)
    assert (cluster.nodes[0].directory / CLEAN_SHUTDOWN_FILE).exists()
    state = cluster.quorum.partition(TOPIC, 0)
    assert state.leader in (1, 2)
    assert 0 not in state.isr
    after = await cluster.produce(state.leader, TP, batch(b"b"))
    assert (after.error_code, after.base_offset) == (ErrorCode.NONE, 1)


async def test_isr_shrinks_when_followers_are_cut_off_and_expands_when_they_return(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, replication=ReplicationConfig(replica_lag_time_max_ms=300))
    await cluster.start()
    try:
        await cluster.create_topic(TOPIC, {0: (0, 1, 2)}, {"min.insync.replicas": "3"})
        assert (await cluster.produce(0, TP, batch(b"a"))).error_code == ErrorCode.NONE
        cluster.nodes[0].cut = True
        assert (await cluster.produce(0, TP, batch(b"b"), acks=1)).error_code == ErrorCode.NONE
        # Followers that cannot fetch fall out of the ISR after replica.lag.time.max.ms (the
        # leader's tick timer), through AlterPartition to the controller.
        await cluster.quorum.until(lambda metadata: cluster.quorum.partition(TOPIC, 0).isr == (0,))
        refused = await cluster.produce(0, TP, batch(b"c"))
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        cluster.nodes[0].cut = False
        await cluster.quorum.until(lambda metadata: cluster.quorum.partition(TOPIC, 0).isr == (0, 1, 2))
        accepted = await cluster.produce(0, TP, batch(b"d"))
        assert (accepted.error_code, accepted.base_offset) == (ErrorCode.NONE, 2)
        for follower in (1, 2):
            log = cluster.broker(follower).hosts[TP].partition.log
            await until(cluster.broker(follower), TP, lambda log=log: log.log_end_offset == 3)
    finally:
        await cluster.stop()


async def test_corrupt_batch_is_refused_and_leaves_the_log_unchanged(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    good = batch(b"a", b"b")
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])
    answer = await cluster.produce(0, TP, corrupt)
    assert answer.error_code == ErrorCode.CORRUPT_MESSAGE
    assert cluster.broker(0).hosts[TP].partition.log.log_end_offset == 0
    assert (await cluster.produce(0, TP, good)).base_offset == 0


async def test_a_large_creation_is_applied_between_other_callbacks_and_reported_caught_up_at_its_end(
        cluster: Cluster) -> None:
    """Goal: a creation of many partitions does not hold the event loop for all of them, and the
    lifecycle hears that the broker caught up once the last one is applied. Method: create 40
    partitions; a callback queued right after the (synchronous) publication runs before the core
    applied them all; then await the lifecycle's caught-up report and check every partition."""
    broker = cluster.broker(0)
    reports: list[bool] = []
    caught_up = asyncio.Event()
    on_metadata = broker.lifecycle.on_metadata

    def spy(metadata_offset: int, is_caught_up: bool, offline_log_ends: tuple[object, ...]) -> None:
        reports.append(is_caught_up)
        if is_caught_up:
            caught_up.set()
        on_metadata(metadata_offset, is_caught_up, offline_log_ends)  # type: ignore[arg-type]

    broker.lifecycle.on_metadata = spy  # type: ignore[method-assign]
    creation = CreatableTopic(TOPIC, assignments={index: (0, 1, 2) for index in range(40)})
    await cluster.quorum.controller_request(CreateTopicsRequest((creation,)), 1_000)  # applied in part, at once
    served: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(lambda: served.set_result(len(broker.hosts)))
    async with asyncio.timeout(TIMEOUT_S):
        hosted_when_served = await served
        await caught_up.wait()
    assert hosted_when_served < 40, "the loop ran another callback before the last partition was applied"
    assert reports[0] is False and reports[-1] is True, reports
    assert sorted(broker.hosts) == [TopicPartition(TOPIC, index) for index in range(40)]
    assert all(host.partition.role == Role.LEADER for host in broker.hosts.values())
    produced = await cluster.produce(0, TopicPartition(TOPIC, 39), batch(b"a"), acks=1)
    assert produced.error_code == ErrorCode.NONE, produced


def test_the_alter_partition_proposals_of_one_ready_go_as_few_requests_naming_each_partition_once() -> None:
    """A failover's new leaders record their lineages in one request (one metadata commit) instead
    of one each; a partition proposed twice, or another broker epoch, starts another request."""
    def send(request_id: int, partition: int, broker_epoch: int = 7) -> AlterPartitionSend:
        return AlterPartitionSend(request_id, broker_epoch, "topic-id", TopicPartition("t", partition),
                                  AlterPartitionProposal(1, 1, (1, 2), (-1, -1)))

    sends = [send(1, 0), send(2, 1), send(3, 0), send(4, 2), send(5, 3, broker_epoch=8)]
    requests = _alter_partition_requests(sends)
    assert [[item.request_id for item in request] for request in requests] == [[1, 2], [3, 4], [5]]
