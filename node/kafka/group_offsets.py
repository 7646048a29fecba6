"""Kafka's committed-offset APIs: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47).

Translated to the node's own requests (client/py) and dispatched; the node routes each to
the group's coordinator (node/group_offsets.py, node/group_deletion.py), which decides. Here only
what Kafka checks before the coordinator: a partition the metadata does not know is
UNKNOWN_TOPIC_OR_PARTITION and is not committed, the others are (Kafka's handleOffsetCommitRequest).

Versions: OffsetCommit 2..9 (v10 names topics by id), OffsetFetch 1..9 (v10 likewise); OffsetFetch
v8+ batches groups (KIP-709), each answered on its own. OffsetFetch v1 has no group-level error, so
a coordinator error is given on every partition asked for, as Kafka does. There are no transactions,
so no offsets are ever pending and `require_stable` (KIP-447) changes nothing; an OffsetCommit's
`retention_time` (v2..v4) is not kept: committed offsets live until deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_offsets import OffsetCommitPartition, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest
from wire.sentinels import NO_EPOCH


async def handle_offset_commit(context: RequestContext, request: Any) -> Mapping[str, Any]:
    known, answered = [], []
    for topic in request.topics:
        for p in topic.partitions:
            if not _partition_exists(context, topic.name, p.partition_index):
                answered.append((topic.name, {"partition_index": p.partition_index,
                                              "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}))
                continue
            known.append(OffsetCommitPartition(
                topic.name, p.partition_index, p.committed_offset, p.committed_metadata or "",
                getattr(p, "committed_leader_epoch", NO_EPOCH)))
    if known:
        answer = await _dispatch(context, Api.OFFSET_COMMIT, OffsetCommitRequest(
            request.group_id, tuple(known), request.generation_id_or_member_epoch, request.member_id,
            getattr(request, "group_instance_id", None)))
        answered += [(p.topic, {"partition_index": p.partition, "error_code": p.error_code})
                     for p in answer.partitions]
    return {"throttle_time": 0, "topics": _by_topic(answered)}


async def handle_offset_fetch(context: RequestContext, request: Any) -> Mapping[str, Any]:
    if context.api_version >= 8:
        fetched = await asyncio.gather(*(_fetch(context, group.group_id, group.topics) for group in request.groups))
        return {"throttle_time": 0, "groups": [
            {"group_id": group.group_id, "error_code": code, "topics": topics}
            for group, (code, topics) in zip(request.groups, fetched, strict=True)]}
    code, topics = await _fetch(context, request.group_id, request.topics)
    if context.api_version < 2 and code != ErrorCode.NONE:
        topics = _by_topic((topic.name, {"partition_index": index, "committed_offset": -1, "metadata": "",
                                         "error_code": code})
                           for topic in request.topics for index in topic.partition_indexes)
    return {"throttle_time": 0, "error_code": code, "topics": topics}


async def _fetch(context: RequestContext, group_id: str, topics: Any) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """A group's committed offsets of `topics` (None: every one it has): its error and the topics."""
    partitions = None if topics is None else tuple((topic.name, index) for topic in topics
                                                   for index in topic.partition_indexes)
    answer = await _dispatch(context, Api.OFFSET_FETCH, OffsetFetchRequest(group_id, partitions))
    return answer.error_code, _by_topic((p.topic, {
        "partition_index": p.partition, "committed_offset": p.committed_offset,
        "committed_leader_epoch": p.committed_leader_epoch, "metadata": p.committed_metadata,
        "error_code": p.error_code}) for p in answer.partitions)


async def handle_offset_delete(context: RequestContext, request: Any) -> Mapping[str, Any]:
    partitions = tuple((topic.name, p.partition_index) for topic in request.topics for p in topic.partitions)
    answer = await _dispatch(context, Api.OFFSET_DELETE, OffsetDeleteRequest(request.group_id, partitions))
    return {"throttle_time": 0, "error_code": answer.error_code, "topics": _by_topic(
        (p.topic, {"partition_index": p.partition, "error_code": p.error_code}) for p in answer.partitions)}


def _by_topic(partitions: Iterable[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Kafka's topics-of-partitions nesting, topics in the order first seen."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return [{"name": name, "partitions": entries} for name, entries in topics.items()]


def _partition_exists(context: RequestContext, topic: str, partition: int) -> bool:
    metadata = context.node.quorum.metadata
    topic_id = metadata.topic_id(topic)
    return topic_id is not None and metadata.partition(topic_id, partition) is not None


async def _dispatch(context: RequestContext, api: Api, request: Any) -> Any:
    return await context.node.dispatch(api, request, context.listener, context.client_host)


APIS = (
    KafkaApi(8, 2, 9, handle_offset_commit),
    KafkaApi(9, 1, 9, handle_offset_fetch),
    KafkaApi(47, 0, 0, handle_offset_delete),
)
