"""Producer against the fake cluster: offsets, partitioning, retries with metadata refresh,
lost connections, named errors, delivery timeout, flush.

Method: a FakeCluster of 3 nodes on loopback; faults are queued in the fake (injected error
codes, dropped connections, a moved leader) before the send that meets them; tests await the
producer's futures, never sleep.
"""

from __future__ import annotations

import asyncio

import pytest

from client.errors import ERRORS, TributaryError
from client.partitioner import partition_for_key
from client.producer import Producer
from storage.records import decode_records, iter_headers
from tests.client.fake_node import FakeCluster, count_refreshes
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.metadata import MetadataResponse
from wire.produce import ProduceRequest


def values_in(cluster: FakeCluster, topic: str, partition: int) -> list[bytes | None]:
    log = cluster.log(topic, partition)
    data = log.read(log.log_start_offset, 1 << 30).records
    values = []
    position = 0
    while position < len(data):
        records = decode_records(data, position)
        values.extend(record.value for record in records)
        position += int.from_bytes(data[position + 8 : position + 12], "big") + 12
    return values


async def test_sends_resolve_to_consecutive_offsets(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, linger_ms=0) as producer:
        futures = [await producer.send("t", b"v%d" % i, partition=1) for i in range(5)]
        offsets = [(await future).offset for future in futures]
    assert offsets == [0, 1, 2, 3, 4]
    assert values_in(cluster, "t", 1) == [b"v0", b"v1", b"v2", b"v3", b"v4"]


async def test_keyed_records_land_on_kafkas_partition(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap) as producer:
        for key in (b"21", b"foobar", b"abc", b"user-7"):
            metadata = await producer.send_and_wait("t", b"x", key=key)
            assert metadata.partition == partition_for_key(key, 3)


async def test_null_keys_fill_one_partition_per_batch(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, batch_size=1000, linger_ms=1000) as producer:
        futures = [await producer.send("t", b"x" * 100) for _ in range(40)]
        await producer.flush()
        partitions = [(await future).partition for future in futures]
    runs = [p for i, p in enumerate(partitions) if i == 0 or partitions[i - 1] != p]
    assert len(runs) < 10  # sticky: a run per batch of ~7 records, not a partition per record
    assert len(set(partitions)) > 1  # and it moves on when a batch is full


async def test_send_many_resolves_to_runs_covering_every_record(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, batch_size=2000) as producer:
        future = await producer.send_many("t", [b"r%d" % i for i in range(100)], partition=2)
        runs = await future
    assert sum(run.record_count for run in runs) == 100
    assert [run.base_offset for run in runs] == sorted(run.base_offset for run in runs)
    assert values_in(cluster, "t", 2) == [b"r%d" % i for i in range(100)]


async def test_not_leader_refreshes_metadata_and_retries_on_the_new_leader(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, retry_backoff_ms=10) as producer:
        cluster.move_leader("t", 0, leader=2)  # the producer's metadata still says node 0
        metadata = await producer.send_and_wait("t", b"moved", partition=0)
    assert metadata.offset == 0
    produce_nodes = [node for node, _ in cluster.requests_of(Api.PRODUCE)]
    assert produce_nodes == [0, 2]
    assert len(cluster.requests_of(Api.METADATA)) >= 2


async def test_injected_retriable_errors_are_retried_until_success(cluster: FakeCluster) -> None:
    cluster.inject(Api.PRODUCE, "t", 0, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS)
    async with Producer(cluster.bootstrap, retry_backoff_ms=10) as producer:
        metadata = await producer.send_and_wait("t", b"once", partition=0)
    assert metadata.offset == 0
    assert values_in(cluster, "t", 0) == [b"once"]


async def test_a_lost_connection_is_retried(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, retry_backoff_ms=10) as producer:
        cluster.disconnect(Api.PRODUCE)
        metadata = await producer.send_and_wait("t", b"again", partition=0)
    assert metadata.offset == 0
    assert values_in(cluster, "t", 0) == [b"again"]


@pytest.mark.parametrize(("enable_idempotence", "copies"), [(None, 1), (False, 3)])
async def test_a_produce_whose_answers_were_lost_is_in_the_log_once_when_idempotent(
        cluster: FakeCluster, enable_idempotence: bool | None, copies: int) -> None:
    """Idempotence is on by default (acks=all): the retries of a written batch get its offsets back."""
    async with Producer(cluster.bootstrap, retry_backoff_ms=10, enable_idempotence=enable_idempotence) as producer:
        cluster.lose_answers(Api.PRODUCE, 2)
        metadata = await producer.send_and_wait("t", b"written", partition=0)
        assert (await producer.send_and_wait("t", b"next", partition=0)).offset == copies
    assert metadata.offset == copies - 1, "idempotent: the first write's offset; else the last copy's"
    assert values_in(cluster, "t", 0) == [b"written"] * copies + [b"next"]


ONE_RECORD_BATCHES = {"batch_size": 100, "linger_ms": 0, "retry_backoff_ms": 10}  # a 64-byte value fills a batch
SENDS = 12


def epochs_of_batches(cluster: FakeCluster, topic: str, partition: int) -> list[int]:
    """The producer epoch of each batch in the log, in log order, checking that each epoch's
    sequences run from 0 with no gap."""
    log = cluster.log(topic, partition)
    epochs, next_sequence = [], {}
    for _, header in iter_headers(log.read(log.log_start_offset, 1 << 30).records):
        epoch = header.producer_epoch
        assert header.base_sequence == next_sequence.get(epoch, 0), (epoch, header.base_sequence, next_sequence)
        next_sequence[epoch] = header.base_sequence + header.records_count
        epochs.append(epoch)
    return epochs


async def send_held(cluster: FakeCluster, producer: Producer) -> list[asyncio.Future]:
    """Send SENDS one-record batches to t-0, all but the first while the node holds its answers (as
    acks=all waits in the purgatory): five go one by one, the rest queue behind them (and go as one
    merged batch) until the answers are released. (The first batch of a partition goes alone: a
    leader with no state for the producer would take any sequence.)"""
    futures = [await producer.send("t", b"00" + b"." * 62, partition=0)]
    await futures[0]
    cluster.hold_answers(Api.PRODUCE)
    try:
        for n in range(1, SENDS):
            futures.append(await producer.send("t", b"%02d" % n + b"." * 62, partition=0))
            if n <= 5:
                await asyncio.wait_for(cluster.wait_held(Api.PRODUCE, n), 10)
    finally:
        cluster.release_answers(Api.PRODUCE)
    return futures


def records_per_request(cluster: FakeCluster) -> list[int]:
    return [header.records_count for _, request in cluster.requests_of(Api.PRODUCE)
            for part in request.partitions for _, header in iter_headers(part.records)]  # type: ignore[attr-defined]


async def test_five_batches_of_a_partition_are_in_flight_at_once(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, **ONE_RECORD_BATCHES) as producer:
        futures = await send_held(cluster, producer)
        offsets = [(await future).offset for future in futures]
    assert cluster.state.most_held[Api.PRODUCE] == 5
    assert offsets == list(range(SENDS))
    assert epochs_of_batches(cluster, "t", 0) == [0] * 7
    assert records_per_request(cluster) == [1] * 6 + [SENDS - 6], "the backlog went as one batch"
    assert producer.accumulator.buffered_bytes == 0, "buffer.memory is given back whole after a merge"


@pytest.mark.parametrize("fault", ["retriable error", "lost answer"])
async def test_a_middle_batch_in_flight_failing_is_retried_in_order_and_written_once(
        cluster: FakeCluster, fault: str) -> None:
    """The middle one of five batches in flight fails; the two behind it are refused as out of order by
    the log and retried after it, in sequence: the log holds every record once, in send order."""
    if fault == "retriable error":
        cluster.fail_sequence("t", 0, 3, ErrorCode.NOT_ENOUGH_REPLICAS)
    else:
        cluster.lose_answer_of_sequence("t", 0, 3)
    async with Producer(cluster.bootstrap, **ONE_RECORD_BATCHES) as producer:
        futures = await send_held(cluster, producer)
        offsets = [(await future).offset for future in futures]
    assert offsets == list(range(SENDS))
    assert values_in(cluster, "t", 0) == [b"%02d" % n + b"." * 62 for n in range(SENDS)]
    assert set(epochs_of_batches(cluster, "t", 0)) == {0}
    assert len(cluster.requests_of(Api.PRODUCE)) > 7, "the fault was met (7 requests without it)"


@pytest.mark.parametrize(("codes", "settings"), [
    ((ErrorCode.MESSAGE_TOO_LARGE,), {}),
    ((ErrorCode.NOT_ENOUGH_REPLICAS,) * 3, {"retries": 2}),
])
async def test_a_batch_lost_for_good_starts_a_new_epoch_for_the_batches_behind_it(
        cluster: FakeCluster, codes: tuple[ErrorCode, ...], settings: dict) -> None:
    """KIP-360: the batches in flight behind a failed one are numbered again under the partition's
    next epoch, from sequence 0, and written in send order; the failed one is not in the log."""
    cluster.fail_sequence("t", 0, 3, *codes)
    async with Producer(cluster.bootstrap, **ONE_RECORD_BATCHES, **settings) as producer:
        futures = await send_held(cluster, producer)
        with pytest.raises(ERRORS[codes[0]]):
            await futures[3]
        offsets = [(await future).offset for n, future in enumerate(futures) if n != 3]
    assert offsets == list(range(SENDS - 1))
    assert values_in(cluster, "t", 0) == [b"%02d" % n + b"." * 62 for n in range(SENDS) if n != 3]
    assert epochs_of_batches(cluster, "t", 0) == [0, 0, 0, 1, 1, 1], "the 4th, 5th and the merged rest renumbered"


async def test_a_merged_batch_over_max_message_bytes_is_sent_again_as_its_parts(cluster: FakeCluster) -> None:
    cluster.fail_sequence("t", 0, 6, ErrorCode.MESSAGE_TOO_LARGE)  # the merged backlog
    async with Producer(cluster.bootstrap, **ONE_RECORD_BATCHES) as producer:
        futures = await send_held(cluster, producer)
        offsets = [(await future).offset for future in futures]
    assert offsets == list(range(SENDS))
    assert epochs_of_batches(cluster, "t", 0) == [0] * SENDS
    assert records_per_request(cluster)[-SENDS + 5:] == [SENDS - 6] + [1] * (SENDS - 6)


def test_idempotence_needs_acks_all() -> None:
    with pytest.raises(ValueError, match="acks=all"):
        Producer("localhost:1", acks=1, enable_idempotence=True)
    assert not Producer("localhost:1", acks=1).idempotent and Producer("localhost:1").idempotent


def test_idempotence_allows_at_most_five_requests_in_flight() -> None:
    """Kafka's rule: brokers keep a producer's last five batches, so a retry must be among them."""
    with pytest.raises(ValueError, match="max_in_flight_requests_per_connection=6"):
        Producer("localhost:1", max_in_flight_requests_per_connection=6, enable_idempotence=True)
    assert not Producer("localhost:1", max_in_flight_requests_per_connection=6).idempotent


async def test_a_non_retriable_error_raises_its_named_exception(cluster: FakeCluster) -> None:
    cluster.inject(Api.PRODUCE, "t", 0, ErrorCode.MESSAGE_TOO_LARGE)
    async with Producer(cluster.bootstrap) as producer:
        future = await producer.send("t", b"big", partition=0)
        with pytest.raises(ERRORS[ErrorCode.MESSAGE_TOO_LARGE]) as raised:
            await future
    assert raised.value.code is ErrorCode.MESSAGE_TOO_LARGE
    assert type(raised.value).__name__ == "MessageTooLargeError"


async def test_retries_run_out(cluster: FakeCluster) -> None:
    cluster.inject(Api.PRODUCE, "t", 0, *[ErrorCode.NOT_ENOUGH_REPLICAS] * 3)
    async with Producer(cluster.bootstrap, retries=1, retry_backoff_ms=1) as producer:
        future = await producer.send("t", b"x", partition=0)
        with pytest.raises(ERRORS[ErrorCode.NOT_ENOUGH_REPLICAS]):
            await future
    assert len(cluster.requests_of(Api.PRODUCE)) == 2


async def test_delivery_timeout_fails_a_batch_that_keeps_failing(cluster: FakeCluster) -> None:
    cluster.inject(Api.PRODUCE, "t", 0, *[ErrorCode.LEADER_NOT_AVAILABLE] * 1000)
    async with Producer(cluster.bootstrap, delivery_timeout_ms=200, retry_backoff_ms=20) as producer:
        future = await producer.send("t", b"x", partition=0)
        with pytest.raises(TributaryError) as raised:
            await future
    assert raised.value.retriable


async def test_while_no_node_answers_metadata_is_asked_for_at_the_retry_backoff(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, retry_backoff_ms=100, delivery_timeout_ms=1000) as producer:
        await producer.send_and_wait("t", b"before", partition=0)
        await cluster.stop_all()
        refreshes = count_refreshes(producer.metadata)
        with pytest.raises(ERRORS[ErrorCode.REQUEST_TIMED_OUT]):
            await producer.send_and_wait("t", b"after", partition=0)
    # one refresh per 100 ms backoff within the 1 s delivery timeout (without it, one per linger: ~160)
    assert 1 <= len(refreshes) <= 11


async def test_an_unknown_topic_is_an_error_named_unknown_topic_after_max_block_ms(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, retry_backoff_ms=50, max_block_ms=300) as producer:
        refreshes = count_refreshes(producer.metadata)
        with pytest.raises(ERRORS[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], match="tributary topics create"):
            await producer.send("missing", b"x")
    assert 2 <= len(refreshes) <= 8  # asked again at the backoff until max.block.ms, then given up


async def test_a_topic_the_broker_learns_of_later_is_waited_for(cluster: FakeCluster) -> None:
    """A topic just created may be unknown to the broker asked (it has not applied the creation
    yet): Kafka's producer waits for it, up to max.block.ms."""
    async with Producer(cluster.bootstrap, retry_backoff_ms=10) as producer:
        refresh = producer.metadata.refresh
        refreshes: list[bool] = []

        async def refresh_then_create(all_topics: bool = False) -> MetadataResponse:
            refreshes.append(all_topics)
            if len(refreshes) == 3:
                cluster.create_topic("late", partitions=2)
            return await refresh(all_topics)

        producer.metadata.refresh = refresh_then_create  # type: ignore[method-assign]
        metadata = await producer.send_and_wait("late", b"x", partition=1)
    assert (metadata.partition, metadata.offset, len(refreshes)) == (1, 0, 3)


async def test_flush_sends_without_waiting_for_linger(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap, linger_ms=60_000) as producer:
        future = await producer.send("t", b"now", partition=0)
        await producer.flush()
        assert future.done()


async def test_one_request_per_leader_carries_all_its_partitions(cluster: FakeCluster) -> None:
    cluster.move_leader("t", 1, leader=0)
    async with Producer(cluster.bootstrap, linger_ms=60_000) as producer:
        for partition in (0, 1):
            await producer.send("t", b"x", partition=partition)
        await producer.flush()
    ((node, request),) = cluster.requests_of(Api.PRODUCE)
    assert node == 0
    assert isinstance(request, ProduceRequest)
    assert sorted(p.partition for p in request.partitions) == [0, 1]
    assert request.acks == -1


async def test_no_reachable_node_fails_start_with_network_exception(cluster: FakeCluster) -> None:
    with pytest.raises(ERRORS[ErrorCode.NETWORK_EXCEPTION], match="check that the cluster is running"):
        await Producer("127.0.0.1:1", request_timeout_ms=1000).start()


async def test_any_reachable_bootstrap_address_will_do(cluster: FakeCluster) -> None:
    async with Producer(f"127.0.0.1:1,{cluster.bootstrap}") as producer:
        assert (await producer.send_and_wait("t", b"x", partition=0)).offset == 0


async def test_a_value_the_codec_refuses_fails_its_future_and_not_the_producer(cluster: FakeCluster) -> None:
    async with Producer(cluster.bootstrap) as producer:
        bad = await producer.send_many("t", ["not bytes"], partition=0)  # type: ignore[list-item]
        with pytest.raises(ERRORS[ErrorCode.INVALID_RECORD]):
            await bad
        assert (await producer.send_and_wait("t", b"fine", partition=0)).offset == 0


async def test_a_producer_not_started_refuses_records_instead_of_queueing_them_forever(cluster: FakeCluster) -> None:
    producer = Producer(cluster.bootstrap)
    with pytest.raises(RuntimeError, match="not started"):
        await producer.send("t", b"v")
    await producer.close()
    with pytest.raises(RuntimeError, match="closed"):
        await producer.send("t", b"v")
