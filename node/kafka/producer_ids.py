"""Kafka's InitProducerId API (22): an idempotent producer's id and epoch (KIP-98).

Any broker answers from its block of ids (node/producer_ids.py). Tributary has no transactions: a
request with a transactional id is refused by the node (INVALID_REQUEST, with why), and none can
reach a transaction coordinator anyway (FindCoordinator never names one, node/kafka/coordinator.py).
Served up to v5; v6 adds two-phase commit (KIP-939), a transactions feature.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from node.kafka.entities import milliseconds
from wire.api import Api
from wire.producer_ids import InitProducerIdRequest


async def handle_init_producer_id(context: RequestContext, request: Any) -> Mapping[str, Any]:
    answer = await context.node.dispatch(Api.INIT_PRODUCER_ID, InitProducerIdRequest(
        request.transactional_id, milliseconds(request.transaction_timeout), getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1)), context.listener, context.client_host)
    return {"throttle_time": 0, "error_code": answer.error_code, "producer_id": answer.producer_id,
            "producer_epoch": answer.producer_epoch}


APIS = (KafkaApi(22, 0, 5, handle_init_producer_id),)
