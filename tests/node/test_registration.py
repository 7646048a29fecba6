"""Registration after a restart (KIP-966 unclean-shutdown detection, KAFKA-15586; KIP-858 directory
ids) and the heartbeat's log-end reports, on real brokers with the fake quorum; and the ELR in the
metadata answers clients describe.

Method: the three-broker cluster of broker_harness; every controller request is recorded with its
answer, so a test reads what the restarted broker sent and what the controller made of it. Waits
are on metadata or partition changes."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller.metadata import ClusterMetadata
from controller.metadata_records import Partition, PartitionChange, RegisterBroker, Topic
from node.admin import metadata_response
from storage.log_manager import CLEAN_SHUTDOWN_FILE
from storage.meta_properties import META_PROPERTIES_FILE, MetaProperties
from tests.node.broker_harness import Cluster, batch, log_bytes, started, until
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest, BrokerRegistrationResponse
from wire.error_codes import ErrorCode
from wire.metadata import MetadataRequest
from wire.sentinels import NO_LEADER
from wire.topic_partition import TopicPartition

TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with started(tmp_path) as cluster:
        yield cluster


class Recorder:
    """Every controller request of the brokers, with its response."""

    def __init__(self, cluster: Cluster) -> None:
        self.exchanges: list[tuple[Any, Any]] = []
        handle = cluster.quorum.controller_request

        async def recorded(request: Any, timeout_ms: int) -> Any:
            response = await handle(request, timeout_ms)
            self.exchanges.append((request, response))
            return response

        cluster.quorum.controller_request = recorded  # type: ignore[method-assign]

    def registration(self, broker_id: int) -> tuple[BrokerRegistrationRequest, BrokerRegistrationResponse]:
        found = [(request, response) for request, response in self.exchanges
                 if isinstance(request, BrokerRegistrationRequest) and request.broker_id == broker_id]
        assert len(found) == 1, found
        return found[0]


def directory_id(cluster: Cluster, broker_id: int) -> str | None:
    return MetaProperties.read(cluster.nodes[broker_id].directory / META_PROPERTIES_FILE).directory_id



async def test_brokers_register_their_directory_ids(cluster: Cluster) -> None:
    for node in cluster.nodes:
        registration = cluster.quorum.metadata.broker(node.broker_id)
        assert registration is not None
        assert registration.log_dirs == (directory_id(cluster, node.broker_id),)


async def test_a_clean_stop_writes_its_broker_epoch_and_the_restart_registers_cleanly_keeping_elr(
    cluster: Cluster,
) -> None:
    """The marker carries the epoch across the restart; the controller finds it equal to the one on
    record, so broker 2 keeps its ELR membership (min.insync.replicas 2, ISR down to the leader)."""
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)}, {"min.insync.replicas": "2"})
    assert (await cluster.produce(0, TP, batch(b"a"))).error_code == ErrorCode.NONE
    await cluster.broker(1).stop(controlled=True)
    epoch = cluster.broker(2).lifecycle.broker_epoch
    await cluster.broker(2).stop(controlled=True)
    assert (cluster.nodes[2].directory / CLEAN_SHUTDOWN_FILE).read_text() == f'{{"version":0,"broker_epoch":{epoch}}}'
    assert (cluster.quorum.partition(TOPIC, 0).isr, cluster.quorum.partition(TOPIC, 0).elr) == ((0,), (2,))
    recorder = Recorder(cluster)
    restarted = await cluster.restart(2)
    request, response = recorder.registration(2)
    assert (request.previous_broker_epoch, request.log_dirs) == (epoch, (directory_id(cluster, 2),))
    assert (response.error_code, response.warning) == (ErrorCode.NONE, None)
    assert restarted.lifecycle.broker_epoch > epoch
    # Still eligible: it leaves the ELR only by catching up into the ISR.
    await cluster.quorum.until(lambda metadata: cluster.quorum.partition(TOPIC, 0).isr == (0, 2))
    assert cluster.quorum.partition(TOPIC, 0).elr == ()


async def test_a_restart_without_the_marker_is_unclean_and_leaves_the_elr(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)}, {"min.insync.replicas": "2"})
    await cluster.broker(1).stop(controlled=True)
    await cluster.broker(2).stop(controlled=True)
    (cluster.nodes[2].directory / CLEAN_SHUTDOWN_FILE).unlink()  # as after a power loss
    recorder = Recorder(cluster)
    with caplog.at_level(logging.WARNING, logger="node.lifecycle"):
        await cluster.restart(2)
    request, response = recorder.registration(2)
    assert request.previous_broker_epoch == -1
    assert "broker 2 restarted without a clean shutdown" in response.warning
    assert "it left the ISR or ELR of 1 partition(s)" in response.warning, "2 was in the ELR"
    assert any("unclean restart" in record.getMessage() and "broker 2 restarted" in record.getMessage()
               for record in caplog.records)
    await cluster.quorum.until(lambda metadata: cluster.quorum.partition(TOPIC, 0).isr == (0, 2))


async def test_a_wiped_log_dir_is_new_to_the_controller_and_its_replica_rejoins_as_a_follower(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """KIP-858: a clean marker cannot vouch for a dir that was replaced; the replica starts empty,
    catches up from the leader and never leads meanwhile."""
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    assert (await cluster.produce(0, TP, batch(b"a", b"b"))).error_code == ErrorCode.NONE
    old_id = directory_id(cluster, 1)
    await cluster.broker(1).stop(controlled=True)
    shutil.rmtree(cluster.nodes[1].directory)
    recorder = Recorder(cluster)
    with caplog.at_level(logging.WARNING, logger="node.lifecycle"):
        restarted = await cluster.restart(1)
    new_id = directory_id(cluster, 1)
    request, response = recorder.registration(1)
    assert request.log_dirs == (new_id,) and new_id != old_id
    assert response.warning.startswith(f"broker 1's log dir {new_id} is new and {old_id} is gone")
    assert any(f"log dir {new_id} is new" in record.getMessage() for record in caplog.records)
    log = restarted.hosts[TP].partition.log
    await until(restarted, TP, lambda: log.log_end_offset == 2)
    assert log_bytes(restarted, TP) == log_bytes(cluster.broker(0), TP)
    assert cluster.quorum.partition(TOPIC, 0).leader == 0


async def test_heartbeats_report_log_ends_and_the_most_complete_replica_leads(cluster: Cluster) -> None:
    """A partition with no leader and an empty ISR and ELR: every broker reports its replica's log
    end in its heartbeats, and the controller elects the one that holds most, here not the first
    in replica order."""
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    assert (await cluster.produce(0, TP, batch(b"a"))).error_code == ErrorCode.NONE
    cluster.quorum.move_leader(TOPIC, 0, 2, (0, 1, 2))
    await until(cluster.broker(2), TP, lambda: cluster.broker(2).hosts[TP].partition.leader_epoch == 1)
    cluster.nodes[2].cut = True  # followers cannot fetch what 2 appends now
    assert (await cluster.produce(2, TP, batch(b"b"), acks=1)).error_code == ErrorCode.NONE
    recorder = Recorder(cluster)
    topic_id = cluster.quorum.metadata.topic_id(TOPIC)
    assert topic_id is not None
    cluster.quorum.write(PartitionChange(topic_id, 0, isr=(), leader=NO_LEADER))  # as if all restarted uncleanly
    await cluster.quorum.until(lambda metadata: cluster.quorum.partition(TOPIC, 0).leader != NO_LEADER)
    state = cluster.quorum.partition(TOPIC, 0)
    assert (state.leader, state.isr, state.leader_epoch) == (2, (2,), 3)
    assert {(request.broker_id, info.current_leader_epoch, info.last_written_leader_epoch, info.log_end_offset)
            for request, _ in recorder.exchanges if isinstance(request, BrokerHeartbeatRequest)
            for info in request.replica_log_info} == {(0, 2, 0, 1), (1, 2, 0, 1), (2, 2, 1, 2)}


def test_metadata_answers_show_elr_and_last_known_elr() -> None:
    """What `topics describe` and `cluster status` print (Kafka's DescribeTopicPartitions fields)."""
    metadata = ClusterMetadata()
    records = [
        RegisterBroker(1, "i1", {"HTTP": "h:1"}, None),
        RegisterBroker(2, "i2", {"HTTP": "h:2"}, None),
        RegisterBroker(3, "i3", {"HTTP": "h:3"}, None),
        Topic("orders", "ECfE0cOGu8TNYT4w2PFq3w", {}),
        Partition("ECfE0cOGu8TNYT4w2PFq3w", 0, (1, 2, 3), (), NO_LEADER, 4, 9, (3,), (1,)),
    ]
    for offset, record in enumerate(records):
        metadata.apply_record(offset, record)
    response = metadata_response(metadata, MetadataRequest(), "HTTP", "c", 1)
    (partition,) = response.topics[0].partitions
    assert (partition.isr, partition.eligible_leader_replicas, partition.last_known_elr) == ((), (3,), (1,))
    assert partition.error_code == ErrorCode.LEADER_NOT_AVAILABLE
