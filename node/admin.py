"""Metadata and topic-admin answers: what any node tells a client about the cluster.

Metadata is read from this node's applied copy of the metadata log and says how fresh it is
(`metadata_offset`). Topic admin is the active controller's job: the wire request (client/protocol)
is turned into the controller's own request (controller/controller_api, same field names, so the
conversion is by name, not by hand) and forwarded through the quorum service.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from client import protocol
from client.protocol import ErrorCode, decode, encode
from controller import controller_api
from controller.metadata import ClusterMetadata
from storage.config import LogConfig

# wire request type -> (controller request type, wire response type)
FORWARDED: dict[type, tuple[type, type]] = {
    protocol.CreateTopicsRequest: (controller_api.CreateTopicsRequest, protocol.CreateTopicsResponse),
    protocol.DeleteTopicsRequest: (controller_api.DeleteTopicsRequest, protocol.DeleteTopicsResponse),
    protocol.IncrementalAlterConfigsRequest: (
        controller_api.IncrementalAlterConfigsRequest,
        protocol.IncrementalAlterConfigsResponse,
    ),
}
DEFAULT_ADMIN_TIMEOUT_MS = 30000


def to_controller(request: Any) -> tuple[Any, int]:
    """The controller's request for a wire admin request, and the caller's timeout."""
    controller_type, _ = FORWARDED[type(request)]
    fields = {f.name for f in dataclasses.fields(controller_type)}
    data = {key: value for key, value in encode(request).items() if key in fields}
    return decode(controller_type, data), getattr(request, "timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS)


def from_controller(request: Any, response: Any) -> Any:
    """The wire response for the controller's answer to a forwarded `request`."""
    _, wire_type = FORWARDED[type(request)]
    return decode(wire_type, encode(response))


def metadata_response(
    metadata: ClusterMetadata,
    request: protocol.MetadataRequest,
    listener: str,
    cluster_id: str,
    controller_id: int | None,
) -> protocol.MetadataResponse:
    """Brokers with their address on `listener`, and the requested topics (all when None)."""
    brokers = []
    for broker in metadata.brokers():
        address = broker.endpoints.get(listener)
        if address is None:
            continue  # not reachable on this network
        host, _, port = address.rpartition(":")
        brokers.append(protocol.MetadataBroker(broker.broker_id, host, int(port), broker.rack, broker.fenced))
    names = request.topics if request.topics is not None else tuple(metadata.topic_names())
    topics = []
    for name in names:
        topic_id = metadata.topic_id(name)
        if topic_id is None:
            topics.append(protocol.MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        partitions = tuple(
            protocol.MetadataPartition(
                index, state.leader, state.leader_epoch, state.replicas, state.isr,
                ErrorCode.NONE if state.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            )
            for index, state in enumerate(metadata.partitions(topic_id))
        )
        topics.append(protocol.MetadataTopic(name, ErrorCode.NONE, topic_id, partitions, metadata.topic_configs(name)))
    return protocol.MetadataResponse(
        cluster_id, controller_id if controller_id is not None else -1, metadata.last_applied_offset,
        tuple(brokers), tuple(topics),
    )


def describe_configs(
    metadata: ClusterMetadata, request: protocol.DescribeConfigsRequest, defaults: LogConfig
) -> protocol.DescribeConfigsResponse:
    """Each topic's overrides and the effective value of every topic config key."""
    results = []
    for name in request.topics:
        if metadata.topic_id(name) is None:
            message = f"topic {name!r} does not exist; see `tributary topics list`"
            results.append(protocol.DescribeConfigsResult(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
            continue
        overrides = metadata.topic_configs(name)
        effective = LogConfig.from_properties(overrides, base=defaults).to_properties()
        results.append(protocol.DescribeConfigsResult(name, ErrorCode.NONE, "", effective, overrides))
    return protocol.DescribeConfigsResponse(tuple(results))
