"""The controller's own periodic input and its answer; the request and response shapes of the
messages it answers (topic admin, broker lifecycle, AlterPartition, AllocateProducerIds) are the
wire's (`wire/`, DESIGN §1: defined once).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ControllerTick:
    """Time passed: fence brokers whose session expired, elect leaders where one became possible."""


@dataclass(frozen=True, slots=True)
class TickResponse:
    fenced_broker_ids: tuple[int, ...] = ()
    elected_partitions: tuple[tuple[str, int], ...] = ()
