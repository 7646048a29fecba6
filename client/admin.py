"""Admin: topics, configs, delete records and a description of the whole cluster.

Topic and config changes go to any node, which forwards them to the active controller.
`describe_cluster` joins the metadata with `Api.DESCRIBE_REPLICAS` from every node, so each
replica's log end offset and lag can be shown (`tributary cluster status`); a node that does not
answer is reported as unreachable instead of failing the whole description. `list_groups` asks
every broker for the groups it coordinates and merges them, `describe_groups` any node (it asks each
group's coordinator), as Kafka's AdminClient does; both retry while a coordinator loads or moves.
`delete_groups` and `delete_offsets` (Kafka's deleteConsumerGroups, deleteConsumerGroupOffsets) go to
any node too and answer each group's or partition's outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from client.consumer_protocol import ConsumerProtocolError, decode_assignment
from client.errors import TributaryError, error_for, retrying
from client.metadata import Metadata, PartitionInfo
from wire.api import Api
from wire.configs import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wire.error_codes import ErrorCode
from wire.group_admin import (
    ConsumerGroupState,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from wire.group_offsets import OffsetDeleteRequest, OffsetDeleteResponse
from wire.log_offsets import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsResponse
from wire.metadata import DescribeReplicasRequest, DescribeReplicasResponse, MetadataBroker, ReplicaState
from wire.topic_partition import TopicPartition
from wire.topics import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """A broker as the cluster sees it; `state` is "online", "fenced" or "unreachable"."""

    broker: MetadataBroker
    state: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """A partition's metadata and what each replica's node says of its log (`replica_states`)."""

    info: PartitionInfo
    replica_states: Mapping[int, ReplicaState]

    @property
    def leader_state(self) -> ReplicaState | None:
        return self.replica_states.get(self.info.leader)

    @property
    def high_watermark(self) -> int:
        leader = self.leader_state
        return -1 if leader is None else leader.high_watermark

    @property
    def log_start_offset(self) -> int:
        leader = self.leader_state
        return -1 if leader is None else leader.log_start_offset

    def lag(self, node_id: int) -> int | None:
        """How many offsets the replica's LEO trails the leader's (None: unknown)."""
        leader, replica = self.leader_state, self.replica_states.get(node_id)
        if leader is None or replica is None:
            return None
        return max(0, leader.log_end_offset - replica.log_end_offset)


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    nodes: tuple[NodeStatus, ...]
    partitions: tuple[PartitionStatus, ...]


@dataclass(frozen=True, slots=True)
class GroupListing:
    """A group as ListGroups shows it (Kafka's ConsumerGroupListing)."""

    group_id: str
    protocol_type: str
    state: ConsumerGroupState


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A member of a group: `assignment` decoded from Kafka's consumer protocol (empty unless the
    group is Stable, or for a group of another protocol type)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as DescribeGroups shows it (Kafka's ConsumerGroupDescription); `assignor` is the
    protocol its leader assigns with, while Stable; `coordinator` None when no node coordinates it."""

    group_id: str
    state: ConsumerGroupState
    protocol_type: str
    assignor: str
    members: tuple[MemberDescription, ...]
    coordinator: MetadataBroker | None

    def owners(self) -> dict[TopicPartition, MemberDescription]:
        """Each assigned partition's member."""
        return {tp: member for member in self.members for tp in member.assignment}


class Admin:
    def __init__(self, bootstrap: str, request_timeout_ms: int = 30000, connections: Connections | None = None) -> None:
        self._own_connections = connections is None
        self.connections = connections or Connections()
        self.metadata = Metadata(bootstrap, self.connections, request_timeout_ms)
        self.request_timeout_ms = request_timeout_ms

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_connections:
            await self.connections.close()

    # -- topics -------------------------------------------------------------------------

    async def create_topics(self, topics: Iterable[NewTopic], validate_only: bool = False) -> None:
        """Create every topic or raise the first failure (the others may have been created)."""
        request = CreateTopicsRequest(tuple(
            CreatableTopic(t.name, t.num_partitions, t.replication_factor, None, dict(t.configs)) for t in topics
        ), validate_only, self.request_timeout_ms)
        response = await self.metadata.request(Api.CREATE_TOPICS, request, CreateTopicsResponse)
        for result in response.topics:
            _raise_for(result.error_code, result.error_message, f"creating topic {result.name!r}")

    async def delete_topics(self, names: Iterable[str]) -> None:
        request = DeleteTopicsRequest(tuple(names), timeout_ms=self.request_timeout_ms)
        response = await self.metadata.request(Api.DELETE_TOPICS, request, DeleteTopicsResponse)
        for result in response.topics:
            _raise_for(result.error_code, result.error_message, f"deleting topic {result.name!r}")

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        await self.metadata.refresh(all_topics=True)
        return sorted(name for name in self.metadata.topics if include_internal or not name.startswith("__"))

    async def describe_topics(self, names: Iterable[str] | None = None) -> dict[str, list[PartitionInfo]]:
        """Partitions (leader, epoch, replicas, ISR) of each topic; all topics when `names` is None."""
        response = await self.metadata.refresh(all_topics=True)
        wanted = [t.name for t in response.topics] if names is None else list(names)
        described = {}
        for name in wanted:
            partitions = self.metadata.require_topic(name)
            described[name] = [partitions[number] for number in sorted(partitions)]
        return described

    # -- configs ------------------------------------------------------------------------

    async def describe_configs(self, topics: Iterable[str]) -> dict[str, DescribeConfigsResult]:
        response = await self.metadata.request(Api.DESCRIBE_CONFIGS, DescribeConfigsRequest(tuple(topics)),
                                               DescribeConfigsResponse)
        for result in response.results:
            _raise_for(result.error_code, result.error_message, f"describing configs of {result.topic!r}")
        return {result.topic: result for result in response.results}

    async def incremental_alter_configs(
        self, topic: str, changes: Mapping[str, str | None], validate_only: bool = False
    ) -> None:
        """Set each key to its value; a None value deletes the override (back to the default)."""
        configs = tuple(
            AlterableConfig(name, AlterConfigOp.DELETE if value is None else AlterConfigOp.SET, value)
            for name, value in changes.items()
        )
        request = IncrementalAlterConfigsRequest((AlterConfigsResource(ConfigResourceType.TOPIC, topic, configs),),
                                                 validate_only)
        response = await self.metadata.request(Api.INCREMENTAL_ALTER_CONFIGS, request, IncrementalAlterConfigsResponse)
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, f"altering configs of {result.resource_name!r}")

    # -- records ------------------------------------------------------------------------

    async def delete_records(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete every record below each offset (-1: below the HW); return the new low watermarks.
        Requests go to each partition's leader."""
        self.metadata.add_topics({tp.topic for tp in offsets})
        await self.metadata.refresh()
        by_leader: dict[int, list[DeleteRecordsPartition]] = {}
        for tp, offset in offsets.items():
            self.metadata.require_topic(tp.topic)
            leader = self.metadata.leader_for(tp)
            if leader is None:
                raise error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp} has no leader now; retry when it has one")
            by_leader.setdefault(leader, []).append(DeleteRecordsPartition(tp.topic, tp.partition, offset))
        low_watermarks = {}
        for leader, partitions in by_leader.items():
            response = await self._call(leader, Api.DELETE_RECORDS,
                                        DeleteRecordsRequest(tuple(partitions), self.request_timeout_ms),
                                        DeleteRecordsResponse)
            for p in response.partitions:
                _raise_for(p.error_code, p.error_message, f"deleting records of {p.topic}-{p.partition}")
                low_watermarks[TopicPartition(p.topic, p.partition)] = p.low_watermark
        return low_watermarks

    # -- consumer groups ----------------------------------------------------------------

    async def list_groups(self, states: Iterable[ConsumerGroupState] = ()) -> list[GroupListing]:
        """The groups every unfenced broker coordinates (only those in `states`, KIP-518, unless
        empty), merged by group id. Raises if a broker does not answer: the list would miss its groups."""
        await self.metadata.refresh()
        request = ListGroupsRequest(tuple(states))
        brokers = sorted(broker.node_id for broker in self.metadata.brokers.values() if not broker.fenced)

        async def listed_by(node_id: int) -> ListGroupsResponse:
            async def attempt() -> ListGroupsResponse:
                response = await self._call(node_id, Api.LIST_GROUPS, request, ListGroupsResponse)
                _raise_for(response.error_code, response.error_message, f"listing the groups of node {node_id}")
                return response

            return await retrying(attempt, self.request_timeout_ms, self.metadata.retry_backoff_ms)

        listed: dict[str, GroupListing] = {}
        for response in await asyncio.gather(*map(listed_by, brokers)):
            for group in response.groups:  # a group moving between coordinators may show twice
                listed.setdefault(group.group_id, GroupListing(group.group_id, group.protocol_type, group.group_state))
        return [listed[group_id] for group_id in sorted(listed)]

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        """Each group's state, assignor and members with their assignments; a group that does not
        exist is Dead with no members (as Kafka describes it)."""
        wanted = tuple(dict.fromkeys(group_ids))
        await self.metadata.refresh()  # the brokers, to name each group's coordinator

        async def attempt() -> DescribeGroupsResponse:
            response = await self.metadata.request(Api.DESCRIBE_GROUPS, DescribeGroupsRequest(wanted),
                                                   DescribeGroupsResponse)
            for group in response.groups:
                _raise_for(group.error_code, group.error_message, f"describing group {group.group_id!r}")
            return response

        response = await retrying(attempt, self.request_timeout_ms, self.metadata.retry_backoff_ms)
        return {group.group_id: self._group_description(group) for group in response.groups}

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, TributaryError | None]:
        """Delete each group with its committed offsets: None where it was deleted, else the error
        (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP while it has members, ...). The groups whose coordinator
        is loading or moving are asked again until the request timeout."""
        outcomes: dict[str, TributaryError | None] = {}
        pending = list(dict.fromkeys(group_ids))
        wanted = tuple(pending)

        async def attempt() -> None:
            response = await self.metadata.request(Api.DELETE_GROUPS, DeleteGroupsRequest(tuple(pending)),
                                                   DeleteGroupsResponse)
            for result in response.results:
                outcomes[result.group_id] = None if result.error_code is ErrorCode.NONE else error_for(
                    result.error_code, f"deleting group {result.group_id!r}: {result.error_message}")
            retriable = [outcome for group_id in pending
                         if (outcome := outcomes.get(group_id)) is not None and outcome.retriable]
            pending[:] = [group_id for group_id in pending if outcomes.get(group_id) in retriable]
            if retriable:
                raise retriable[0]

        with contextlib.suppress(TributaryError):  # out of time: each group's last outcome stands
            await retrying(attempt, self.request_timeout_ms, self.metadata.retry_backoff_ms)
        missing = [group_id for group_id in wanted if group_id not in outcomes]
        if missing:
            raise error_for(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for groups {missing}")
        return {group_id: outcomes[group_id] for group_id in wanted}

    async def delete_offsets(self, group_id: str,
                             partitions: Iterable[TopicPartition]) -> dict[TopicPartition, TributaryError | None]:
        """Delete the group's committed offsets of `partitions`: None where deleted, else the error
        (GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to the topic, UNKNOWN_TOPIC_OR_PARTITION).
        An error of the whole group (GROUP_ID_NOT_FOUND, ...) is raised."""
        request = OffsetDeleteRequest(group_id, tuple((tp.topic, tp.partition) for tp in dict.fromkeys(partitions)))

        async def attempt() -> OffsetDeleteResponse:
            response = await self.metadata.request(Api.OFFSET_DELETE, request, OffsetDeleteResponse)
            _raise_for(response.error_code, response.error_message, f"deleting offsets of group {group_id!r}")
            return response

        response = await retrying(attempt, self.request_timeout_ms, self.metadata.retry_backoff_ms)
        return {TopicPartition(p.topic, p.partition): None if p.error_code is ErrorCode.NONE
                else error_for(p.error_code, p.error_message) for p in response.partitions}

    def _group_description(self, group: DescribedGroup) -> GroupDescription:
        assert group.group_state is not None, f"group {group.group_id} described without a state"
        members = []
        for member in group.members:
            try:  # a member's assignment is another client's bytes: checked as it is decoded
                assigned = decode_assignment(member.member_assignment) if group.protocol_type == "consumer" else {}
            except ConsumerProtocolError as error:
                raise ValueError(f"member {member.member_id} of group {group.group_id} has an assignment that is not "
                                 f"Kafka's consumer protocol: {error}") from None
            partitions = frozenset(TopicPartition(topic, number) for topic, numbers in assigned.items()
                                   for number in numbers)
            members.append(MemberDescription(member.member_id, member.group_instance_id, member.client_id,
                                             member.client_host, partitions))
        coordinator = self.metadata.brokers.get(group.coordinator_id) if group.coordinator_id >= 0 else None
        return GroupDescription(group.group_id, group.group_state, group.protocol_type, group.protocol_data,
                                tuple(members), coordinator)

    # -- cluster ------------------------------------------------------------------------

    async def describe_cluster(self, include_internal: bool = False) -> ClusterDescription:
        """Metadata plus every node's replica states, asked of all nodes at once. Internal topics
        (`__consumer_offsets`) only with `include_internal`."""
        response = await self.metadata.refresh(all_topics=True)
        brokers = sorted(self.metadata.brokers.values(), key=lambda broker: broker.node_id)
        answers = await asyncio.gather(*(
            self._call(broker.node_id, Api.DESCRIBE_REPLICAS, DescribeReplicasRequest(), DescribeReplicasResponse)
            for broker in brokers
        ), return_exceptions=True)
        nodes = []
        states: dict[tuple[str, int], dict[int, ReplicaState]] = {}
        for broker, answer in zip(brokers, answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, TributaryError):
                    raise answer
                nodes.append(NodeStatus(broker, "unreachable", str(answer)))
                continue
            nodes.append(NodeStatus(broker, "fenced" if broker.fenced else "online"))
            for replica in answer.replicas:
                states.setdefault((replica.topic, replica.partition), {})[answer.node_id] = replica
        partitions = tuple(
            PartitionStatus(info, states.get((topic, number), {}))
            for topic in sorted(self.metadata.topics)
            if include_internal or not topic.startswith("__")
            for number, info in sorted(self.metadata.topics[topic].items())
        )
        return ClusterDescription(response.cluster_id, response.controller_id, tuple(nodes), partitions)

    async def _call(self, node_id: int, api: Api, request: object, response_type: type):
        address = self.metadata.address_of(node_id)
        try:
            if address is None:
                raise NodeUnavailableError(f"node {node_id} is not in the metadata")
            return await self.connections.call(address, api, request, response_type, self.request_timeout_ms)
        except NodeUnavailableError as error:
            raise error_for(ErrorCode.NETWORK_EXCEPTION, f"node {node_id} did not answer: {error}") from None
        except RequestRejectedError as error:
            raise error_for(error.code, error.message) from None


def _raise_for(code: ErrorCode, message: str | None, doing: str) -> None:
    if code is not ErrorCode.NONE:
        raise error_for(code, f"{doing}: {message}" if message else doing)
