"""Producer ids: a client's InitProducerId (KIP-98) to any broker, and a broker's AllocateProducerIds
(KIP-730) to the active controller for a block of ids to hand out.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.error_codes import ErrorCode


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsRequest:
    """A broker asks for a block of producer ids to hand out in InitProducerId (KIP-730)."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse:
    """The ids [producer_id_start, producer_id_start + producer_id_len) are this broker's alone."""

    error_code: ErrorCode
    error_message: str | None = None
    producer_id_start: int = -1
    producer_id_len: int = 0


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    """An idempotent producer's id and epoch, from any broker. Transactions (`transactional_id`)
    are not supported: such a request is refused with INVALID_REQUEST."""

    transactional_id: str | None = None
    transaction_timeout_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error_code: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1
    error_message: str = ""
