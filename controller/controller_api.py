"""The controller's own inputs (its tick, its probes' refusals) and their answer; the request and response shapes of the
messages it answers (topic admin, broker lifecycle, AlterPartition, AllocateProducerIds) are the
wire's (`wire/`, DESIGN §1: defined once).
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.error_codes import ErrorCode


@dataclass(frozen=True, slots=True)
class ControllerTick:
    """Time passed: fence brokers whose session expired, elect leaders where one became possible."""


@dataclass(frozen=True, slots=True)
class TickResponse:
    """What a tick or a probe's refusal did; `error_code` NOT_CONTROLLER when it reached a node out
    of office."""

    fenced_broker_ids: tuple[int, ...] = ()
    elected_partitions: tuple[tuple[str, int], ...] = ()
    error_code: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class BrokerProbe:
    """Open (and at once close) a TCP connection to `endpoint` (host:port, the broker's inter-broker
    listener at its `broker_epoch`); if the connection is refused, report `BrokerConnectionRefused`
    with the same fields and `attempted_ms` = the controller's monotonic time before connecting."""

    broker_id: int
    broker_epoch: int
    endpoint: str


@dataclass(frozen=True, slots=True)
class BrokerConnectionRefused:
    """The active controller's own probe of `broker_id` at `broker_epoch`, begun at `attempted_ms`
    (this controller's monotonic clock), was refused: nothing listens there (README, "Failover after kill -9")."""

    broker_id: int
    broker_epoch: int
    attempted_ms: int
