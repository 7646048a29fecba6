"""Broker lifecycle: registration and unfencing, re-registration after a stale epoch, controlled
and uncontrolled stops, and a restart on the same directory that catches up and rejoins the ISR.
Method: the three-broker cluster of broker_harness; waits are on metadata or partition changes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from controller.metadata import ClusterMetadata
from controller.metadata_records import RegisterBroker
from node.lifecycle import BrokerState
from storage.log_manager import CLEAN_SHUTDOWN_FILE
from tests.node.broker_harness import Cluster, batch, log_bytes, started, until
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with started(tmp_path) as cluster:
        yield cluster



async def test_brokers_register_with_endpoints_and_rack_and_are_unfenced(cluster: Cluster) -> None:
    for node in cluster.nodes:
        registration = cluster.quorum.metadata.broker(node.broker_id)
        assert registration is not None
        broker = cluster.broker(node.broker_id)
        assert registration.incarnation_id == broker.lifecycle.incarnation_id
        assert registration.broker_epoch == broker.lifecycle.broker_epoch
        assert dict(registration.endpoints) == {"HTTP": node.address}
        assert registration.rack == f"rack-{node.broker_id}"
        assert registration.active
        assert broker.is_unfenced
        assert broker.lifecycle.state == BrokerState.RUNNING


async def test_stale_broker_epoch_makes_the_broker_register_again(cluster: Cluster) -> None:
    broker = cluster.broker(1)
    old_epoch = broker.lifecycle.broker_epoch
    # Another registration (as after a controller failover that replayed an old request) moves
    # the controller's epoch for broker 1 on: its next heartbeat is STALE_BROKER_EPOCH.
    cluster.quorum.write(RegisterBroker(1, "someone-else", {"HTTP": cluster.nodes[1].address}, None))

    def registered_again(metadata: ClusterMetadata) -> bool:
        registration = metadata.broker(1)
        return (registration is not None and registration.incarnation_id == broker.lifecycle.incarnation_id
                and registration.active)

    await cluster.quorum.until(registered_again)
    assert broker.lifecycle.broker_epoch > old_epoch


async def test_restart_after_controlled_stop_recovers_cleanly_catches_up_and_rejoins_the_isr(
    cluster: Cluster,
) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    assert (await cluster.produce(0, TP, batch(b"a", b"b"))).error_code == ErrorCode.NONE
    await cluster.broker(2).stop(controlled=True)
    assert (cluster.nodes[2].directory / CLEAN_SHUTDOWN_FILE).exists()
    assert cluster.quorum.partition(TOPIC, 0).isr == (0, 1)
    assert (await cluster.produce(0, TP, batch(b"c"))).error_code == ErrorCode.NONE
    restarted = await cluster.restart(2)
    assert restarted.log_manager.recovered == []  # a clean shutdown: no recovery pass
    log = restarted.hosts[TP].partition.log
    await until(restarted, TP, lambda: log.log_end_offset == 3 and log.high_watermark == 3)
    assert log_bytes(restarted, TP) == log_bytes(cluster.broker(0), TP)
    await cluster.quorum.until(lambda metadata: 2 in cluster.quorum.partition(TOPIC, 0).isr)


async def test_uncontrolled_stop_still_flushes_and_writes_the_clean_shutdown_marker(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (1, 0, 2)})
    assert (await cluster.produce(1, TP, batch(b"a"))).error_code == ErrorCode.NONE
    broker = cluster.broker(1)
    log = broker.hosts[TP].partition.log
    await broker.stop(controlled=False)
    assert (cluster.nodes[1].directory / CLEAN_SHUTDOWN_FILE).exists()
    assert log.recovery_point == 1
    assert broker.hosts == {}
    # A request still reaching the stopped broker is refused with the leader the metadata names.
    answer = await cluster.fetch(1, TP, 0)
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert answer.current_leader is not None
