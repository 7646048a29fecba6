"""The HTTP+msgpack API between clients and nodes: its routes and which shapes travel on each.

Every API is `POST /v1/<name>` with a msgpack map body, answered `200` with a msgpack map. Field
names are Kafka's (snake_case of its JSON message schemas); error codes are Kafka's `ErrorCode`.
A request the node cannot parse (bad msgpack, a missing, unknown or mistyped field, a number out
of range, a body over `socket.request.max.bytes`) is answered `400` (`413` for size) with an
`ErrorResponse`, and changes nothing. Per-partition failures travel inside a `200` answer, as in
Kafka, so one bad partition does not fail the others. The shapes live in the modules of `wire/`,
one per API or group of APIs; `wire/codec.py` turns them into msgpack and back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from wire.configs import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wire.envelope import Envelope
from wire.error_codes import ErrorCode
from wire.fetch import FetchRequest, FetchResponse
from wire.group_admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from wire.group_membership import (
    GroupResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from wire.group_offsets import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from wire.log_offsets import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from wire.metadata import DescribeReplicasRequest, DescribeReplicasResponse, MetadataRequest, MetadataResponse
from wire.produce import ProduceRequest, ProduceResponse
from wire.producer_ids import InitProducerIdRequest, InitProducerIdResponse
from wire.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

CONTENT_TYPE = "application/msgpack"
PREFIX = "/v1/"


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


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """The answer to a request that was refused as a whole (HTTP 4xx/5xx)."""

    error_code: ErrorCode
    error: str
    message: str


def error_response(code: ErrorCode, message: str) -> ErrorResponse:
    return ErrorResponse(code, code.name, message)


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
