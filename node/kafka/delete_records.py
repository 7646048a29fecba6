"""Kafka's DeleteRecords (key 21): raise partitions' logStartOffset (offset -1: to the HW).

The leader answers once every in-sync replica's logStartOffset reached it (the low watermark), or
REQUEST_TIMED_OUT at the request's timeout, as the node's own DeleteRecords. Versions 0..2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from node.kafka.entities import milliseconds
from wire.api import Api
from wire.log_offsets import DeleteRecordsPartition, DeleteRecordsRequest


async def handle_delete_records(context: RequestContext, request: Any) -> Mapping[str, Any]:
    internal = DeleteRecordsRequest(
        tuple(DeleteRecordsPartition(topic.name, part.partition_index, part.offset)
              for topic in request.topics for part in topic.partitions),
        timeout_ms=max(milliseconds(request.timeout), 0),
    )
    answer = await context.node.dispatch(Api.DELETE_RECORDS, internal, context.listener, context.client_host)
    topics: dict[str, list[dict[str, Any]]] = {}
    for part in answer.partitions:
        topics.setdefault(part.topic, []).append({"partition_index": part.partition,
                                                  "low_watermark": part.low_watermark,
                                                  "error_code": part.error_code})
    return {"throttle_time": 0, "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


APIS = (KafkaApi(21, 0, 2, handle_delete_records),)
