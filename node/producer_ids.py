"""ProducerIdManager: a broker's answers to InitProducerId, from blocks of ids the controller gives.

Kafka's RPCProducerIdManager (KIP-730) without its prefetch: ids come from a block of
`PRODUCER_ID_BLOCK_SIZE` that the active controller allocates to this broker (AllocateProducerIds,
recorded in the metadata log, so no id is handed out twice in the cluster's life); the next block is
asked for when this one is used up. An idempotent producer (no transactional id) always gets a new
id at epoch 0, as Kafka's transaction coordinator gives one. Transactions are not supported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from wire.error_codes import ErrorCode
from wire.producer_ids import AllocateProducerIdsRequest, InitProducerIdRequest, InitProducerIdResponse


class ProducerIdManager:
    """One per broker process. `broker_epoch` reads the broker's current registration."""

    def __init__(self, broker_id: int, broker_epoch: Callable[[], int],
                 controller_request: Callable[[Any, int], Awaitable[Any]], timeout_ms: int) -> None:
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._controller_request = controller_request
        self._timeout_ms = timeout_ms
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        if request.transactional_id is not None:
            return InitProducerIdResponse(ErrorCode.INVALID_REQUEST, error_message=(
                f"transactional.id {request.transactional_id!r}: transactions are not supported; an idempotent "
                "producer needs no transactional.id"))
        async with self._lock:
            if self._next >= self._end:
                answer = await self._controller_request(
                    AllocateProducerIdsRequest(self._broker_id, self._broker_epoch()), self._timeout_ms)
                if answer.error_code != ErrorCode.NONE:
                    # Kafka's answer while the broker cannot get ids: retriable.
                    return InitProducerIdResponse(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, error_message=(
                        f"broker {self._broker_id} could not get producer ids from the controller "
                        f"({answer.error_code.name}: {answer.error_message}); retry"))
                self._next, self._end = answer.producer_id_start, answer.producer_id_start + answer.producer_id_len
            producer_id = self._next
            self._next += 1
        return InitProducerIdResponse(ErrorCode.NONE, producer_id, 0)
