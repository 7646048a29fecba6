"""Fetch: consumers and followers read raw batches from a replica (KIP-320 epochs, KIP-392 preferred
read replica, a diverging epoch for a follower to truncate to).
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.error_codes import ErrorCode
from wire.sentinels import CONSUMER_REPLICA_ID, NO_EPOCH


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """A partition to fetch. Followers also send `last_fetched_epoch` (KIP-320) and their
    `log_start_offset`."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1048576
    current_leader_epoch: int = NO_EPOCH
    last_fetched_epoch: int = NO_EPOCH
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """replica_id CONSUMER_REPLICA_ID (-1): a consumer. Any replica serves a consumer up to its own HW (KIP-392); a
    consumer that sets `rack_id` is also told the preferred replica in its rack. A follower sends
    its `cluster_id` (Kafka's ClusterId, v12+): a leader refuses a replica fetch from another cluster
    (INCONSISTENT_CLUSTER_ID)."""

    partitions: tuple[FetchPartition, ...]
    replica_id: int = CONSUMER_REPLICA_ID
    broker_epoch: int = -1
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52428800
    rack_id: str = ""
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    records: bytes = b""
    diverging_epoch: EpochEndOffset | None = None
    current_leader: LeaderIdAndEpoch | None = None
    preferred_read_replica: int = -1


@dataclass(frozen=True, slots=True)
class FetchResponse:
    partitions: tuple[FetchPartitionResponse, ...]
