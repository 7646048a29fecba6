"""The idempotent producer against three real node processes: producer ids from the controller,
batches numbered per partition, and a produce retried after its answer was lost, then again at the
new leader after a kill -9 of the old one, is in the log once, at its first offsets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from client.admin import Admin, NewTopic
from client.connection import Connections, NodeUnavailableError
from client.producer import Producer
from node.dev import DevCluster
from storage.records import build_batch, iter_headers
from tests.node.cluster_harness import describe, eventually, read_replica, start_cluster, stopped
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchRequest, FetchResponse
from wire.produce import ProducePartition, ProduceRequest, ProduceResponse
from wire.producer_ids import InitProducerIdRequest, InitProducerIdResponse

TOPIC = "once"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("idempotence")))


async def create_topic(cluster: DevCluster, name: str) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(name, 1, 3, {"min.insync.replicas": "2"})])

    async def full_isr() -> bool:  # the node asked may not know the topic yet
        states = [p for p in (await describe(cluster.bootstrap)).partitions if p.info.topic == name]
        return len(states) == 1 and states[0].info.leader >= 0 and len(states[0].info.isr) == 3

    await eventually(full_isr, f"{name} has a leader and a full ISR")


async def leader_of(cluster: DevCluster, name: str) -> int:
    """The partition's leader as the node asked knows it; -1 when it knows none (or not the topic)."""
    states = [p for p in (await describe(cluster.bootstrap)).partitions if p.info.topic == name]
    return states[0].info.leader if states else -1


async def test_our_producer_gets_an_id_and_numbers_its_batches(cluster: DevCluster) -> None:
    await create_topic(cluster, "numbered")
    async with Producer(cluster.bootstrap, linger_ms=0, batch_size=200) as producer:
        assert producer.producer_id >= 0
        for n in range(20):
            await (await producer.send("numbered", b"value-%03d" % n, partition=0))
    connections = Connections()
    try:
        leader = await leader_of(cluster, "numbered")
        response = await connections.call(cluster.nodes[leader].address, Api.FETCH, FetchRequest(
            (FetchPartition("numbered", 0, 0, 1 << 20),), max_wait_ms=0, min_bytes=0), FetchResponse, 5000)
    finally:
        await connections.close()
    headers = [header for _, header in iter_headers(response.partitions[0].records)]
    assert {header.producer_id for header in headers} == {producer.producer_id}
    sequences = [header.base_sequence for header in headers]
    assert sequences == [header.base_offset for header in headers], "each batch's first sequence is its record's"


async def test_batches_in_flight_together_land_in_send_order(cluster: DevCluster) -> None:
    """Up to five one-record batches of the partition wait in the leader's acks=all purgatory at once
    (each goes to the leader as soon as it is drained); the log holds them in send order."""
    await create_topic(cluster, "pipelined")
    values = [b"value-%03d" % n for n in range(100)]
    async with Producer(cluster.bootstrap, linger_ms=0, batch_size=100) as producer:
        futures = [await producer.send("pipelined", value, partition=0) for value in values]
        offsets = [(await future).offset for future in futures]
    assert offsets == list(range(len(values)))
    records, _ = await read_replica(cluster.nodes[await leader_of(cluster, "pipelined")].address, "pipelined", 0)
    assert [value for _, value in records] == values


async def test_a_produce_retried_across_a_leader_kill_is_in_the_log_once(cluster: DevCluster) -> None:
    await create_topic(cluster, TOPIC)
    connections = Connections()
    try:
        init = await connections.call(cluster.bootstrap.split(",")[0], Api.INIT_PRODUCER_ID, InitProducerIdRequest(),
                                      InitProducerIdResponse, 10_000)
        assert init.error_code == ErrorCode.NONE, init
        values = [b"once-%d" % n for n in range(5)]
        batch = build_batch([(None, value) for value in values], producer_id=init.producer_id,
                            producer_epoch=init.producer_epoch, base_sequence=0)
        request = ProduceRequest(-1, 10_000, (ProducePartition(TOPIC, 0, batch),))

        async def produce_at(node_id: int) -> ProduceResponse:
            return await connections.call(cluster.nodes[node_id].address, Api.PRODUCE, request, ProduceResponse,
                                          15_000)

        old_leader = await leader_of(cluster, TOPIC)
        first = (await produce_at(old_leader)).partitions[0]
        assert first.error_code == ErrorCode.NONE, first
        again = (await produce_at(old_leader)).partitions[0]  # its answer was lost: sent again
        assert (again.error_code, again.base_offset) == (ErrorCode.NONE, first.base_offset)

        async def every_replica_has_it() -> bool:
            for node in cluster.nodes.values():
                records, _ = await read_replica(node.address, TOPIC, 0)
                if [value for _, value in records] != values:
                    return False
            return True

        await eventually(every_replica_has_it, "every replica holds the batch once")
        cluster.kill_node(old_leader)

        new_leaders: list[int] = []

        async def another_leader_takes_it_back() -> bool:
            leader = await leader_of(cluster, TOPIC)
            if leader in (old_leader, -1):
                return False
            new_leaders.append(leader)
            try:
                answer = (await produce_at(leader)).partitions[0]
            except NodeUnavailableError:
                return False
            if answer.error_code.retriable:
                return False
            assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, first.base_offset), answer
            return True

        await eventually(another_leader_takes_it_back, "the new leader answers the retry with the first offsets")
        new_leader = new_leaders[-1]
        records, _ = await read_replica(cluster.nodes[new_leader].address, TOPIC, 0)
        assert [value for _, value in records] == values, "the retried batch is in the log once"
        following = build_batch([(None, b"then")], producer_id=init.producer_id, producer_epoch=0, base_sequence=5)
        answer = await connections.call(cluster.nodes[new_leader].address, Api.PRODUCE, ProduceRequest(
            -1, 10_000, (ProducePartition(TOPIC, 0, following),)), ProduceResponse, 15_000)
        assert (answer.partitions[0].error_code, answer.partitions[0].base_offset) == (ErrorCode.NONE, 5)
    finally:
        await connections.close()
        cluster.start_node(old_leader)
