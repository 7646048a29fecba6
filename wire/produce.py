"""Produce: a client's RecordBatch v2 bytes to partition leaders, with acks 0, 1 or all.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH


@dataclass(frozen=True, slots=True)
class ProducePartition:
    topic: str
    partition: int
    records: bytes
    current_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """acks: 0, 1 or -1 (all). `records` are whole RecordBatch v2 bytes (one or more batches)."""

    acks: int
    timeout_ms: int
    partitions: tuple[ProducePartition, ...]


@dataclass(frozen=True, slots=True)
class ProducePartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str = ""
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    partitions: tuple[ProducePartitionResponse, ...]
