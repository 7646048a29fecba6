"""A partition's offsets: ListOffsets (by timestamp, or the sentinels of `wire.sentinels`),
OffsetsForLeaderEpoch (KIP-101/279: where an epoch ends) and DeleteRecords (move the log start offset).
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    """timestamp: a time in ms, or LATEST_TIMESTAMP / EARLIEST_TIMESTAMP / MAX_TIMESTAMP."""

    topic: str
    partition: int
    timestamp: int
    current_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    partitions: tuple[ListOffsetsPartition, ...]
    replica_id: int = -1
    from_follower: bool = False


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str = ""
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    partitions: tuple[ListOffsetsPartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class OffsetForLeaderPartition:
    topic: str
    partition: int
    leader_epoch: int
    current_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochRequest:
    partitions: tuple[OffsetForLeaderPartition, ...]
    replica_id: int = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffsetResponse:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str = ""
    leader_epoch: int = NO_EPOCH
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochResponse:
    partitions: tuple[EpochEndOffsetResponse, ...]


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartition:
    """Delete every record below `offset` (-1: below the high watermark)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    partitions: tuple[DeleteRecordsPartition, ...]
    timeout_ms: int = 30000


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str = ""
    low_watermark: int = -1


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    partitions: tuple[DeleteRecordsPartitionResponse, ...]
