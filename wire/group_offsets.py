"""A consumer group's committed offsets (kept in the compacted topic `__consumer_offsets`):
OffsetCommit, OffsetFetch and OffsetDelete (kafka-consumer-groups.sh --delete-offsets).
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    topic: str
    partition: int
    committed_offset: int
    committed_metadata: str = ""
    committed_leader_epoch: int = NO_EPOCH  # KIP-320: the leader epoch of the record before the offset


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """`generation_id` and `member_id`: the committing member's (a group member's commit is refused
    with ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID once it is not the current generation's); -1 and
    "" for a consumer that assigns its partitions itself (only to a group without members)."""

    group_id: str
    partitions: tuple[OffsetCommitPartition, ...]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None  # a static member's (KIP-345): fenced once replaced


@dataclass(frozen=True, slots=True)
class OffsetCommitPartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    partitions: tuple[OffsetCommitPartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    """partitions None: every partition the group committed."""

    group_id: str
    partitions: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class OffsetFetchPartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode
    committed_offset: int = -1
    committed_metadata: str = ""
    committed_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error_code: ErrorCode
    partitions: tuple[OffsetFetchPartitionResponse, ...] = ()
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    """Delete the group's committed offsets of these (topic, partition)s: allowed for an Empty group,
    or for topics none of its members subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise)."""

    group_id: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class OffsetDeletePartitionResponse:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    """A group-level `error_code` (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, a coordinator error) leaves
    `partitions` holding only those refused before the coordinator was asked."""

    error_code: ErrorCode
    partitions: tuple[OffsetDeletePartitionResponse, ...] = ()
    error_message: str = ""
