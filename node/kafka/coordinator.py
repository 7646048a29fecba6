"""Kafka's FindCoordinator API (key 10): which broker coordinates a group, on the asking listener.

A group's coordinator is the leader of its `__consumer_offsets` partition (node/group_offsets.py
routes every group request there); the answer gives that broker's endpoint on the listener the
request came in on, as Kafka's brokers answer from each listener's own endpoints. The offsets topic
is created by the first FindCoordinator, as Kafka creates it; until it has a live leader the answer
is COORDINATOR_NOT_AVAILABLE, Kafka's only retriable error here. v4+ batches the keys (KIP-699).

Tributary has no transactions: a transaction coordinator (key_type 1) is never available,
COORDINATOR_NOT_AVAILABLE as Kafka answers while `__transaction_state` cannot be created; share
groups (key_type 2, KIP-932) do not exist either (INVALID_REQUEST).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from replication.group_coordinator import OFFSETS_TOPIC, coordinator_partition
from wire.error_codes import ErrorCode

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


async def handle_find_coordinator(context: RequestContext, request: Any) -> Mapping[str, Any]:
    batched = context.api_version >= 4
    keys = request.coordinator_keys if batched else (request.key,)
    key_type = request.key_type if context.api_version >= 1 else GROUP_KEY_TYPE
    coordinators = await asyncio.gather(*(_coordinator(context, key_type, key) for key in keys))
    if batched:
        return {"throttle_time": 0, "coordinators": coordinators}
    (only,) = coordinators
    return {"throttle_time": 0, **only}


async def _coordinator(context: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    if key_type == TRANSACTION_KEY_TYPE:
        return _unavailable(key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            "transactions are not supported: there is no transaction coordinator; "
                            "an idempotent producer needs no transactional.id")
    if key_type != GROUP_KEY_TYPE:
        return _unavailable(key, ErrorCode.INVALID_REQUEST, f"key_type {key_type}: only groups (0) have coordinators")
    node = context.node
    assert node.group_offsets is not None, "a Kafka listener runs only on a broker"
    partition = coordinator_partition(key, node.config.offsets_topic_num_partitions)
    code = await node.group_offsets.route(partition, create=True)
    if code is not None:
        return _unavailable(key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            f"{OFFSETS_TOPIC}-{partition} has no leader yet ({code.name}); retry")
    metadata = node.quorum.metadata
    topic_id = metadata.topic_id(OFFSETS_TOPIC)
    state = metadata.partition(topic_id, partition) if topic_id is not None else None
    broker = metadata.broker(state.leader) if state is not None and state.leader >= 0 else None
    address = broker.endpoints.get(context.listener) if broker is not None and not broker.fenced else None
    if broker is None or address is None:
        return _unavailable(key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            f"the leader of {OFFSETS_TOPIC}-{partition} is not reachable on listener "
                            f"{context.listener}; retry")
    host, _, port = address.rpartition(":")
    return {"key": key, "node_id": broker.broker_id, "host": host, "port": int(port), "error_code": ErrorCode.NONE,
            "error_message": None}


def _unavailable(key: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": message}


APIS = (KafkaApi(10, 0, 6, handle_find_coordinator),)
