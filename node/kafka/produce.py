"""Kafka's Produce API (key 0): RecordBatch v2 bytes to the partition leaders' logs.

The records go to the node's own produce path as they came (the leader validates each batch's
header and CRC and assigns offsets without decoding records; compressed batches stay compressed),
so acks, min.insync.replicas, idempotence and every per-partition error are the node's. An
acks=0 request gets no answer at all, as in Kafka; if it failed, the connection is closed (Kafka's
way to tell such a producer to refresh its metadata). Versions 3..12: v13 names topics by id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.kafka.apis import CloseConnection, KafkaApi, RequestContext
from node.kafka.entities import milliseconds
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.produce import ProducePartition, ProduceRequest


async def handle_produce(context: RequestContext, request: Any) -> Mapping[str, Any] | None:
    # A negative timeout is taken as 0 (Kafka's arithmetic makes it expire at once).
    internal = ProduceRequest(
        acks=request.acks,
        timeout_ms=max(milliseconds(request.timeout), 0),
        partitions=tuple(ProducePartition(topic.name, part.index, part.records or b"")
                         for topic in request.topic_data for part in topic.partition_data),
    )
    answer = await context.node.dispatch(Api.PRODUCE, internal, context.listener, context.client_host)
    if request.acks == 0:
        failed = [f"{part.topic}-{part.partition}: {part.error_code.name}" for part in answer.partitions
                  if part.error_code is not ErrorCode.NONE]
        if failed:
            raise CloseConnection(f"an acks=0 produce failed ({', '.join(failed)})")
        return None
    topics: dict[str, list[dict[str, Any]]] = {}
    for part in answer.partitions:
        topics.setdefault(part.topic, []).append({
            "index": part.partition,
            "error_code": part.error_code,
            "base_offset": part.base_offset,
            "log_append_time": part.log_append_time_ms,
            "log_start_offset": part.log_start_offset,
            "record_errors": (),
            "error_message": part.error_message or None,
        })
    return {"responses": [{"name": name, "partition_responses": parts} for name, parts in topics.items()],
            "throttle_time": 0}


APIS = (KafkaApi(0, 3, 12, handle_produce),)
