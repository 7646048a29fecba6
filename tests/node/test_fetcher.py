"""Replica fetchers: one per leader with all its partitions, moved on leader change, backing off
when the leader is unreachable. Method: a three-broker cluster (broker_harness) whose test apps
record the replica fetches they receive."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from storage import log_segment
from tests.node.broker_harness import Cluster, batch, started, until
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

TOPIC = "orders"
P0, P1, P2 = (TopicPartition(TOPIC, index) for index in range(3))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with started(tmp_path) as cluster:
        yield cluster



async def test_one_fetcher_per_leader_carries_all_its_partitions_in_one_request(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2), 1: (0, 2, 1), 2: (2, 1, 0)})
    fetchers = cluster.broker(1).core.fetchers.sessions
    assert {leader: set(session.backoff_until_ms) for leader, session in fetchers.items()} == {0: {P0, P1}, 2: {P2}}
    # Data on both partitions of leader 0 arrives. Broker 1's fetches are one KIP-227 session: the
    # full fetch (epoch 0) names both partitions, each later one only those whose position moved.
    await cluster.produce(0, P0, batch(b"a"), acks=1)
    await cluster.produce(0, P1, batch(b"b"), acks=1)
    follower = cluster.broker(1)
    for topic_partition in (P0, P1):
        log = follower.hosts[topic_partition].partition.log
        await until(follower, topic_partition, lambda log=log: log.log_end_offset == 1)
    from_broker_1 = [request for request in cluster.nodes[0].replica_fetches if request.replica_id == 1]
    assert from_broker_1 and from_broker_1[0].session_epoch == 0
    assert {(part.topic, part.partition) for part in from_broker_1[0].partitions} == {(TOPIC, 0), (TOPIC, 1)}
    assert len({request.session_id for request in from_broker_1[1:]}) <= 1
    for request in from_broker_1:
        assert {(part.topic, part.partition) for part in request.partitions} <= {(TOPIC, 0), (TOPIC, 1)}
        assert request.broker_epoch == follower.lifecycle.broker_epoch
        assert request.max_wait_ms == cluster.settings["replica_fetch_wait_max_ms"]
    moved = [request for request in from_broker_1[1:] if request.partitions]
    assert moved and all(part.fetch_offset == 1 for request in moved for part in request.partitions)


async def test_leader_change_moves_the_partition_to_the_new_leaders_fetcher(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2), 1: (2, 1, 0)})
    fetchers = cluster.broker(1).core.fetchers.sessions
    assert set(fetchers) == {0, 2}
    cluster.quorum.move_leader(TOPIC, 1, leader=0, isr=(0, 1, 2))
    assert {leader: set(session.backoff_until_ms) for leader, session in fetchers.items()
            if session.backoff_until_ms} == {0: {P0, P1}}
    produced = await cluster.produce(0, P1, batch(b"c"))
    assert produced.error_code == ErrorCode.NONE
    log = cluster.broker(1).hosts[P1].partition.log
    await until(cluster.broker(1), P1, lambda: log.high_watermark == 1)


async def test_unreachable_leader_backs_off_then_replication_resumes(cluster: Cluster) -> None:
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    cluster.nodes[0].cut = True
    produced = await cluster.produce(0, P0, batch(b"a"), acks=1)
    assert produced.error_code == ErrorCode.NONE
    follower = cluster.broker(1)
    session = follower.core.fetchers.sessions[0]
    log = follower.hosts[P0].partition.log
    # The cut refuses the follower's fetches: the partition waits out a backoff, still at LEO 0.
    await until(follower, P0, lambda: session.backoff_until_ms[P0] > 0)
    assert log.log_end_offset == 0
    cluster.nodes[0].cut = False
    await until(follower, P0, lambda: log.log_end_offset == 1 and log.high_watermark == 1)


async def test_a_follower_that_cannot_append_backs_off_then_catches_up(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # Broker 1's disk is full: each answer's records are refused (KAFKA_STORAGE_ERROR, the log taken
    # back). The same fetch would fail again at once, so the partition waits out the backoff like
    # a refused fetch does, instead of refetching in a loop; once the disk has room it catches up.
    await cluster.create_topic(TOPIC, {0: (0, 1, 2)})
    follower = cluster.broker(1)
    log = follower.hosts[P0].partition.log
    session = follower.core.fetchers.sessions[0]
    real_pwritev = log_segment.os.pwritev
    refused: list[int] = []

    def full_disk_for_broker_1(fd: int, buffers: Sequence[bytes | memoryview], position: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(log.directory)):
            refused.append(fd)
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return real_pwritev(fd, buffers, position)

    monkeypatch.setattr(log_segment.os, "pwritev", full_disk_for_broker_1)
    await cluster.produce(0, P0, batch(b"a"), acks=1)
    await until(follower, P0, lambda: session.backoff_until_ms[P0] > 0)
    assert refused and log.log_end_offset == 0
    monkeypatch.setattr(log_segment.os, "pwritev", real_pwritev)
    await until(follower, P0, lambda: log.log_end_offset == 1)
