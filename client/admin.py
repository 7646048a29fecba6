"""Admin: topics, configs, delete records and a description of the whole cluster.

Topic and config changes go to any node, which forwards them to the active controller.
`describe_cluster` joins the metadata with `Api.DESCRIBE_REPLICAS` from every node, so each
replica's log end offset and lag can be shown (`tributary cluster status`); a node that does not
answer is reported as unreachable instead of failing the whole description.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from client.errors import TributaryError, error_for
from client.metadata import Metadata, PartitionInfo, TopicPartition
from client.protocol import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    Api,
    ConfigResourceType,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeReplicasRequest,
    DescribeReplicasResponse,
    ErrorCode,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    MetadataBroker,
    ReplicaState,
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
