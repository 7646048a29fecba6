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
class ForgottenPartition:
    """A partition an incremental fetch drops from its session (Kafka's ForgottenTopicsData)."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """replica_id CONSUMER_REPLICA_ID (-1): a consumer. Any replica serves a consumer up to its own HW (KIP-392); a
    consumer that sets `rack_id` is also told the preferred replica in its rack. A follower sends
    its `cluster_id` (Kafka's ClusterId, v12+): a leader refuses a replica fetch from another cluster
    (INCONSISTENT_CLUSTER_ID). A follower's fetch may belong to a KIP-227 session (`session_id`,
    `session_epoch`: 0 opens one, -1 is sessionless; an incremental fetch lists only the partitions
    added or changed and `forgotten` those it drops); consumers' are sessionless here."""

    partitions: tuple[FetchPartition, ...]
    replica_id: int = CONSUMER_REPLICA_ID
    broker_epoch: int = -1
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52428800
    rack_id: str = ""
    cluster_id: str | None = None
    session_id: int = 0
    session_epoch: int = -1
    forgotten: tuple[ForgottenPartition, ...] = ()


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
    producer_snapshot: bytes = b""  # to a follower behind logStartOffset (replication/ready.py FetchResult)


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """`session_id`: the follower's fetch session (0: none); a session fetch the leader refused has
    `error_code` FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH and no partitions; an
    incremental one lists only the partitions with news."""

    partitions: tuple[FetchPartitionResponse, ...]
    error_code: ErrorCode = ErrorCode.NONE
    session_id: int = 0
