"""Requests to the active controller and its responses, as frozen dataclasses with Kafka's field names.

These are the shapes of Kafka's CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
BrokerRegistration, BrokerHeartbeat, ControlledShutdown and AlterPartition messages, reduced to the
fields Tributary uses. `node/` decodes the wire form into them and `QuorumController` answers
them; errors are `ErrorCode` values with a message that says what to do, never exceptions.
The topic-admin shapes are also the wire protocol's: `client/protocol.py` imports them from here
(DESIGN §1: the protocol is defined once). This module is plain data over `storage.error_codes`, so
that import pulls nothing else of the controller into the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from storage.error_codes import ErrorCode

NO_VALUE = -1
"""Kafka's "use the default" for `num_partitions` and `replication_factor`, and "unknown" elsewhere."""


class AlterConfigOp(IntEnum):
    """An incremental config operation (Kafka's `AlterConfigOp.OpType` ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigResourceType(IntEnum):
    """What a config belongs to (Kafka's `ConfigResource.Type` ids). Only topic configs are dynamic here."""

    TOPIC = 2
    BROKER = 4


# ---- CreateTopics ---------------------------------------------------------------------------------


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


# ---- DeleteTopics ---------------------------------------------------------------------------------


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


# ---- IncrementalAlterConfigs ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterableConfig:
    """One operation on one key; `value` is ignored by DELETE and required by the others."""

    name: str
    op: AlterConfigOp
    value: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    """`replace`: Kafka's legacy AlterConfigs, the ops (all SET) are the resource's whole set of
    overrides and every other override is deleted, in the same records."""

    resource_type: ConfigResourceType
    resource_name: str
    configs: tuple[AlterableConfig, ...]
    replace: bool = False


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsRequest:
    """Change configs; each resource succeeds or fails as a whole."""

    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterConfigsResourceResult:
    resource_type: ConfigResourceType
    resource_name: str
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsResponse:
    responses: tuple[AlterConfigsResourceResult, ...]


# ---- BrokerRegistration, BrokerHeartbeat, ControlledShutdown ---------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    """A starting broker registers. `incarnation_id` is new for every process start;
    `endpoints` maps listener name to `host:port`. `log_dirs` are the directory ids of its log
    dirs (KIP-858, from meta.properties). `previous_broker_epoch` is the broker epoch its
    clean-shutdown marker recorded (KIP-966, KAFKA-15586), -1 when it has none: the registration is
    clean only if it equals the epoch the controller has on record."""

    broker_id: int
    incarnation_id: str
    endpoints: Mapping[str, str]
    rack: str | None = None
    log_dirs: tuple[str, ...] = ()
    previous_broker_epoch: int = NO_VALUE


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResponse:
    """`broker_epoch` (the registration record's offset) goes into every later request of the broker.
    `warning`, on success, says why the registration counted as an unclean restart and what it cost
    (the broker logs it for the operator); None for a clean one."""

    error_code: ErrorCode
    error_message: str | None = None
    broker_epoch: int = NO_VALUE
    warning: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    """A replica's log end, reported for a partition without a leader whose ISR and ELR are empty
    (the fields of KIP-966's GetReplicaLogInfo answer). `current_leader_epoch` is the partition's
    leader epoch the replica's core is in; `last_written_leader_epoch` the epoch of its last batch
    (-1 for an empty log). `log_start_offset` and `epoch_start_offsets` (its leader-epoch cache:
    (epoch, start offset) pairs, oldest first) let the controller tell whether one replica's log
    surely holds another's (`controller/quorum_controller.py`, `_surely_extends`). Records from
    `may_be_committed_end_offset` on (-1: none) only this replica ever held, and no leader counted
    them committed: a deposed leader's that it never sent to a follower."""

    topic_id: str
    partition_index: int
    current_leader_epoch: int
    last_written_leader_epoch: int
    log_end_offset: int
    log_start_offset: int = 0
    epoch_start_offsets: tuple[tuple[int, int], ...] = ()
    may_be_committed_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    """Sent every `broker.heartbeat.interval.ms`. `current_metadata_offset` is the broker's applied
    metadata offset; `want_fence` asks to stay fenced (still starting); `want_shutdown` asks for a
    controlled shutdown. `replica_log_info`: the log ends of its replicas of partitions that have
    no leader and an empty ISR and ELR, from which the controller elects the most complete."""

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shutdown: bool = False
    replica_log_info: tuple[ReplicaLogInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest:
    """A stopping broker asks to hand over its leaderships first (a heartbeat with `want_shutdown`)."""

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    """`is_caught_up`: the broker has applied its own registration. `should_shut_down`: a controlled
    shutdown is complete (it leads nothing and has seen the records that moved its leaderships)."""

    error_code: ErrorCode
    error_message: str | None = None
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


# ---- AllocateProducerIds ----------------------------------------------------------------------------

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
PRODUCER_ID_MAX = 2**63 - 1


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


# ---- AlterPartition ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterPartitionData:
    """A leader's proposed ISR for one partition, at the leader and partition epochs it knows.
    `new_isr_broker_epochs`, when given, pairs each ISR member with the broker epoch the leader saw
    it fetch with (KIP-903); -1 skips the check for that member."""

    topic_id: str
    partition_index: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    new_isr_broker_epochs: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    partitions: tuple[AlterPartitionData, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """On NONE, the partition's state after the change (which the leader adopts). On
    INELIGIBLE_REPLICA too: the refusal bumped the partition epoch (see `QuorumController`)."""

    topic_id: str
    partition_index: int
    error_code: ErrorCode
    error_message: str | None = None
    leader_id: int = NO_VALUE
    leader_epoch: int = NO_VALUE
    isr: tuple[int, ...] = ()
    partition_epoch: int = NO_VALUE


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """A top-level error (unknown broker, stale broker epoch) leaves `partitions` empty."""

    error_code: ErrorCode
    error_message: str | None = None
    partitions: tuple[AlterPartitionResult, ...] = ()


# ---- periodic work -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerTick:
    """Time passed: fence brokers whose session expired, elect leaders where one became possible."""


@dataclass(frozen=True, slots=True)
class TickResponse:
    fenced_broker_ids: tuple[int, ...] = ()
    elected_partitions: tuple[tuple[str, int], ...] = ()
