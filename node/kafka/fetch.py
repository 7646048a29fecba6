"""Kafka's Fetch API (key 1) for consumers: raw log bytes, fetch sessions (KIP-227), KIP-392.

The edge only: the session cache (replication/fetch_sessions.py) decides what a request reads and
which partitions its answer lists; the node's fetch path reads them (any replica serves a consumer
up to its HW; a leader names a replica in the consumer's `rack_id` as `preferred_read_replica`,
KIP-392) and long-polls for `min_bytes`. Records are the log's bytes as they lie on disk.
Tributary has no transactions, so read_committed reads what read_uncommitted reads: the last
stable offset is the HW and there are no aborted transactions.

Replica fetches (replica_id >= 0) go over the inter-broker listener's HTTP API, never here: one is
answered INVALID_REQUEST. Versions 4..12: v13 names topics by id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from node.kafka.entities import milliseconds
from replication.fetch_sessions import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    ContextKind,
    PartitionFetch,
    PartitionRead,
)
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchPartitionResponse, FetchRequest
from wire.topic_partition import TopicPartition

CONSUMER_REPLICA_ID = -1


async def handle_fetch(context: RequestContext, request: Any) -> Mapping[str, Any]:
    if request.replica_id != CONSUMER_REPLICA_ID:
        return _refused(ErrorCode.INVALID_REQUEST)
    node = context.node
    sessions = node.fetch_sessions
    fetch_context = sessions.begin(
        getattr(request, "session_id", INVALID_SESSION_ID), getattr(request, "session_epoch", FINAL_EPOCH),
        _requested(request), (TopicPartition(topic.topic, index)
                              for topic in getattr(request, "forgotten_topics_data", ()) for index in topic.partitions),
        privileged=False, now_ms=node.monotonic_clock())
    if fetch_context.kind is ContextKind.ERROR:
        return _refused(fetch_context.error)
    internal = FetchRequest(
        partitions=tuple(FetchPartition(
            topic=tp.topic, partition=tp.partition, fetch_offset=fetch.fetch_offset,
            partition_max_bytes=max(fetch.partition_max_bytes, 0), current_leader_epoch=fetch.current_leader_epoch,
            last_fetched_epoch=fetch.last_fetched_epoch, log_start_offset=fetch.log_start_offset,
        ) for tp, fetch in fetch_context.partitions),
        max_wait_ms=max(milliseconds(request.max_wait), 0),
        min_bytes=max(request.min_bytes, 0),
        max_bytes=max(request.max_bytes, 0),
        rack_id=getattr(request, "rack_id", ""),
    )
    answer = await node.dispatch(Api.FETCH, internal, context.listener, context.client_host)
    read = {TopicPartition(part.topic, part.partition): part for part in answer.partitions}
    plan = sessions.complete(fetch_context, {tp: _outcome(part) for tp, part in read.items()},
                             node.monotonic_clock())
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic_partition in plan.partitions:
        topics.setdefault(topic_partition.topic, []).append(_partition(read[topic_partition]))
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "session_id": plan.session_id,
            "responses": [{"topic": topic, "partitions": parts} for topic, parts in topics.items()]}


def _requested(request: Any) -> list[tuple[TopicPartition, PartitionFetch]]:
    """The request's partitions (fields a version lacks take Kafka's defaults)."""
    return [(TopicPartition(topic.topic, part.partition),
             PartitionFetch(part.fetch_offset, part.partition_max_bytes, getattr(part, "current_leader_epoch", -1),
                            getattr(part, "last_fetched_epoch", -1), getattr(part, "log_start_offset", -1)))
            for topic in request.topics for part in topic.partitions]


def _outcome(part: FetchPartitionResponse) -> PartitionRead:
    return PartitionRead(part.error_code, len(part.records), part.high_watermark, part.log_start_offset,
                         part.preferred_read_replica, part.diverging_epoch is not None)


def _partition(part: FetchPartitionResponse) -> dict[str, Any]:
    values: dict[str, Any] = {
        "partition_index": part.partition,
        "error_code": part.error_code,
        "high_watermark": part.high_watermark,
        "last_stable_offset": part.high_watermark,  # no transactions: everything below the HW is stable
        "log_start_offset": part.log_start_offset,
        "aborted_transactions": (),
        "preferred_read_replica": part.preferred_read_replica,
        "records": part.records,
    }
    if part.diverging_epoch is not None:
        values["diverging_epoch"] = {"epoch": part.diverging_epoch.epoch,
                                     "end_offset": part.diverging_epoch.end_offset}
    if part.current_leader is not None:
        values["current_leader"] = {"leader_id": part.current_leader.leader_id,
                                    "leader_epoch": part.current_leader.leader_epoch}
    return values


def _refused(error: ErrorCode) -> Mapping[str, Any]:
    """A whole Fetch refused (a session error): no partitions, no session."""
    return {"throttle_time": 0, "error_code": error, "session_id": INVALID_SESSION_ID, "responses": ()}


APIS = (KafkaApi(1, 4, 12, handle_fetch),)
