"""Kafka's DescribeCluster (key 60) and DescribeLogDirs (key 35).

DescribeCluster answers from the same metadata as Metadata (node/kafka/metadata.py): the cluster
id, a controller id a client can reach, and the brokers with their address on the asking listener
(fenced ones only when v2's `include_fenced_brokers` asks, KIP-1073). Brokers answer for brokers
only: endpoint type 2 (controllers, KIP-919) is UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker says.

DescribeLogDirs describes this node's log dirs (`log.dirs`, every one even when empty) with the
replicas each holds, from the broker's DESCRIBE_REPLICAS: size on disk, and Kafka's offset lag
of a current replica, max(high watermark - log end offset, 0) (ReplicaManager.getLogEndOffsetLag;
there are no future replicas here). v4 adds the dir's total and usable bytes.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from node.kafka.metadata import reachable_controller_id
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.metadata import DescribeReplicasRequest, MetadataRequest

BROKER_ENDPOINTS = 1  # DescribeClusterRequest.endpoint_type: 1 brokers, 2 controllers


async def handle_describe_cluster(context: RequestContext, request: Any) -> Mapping[str, Any]:
    answer = {"throttle_time": 0, "error_code": ErrorCode.NONE, "endpoint_type": BROKER_ENDPOINTS, "brokers": ()}
    if context.api_version >= 1 and request.endpoint_type != BROKER_ENDPOINTS:
        return answer | {"error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, "cluster_id": "",
                         "error_message": f"endpoint type {request.endpoint_type}: a broker describes brokers (1)"}
    metadata = await context.node.dispatch(Api.METADATA, MetadataRequest(()), context.listener)
    with_fenced = context.api_version >= 2 and request.include_fenced_brokers
    brokers = [{"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "is_fenced": b.fenced}
               for b in metadata.brokers if with_fenced or not b.fenced]
    return answer | {"cluster_id": metadata.cluster_id, "controller_id": reachable_controller_id(metadata),
                     "brokers": brokers}


async def handle_describe_log_dirs(context: RequestContext, request: Any) -> Mapping[str, Any]:
    node = context.node
    wanted = None if request.topics is None else {
        (topic.topic, partition) for topic in request.topics for partition in topic.partitions}
    topics = None if request.topics is None else tuple(topic.topic for topic in request.topics)
    answer = await node.dispatch(Api.DESCRIBE_REPLICAS, DescribeReplicasRequest(topics), context.listener)
    by_dir: dict[str, dict[str, list[dict[str, Any]]]] = {str(path): {} for path in node.config.log_dirs}
    for replica in answer.replicas:
        if wanted is not None and (replica.topic, replica.partition) not in wanted:
            continue
        by_dir.setdefault(replica.log_dir, {}).setdefault(replica.topic, []).append({
            "partition_index": replica.partition,
            "partition_size": replica.size_bytes,
            "offset_lag": max(replica.high_watermark - replica.log_end_offset, 0),
            "is_future_key": False,
        })
    results = []
    for log_dir, topics_here in by_dir.items():
        usage = shutil.disk_usage(log_dir)
        results.append({
            "error_code": ErrorCode.NONE,
            "log_dir": log_dir,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in sorted(topics_here.items())],
            "total_bytes": usage.total,
            "usable_bytes": usage.free,
        })
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "results": results}


APIS = (
    KafkaApi(60, 0, 2, handle_describe_cluster),
    KafkaApi(35, 1, 4, handle_describe_log_dirs),
)
