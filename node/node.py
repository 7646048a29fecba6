"""Node: one process's parts wired together by `process.roles` — config, quorum service, broker,
group offsets, HTTP.

Roles (KRaft). Every node runs the quorum service: a controller is a Raft voter and, while it
leads, the active controller; a broker-only node follows the metadata log as an observer. Only a
broker opens its partition logs, registers, hosts partitions and keeps group offsets; a
controller-only node keeps just its metadata log (in `metadata.log.dir`) and serves what Kafka's
controller listener serves: Raft, the broker-to-controller requests and topic admin (answered as
the active controller or forwarded to it). It refuses every other request with 503
BROKER_NOT_AVAILABLE naming the brokers to use, which a client takes as "ask another node".

Start order: claim the data dirs (meta.properties: refuse a dir of another cluster; a new or wiped
dir gets a fresh directory id, KIP-858), open the
logs (storage recovery), listen (peers need the Raft route before anyone can be elected), start
the quorum, then the broker (it registers with the active controller). Client requests are
refused (503 BROKER_NOT_AVAILABLE) until the broker has applied the metadata up to its
registration, as a Kafka broker opens its client listeners only after that catch-up: a restarted
node would otherwise answer from the metadata it had when it stopped. Stop order is the reverse; a
controlled stop first moves leadership away through the controller.
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from node import admin
from node.broker import Broker
from node.config import NodeConfig
from node.group_deletion import GroupDeletion
from node.group_membership import GroupMembership, with_client_host
from node.group_offsets import OFFSETS_TOPIC, GroupOffsets
from node.group_queries import GroupQueries
from node.kafka.listener import KafkaListener
from node.loop_lag import LoopLagProbe
from node.metrics import NodeMetrics, QuorumMetrics, ReplicaMetrics
from node.producer_ids import ProducerIdManager
from node.quorum import QuorumService
from node.server import NotABroker, NotOnThisListener, NotServingYet, build_app
from replication.fetch_sessions import FetchSessionCache
from storage import meta_properties
from storage.config import LogConfig
from storage.dir_lock import DirLock
from storage.log_manager import LogManager
from wire.api import Api
from wire.codec import ProtocolError
from wire.envelope import Envelope
from wire.error_codes import ErrorCode
from wire.fetch import FetchRequest
from wire.group_admin import DeletableGroupResult, DeleteGroupsResponse, DescribedGroup, DescribeGroupsResponse
from wire.group_offsets import (
    OffsetCommitPartitionResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
)
from wire.topics import CreatableTopic, CreateTopicsRequest

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
# Served while the broker catches up: Raft, and controller requests another node forwards here
# (the active controller may be a node whose broker is still starting).
NODE_TO_NODE_APIS = frozenset(
    {Api.RAFT, Api.BROKER_REGISTRATION, Api.BROKER_HEARTBEAT, Api.CONTROLLED_SHUTDOWN, Api.ALTER_PARTITION,
     Api.ALLOCATE_PRODUCER_IDS}
)
# Topic admin is forwarded to the active controller on these public routes; it answers them from
# the quorum's state, so they are served there even while its own broker catches up.
CONTROLLER_ADMIN_APIS = frozenset({Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.INCREMENTAL_ALTER_CONFIGS,
                                   Api.CREATE_PARTITIONS})
OFFSETS_TOPIC_SEGMENT_BYTES = 104857600  # Kafka's offsets.topic.segment.bytes


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Node:
    def __init__(self, config: NodeConfig, clock: Any = wall_clock_ms, rng: random.Random | None = None,
                 monotonic_clock: Any = monotonic_ms) -> None:
        self.config = config
        self.clock = clock
        self.monotonic_clock = monotonic_clock
        self.rng = rng or random.Random()
        # Streams to other nodes, one set per channel as Kafka keeps one network client per purpose:
        # a call that times out closes its stream with every call on it (client/connection.py), so a
        # slow controller must not cut the replica fetches (one 2,000-partition failover stalled
        # writes for 30 s that way). `connections`: replica fetches and group requests;
        # `controller_connections`: requests forwarded to the active controller (Raft has its own).
        self.connections = Connections()
        self.controller_connections = Connections()
        # Raft and the controller time elections, fetch and session timeouts: the monotonic clock,
        # so a wall-clock step neither fences every broker at once nor freezes an election. (The
        # metadata log's batch timestamps then count from the host's boot; nothing reads them.)
        self.quorum = QuorumService(config, self.controller_connections, monotonic_clock, self.rng)
        self.metrics = NodeMetrics(self._replica_metrics if config.is_broker else None, self._quorum_metrics)
        self.loop_lag = LoopLagProbe(self.metrics.observe_loop_lag)
        self.log_manager: LogManager | None = None
        self.broker: Broker | None = None
        self.group_offsets: GroupOffsets | None = None
        self.producer_ids: ProducerIdManager | None = None
        self.group_membership: GroupMembership | None = None
        self.group_queries: GroupQueries | None = None
        self.group_deletion: GroupDeletion | None = None
        self._runner: web.AppRunner | None = None
        self.kafka_listeners = [KafkaListener(self, endpoint.name, endpoint.host.strip("[]"), endpoint.port)
                                for endpoint in config.kafka_listeners()] if config.is_broker else []
        self._dir_locks: list[DirLock] = []
        # KIP-227: the Kafka listeners' fetch sessions, one cache per broker as in Kafka.
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots,
                                                random.Random(self.rng.getrandbits(64)))

    async def start(self) -> None:
        # Before anything in them is read: a second process on the same dirs refuses to start.
        for directory in dict.fromkeys(Path(data_dir).resolve() for data_dir in self.config.data_dirs):
            try:
                self._dir_locks.append(DirLock.acquire(directory, f"node {self.config.node_id}"))
            except BaseException:
                self._release_dir_locks()
                raise
        directory_ids: dict[str, str] = {}
        for data_dir in self.config.data_dirs:
            claimed = meta_properties.ensure(Path(data_dir), self.config.node_id, self.config.cluster_id, self.rng)
            assert claimed.directory_id is not None, f"ensure leaves a directory id: {claimed}"
            directory_ids[data_dir] = claimed.directory_id
        if self.config.is_broker:
            self._make_broker(tuple(directory_ids[log_dir] for log_dir in self.config.log_dirs))
        self._runner = web.AppRunner(build_app(self), access_log=None)
        await self._runner.setup()
        for host, port in self.config.listener_binds():
            await web.TCPSite(self._runner, host, port).start()
        await self.quorum.start()
        if self.broker is not None:
            await self.broker.start()
            for listener in self.kafka_listeners:
                await listener.start(self.broker.wait_caught_up)
        self.loop_lag.start(f"loop-lag-{self.config.node_id}")

    def _make_broker(self, directory_ids: tuple[str, ...]) -> None:
        """The broker's parts: its partition logs (storage recovery runs here; the clean-shutdown
        marker's broker epoch is read), the broker (it registers with `directory_ids`, those of its
        log dirs, KIP-858), group offsets."""
        self.log_manager = LogManager([Path(d) for d in self.config.log_dirs], self._log_config, self.clock(),
                                      skip_topics=frozenset({METADATA_TOPIC}))
        self.broker = Broker(self.config.broker_settings(), self.quorum, self.connections, self.monotonic_clock,
                             self.clock, self.log_manager, directory_ids)
        self.group_offsets = GroupOffsets(
            self.config.node_id, self.config.offsets_topic_num_partitions, self._offsets_leader,
            self._offsets_coordinator_address, self.broker.produce, self.broker.fetch, self.broker.list_offsets,
            self._forward, self._create_offsets_topic, self.clock, self.config.request_timeout_ms,
            lambda group, generation, member, instance: self._membership().commit_error(
                group, generation, member, instance),
        )
        self.group_membership = GroupMembership(
            self.config.node_id, self.config.offsets_topic_num_partitions, self.config.groups_config(),
            self._offsets_leader, self._offsets_leader_epoch, self.group_offsets.route,
            self._offsets_coordinator_address, self._forward, self.group_offsets.write_group,
            self.group_offsets.load_groups, self.monotonic_clock, random.Random(self.rng.getrandbits(64)),
        )
        self.group_queries = GroupQueries(
            self.config.node_id, self.config.offsets_topic_num_partitions, self._offsets_leader,
            self.group_offsets.route, self._offsets_coordinator_address, self._forward, self.group_membership,
            self.group_offsets.group_ids,
        )
        self.group_deletion = GroupDeletion(
            self.config.node_id, self.config.offsets_topic_num_partitions, self._offsets_leader,
            self.group_offsets.route, self._offsets_coordinator_address, self._forward, self.group_membership,
            self.group_offsets.group_ids, self.group_offsets.delete_offsets, self._partition_exists,
        )
        broker = self.broker
        self.producer_ids = ProducerIdManager(self.config.node_id, lambda: broker.lifecycle.broker_epoch,
                                              self.quorum.controller_request, self.config.request_timeout_ms)

    async def stop(self, controlled: bool) -> None:
        for listener in self.kafka_listeners:
            await listener.stop()
        if self.broker is not None:
            await self.broker.stop(controlled)
        await self.quorum.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.connections.close()
        await self.controller_connections.close()
        await self.loop_lag.stop()
        self._release_dir_locks()

    def _release_dir_locks(self) -> None:
        for lock in self._dir_locks:
            lock.release()
        self._dir_locks = []

    def _log_config(self, topic: str) -> LogConfig:
        return LogConfig.from_properties(self.quorum.metadata.topic_configs(topic), base=self.config.log_config())

    # ---- requests ------------------------------------------------------------------------------

    async def dispatch(self, api: Api, message: Any, listener: str, peer: str | None = None) -> Any:
        """The answer to one decoded request that arrived on `listener` from address `peer`."""
        self._check_served(api, message, listener)
        if api in NODE_TO_NODE_APIS or api in CONTROLLER_ADMIN_APIS:
            return await self._dispatch_to_quorum(api, message)
        broker = self.broker
        assert broker is not None, f"{api.value} passed the role check on a node without a broker"
        match api:
            case Api.PRODUCE:
                return await broker.produce(message)
            case Api.FETCH:
                return await broker.fetch(message)
            case Api.LIST_OFFSETS:
                return await broker.list_offsets(message)
            case Api.OFFSETS_FOR_LEADER_EPOCH:
                return await broker.offsets_for_leader_epoch(message)
            case Api.DELETE_RECORDS:
                return await broker.delete_records(message)
            case Api.DESCRIBE_REPLICAS:
                return broker.describe_replicas(message)
            case Api.METADATA:
                return admin.metadata_response(self.quorum.metadata, message, listener, self.config.cluster_id,
                                               self.quorum.active_controller_id)
            case Api.DESCRIBE_CONFIGS:
                return admin.describe_configs(self.quorum.metadata, message, self.config.log_config())
            case Api.OFFSET_COMMIT:
                assert self.group_offsets is not None
                return await self.group_offsets.commit(message)
            case Api.OFFSET_FETCH:
                assert self.group_offsets is not None
                return await self.group_offsets.fetch(message)
            case Api.INIT_PRODUCER_ID:
                assert self.producer_ids is not None
                return await self.producer_ids.init_producer_id(message)
            case Api.JOIN_GROUP:
                forwarded = self.config.serves_node_traffic(listener)
                return await self._membership().join(with_client_host(message, peer, forwarded))
            case Api.SYNC_GROUP:
                return await self._membership().sync(message)
            case Api.HEARTBEAT:
                return await self._membership().heartbeat(message)
            case Api.LEAVE_GROUP:
                return await self._membership().leave(message)
            case Api.LIST_GROUPS:
                assert self.group_queries is not None
                return await self.group_queries.list_groups(message)
            case Api.DESCRIBE_GROUPS:
                assert self.group_queries is not None
                return await self.group_queries.describe_groups(message)
            case Api.DELETE_GROUPS:
                assert self.group_deletion is not None
                return await self.group_deletion.delete_groups(message)
            case Api.OFFSET_DELETE:
                assert self.group_deletion is not None
                return await self.group_deletion.delete_offsets(message)
        raise AssertionError(f"no handler for {api.value}")

    def _check_served(self, api: Api, message: Any, listener: str) -> None:
        """Raise NotOnThisListener, NotABroker or NotServingYet when this node does not serve `api`
        on `listener`, or not yet; ProtocolError (INCONSISTENT_CLUSTER_ID) for another cluster's
        replica fetch."""
        if api in NODE_TO_NODE_APIS or (isinstance(message, FetchRequest) and message.replica_id >= 0):
            if not self.config.serves_node_traffic(listener):
                internal = ", ".join((self.config.inter_broker_listener_name, *self.config.controller_listener_names))
                raise NotOnThisListener(
                    f"listener {listener} of node {self.config.node_id} serves clients only; Raft, the "
                    f"broker-to-controller requests and replica fetches go to its listeners {internal} "
                    "(inter.broker.listener.name, controller.listener.names)")
            if api in NODE_TO_NODE_APIS:
                return
            if message.cluster_id != self.config.cluster_id:
                raise ProtocolError(f"a replica fetch from broker {message.replica_id} of cluster "
                                    f"{message.cluster_id!r}; this node is in cluster {self.config.cluster_id!r}: "
                                    "check controller.quorum.voters on both nodes", ErrorCode.INCONSISTENT_CLUSTER_ID)
        if not self.config.is_broker:
            # A controller-only node: topic admin runs on the active controller, here or forwarded.
            if api in CONTROLLER_ADMIN_APIS:
                return
            raise NotABroker(self._not_a_broker_message(api, listener))
        broker = self.broker
        assert broker is not None, "a broker's routes are served only after it exists (start)"
        if broker.is_caught_up or (api in CONTROLLER_ADMIN_APIS
                                   and self.quorum.active_controller_id == self.config.node_id):
            return
        raise NotServingYet(
            f"node {self.config.node_id} is starting: it has not yet caught up with the metadata log "
            f"(applied up to offset {self.quorum.metadata_offset}, its registration not yet among it); "
            f"ask another node, or retry when its /health says broker_unfenced"
        )

    def _not_a_broker_message(self, api: Api, listener: str) -> str:
        """Why a controller-only node refuses `api`, and the brokers to ask instead (their addresses
        on `listener`, from this node's metadata)."""
        addresses = [broker.endpoints[listener] for broker in self.quorum.metadata.brokers()
                     if not broker.fenced and listener in broker.endpoints]
        where = (f"send it to a broker: {', '.join(addresses)}" if addresses
                 else "no broker is registered and unfenced yet; start nodes with process.roles=broker")
        return (f"node {self.config.node_id} is a controller only (process.roles=controller): it hosts no "
                f"partitions and serves no {api.value} requests; {where}")

    async def _dispatch_to_quorum(self, api: Api, message: Any) -> Any:
        """Raft, the broker-to-controller requests and topic admin: the quorum service's."""
        match api:
            case Api.RAFT:
                await self.quorum.handle_raft(message)
                return Envelope("Ack", {})
            case Api.CREATE_TOPICS | Api.DELETE_TOPICS | Api.INCREMENTAL_ALTER_CONFIGS | Api.CREATE_PARTITIONS:
                timeout_ms = getattr(message, "timeout_ms", self.config.request_timeout_ms)
                return await self.quorum.controller_request(message, timeout_ms)
            case _:
                return await self.quorum.handle_controller(api, message)

    async def _forward(self, address: str, api: Api, request: Any, response_type: type) -> Any:
        """A group request to its coordinator; a JoinGroup may wait there for its whole rebalance."""
        timeout_ms = self.config.request_timeout_ms + (request.rebalance_timeout_ms if api is Api.JOIN_GROUP else 0)
        try:
            return await self.connections.call(address, api, request, response_type, timeout_ms)
        except (NodeUnavailableError, RequestRejectedError) as error:
            log.info("forwarding %s to %s failed: %s", api.value, address, error)
            if api in (Api.JOIN_GROUP, Api.SYNC_GROUP, Api.HEARTBEAT, Api.LEAVE_GROUP):
                return response_type(ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=str(error))
            if api is Api.OFFSET_FETCH:
                return OffsetFetchResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, (), str(error))
            if api is Api.DESCRIBE_GROUPS:
                return DescribeGroupsResponse(tuple(
                    DescribedGroup(ErrorCode.COORDINATOR_NOT_AVAILABLE, group_id, error_message=str(error))
                    for group_id in request.groups))
            if api is Api.DELETE_GROUPS:
                return DeleteGroupsResponse(tuple(
                    DeletableGroupResult(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE, str(error))
                    for group_id in request.groups_names))
            if api is Api.OFFSET_DELETE:
                return OffsetDeleteResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, (), str(error))
            return OffsetCommitResponse(tuple(
                OffsetCommitPartitionResponse(p.topic, p.partition, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                       str(error))
                for p in request.partitions))

    # ---- __consumer_offsets --------------------------------------------------------------------

    def _offsets_leader(self, partition: int) -> int | None:
        metadata = self.quorum.metadata
        topic_id = metadata.topic_id(OFFSETS_TOPIC)
        state = metadata.partition(topic_id, partition) if topic_id is not None else None
        return state.leader if state is not None else None

    def _offsets_leader_epoch(self, partition: int) -> int:
        metadata = self.quorum.metadata
        topic_id = metadata.topic_id(OFFSETS_TOPIC)
        state = metadata.partition(topic_id, partition) if topic_id is not None else None
        return state.leader_epoch if state is not None else -1

    def _partition_exists(self, topic: str, partition: int) -> bool:
        metadata = self.quorum.metadata
        topic_id = metadata.topic_id(topic)
        return topic_id is not None and metadata.partition(topic_id, partition) is not None

    def _membership(self) -> GroupMembership:
        assert self.group_membership is not None, "group requests are served only on a broker"
        return self.group_membership

    def _offsets_coordinator_address(self, partition: int) -> str | None:
        leader = self._offsets_leader(partition)
        broker = self.quorum.metadata.broker(leader) if leader is not None and leader >= 0 else None
        return broker.endpoints.get(self.config.inter_broker_listener_name) if broker is not None else None

    async def _create_offsets_topic(self) -> ErrorCode:
        """Create `__consumer_offsets` with its configured replication factor, never fewer (Kafka:
        the coordinator is not available until enough brokers are up; a topic created smaller
        would stay under-replicated for good)."""
        live = sum(1 for broker in self.quorum.metadata.brokers() if broker.active)
        factor = self.config.offsets_topic_replication_factor
        if live < factor:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        topic = CreatableTopic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, factor,
                               configs={"cleanup.policy": "compact", "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES)})
        response = await self.quorum.controller_request(CreateTopicsRequest((topic,)), self.config.request_timeout_ms)
        return response.topics[0].error_code if response.topics else ErrorCode.UNKNOWN_SERVER_ERROR

    # ---- health and metrics --------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Healthy: the quorum service runs and knows its leader, and (a broker) the broker is
        registered and unfenced within its session. A controller-only node has no broker part."""
        leader = self.quorum.active_controller_id
        following = self.quorum.is_running
        status: dict[str, Any] = {
            "healthy": leader is not None and following,
            "node_id": self.config.node_id,
            "process_roles": sorted(role.value for role in self.config.process_roles),
            "following_metadata": following,
            "active_controller": leader,
            "metadata_offset": self.quorum.metadata_offset,
        }
        if self.config.is_broker:
            registered = self.broker is not None and self.broker.is_unfenced
            status["broker_unfenced"] = registered
            status["healthy"] = status["healthy"] and registered
        return status

    def _replica_metrics(self) -> list[ReplicaMetrics]:
        return self.broker.replica_metrics() if self.broker is not None else []

    def _quorum_metrics(self) -> QuorumMetrics:
        leader = self.quorum.active_controller_id
        return QuorumMetrics(self.config.node_id, leader if leader is not None else -1, self.quorum.epoch,
                             self.quorum.metadata_offset, leader == self.config.node_id)
