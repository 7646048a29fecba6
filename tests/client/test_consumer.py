"""Consumer against the fake cluster: polling, positions, follower and nearest-replica reads,
long polls, OFFSET_OUT_OF_RANGE resets, retries after stale metadata, committed offsets.

Method: records are appended through the real Producer; the fake records every request with
the node that served it, so tests check where fetches went. Long polls are observed through
the fake's `fetch_parked` event, not by sleeping.
"""

from __future__ import annotations

import asyncio

import pytest

from client.consumer import Consumer
from client.errors import ERRORS
from client.producer import Producer
from tests.client.fake_node import FakeCluster, count_refreshes
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import FetchRequest
from wire.metadata import MetadataResponse
from wire.topic_partition import TopicPartition

T0 = TopicPartition("t", 0)


async def produce(cluster: FakeCluster, count: int, partition: int = 0, timestamp_ms: int | None = None) -> None:
    async with Producer(cluster.bootstrap) as producer:
        await (await producer.send_many("t", [b"v%d" % i for i in range(count)], partition=partition,
                                        timestamp_ms=timestamp_ms))


async def poll_until(consumer: Consumer, count: int) -> list:
    records: list = []
    for _ in range(50):
        records += await consumer.poll(timeout_ms=2000)
        if len(records) >= count:
            return records
    raise AssertionError(f"only {len(records)} of {count} records came")


def fetch_nodes(cluster: FakeCluster) -> set[int]:
    return {node for node, _ in cluster.requests_of(Api.FETCH)}


async def test_poll_reads_every_record_in_order_from_the_leader(cluster: FakeCluster) -> None:
    await produce(cluster, 20)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0)])
        records = await poll_until(consumer, 20)
        assert [r.offset for r in records] == list(range(20))
        assert [r.value for r in records] == [b"v%d" % i for i in range(20)]
        assert await consumer.position(T0) == 20
    assert fetch_nodes(cluster) == {0}


async def test_read_from_follower_fetches_from_a_replica_that_is_not_the_leader(cluster: FakeCluster) -> None:
    await produce(cluster, 5)
    async with Consumer(cluster.bootstrap, read_from="follower", auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0)])
        assert len(await poll_until(consumer, 5)) == 5
    assert fetch_nodes(cluster) <= {1, 2}
    assert fetch_nodes(cluster)


async def test_nearest_follows_the_leaders_preferred_read_replica(cluster: FakeCluster) -> None:
    cluster.rack_of.update({0: "r0", 1: "r1", 2: "r2"})
    await produce(cluster, 5)
    async with Consumer(cluster.bootstrap, read_from="nearest", client_rack="r2",
                        auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0)])
        assert len(await poll_until(consumer, 5)) == 5
    nodes = [node for node, _ in cluster.requests_of(Api.FETCH)]
    assert nodes[0] == 0
    assert set(nodes[1:]) == {2}
    first = cluster.requests_of(Api.FETCH)[0][1]
    assert isinstance(first, FetchRequest)
    assert first.rack_id == "r2"


async def test_a_poll_long_polls_until_a_record_arrives(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap, fetch_max_wait_ms=10_000) as consumer:
        consumer.assign([("t", 0)])
        assert await consumer.position(T0) == 0
        poll = asyncio.create_task(consumer.poll(timeout_ms=10_000))
        await cluster.state.fetch_parked.wait()
        assert not poll.done()
        await produce(cluster, 1)
        records = await poll
    assert [r.value for r in records] == [b"v0"]
    assert len(cluster.requests_of(Api.FETCH)) == 1  # answered by the append, not a second fetch


async def test_poll_returns_empty_after_its_timeout(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap, fetch_max_wait_ms=50) as consumer:
        consumer.assign([("t", 0)])
        assert await consumer.poll(timeout_ms=100) == []


async def test_max_records_keeps_the_rest_for_the_next_poll(cluster: FakeCluster) -> None:
    await produce(cluster, 10)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0)])
        first = await consumer.poll(timeout_ms=2000, max_records=3)
        assert [r.offset for r in first] == [0, 1, 2]
        assert await consumer.position(T0) == 3
        fetches = len(cluster.requests_of(Api.FETCH))
        rest = await consumer.poll(timeout_ms=2000, max_records=100)
        assert [r.offset for r in rest] == list(range(3, 10))
        assert len(cluster.requests_of(Api.FETCH)) == fetches  # served from the buffer


async def test_seek_reads_from_the_middle_of_a_batch(cluster: FakeCluster) -> None:
    await produce(cluster, 10)
    async with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(T0, 7)
        assert [r.offset for r in await poll_until(consumer, 3)] == [7, 8, 9]


async def test_poll_batches_yields_whole_batches_without_decoding(cluster: FakeCluster) -> None:
    await produce(cluster, 10)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0)])
        batches = await consumer.poll_batches(timeout_ms=2000)
    assert sum(batch.records_count for batch in batches) == 10
    assert [r.value for batch in batches for r in batch.records()] == [b"v%d" % i for i in range(10)]


async def test_seek_to_beginning_and_end(cluster: FakeCluster) -> None:
    await produce(cluster, 4)
    async with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([("t", 0)])
        await consumer.seek_to_end()
        assert await consumer.position(T0) == 4
        await consumer.seek_to_beginning(T0)
        assert await consumer.position(T0) == 0
        assert await consumer.end_offsets([T0]) == {T0: 4}


async def test_offsets_for_times_finds_the_first_record_at_or_after(cluster: FakeCluster) -> None:
    await produce(cluster, 3, timestamp_ms=1000)
    await produce(cluster, 3, timestamp_ms=2000)
    async with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([("t", 0)])
        found = await consumer.offsets_for_times({T0: 1500})
        assert found[T0] is not None
        assert found[T0].offset == 3
        assert (await consumer.offsets_for_times({T0: 5000}))[T0] is None


async def test_out_of_range_resets_to_earliest(cluster: FakeCluster) -> None:
    await produce(cluster, 3)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(T0, 100)
        assert [r.offset for r in await poll_until(consumer, 3)] == [0, 1, 2]


async def test_out_of_range_resets_to_latest(cluster: FakeCluster) -> None:
    await produce(cluster, 3)
    async with Consumer(cluster.bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=10) as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(T0, 100)
        assert await consumer.poll(timeout_ms=200) == []
        assert await consumer.position(T0) == 3


async def test_out_of_range_with_reset_none_raises_a_named_error(cluster: FakeCluster) -> None:
    await produce(cluster, 3)
    async with Consumer(cluster.bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([("t", 0)])
        consumer.seek(T0, 100)
        with pytest.raises(ERRORS[ErrorCode.OFFSET_OUT_OF_RANGE], match=r"seek to 0 \(earliest\) or 3"):
            await consumer.poll(timeout_ms=2000)


async def test_not_leader_on_fetch_refreshes_metadata_and_reads_from_the_new_leader(cluster: FakeCluster) -> None:
    await produce(cluster, 3)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest", retry_backoff_ms=10) as consumer:
        consumer.assign([("t", 0)])
        await consumer.position(T0)
        cluster.move_leader("t", 0, leader=1)
        cluster.inject(Api.FETCH, "t", 0, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        assert len(await poll_until(consumer, 3)) == 3
    nodes = [node for node, _ in cluster.requests_of(Api.FETCH)]
    assert nodes[0] == 0
    assert nodes[-1] == 1


async def test_a_lost_fetch_connection_is_retried(cluster: FakeCluster) -> None:
    await produce(cluster, 2)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest", retry_backoff_ms=10) as consumer:
        consumer.assign([("t", 0)])
        await consumer.position(T0)
        cluster.disconnect(Api.FETCH)
        assert len(await poll_until(consumer, 2)) == 2


async def test_a_poll_while_no_node_answers_asks_for_metadata_at_the_retry_backoff(cluster: FakeCluster) -> None:
    await produce(cluster, 2)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest", retry_backoff_ms=100) as consumer:
        consumer.assign([("t", 0)])
        assert len(await poll_until(consumer, 2)) == 2
        await cluster.stop_all()
        refreshes = count_refreshes(consumer.metadata)
        assert await consumer.poll(timeout_ms=1000) == []
    # one refresh per 100 ms backoff (a refused connection fails at once: without the backoff, ~800)
    assert 1 <= len(refreshes) <= 11


async def test_a_topic_unknown_before_a_failed_refresh_is_asked_about_again(cluster: FakeCluster) -> None:
    # The last answer said "no such topic"; then a refresh failed (nodes down), and the topic was
    # created. Within the refresh backoff the old answer must not be taken as the truth.
    async with Consumer(cluster.bootstrap, retry_backoff_ms=200) as consumer:
        consumer.metadata.add_topics(["later"])
        await consumer.metadata.refresh()
        assert consumer.metadata.topic_errors["later"] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await cluster.stop_all()
        consumer.metadata.invalidate()
        with pytest.raises(ERRORS[ErrorCode.NETWORK_EXCEPTION]):
            await consumer.metadata.refresh()
        for node_id in cluster.node_ids:
            await cluster.start_node(node_id)
        cluster.create_topic("later")
        assert not consumer.metadata.may_refresh()
        assert await consumer.end_offsets([("later", 0)]) == {TopicPartition("later", 0): 0}


async def test_one_fetch_per_node_carries_all_its_partitions(cluster: FakeCluster) -> None:
    cluster.move_leader("t", 1, leader=0)
    async with Consumer(cluster.bootstrap, fetch_max_wait_ms=10) as consumer:
        consumer.assign([("t", 0), ("t", 1)])
        await consumer.poll(timeout_ms=50)
    node, request = cluster.requests_of(Api.FETCH)[0]
    assert node == 0
    assert isinstance(request, FetchRequest)
    assert sorted(p.partition for p in request.partitions) == [0, 1]


async def test_committed_offsets_round_trip_and_start_a_new_consumer(cluster: FakeCluster) -> None:
    await produce(cluster, 5)
    async with Consumer(cluster.bootstrap, group_id="g") as consumer:
        consumer.assign([("t", 0)])
        assert await consumer.committed([T0]) == {T0: None}
        await consumer.commit({T0: 3})
        assert await consumer.committed([("t", 0)]) == {T0: 3}
    async with Consumer(cluster.bootstrap, group_id="g") as consumer:
        consumer.assign([("t", 0)])
        assert [r.offset for r in await poll_until(consumer, 2)] == [3, 4]


async def test_commit_without_a_group_says_how_to_fix_it(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap) as consumer:
        with pytest.raises(ValueError, match="group_id"):
            await consumer.commit({T0: 1})


async def test_an_unknown_topic_is_an_error_named_unknown_topic(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap, request_timeout_ms=500) as consumer:
        consumer.assign([("missing", 0)])
        with pytest.raises(ERRORS[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]):
            await consumer.poll(timeout_ms=500)


async def test_a_topic_the_answering_node_does_not_know_yet_is_asked_about_again(cluster: FakeCluster) -> None:
    # A group's leader member saw the topic; the node this member asked had not applied its creation
    # yet. The poll asks again (within request.timeout.ms) instead of failing UNKNOWN_TOPIC_OR_PARTITION.
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest", retry_backoff_ms=1) as consumer:
        refresh = consumer.metadata.refresh
        answers: list[ErrorCode] = []

        async def lagging(all_topics: bool = False) -> MetadataResponse:
            response = await refresh(all_topics)
            answers.append(consumer.metadata.topic_errors["late"])
            if len(answers) == 1:
                cluster.create_topic("late")  # the next node asked has applied it
            return response

        consumer.metadata.refresh = lagging  # type: ignore[method-assign]
        consumer.assign([("late", 0)])
        assert await consumer.position(("late", 0)) == 0
    assert answers[0] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and answers[-1] is ErrorCode.NONE


async def test_commit_and_committed_retry_while_the_coordinator_loads(cluster: FakeCluster) -> None:
    cluster.inject(Api.OFFSET_COMMIT, "g", -1, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    cluster.inject(Api.OFFSET_FETCH, "g", -1, ErrorCode.NOT_COORDINATOR)
    async with Consumer(cluster.bootstrap, group_id="g", retry_backoff_ms=1) as consumer:
        await consumer.commit({T0: 2})
        assert await consumer.committed([T0]) == {T0: 2}
    assert len(cluster.requests_of(Api.OFFSET_COMMIT)) == 2


def fetched_partitions(cluster: FakeCluster, since: int = 0) -> set[int]:
    """Partitions of `t` asked for by the fetches from the `since`-th on."""
    return {p.partition for _, request in cluster.requests_of(Api.FETCH)[since:] if isinstance(request, FetchRequest)
            for p in request.partitions}


async def test_a_paused_partition_is_not_fetched_and_keeps_its_buffered_records_until_resumed(
    cluster: FakeCluster,
) -> None:
    T1 = TopicPartition("t", 1)
    await produce(cluster, 5)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=20) as consumer:
        consumer.assign([T0, T1])
        assert [r.offset for r in await consumer.poll(timeout_ms=2000, max_records=2)] == [0, 1]
        consumer.pause([T0])  # offsets 2-4 are buffered
        assert consumer.paused() == {T0}
        await produce(cluster, 3, partition=1)
        assert {(r.partition, r.offset) for r in await poll_until(consumer, 3)} == {(1, 0), (1, 1), (1, 2)}
        consumer.resume([T0])
        fetches = len(cluster.requests_of(Api.FETCH))
        assert [r.offset for r in await consumer.poll(timeout_ms=2000)] == [2, 3, 4]
        assert fetched_partitions(cluster, fetches) <= {1, 2}  # served from the buffer kept while paused
        consumer.pause([("t", 0)])  # nothing buffered now: paused, it is not fetched at all
        fetches = len(cluster.requests_of(Api.FETCH))
        await produce(cluster, 2)
        await produce(cluster, 2, partition=1)
        assert {r.partition for r in await poll_until(consumer, 2)} == {1}
        assert 0 not in fetched_partitions(cluster, fetches)
        assert await consumer.position(T0) == 5


async def test_pausing_or_resuming_a_partition_not_assigned_is_refused(cluster: FakeCluster) -> None:
    async with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([T0])
        with pytest.raises(ValueError, match="t-1 is not assigned"):
            consumer.pause([T0, ("t", 1)])
        with pytest.raises(ValueError, match="t-1 is not assigned"):
            consumer.resume([("t", 1)])
        assert consumer.paused() == set()
        consumer.pause([T0])
        consumer.assign([("t", 1)])
        assert consumer.paused() == set()


async def test_async_for_yields_the_records_one_by_one_and_ends_when_the_consumer_is_closed(
    cluster: FakeCluster,
) -> None:
    await produce(cluster, 5)
    consumer = Consumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=10_000)
    consumer.assign([T0])
    seen: list[int] = []
    all_seen = asyncio.Event()

    async def iterate() -> None:
        async for record in consumer:
            seen.append(record.offset)
            if len(seen) == 5:
                all_seen.set()

    iteration = asyncio.create_task(iterate())
    await all_seen.wait()
    await cluster.state.fetch_parked.wait()  # the iteration waits in a long poll for more
    await consumer.close()
    await asyncio.wait_for(iteration, 5)  # ended without an error
    assert seen == [0, 1, 2, 3, 4]
    await produce(cluster, 1)  # answers the fake's parked fetch, which would hold up its shutdown


async def test_records_fetched_but_not_yet_iterated_are_not_consumed(cluster: FakeCluster) -> None:
    await produce(cluster, 10)
    async with Consumer(cluster.bootstrap, group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.assign([T0])
        offsets = []
        async for record in consumer:  # the poll underneath fetched all ten
            offsets.append(record.offset)
            if len(offsets) == 3:
                break
        assert await consumer.position(T0) == 3
        await consumer.commit()
        assert await consumer.committed([T0]) == {T0: 3}
        async for record in consumer:
            offsets.append(record.offset)
            if len(offsets) == 10:
                break
        assert offsets == list(range(10))
