"""Kafka's Metadata API (key 3): brokers on the asking listener, topics, partitions and leaders.

Answered from the node's metadata image as the HTTP API's METADATA is (node/admin.py), in Kafka's
terms: fenced brokers are left out (a client must not be sent to them, as in KRaft), a replica on a
broker not alive is offline, `__consumer_offsets` is internal, topics may be asked by id (v10+).
No topic is created by a Metadata request: Tributary has no `auto.create.topics.enable`, so an
unknown topic is UNKNOWN_TOPIC_OR_PARTITION whatever `allow_auto_topic_creation` says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from node.kafka.entities import topic_id_text
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.metadata import MetadataRequest, MetadataResponse, MetadataTopic

OFFSETS_TOPIC = "__consumer_offsets"


async def handle_metadata(context: RequestContext, request: Any) -> Mapping[str, Any]:
    node = context.node
    names, unknown_ids = _requested_names(context, request)
    answer = await node.dispatch(Api.METADATA, MetadataRequest(names), context.listener)
    live = {broker.node_id for broker in answer.brokers if not broker.fenced}
    controller_id = reachable_controller_id(answer)
    topics = [_topic(topic, live) for topic in answer.topics]
    topics += [{"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id, "is_internal": False,
                "partitions": ()} for topic_id in unknown_ids]
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in answer.brokers if not b.fenced],
        "cluster_id": answer.cluster_id,
        "controller_id": controller_id,
        "topics": topics,
    }


def reachable_controller_id(answer: MetadataResponse) -> int:
    """The active controller if it is a live broker, else the lowest live broker (-1 if none): a
    Kafka client sends admin requests to the controller id it is given, so it must be a broker it
    can reach on this listener (KRaft brokers answer with a random live broker)."""
    live = {broker.node_id for broker in answer.brokers if not broker.fenced}
    return answer.controller_id if answer.controller_id in live else min(live, default=-1)


def _requested_names(context: RequestContext, request: Any) -> tuple[tuple[str, ...] | None, list[Any]]:
    """The topic names asked for (None: every topic) and the ids no topic has."""
    if request.topics is None or (context.api_version == 0 and not request.topics):
        return None, []
    metadata = context.node.quorum.metadata
    names: list[str] = []
    unknown_ids = []
    for topic in request.topics:
        if topic.name is not None:
            names.append(topic.name)
            continue
        name = metadata.topic_name(topic_id_text(topic.topic_id))
        if name is None:
            unknown_ids.append(topic.topic_id)
        else:
            names.append(name)
    return tuple(dict.fromkeys(names)), unknown_ids


def _topic(topic: MetadataTopic, live: set[int]) -> dict[str, Any]:
    return {
        "error_code": topic.error_code,
        "name": topic.name,
        "topic_id": topic.topic_id or None,
        "is_internal": topic.name == OFFSETS_TOPIC,
        "partitions": [{
            "error_code": p.error_code,
            "partition_index": p.partition,
            "leader_id": p.leader,
            "leader_epoch": p.leader_epoch,
            "replica_nodes": p.replicas,
            "isr_nodes": p.isr,
            "offline_replicas": [replica for replica in p.replicas if replica not in live],
        } for p in topic.partitions],
    }


APIS = (KafkaApi(3, 0, 12, handle_metadata),)
