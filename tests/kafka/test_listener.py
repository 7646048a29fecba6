"""The Kafka listener of real node processes: ApiVersions (and KIP-511's answer to a version newer
than ours), pipelined requests answered in order, an API we do not serve answered
UNSUPPORTED_VERSION in its own format, bad frames closing only their own connection, and Metadata
as kcat and kafka-python see it."""

from __future__ import annotations

import asyncio
import datetime
import shutil
import struct
import subprocess
import time

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i32Timedelta

from client.admin import Admin, NewTopic
from node.dev import DevCluster
from storage.records import build_batch_from_values
from tests.kafka.wire import exchange, read_response, request_frame
from tests.node.cluster_harness import describe, eventually

pytestmark = pytest.mark.kafka_clients

API_VERSIONS = ApiVersionsRequest(client_software_name="tributary-test", client_software_version="1")
METADATA = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def first_kafka_address(cluster: DevCluster) -> str:
    return cluster.kafka_bootstrap.split(",")[0]


async def test_api_versions_lists_what_is_served_and_pipelined_requests_are_answered_in_order(
        cluster: DevCluster) -> None:
    frames = [request_frame(API_VERSIONS, 1), request_frame(METADATA, 2), request_frame(API_VERSIONS, 3)]
    answers, closed = await exchange(first_kafka_address(cluster), frames, 3)
    assert not closed
    correlation, versions = read_response(answers[0], ApiVersionsResponse)
    assert correlation == 1 and versions.error_code is KioErrorCode.none
    served = {api.api_key: (api.min_version, api.max_version) for api in versions.api_keys}
    assert served[18] == (0, 4) and served[3][1] >= 12
    assert [read_response(answers[1], MetadataResponse)[0], read_response(answers[2], ApiVersionsResponse)[0]] == [2, 3]


async def test_a_newer_api_versions_request_is_answered_in_v0_with_our_versions(cluster: DevCluster) -> None:
    """KIP-511: the client picks again from the versions a v0 answer lists."""
    frame = request_frame(API_VERSIONS, 7)
    newer = frame[:6] + struct.pack(">h", 99) + frame[8:]  # version 99 of ApiVersions
    answers, closed = await exchange(first_kafka_address(cluster), [newer], 1)
    correlation, versions = read_response(answers[0], ApiVersionsResponseV0)
    assert (correlation, versions.error_code, closed) == (7, KioErrorCode.unsupported_version, False)
    assert {api.api_key for api in versions.api_keys} >= {3, 18}


async def test_an_api_we_do_not_serve_is_answered_unsupported_version_in_its_own_format(cluster: DevCluster) -> None:
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest
    from kio.schema.describe_acls.v3.response import DescribeAclsResponse

    request = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                  principal_filter=None, host_filter=None, operation=1, permission_type=1)
    answers, closed = await exchange(first_kafka_address(cluster), [request_frame(request, 5)], 1)
    correlation, response = read_response(answers[0], DescribeAclsResponse)
    assert (correlation, response.error_code, closed) == (5, KioErrorCode.unsupported_version, False)


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 4) + b"\x00\x03\x00",  # shorter than a header (size says 4, 3 follow: the node waits)
    struct.pack(">i", -1),  # a negative size
    struct.pack(">i", 1 << 30),  # over socket.request.max.bytes
    struct.pack(">i", 8) + struct.pack(">hhi", 4242, 0, 1),  # an API key Kafka does not have
    struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\xff\xff",  # a truncated Metadata body
    struct.pack(">i", 5) + b"\x00\x00\x00\x00\x00",  # garbage
], ids=["short", "negative size", "too large", "unknown api key", "truncated body", "garbage"])
async def test_a_bad_frame_closes_its_connection_only(cluster: DevCluster, frame: bytes) -> None:
    address = first_kafka_address(cluster)
    others = asyncio.create_task(exchange(address, [request_frame(API_VERSIONS, 1)], 1))
    if frame.startswith(struct.pack(">i", 4)):
        host, _, port = address.rpartition(":")
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(frame)
        writer.close()  # a frame cut short by the client closing: nothing to answer
    else:
        answers, closed = await exchange(address, [frame, request_frame(API_VERSIONS, 2)], 1)
        assert (answers, closed) == ([], True)
    answers, closed = await others
    assert len(answers) == 1 and not closed
    after, _ = await exchange(address, [request_frame(METADATA, 3)], 1)
    assert read_response(after[0], MetadataResponse)[0] == 3


async def test_metadata_as_kcat_and_kafka_python_see_it(cluster: DevCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic("seen", 3, 3)])
    from kafka import KafkaConsumer

    def kafka_python_partitions() -> set[int] | None:
        consumer = KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap)
        try:
            return consumer.partitions_for_topic("seen")
        finally:
            consumer.close()

    assert await asyncio.to_thread(kafka_python_partitions) == {0, 1, 2}
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by `make test` (apt-get install kcat)"
    listing = subprocess.run([kcat, "-b", cluster.kafka_bootstrap, "-L", "-t", "seen"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    assert 'topic "seen" with 3 partitions' in listing
    assert listing.count("broker ") >= 3


async def leader_of(cluster: DevCluster, topic: str) -> int:
    """Partition 0's leader, once the node asked knows the topic (metadata reaches nodes in turn)."""
    leaders: list[int] = []

    async def known() -> bool:
        description = await describe(cluster.bootstrap)
        leaders[:] = [p.info.leader for p in description.partitions if p.info.topic == topic and p.info.leader >= 0]
        return bool(leaders)

    await eventually(known, f"{topic} has a leader")
    return leaders[0]


def acks_0_produce(topic: str) -> ProduceRequest:
    records = build_batch_from_values([b"v"], timestamp_ms=int(time.time() * 1000))
    data = PartitionProduceData(index=0, records=records)
    return ProduceRequest(acks=0, timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
                          topic_data=(TopicProduceData(name=topic, partition_data=(data,)),))


async def test_a_failed_acks_0_produce_closes_its_connection_without_an_answer(cluster: DevCluster) -> None:
    """Kafka's way to tell a producer that expects no answer to refresh its metadata; a good acks=0
    produce gets no answer and the connection goes on."""
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic("unanswered", 1, 3)])
    leader = await leader_of(cluster, "unanswered")
    address = cluster.nodes[leader].kafka_address
    assert address is not None
    answers, closed = await exchange(address, [request_frame(acks_0_produce("unanswered"), 1),
                                               request_frame(API_VERSIONS, 2)], 1)
    assert not closed and read_response(answers[0], ApiVersionsResponse)[0] == 2, "no answer to the produce"
    answers, closed = await exchange(address, [request_frame(acks_0_produce("no-such-topic"), 1),
                                               request_frame(API_VERSIONS, 2)], 1)
    assert (answers, closed) == ([], True)
