"""Bad input to every route of a real node process: a 4xx with a named Kafka error and a message,
the node stays up, and no log changes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import msgpack
import pytest

from client.admin import Admin, NewTopic
from client.producer import Producer
from node.dev import DevCluster, healthy
from storage.records import Compression, build_batch
from tests.node.cluster_harness import describe, start_cluster, stopped
from wire.api import Api, ErrorResponse
from wire.codec import pack, unpack
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchRequest, FetchResponse
from wire.metadata import MetadataRequest, MetadataResponse
from wire.produce import ProducePartition, ProducePartitionResponse, ProduceRequest, ProduceResponse
from wire.stream import STREAM_PATH, decode_response, encode_request

MAX_BYTES = 65536
MAX_PARTITIONS = 100
REQUEST_TIMEOUT_MS = 5000
TOPIC = "guarded"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("bad-input"), 1, **{
        "socket.request.max.bytes": str(MAX_BYTES), "max.request.partitions": str(MAX_PARTITIONS),
        "request.timeout.ms": str(REQUEST_TIMEOUT_MS)}))


async def post(cluster: DevCluster, path: str, body: bytes) -> tuple[int, ErrorResponse | bytes]:
    async with aiohttp.ClientSession() as session, session.post(f"http://{cluster.nodes[1].address}{path}",
                                                                 data=body) as response:
        data = await response.read()
        if response.status == 200:
            return 200, data
        return response.status, unpack(ErrorResponse, data)


async def log_end_offset(cluster: DevCluster) -> int:
    description = await describe(cluster.bootstrap)
    (state,) = [p for p in description.partitions if p.info.topic == TOPIC]
    return state.replica_states[1].log_end_offset


async def create_topic(cluster: DevCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, 1, 1)])
    async with Producer(cluster.bootstrap) as producer:
        await (await producer.send(TOPIC, b"before"))


@pytest.fixture(scope="module")
def topic(node: DevCluster) -> str:
    asyncio.run(create_topic(node))
    return TOPIC


def malformed_bodies(api: Api) -> dict[str, bytes]:
    return {
        "not msgpack": b"\xc1\xc1\xc1",
        "empty body": b"",
        "an array, not a map": pack([1, 2, 3]),
        "unknown field": pack({"surprise": 1}),
        "wrong type everywhere": pack({"partitions": "lots", "topics": 7, "type": 3, "group_id": 5,
                                       "resources": None, "acks": "all"}),
        "integer beyond 64 bits": msgpack.packb({"timeout_ms": 2**64 - 1}),
        "nested garbage": pack({"partitions": [{"topic": None}], "topics": [[1]]}),
        "a map keyed by a map": b"\x81\x80\x00",  # found by fuzzing: msgpack raised TypeError
    }


@pytest.mark.parametrize("api", list(Api), ids=lambda api: api.value)
async def test_every_route_refuses_malformed_bodies_with_a_named_error(node: DevCluster, topic: str, api: Api) -> None:
    before = await log_end_offset(node)
    for what, body in malformed_bodies(api).items():
        status, answer = await post(node, api.path, body)
        assert status == 400, (api, what, status)
        assert isinstance(answer, ErrorResponse)
        assert answer.error_code == ErrorCode.INVALID_REQUEST and answer.error == "INVALID_REQUEST", (api, what)
        assert answer.message.startswith(api.value), answer.message
    assert healthy(node.nodes[1].address)
    assert await log_end_offset(node) == before


@pytest.mark.parametrize(
    ("api", "field", "value"),
    [(Api.PRODUCE, "timeout_ms", -1), (Api.FETCH, "max_wait_ms", -5), (Api.FETCH, "max_bytes", -1),
     (Api.PRODUCE, "partition", -3), (Api.FETCH, "partition", -3)],
)
async def test_negative_counts_and_durations_are_refused(
    node: DevCluster, topic: str, api: Api, field: str, value: int
) -> None:
    partition = {"topic": TOPIC, "partition": 0, "records": b""} if api is Api.PRODUCE else {
        "topic": TOPIC, "partition": 0, "fetch_offset": 0}
    body = {"acks": -1, "timeout_ms": 1000} if api is Api.PRODUCE else {}
    if field == "partition":
        partition[field] = value
    else:
        body[field] = value
    status, answer = await post(node, api.path, pack({**body, "partitions": [partition]}))
    assert status == 400 and isinstance(answer, ErrorResponse), (api, field, status)
    assert field in answer.message and "0 or more" in answer.message


async def test_a_body_over_socket_request_max_bytes_is_refused_before_it_is_read(node: DevCluster, topic: str) -> None:
    before = await log_end_offset(node)
    big = pack(ProduceRequest(-1, 1000, (ProducePartition(TOPIC, 0, build_batch([(None, b"x" * MAX_BYTES)])),)))
    status, answer = await post(node, Api.PRODUCE.path, big)
    assert status == 413 and isinstance(answer, ErrorResponse)
    assert "socket.request.max.bytes" in answer.message
    assert await log_end_offset(node) == before
    assert healthy(node.nodes[1].address)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("flip a byte inside the CRC's range", ErrorCode.CORRUPT_MESSAGE),
        ("truncate the batch", ErrorCode.CORRUPT_MESSAGE),
        ("not a batch at all", ErrorCode.CORRUPT_MESSAGE),
    ],
)
async def test_corrupt_batches_are_refused_per_partition_and_change_nothing(
    node: DevCluster, topic: str, damage: str, expected: ErrorCode
) -> None:
    batch = bytearray(build_batch([(b"k", b"v" * 50)]))
    if damage.startswith("flip"):
        batch[-5] ^= 0xFF
    elif damage.startswith("truncate"):
        batch = batch[:-7]
    else:
        batch = bytearray(b"hello, tributary" * 5)
    before = await log_end_offset(node)
    status, answer = await post(node, Api.PRODUCE.path,
                                pack(ProduceRequest(-1, 1000, (ProducePartition(TOPIC, 0, bytes(batch)),))))
    assert status == 200
    assert isinstance(answer, bytes)
    (result,) = unpack(ProduceResponse, answer).partitions
    assert isinstance(result, ProducePartitionResponse)
    assert result.error_code in (expected, ErrorCode.INVALID_RECORD), result
    assert result.error_message
    assert await log_end_offset(node) == before


async def test_a_list_longer_than_max_request_partitions_is_refused_before_it_is_built(node: DevCluster,
                                                                                     topic: str) -> None:
    parts = tuple(FetchPartition(TOPIC, index, 0) for index in range(MAX_PARTITIONS + 1))
    status, answer = await post(node, Api.FETCH.path, pack(FetchRequest(parts, max_wait_ms=0)))
    assert status == 400 and isinstance(answer, ErrorResponse)
    assert answer.error_code == ErrorCode.INVALID_REQUEST and "max.request.partitions" in answer.message
    status, answer = await post(node, Api.FETCH.path, pack(FetchRequest(parts[:MAX_PARTITIONS], max_wait_ms=0)))
    assert status == 200


async def test_a_long_poll_waits_at_most_the_request_timeout(node: DevCluster, topic: str) -> None:
    """A fetch asking to wait ten days at the log end holds a parked-fetch slot only as long as a
    client could wait for the answer: request.timeout.ms."""
    end = await log_end_offset(node)
    request = FetchRequest((FetchPartition(TOPIC, 0, end),), max_wait_ms=10 * 24 * 3600 * 1000, min_bytes=1)
    status, answer = await asyncio.wait_for(post(node, Api.FETCH.path, pack(request)),
                                            timeout=REQUEST_TIMEOUT_MS / 1000 + 25)
    assert status == 200 and isinstance(answer, bytes)
    (part,) = unpack(FetchResponse, answer).partitions
    assert part.error_code == ErrorCode.NONE and part.records == b""


def peak_rss_mib(cluster: DevCluster) -> float:
    process = cluster.nodes[1].process
    assert process is not None
    status = (Path("/proc") / str(process.pid) / "status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("VmHWM:")]
    return int(line.split()[1]) / 1024


async def test_a_decompression_bomb_is_refused_without_being_unpacked(node: DevCluster, topic: str) -> None:
    """256 MiB of zeros in 256 records, zstd-compressed to a few KiB: the node stops unpacking past
    max.decompressed.batch.bytes (8 MiB), answers INVALID_RECORD and stores nothing; its peak memory
    grows by little more than that limit (the whole 256 MiB before)."""
    bomb = build_batch([(None, bytes(1 << 20))] * 256, compression=Compression.ZSTD)
    assert len(bomb) < MAX_BYTES
    before, peak_before = await log_end_offset(node), peak_rss_mib(node)
    request = ProduceRequest(-1, 1000, (ProducePartition(TOPIC, 0, bomb),))
    status, answer = await post(node, Api.PRODUCE.path, pack(request))
    assert status == 200 and isinstance(answer, bytes)
    (result,) = unpack(ProduceResponse, answer).partitions
    assert isinstance(result, ProducePartitionResponse)
    assert result.error_code == ErrorCode.INVALID_RECORD and "max.decompressed.batch.bytes" in result.error_message
    assert await log_end_offset(node) == before
    assert peak_rss_mib(node) - peak_before < 64


async def test_unknown_routes_and_methods_get_named_errors(node: DevCluster) -> None:
    status, answer = await post(node, "/v1/no_such_api", pack({}))
    assert status == 404 and isinstance(answer, ErrorResponse) and "produce" in answer.message
    async with aiohttp.ClientSession() as session, session.get(
            f"http://{node.nodes[1].address}{Api.PRODUCE.path}") as response:
        assert response.status == 405
        assert unpack(ErrorResponse, await response.read()).error_code == ErrorCode.INVALID_REQUEST


# -- request streams (wire/stream.py) --------------------------------------------------------------


async def stream_exchange(cluster: DevCluster, frames: list[bytes | str]) -> list[aiohttp.WSMessage]:
    """Send `frames` on one stream; what comes back until the node closes it (or 5 s pass)."""
    async with aiohttp.ClientSession() as session, session.ws_connect(
            f"http://{cluster.nodes[1].address}{STREAM_PATH}") as stream:
        for frame in frames:
            if isinstance(frame, str):
                await stream.send_str(frame)
            else:
                await stream.send_bytes(frame)
        received = []
        async with asyncio.timeout(5):
            async for message in stream:
                received.append(message)
        return received


@pytest.mark.parametrize(("what", "frame"), [
    ("text, not binary", "produce"),
    ("shorter than a header", b"\x00\x01"),
    ("an API name that is not one", encode_request(1, Api.PRODUCE, b"")[:4] + b"\x05nopes" + b"\x80"),
    ("a name longer than the frame", b"\x00\x00\x00\x01\xff" + b"produce"),
    ("over socket.request.max.bytes", encode_request(1, Api.PRODUCE, b"\x00" * (MAX_BYTES + 1))),
])
async def test_a_frame_that_is_not_a_request_closes_its_stream_only(node: DevCluster, topic: str, what: str,
                                                                    frame: bytes | str) -> None:
    before = await log_end_offset(node)
    received = await stream_exchange(node, [frame])
    assert not any(message.type is aiohttp.WSMsgType.BINARY for message in received), what
    assert healthy(node.nodes[1].address)
    async with Producer(node.bootstrap) as producer:  # other streams still serve
        await (await producer.send(TOPIC, b"after a bad frame"))
    assert await log_end_offset(node) == before + 1


async def test_a_malformed_body_on_a_stream_is_answered_as_its_route_answers(node: DevCluster, topic: str) -> None:
    async with aiohttp.ClientSession() as session, session.ws_connect(
            f"http://{node.nodes[1].address}{STREAM_PATH}") as stream:
        await stream.send_bytes(encode_request(7, Api.PRODUCE, b"\xc1"))
        await stream.send_bytes(encode_request(8, Api.METADATA, pack(MetadataRequest(None))))
        answers = {}
        for _ in range(2):
            correlation_id, status, body = decode_response(await stream.receive_bytes(timeout=5))
            answers[correlation_id] = status, body
    status, body = answers[7]
    assert status == 400 and unpack(ErrorResponse, body).error_code == ErrorCode.INVALID_REQUEST
    assert answers[8][0] == 200 and unpack(MetadataResponse, answers[8][1]).brokers
