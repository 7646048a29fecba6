"""Kafka's ListOffsets (key 2) and OffsetForLeaderEpoch (key 23) for consumers.

ListOffsets: earliest (-2: the logStartOffset), latest (-1: the HW; read_committed gives the same,
as there are no transactions), the max timestamp (-3, KIP-734) or the first offset whose timestamp
is at least the one asked, each with its batch's leader epoch (KIP-320); no match is offset -1.
Earliest-local (-4, KIP-405) is the earliest: every segment is local. The leader answers; a
debugging client (replica_id -2, Kafka's DEBUGGING_REPLICA_ID) may ask any replica. Versions 1..9
(v10 adds a timeout we would ignore).

OffsetForLeaderEpoch: a consumer validating its position after a leader change (KIP-320) is told
the end offset of the epoch it last fetched in, from the leader's epoch cache. Versions 2..4.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from wire.api import Api
from wire.log_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
)
from wire.sentinels import EARLIEST_TIMESTAMP, NO_EPOCH

EARLIEST_LOCAL_TIMESTAMP = -4
DEBUGGING_REPLICA_ID = -2


async def handle_list_offsets(context: RequestContext, request: Any) -> Mapping[str, Any]:
    internal = ListOffsetsRequest(
        partitions=tuple(ListOffsetsPartition(
            topic.name, part.partition_index,
            EARLIEST_TIMESTAMP if part.timestamp == EARLIEST_LOCAL_TIMESTAMP else part.timestamp,
            getattr(part, "current_leader_epoch", NO_EPOCH),
        ) for topic in request.topics for part in topic.partitions),
        from_follower=request.replica_id == DEBUGGING_REPLICA_ID,
    )
    answer = await context.node.dispatch(Api.LIST_OFFSETS, internal, context.listener, context.client_host)
    topics = _by_topic((part.topic, {
        "partition_index": part.partition,
        "error_code": part.error_code,
        "timestamp": part.timestamp,
        "offset": part.offset,
        "leader_epoch": part.leader_epoch,
    }) for part in answer.partitions)
    return {"throttle_time": 0, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


async def handle_offset_for_leader_epoch(context: RequestContext, request: Any) -> Mapping[str, Any]:
    internal = OffsetsForLeaderEpochRequest(tuple(
        OffsetForLeaderPartition(topic.topic, part.partition, part.leader_epoch, part.current_leader_epoch)
        for topic in request.topics for part in topic.partitions))
    answer = await context.node.dispatch(Api.OFFSETS_FOR_LEADER_EPOCH, internal, context.listener,
                                         context.client_host)
    topics = _by_topic((part.topic, {
        "error_code": part.error_code,
        "partition": part.partition,
        "leader_epoch": part.leader_epoch,
        "end_offset": part.end_offset,
    }) for part in answer.partitions)
    return {"throttle_time": 0, "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()]}


def _by_topic(parts: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, values in parts:
        topics.setdefault(topic, []).append(values)
    return topics


APIS = (
    KafkaApi(2, 1, 9, handle_list_offsets),
    KafkaApi(23, 2, 4, handle_offset_for_leader_epoch),
)
