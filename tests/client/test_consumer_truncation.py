"""KIP-320 against the fake cluster: a consumer whose partition's log is truncated under its position
(the fake's `truncate`: a new leader epoch, a shorter log, then new records at the same offsets)
finds it by OffsetsForLeaderEpoch before fetching again, and reports it as Kafka's consumer does:
LogTruncationError with auto_offset_reset="none", else a warning and a seek to the diverging offset.
Without the check, it would read on at its old position and silently skip the new records there.
"""

from __future__ import annotations

import logging

import pytest

from client.consumer import Consumer
from client.errors import LogTruncationError, OffsetOutOfRangeError
from client.producer import Producer
from tests.client.fake_node import FakeCluster
from wire.api import Api
from wire.log_offsets import OffsetForLeaderPartition, OffsetsForLeaderEpochRequest
from wire.topic_partition import TopicPartition

T0 = TopicPartition("t", 0)
SETTINGS = {"retry_backoff_ms": 10, "fetch_max_wait_ms": 20}


async def produce(cluster: FakeCluster, values: list[bytes]) -> None:
    async with Producer(cluster.bootstrap) as producer:
        await (await producer.send_many("t", values, partition=0))


async def poll_until(consumer: Consumer, count: int) -> list:
    records: list = []
    for _ in range(50):
        records += await consumer.poll(timeout_ms=200)
        if len(records) >= count:
            return records
    raise AssertionError(f"only {len(records)} of {count} records came")


async def read_ten_then_truncate_to_six(cluster: FakeCluster, consumer: Consumer) -> None:
    """The consumer reads offsets 0-9 in leader epoch 0; then a leader of epoch 1 keeps 0-5 and
    takes six new records, at offsets 6-11."""
    await produce(cluster, [b"old-%d" % i for i in range(6)])
    await produce(cluster, [b"old-%d" % i for i in range(6, 10)])  # its own batch: a log is cut between batches
    consumer.assign([T0])
    consumer.seek(T0, 0)
    assert len(await poll_until(consumer, 10)) == 10
    cluster.truncate("t", 0, 6)
    await produce(cluster, [b"new-%d" % i for i in range(6, 12)])


def validations(cluster: FakeCluster) -> list[OffsetForLeaderPartition]:
    return [p for _, request in cluster.requests_of(Api.OFFSETS_FOR_LEADER_EPOCH)
            if isinstance(request, OffsetsForLeaderEpochRequest) for p in request.partitions]


async def test_a_truncated_log_raises_log_truncation_error_without_a_reset_policy(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap, auto_offset_reset="none", **SETTINGS) as consumer:  # type: ignore[arg-type]
        await read_ten_then_truncate_to_six(cluster, consumer)
        for _ in range(2):  # until the application seeks
            with pytest.raises(LogTruncationError) as raised:
                await poll_until(consumer, 1)
            assert isinstance(raised.value, OffsetOutOfRangeError)
            assert (raised.value.partition, raised.value.position, raised.value.diverging_offset) == (T0, 10, 6)
            assert "t-0 at position 10" in str(raised.value)
        consumer.seek(T0, raised.value.diverging_offset)
        assert [r.value for r in await poll_until(consumer, 6)] == [b"new-%d" % i for i in range(6, 12)]
    assert validations(cluster)[0] == OffsetForLeaderPartition("t", 0, leader_epoch=0, current_leader_epoch=1)


async def test_a_truncated_log_is_read_again_from_the_diverging_offset_with_a_warning(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    async with Consumer(cluster.bootstrap, auto_offset_reset="latest", **SETTINGS) as consumer:  # type: ignore[arg-type]
        await read_ten_then_truncate_to_six(cluster, consumer)
        with caplog.at_level(logging.WARNING, logger="client.consumer"):
            records = await poll_until(consumer, 6)
    assert [(r.offset, r.value) for r in records] == [(i, b"new-%d" % i) for i in range(6, 12)]
    assert "log truncation detected on t-0 at offset 10: the leader's log diverges at offset 6" in caplog.text


async def test_a_new_leader_that_kept_the_log_lets_the_consumer_go_on(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap, auto_offset_reset="none", **SETTINGS) as consumer:  # type: ignore[arg-type]
        await produce(cluster, [b"a", b"b"])
        consumer.assign([T0])
        consumer.seek(T0, 0)
        assert len(await poll_until(consumer, 2)) == 2
        cluster.move_leader("t", 0, leader=1)
        await produce(cluster, [b"c"])
        assert [r.offset for r in await poll_until(consumer, 1)] == [2]
    assert validations(cluster) == [OffsetForLeaderPartition("t", 0, leader_epoch=0, current_leader_epoch=1)]
    assert cluster.requests_of(Api.OFFSETS_FOR_LEADER_EPOCH)[0][0] == 1  # asked of the new leader


async def test_a_committed_position_carries_its_leader_epoch_and_is_validated(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap, group_id="g", **SETTINGS) as consumer:  # type: ignore[arg-type]
        await read_ten_then_truncate_to_six(cluster, consumer)
        await consumer.commit()
    assert cluster.state.committed["g"][("t", 0)] == (10, 0)
    async with Consumer(cluster.bootstrap, group_id="g", auto_offset_reset="none",
                        **SETTINGS) as consumer:  # type: ignore[arg-type]
        consumer.assign([T0])
        with pytest.raises(LogTruncationError, match="diverges from it at offset 6"):
            await poll_until(consumer, 1)
