"""The wire protocol between clients and nodes, defined once (DESIGN §1): routes, message shapes, codec.

Every API is `POST /v1/<name>` with a msgpack map body, answered `200` with a msgpack map. Field
names are Kafka's (snake_case of its JSON message schemas); error codes are Kafka's `ErrorCode`.
A request the node cannot parse (bad msgpack, a missing, unknown or mistyped field, a number out
of range, a body over `socket.request.max.bytes`) is answered `400` (`413` for size) with an
`ErrorResponse`, and changes nothing. Per-partition failures travel inside a `200` answer, as in
Kafka, so one bad partition does not fail the others.

The topic-admin shapes (CreateTopics, DeleteTopics, IncrementalAlterConfigs) are the controller's own
request and response classes (controller/controller_api.py, plain data), imported and re-exported here
so they are written once; every other shape is defined here.

Shapes are frozen dataclasses; `encode` turns one into plain msgpack data, `decode(cls, data)`
checks data against `cls`'s type hints, field by field, and raises `ProtocolError` naming the
field. The same codec carries the node-to-node messages whose shapes the cores define (Raft
messages, controller requests); `node/` names their routes here too.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgpack

from controller.controller_api import (  # the topic-admin shapes are the controller's own: defined once, re-exported
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResourceResult,
    ConfigResourceType,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from storage.error_codes import ErrorCode

CONTENT_TYPE = "application/msgpack"
PREFIX = "/v1/"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
NO_LEADER = -1
NO_EPOCH = -1

# Special timestamps of ListOffsets (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

T = TypeVar("T")


class Api(enum.Enum):
    """Every route: the value is the path after `/v1/`."""

    PRODUCE = "produce"
    FETCH = "fetch"
    LIST_OFFSETS = "list_offsets"
    OFFSETS_FOR_LEADER_EPOCH = "offsets_for_leader_epoch"
    DELETE_RECORDS = "delete_records"
    METADATA = "metadata"
    DESCRIBE_REPLICAS = "describe_replicas"
    CREATE_TOPICS = "create_topics"
    DELETE_TOPICS = "delete_topics"
    DESCRIBE_CONFIGS = "describe_configs"
    INCREMENTAL_ALTER_CONFIGS = "incremental_alter_configs"
    OFFSET_COMMIT = "offset_commit"
    OFFSET_FETCH = "offset_fetch"
    INIT_PRODUCER_ID = "init_producer_id"
    JOIN_GROUP = "join_group"
    SYNC_GROUP = "sync_group"
    HEARTBEAT = "heartbeat"
    LEAVE_GROUP = "leave_group"
    LIST_GROUPS = "list_groups"
    DESCRIBE_GROUPS = "describe_groups"
    DELETE_GROUPS = "delete_groups"
    OFFSET_DELETE = "offset_delete"
    CREATE_PARTITIONS = "create_partitions"
    # node to node
    RAFT = "raft"
    BROKER_REGISTRATION = "broker_registration"
    BROKER_HEARTBEAT = "broker_heartbeat"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    ALTER_PARTITION = "alter_partition"
    ALLOCATE_PRODUCER_IDS = "allocate_producer_ids"

    @property
    def path(self) -> str:
        return PREFIX + self.value


class ProtocolError(Exception):
    """A request or response that does not fit its shape: `code` is what the sender is told."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """The answer to a request that was refused as a whole (HTTP 4xx/5xx)."""

    error_code: ErrorCode
    error: str
    message: str


# ---- produce ---------------------------------------------------------------------------------


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


# ---- fetch -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """A partition to fetch. Followers also send `last_fetched_epoch` (KIP-320), their
    `log_start_offset` and `high_watermark`."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1048576
    current_leader_epoch: int = NO_EPOCH
    last_fetched_epoch: int = NO_EPOCH
    log_start_offset: int = -1
    high_watermark: int = -1


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """replica_id -1: a consumer. Any replica serves a consumer up to its own HW (KIP-392); a
    consumer that sets `rack_id` is also told the preferred replica in its rack. A follower sends
    its `cluster_id` (Kafka's ClusterId, v12+): a leader refuses a replica fetch from another cluster
    (INCONSISTENT_CLUSTER_ID)."""

    partitions: tuple[FetchPartition, ...]
    replica_id: int = -1
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


# ---- list offsets, offsets for leader epoch, delete records ----------------------------------


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


# ---- metadata and replica state --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """topics None: every topic."""

    topics: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class MetadataBroker:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class MetadataPartition:
    """One partition as the metadata says. `eligible_leader_replicas` and `last_known_elr` are
    KIP-966's (Kafka shows them in DescribeTopicPartitions): replicas outside the ISR that still
    hold every acknowledged record, and those that lost that standing by an unclean restart."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: ErrorCode = ErrorCode.NONE
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MetadataTopic:
    name: str
    error_code: ErrorCode
    topic_id: str = ""
    partitions: tuple[MetadataPartition, ...] = ()
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """`metadata_offset`: the last metadata-log offset this node applied (how fresh this is);
    addresses are those of the listener the request came in on."""

    cluster_id: str
    controller_id: int
    metadata_offset: int
    brokers: tuple[MetadataBroker, ...]
    topics: tuple[MetadataTopic, ...]


@dataclass(frozen=True, slots=True)
class DescribeReplicasRequest:
    """This node's replicas (all when `topics` is None): what `cluster status` shows per replica."""

    topics: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ReplicaState:
    topic: str
    partition: int
    role: str
    leader_id: int
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    isr: tuple[int, ...] = ()
    size_bytes: int = 0
    log_dir: str = ""  # the log dir holding it (Kafka's DescribeLogDirs)


@dataclass(frozen=True, slots=True)
class DescribeReplicasResponse:
    node_id: int
    replicas: tuple[ReplicaState, ...]


# ---- topic configs (topic admin itself uses the controller's shapes, imported above) -----------


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    """Topic configs: the topic's own settings and the effective value of every key."""

    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribeConfigsResult:
    topic: str
    error_code: ErrorCode
    error_message: str = ""
    configs: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    results: tuple[DescribeConfigsResult, ...]


# ---- consumer group offsets (stored in the compacted topic __consumer_offsets) ---------------


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


# ---- consumer groups (Kafka's classic group protocol) -----------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupProtocol:
    name: str  # an assignor: "range", "roundrobin", "cooperative-sticky"
    metadata: bytes  # Kafka's ConsumerProtocolSubscription


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: tuple[JoinGroupProtocol, ...]
    client_id: str = "tributary"
    group_instance_id: str | None = None  # group.instance.id: a static member (KIP-345)
    # Kafka's clientHost, for DescribeGroups: set by the node the client reached (its peer address)
    # and carried when that node forwards the request to the coordinator; a client's own is replaced.
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    """`members`: every member's subscription, for the leader only."""

    error_code: ErrorCode
    generation_id: int = -1
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class SyncGroupAssignment:
    member_id: str
    assignment: bytes  # Kafka's ConsumerProtocolAssignment


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[SyncGroupAssignment, ...] = ()  # the leader's
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: ErrorCode
    assignment: bytes = b""
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupMember:
    """A static member leaving by its instance id (LeaveGroup v3+, KIP-345); `member_id` "" when
    unknown (an admin removing it)."""

    group_instance_id: str
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    member_ids: tuple[str, ...]
    members: tuple[LeaveGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupResponse:
    """The answer to a Heartbeat or a LeaveGroup."""

    error_code: ErrorCode
    error_message: str = ""


# ---- ListGroups, DescribeGroups: what kafka-consumer-groups.sh shows -------------------------


class ConsumerGroupState(enum.Enum):
    """A group's state as ListGroups and DescribeGroups name it (Kafka's ConsumerGroupState)."""

    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    EMPTY = "Empty"


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    """The groups this node coordinates (as in Kafka, a client asks every broker and merges);
    `states_filter` (KIP-518): only groups in these states, every group when empty."""

    states_filter: tuple[ConsumerGroupState, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: ConsumerGroupState


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    """A retriable `error_code` (COORDINATOR_LOAD_IN_PROGRESS) says some groups may be missing."""

    error_code: ErrorCode
    groups: tuple[ListedGroup, ...] = ()
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    """Any node answers, asking each group's coordinator."""

    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedGroupMember:
    """`member_metadata`: its subscription (ConsumerProtocolSubscription) and `member_assignment`
    (ConsumerProtocolAssignment), both empty unless the group is Stable."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    """Kafka's DescribedGroup: `protocol_data` is the assignor while Stable; an unknown group is Dead
    with no members and no error. `group_state` is None in an error answer. `coordinator_id`
    (ours): the node that answered, since any node takes the request and asks the coordinator."""

    error_code: ErrorCode
    group_id: str
    group_state: ConsumerGroupState | None = None
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedGroupMember, ...] = ()
    error_message: str = ""
    coordinator_id: int = -1


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


# ---- DeleteGroups, OffsetDelete: kafka-consumer-groups.sh --delete, --delete-offsets ---------


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    """Any node answers, asking each group's coordinator. A group is deleted only when it has no
    members (NON_EMPTY_GROUP otherwise), with its committed offsets."""

    groups_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletableGroupResult:
    group_id: str
    error_code: ErrorCode
    error_message: str = ""  # ours: Kafka's DeleteGroups has none


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeletableGroupResult, ...]


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


# ---- InitProducerId (KIP-98) -------------------------------------------------------------------


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


# ---- node to node: the cores' own shapes travel in an envelope -------------------------------


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message whose shape a core defines (a Raft message, a controller request): `type` is its
    class name, looked up in the receiver's table of known classes. `source_id` and
    `source_address` say who sent it and where answers go (a Raft leader learns an observer's
    address this way; voters' addresses come from `controller.quorum.voters`). `cluster_id` is the
    sender's: a node refuses a request from another cluster (INCONSISTENT_CLUSTER_ID), so a node
    pointed at the wrong voters cannot vote, lead or register there."""

    type: str
    body: Mapping[str, Any]
    source_id: int = -1
    source_address: str = ""
    cluster_id: str = ""

    def require_cluster(self, cluster_id: str) -> None:
        """ProtocolError (INCONSISTENT_CLUSTER_ID) unless this comes from a node of `cluster_id`."""
        if self.cluster_id != cluster_id:
            raise ProtocolError(f"{self.type} from node {self.source_id} of cluster {self.cluster_id!r}; this node "
                                f"is in cluster {cluster_id!r}: check controller.quorum.voters on both nodes",
                                ErrorCode.INCONSISTENT_CLUSTER_ID)


REQUESTS: dict[Api, type] = {
    Api.PRODUCE: ProduceRequest,
    Api.FETCH: FetchRequest,
    Api.LIST_OFFSETS: ListOffsetsRequest,
    Api.OFFSETS_FOR_LEADER_EPOCH: OffsetsForLeaderEpochRequest,
    Api.DELETE_RECORDS: DeleteRecordsRequest,
    Api.METADATA: MetadataRequest,
    Api.DESCRIBE_REPLICAS: DescribeReplicasRequest,
    Api.CREATE_TOPICS: CreateTopicsRequest,
    Api.DELETE_TOPICS: DeleteTopicsRequest,
    Api.DESCRIBE_CONFIGS: DescribeConfigsRequest,
    Api.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsRequest,
    Api.OFFSET_COMMIT: OffsetCommitRequest,
    Api.OFFSET_FETCH: OffsetFetchRequest,
    Api.INIT_PRODUCER_ID: InitProducerIdRequest,
    Api.JOIN_GROUP: JoinGroupRequest,
    Api.SYNC_GROUP: SyncGroupRequest,
    Api.HEARTBEAT: HeartbeatRequest,
    Api.LEAVE_GROUP: LeaveGroupRequest,
    Api.LIST_GROUPS: ListGroupsRequest,
    Api.DESCRIBE_GROUPS: DescribeGroupsRequest,
    Api.DELETE_GROUPS: DeleteGroupsRequest,
    Api.OFFSET_DELETE: OffsetDeleteRequest,
    Api.CREATE_PARTITIONS: CreatePartitionsRequest,
    Api.RAFT: Envelope,
    Api.BROKER_REGISTRATION: Envelope,
    Api.BROKER_HEARTBEAT: Envelope,
    Api.CONTROLLED_SHUTDOWN: Envelope,
    Api.ALTER_PARTITION: Envelope,
    Api.ALLOCATE_PRODUCER_IDS: Envelope,
}
RESPONSES: dict[Api, type] = {
    Api.PRODUCE: ProduceResponse,
    Api.FETCH: FetchResponse,
    Api.LIST_OFFSETS: ListOffsetsResponse,
    Api.OFFSETS_FOR_LEADER_EPOCH: OffsetsForLeaderEpochResponse,
    Api.DELETE_RECORDS: DeleteRecordsResponse,
    Api.METADATA: MetadataResponse,
    Api.DESCRIBE_REPLICAS: DescribeReplicasResponse,
    Api.CREATE_TOPICS: CreateTopicsResponse,
    Api.DELETE_TOPICS: DeleteTopicsResponse,
    Api.DESCRIBE_CONFIGS: DescribeConfigsResponse,
    Api.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsResponse,
    Api.OFFSET_COMMIT: OffsetCommitResponse,
    Api.OFFSET_FETCH: OffsetFetchResponse,
    Api.INIT_PRODUCER_ID: InitProducerIdResponse,
    Api.JOIN_GROUP: JoinGroupResponse,
    Api.SYNC_GROUP: SyncGroupResponse,
    Api.HEARTBEAT: GroupResponse,
    Api.LEAVE_GROUP: GroupResponse,
    Api.LIST_GROUPS: ListGroupsResponse,
    Api.DESCRIBE_GROUPS: DescribeGroupsResponse,
    Api.DELETE_GROUPS: DeleteGroupsResponse,
    Api.OFFSET_DELETE: OffsetDeleteResponse,
    Api.CREATE_PARTITIONS: CreatePartitionsResponse,
    Api.RAFT: Envelope,
    Api.BROKER_REGISTRATION: Envelope,
    Api.BROKER_HEARTBEAT: Envelope,
    Api.CONTROLLED_SHUTDOWN: Envelope,
    Api.ALTER_PARTITION: Envelope,
    Api.ALLOCATE_PRODUCER_IDS: Envelope,
}


# ---- codec -----------------------------------------------------------------------------------


def pack(message: Any) -> bytes:
    """A dataclass (or plain data) as msgpack bytes."""
    return msgpack.packb(encode(message), use_bin_type=True)


def unpack(cls: type[T], body: bytes, max_list_length: int = -1) -> T:
    """msgpack bytes as a `cls`; ProtocolError names what is wrong. A list or map longer than
    `max_list_length` (-1: as long as the body allows) is refused before it is built."""
    try:
        data = msgpack.unpackb(body, raw=False, strict_map_key=False, max_array_len=max_list_length,
                               max_map_len=max_list_length)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        # TypeError: a map key msgpack cannot hash (a map or an array)
        raise ProtocolError(f"the body is not valid msgpack ({error}); send one msgpack map") from None
    return decode(cls, data)


# Types msgpack takes as they are: `encode` and the dataclass encoders pass them through untouched.
_PLAIN_TYPES = frozenset({int, str, bytes, bool, float, type(None)})


def encode(value: Any) -> Any:
    """Plain msgpack data for a dataclass, enum, tuple, mapping or scalar."""
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return value
    return _encoder_for(kind)(value)


@functools.cache
def _encoder_for(kind: type) -> Callable[[Any], Any]:
    """The encoder of values of type `kind`, built once per type (a dataclass's field names are
    looked up once, not per message)."""
    if dataclasses.is_dataclass(kind):
        names = tuple(f.name for f in _fields(kind))

        def encode_dataclass(value: Any) -> dict[str, Any]:
            data = {}
            for name in names:
                item = getattr(value, name)
                data[name] = item if type(item) in _PLAIN_TYPES else encode(item)
            return data

        return encode_dataclass
    if issubclass(kind, enum.Enum):
        return _enum_value
    if issubclass(kind, (tuple, list)):
        return _encode_items
    if issubclass(kind, Mapping):
        return _encode_mapping
    if issubclass(kind, memoryview):
        return bytes
    return _unchanged


def _enum_value(value: enum.Enum) -> Any:
    return value.value


def _encode_items(value: tuple | list) -> list[Any]:
    return [encode(item) for item in value]


def _encode_mapping(value: Mapping) -> dict[Any, Any]:
    return {encode(key): encode(item) for key, item in value.items()}


def _unchanged(value: Any) -> Any:
    return value


def decode(cls: type[T], data: Any) -> T:
    """`data` checked against `cls` (a dataclass) and built into one.

    Two decoders with one meaning: a fast one compiled once per class, which only says whether
    the data fits, and the field-by-field walk below, which names what does not. Data the fast
    one refuses is walked again, so every error message comes from the walk."""
    fast = _fast_decoder(cls)
    if fast is not None:
        try:
            return fast(data)
        except _Misfit:
            pass
    return _decode(cls, data, cls.__name__)


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cls)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(hint: Any, data: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, data, where)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, data, where)
            except ProtocolError as error:
                errors.append(str(error))
        raise ProtocolError("; ".join(errors))
    if origin is tuple or origin is list:
        if not isinstance(data, (list, tuple)):
            raise ProtocolError(f"{where} must be an array, not {type(data).__name__}")
        args = typing.get_args(hint)
        if origin is tuple and args[-1] is not Ellipsis:  # a fixed-length tuple such as tuple[str, int]
            if len(data) != len(args):
                raise ProtocolError(f"{where} must have {len(args)} items, not {len(data)}")
            pairs = enumerate(zip(args, data, strict=True))
            return tuple(_decode(item, value, f"{where}[{i}]") for i, (item, value) in pairs)
        items = [_decode(args[0], value, f"{where}[{i}]") for i, value in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin in (Mapping, dict):
        if not isinstance(data, dict):
            raise ProtocolError(f"{where} must be a map, not {type(data).__name__}")
        key_hint, value_hint = typing.get_args(hint)
        return {
            _decode(key_hint, key, f"{where} key"): _decode(value_hint, value, f"{where}[{key!r}]")
            for key, value in data.items()
        }
    if hint is Any:
        return data
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(data)
        except ValueError:
            raise ProtocolError(f"{where}: {data!r} is not a known {hint.__name__}") from None
    if hint is int:
        if type(data) is not int:
            raise ProtocolError(f"{where} must be an integer, not {type(data).__name__}")
        if not INT64_MIN <= data <= INT64_MAX:
            raise ProtocolError(f"{where} is out of the 64-bit range")
        return data
    if hint is float:
        if type(data) not in (int, float):
            raise ProtocolError(f"{where} must be a number, not {type(data).__name__}")
        return float(data)
    if hint in (str, bool, bytes):
        if type(data) is not hint:
            raise ProtocolError(f"{where} must be {hint.__name__}, not {type(data).__name__}")
        return data
    raise TypeError(f"no decoder for {hint!r} at {where}")


def _decode_dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ProtocolError(f"{where} must be a map, not {type(data).__name__}")
    hints = _hints(cls)
    known = {f.name for f in _fields(cls)}
    unknown = [key for key in data if key not in known]
    if unknown:
        raise ProtocolError(f"{where} has unknown fields {sorted(map(str, unknown))}; known: {sorted(known)}")
    values = {}
    for f in _fields(cls):
        if f.name in data:
            values[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ProtocolError(f"{where} is missing the required field {f.name!r}")
    return cls(**values)


class _Misfit(Exception):
    """The fast decoder's refusal: no message, the walk (`_decode`) finds and names the fault."""


FastDecoder = Callable[[Any], Any]


@functools.cache
def _fast_decoder(hint: Any) -> FastDecoder | None:
    """A decoder for `hint` that accepts exactly what `_decode` accepts and builds the same value,
    but raises `_Misfit` instead of naming the fault; None for a hint it does not know (the walk
    then decodes alone). Built once per hint: the type hints are read here, not per message."""
    try:
        return _compile(hint)
    except TypeError:
        return None


def _compile(hint: Any) -> FastDecoder:
    if dataclasses.is_dataclass(hint):
        return _compile_dataclass(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _compile_union(hint)
    if origin is tuple or origin is list:
        return _compile_sequence(hint, origin)
    if origin in (Mapping, dict):
        key_hint, value_hint = typing.get_args(hint)
        return _compile_mapping(_compile(key_hint), _compile(value_hint))
    if hint is Any:
        return _unchanged
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _compile_enum(hint)
    if hint is int:
        return _decode_int
    if hint is float:
        return _decode_float
    if hint in (str, bool, bytes):
        return _compile_exact(hint)
    raise TypeError(f"no decoder for {hint!r}")


def _compile_dataclass(cls: type) -> FastDecoder:
    hints = _hints(cls)
    fields = tuple(
        (f.name, _compile(hints[f.name]), f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in _fields(cls)
    )
    known = frozenset(name for name, _, _ in fields)

    def decode_dataclass(data: Any) -> Any:
        if not isinstance(data, dict) or not known.issuperset(data):
            raise _Misfit
        values = {}
        for name, decode_field, required in fields:
            if name in data:
                values[name] = decode_field(data[name])
            elif required:
                raise _Misfit
        return cls(**values)

    return decode_dataclass


def _compile_union(hint: Any) -> FastDecoder:
    options = typing.get_args(hint)
    nullable = type(None) in options
    decoders = tuple(_compile(option) for option in options if option is not type(None))

    def decode_union(data: Any) -> Any:
        if data is None and nullable:
            return None
        for decode_option in decoders:
            try:
                return decode_option(data)
            except _Misfit:
                pass
        raise _Misfit

    return decode_union


def _compile_sequence(hint: Any, origin: type) -> FastDecoder:
    args = typing.get_args(hint)
    if origin is tuple and args[-1] is not Ellipsis:
        items = tuple(_compile(arg) for arg in args)

        def decode_fixed_tuple(data: Any) -> tuple:
            if not isinstance(data, (list, tuple)) or len(data) != len(items):
                raise _Misfit
            return tuple(decode_item(value) for decode_item, value in zip(items, data, strict=True))

        return decode_fixed_tuple
    decode_item = _compile(args[0])

    def decode_sequence(data: Any) -> tuple | list:
        if not isinstance(data, (list, tuple)):
            raise _Misfit
        decoded = [decode_item(value) for value in data]
        return tuple(decoded) if origin is tuple else decoded

    return decode_sequence


def _compile_mapping(decode_key: FastDecoder, decode_value: FastDecoder) -> FastDecoder:
    def decode_mapping(data: Any) -> dict:
        if not isinstance(data, dict):
            raise _Misfit
        return {decode_key(key): decode_value(value) for key, value in data.items()}

    return decode_mapping


def _compile_enum(cls: type[enum.Enum]) -> FastDecoder:
    def decode_enum(data: Any) -> enum.Enum:
        try:
            return cls(data)
        except ValueError:
            raise _Misfit from None

    return decode_enum


def _decode_int(data: Any) -> int:
    if type(data) is not int or not INT64_MIN <= data <= INT64_MAX:
        raise _Misfit
    return data


def _decode_float(data: Any) -> float:
    if type(data) not in (int, float):
        raise _Misfit
    return float(data)


def _compile_exact(kind: type) -> FastDecoder:
    def decode_exact(data: Any) -> Any:
        if type(data) is not kind:
            raise _Misfit
        return data

    return decode_exact


def error_response(code: ErrorCode, message: str) -> ErrorResponse:
    return ErrorResponse(code, code.name, message)
