"""Metadata and topic-admin answers: what any node tells a client about the cluster.

Metadata is read from this node's applied copy of the metadata log and says how fresh it is
(`metadata_offset`). Topic admin is the active controller's job: its wire shapes are the
controller's own requests, which the node hands to the quorum service as they are.
"""

from __future__ import annotations

from controller.metadata import ClusterMetadata
from storage.config import LogConfig
from wire.configs import DescribeConfigsRequest, DescribeConfigsResponse, DescribeConfigsResult
from wire.error_codes import ErrorCode
from wire.metadata import MetadataBroker, MetadataPartition, MetadataRequest, MetadataResponse, MetadataTopic


def metadata_response(
    metadata: ClusterMetadata,
    request: MetadataRequest,
    listener: str,
    cluster_id: str,
    controller_id: int | None,
) -> MetadataResponse:
    """Brokers with their address on `listener`, and the requested topics (all when None)."""
    brokers = []
    for broker in metadata.brokers():
        address = broker.endpoints.get(listener)
        if address is None:
            continue  # not reachable on this network
        host, _, port = address.rpartition(":")
        brokers.append(MetadataBroker(broker.broker_id, host, int(port), broker.rack, broker.fenced,
                                      dict(broker.endpoints)))
    names = request.topics if request.topics is not None else tuple(metadata.topic_names())
    topics = []
    for name in names:
        topic_id = metadata.topic_id(name)
        if topic_id is None:
            topics.append(MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        partitions = tuple(
            MetadataPartition(
                index, state.leader, state.leader_epoch, state.replicas, state.isr,
                ErrorCode.NONE if state.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE, state.elr,
                state.last_known_elr,
            )
            for index, state in enumerate(metadata.partitions(topic_id))
        )
        topics.append(MetadataTopic(name, ErrorCode.NONE, topic_id, partitions, metadata.topic_configs(name)))
    return MetadataResponse(
        cluster_id, controller_id if controller_id is not None else -1, metadata.last_applied_offset,
        tuple(brokers), tuple(topics),
    )


def describe_configs(
    metadata: ClusterMetadata, request: DescribeConfigsRequest, defaults: LogConfig
) -> DescribeConfigsResponse:
    """Each topic's overrides and the effective value of every topic config key."""
    results = []
    for name in request.topics:
        if metadata.topic_id(name) is None:
            message = f"topic {name!r} does not exist; see `tributary topics list`"
            results.append(DescribeConfigsResult(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, message))
            continue
        overrides = metadata.topic_configs(name)
        effective = LogConfig.from_properties(overrides, base=defaults).to_properties()
        results.append(DescribeConfigsResult(name, ErrorCode.NONE, "", effective, overrides))
    return DescribeConfigsResponse(tuple(results))
