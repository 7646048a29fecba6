"""CreateTopics and DeleteTopics: Kafka's topic-admin messages, reduced to the fields Tributary uses.

A node forwards them to the active controller, which answers each topic alone; errors are `ErrorCode`
values with a message that says what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode
from wire.sentinels import NO_VALUE


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    """A topic to create. Either `num_partitions` / `replication_factor` (-1: the controller's
    default) or `assignments` (partition index -> replica broker ids, leader first), not both."""

    name: str
    num_partitions: int = NO_VALUE
    replication_factor: int = NO_VALUE
    assignments: Mapping[int, tuple[int, ...]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    """Create topics; each succeeds or fails alone. `validate_only` checks everything and writes nothing."""

    topics: tuple[CreatableTopic, ...]
    validate_only: bool = False
    timeout_ms: int = 30000  # how long the caller waits for the records to commit (Kafka's timeoutMs)


@dataclass(frozen=True, slots=True)
class CreatableTopicResult:
    """One topic's outcome; `topic_id` is None on failure and under `validate_only`."""

    name: str
    error_code: ErrorCode
    error_message: str | None = None
    topic_id: str | None = None
    num_partitions: int = NO_VALUE
    replication_factor: int = NO_VALUE
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[CreatableTopicResult, ...]


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    """Delete topics by name and/or by topic id; each succeeds or fails alone."""

    topic_names: tuple[str, ...] = ()
    topic_ids: tuple[str, ...] = ()
    timeout_ms: int = 30000  # how long the caller waits for the records to commit (Kafka's timeoutMs)


@dataclass(frozen=True, slots=True)
class DeletableTopicResult:
    name: str | None
    topic_id: str | None
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    topics: tuple[DeletableTopicResult, ...]


# ---- CreatePartitions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """Grow topic `name` to `count` partitions. `assignments`: the new partitions' replica broker
    ids in index order (leader first), or None for the controller's placement."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    """Add partitions; each topic succeeds or fails alone. `validate_only` checks and writes nothing."""

    topics: tuple[CreatePartitionsTopic, ...]
    validate_only: bool = False
    timeout_ms: int = 30000  # how long the caller waits for the records to commit (Kafka's timeoutMs)


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopicResult:
    name: str
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    results: tuple[CreatePartitionsTopicResult, ...]
