"""A cluster of real `Broker`s in one event loop, over loopback HTTP, with a fake quorum.

`FakeQuorum` is the real `QuorumController` with every record committed at once (as
tests/sim/replication/controller.py), offering the QuorumService interface the broker codes
against; its listeners run synchronously after each change, as a node's metadata driver calls
them after applying records. `move_leader` writes a partition change as another controller would
(failover), through `QuorumController.reset_to`.

Each broker serves a tiny aiohttp app with the data routes (msgpack through `wire.codec`);
`cut(broker_id)` makes its fetch route refuse replicas (HTTP 503, also for answers of fetches in
flight), as a network cut between a leader and its followers would. `cut_when(answer)` cuts at the
first answer to a replica fetch that satisfies it, that answer lost too: a follower stops right
before it would learn something (a new HW, say).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from client.connection import Connections
from controller.metadata import ClusterMetadata, PartitionRegistration
from controller.metadata_records import MetadataRecord, PartitionChange
from controller.quorum_controller import ControllerConfig, QuorumController
from node.broker import Broker, BrokerSettings
from node.request_stream import Call, add_stream_route
from replication.config import ReplicationConfig
from storage import meta_properties
from storage.config import LogConfig
from storage.log_manager import LogManager
from storage.records import build_batch_from_values, iter_headers
from wire.api import REQUESTS, Api, error_response
from wire.codec import pack, unpack
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchPartitionResponse, FetchRequest, FetchResponse
from wire.produce import ProducePartition, ProducePartitionResponse, ProduceRequest, ProduceResponse
from wire.topic_partition import TopicPartition
from wire.topics import CreatableTopic, CreateTopicsRequest, DeleteTopicsRequest

T = TypeVar("T")
LISTENER = "HTTP"
CLUSTER_ID = "tributary-test-cluster"
TIMEOUT_S = 15
# Small index files: every partition preallocates its indexes on a temp dir.
LOG_DEFAULTS = {"segment.index.bytes": "4096", "index.interval.bytes": "64"}


MAX_BODY_BYTES = 64 * 1024 * 1024


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class FakeQuorum:
    """The QuorumService interface over a `QuorumController` whose records commit at once."""

    def __init__(self, clock: Callable[[], int], seed: int = 7) -> None:
        self.clock = clock
        config = ControllerConfig(broker_session_timeout_ms=600_000)
        self.controller = QuorumController(ClusterMetadata(), random.Random(seed), clock(), 0, config)
        self.listeners: list[Callable[[], None]] = []
        self._waiters: list[tuple[Callable[[ClusterMetadata], bool], asyncio.Future[None]]] = []

    @property
    def metadata(self) -> ClusterMetadata:
        return self.controller.metadata

    @property
    def metadata_offset(self) -> int:
        return self.metadata.metadata_offset

    def add_listener(self, callback: Callable[[], None]) -> None:
        self.listeners.append(callback)

    async def controller_request(self, request: Any, timeout_ms: int) -> Any:
        before = self.metadata_offset
        response = self.controller.handle(request, self.clock()).response
        if self.metadata_offset != before:
            self._publish()
        return response

    def _publish(self) -> None:
        for listener in list(self.listeners):
            listener()
        for predicate, future in list(self._waiters):
            if not future.done() and predicate(self.metadata):
                future.set_result(None)

    async def until(self, predicate: Callable[[ClusterMetadata], bool]) -> None:
        """Wait until the committed metadata satisfies `predicate`."""
        if predicate(self.metadata):
            return
        waiter = (predicate, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(TIMEOUT_S):
                await waiter[1]
        finally:
            self._waiters.remove(waiter)

    def write(self, *records: MetadataRecord) -> None:
        """Commit `records` as another active controller would, and publish them."""
        metadata = self.metadata.copy()
        offset = self.controller.next_offset
        for record in records:
            metadata.apply_record(offset, record)
            offset += 1
        self.controller.reset_to(metadata, self.clock(), offset)
        self._publish()

    def partition(self, topic: str, index: int) -> PartitionRegistration:
        topic_id = self.metadata.topic_id(topic)
        assert topic_id is not None, topic
        state = self.metadata.partition(topic_id, index)
        assert state is not None, (topic, index)
        return state

    def move_leader(self, topic: str, index: int, leader: int, isr: tuple[int, ...]) -> PartitionRegistration:
        """Failover: `leader` leads `topic`-`index` in a new leader epoch with `isr`."""
        topic_id = self.metadata.topic_id(topic)
        assert topic_id is not None, topic
        self.write(PartitionChange(topic_id, index, isr=isr, leader=leader))
        return self.partition(topic, index)


class BrokerNode:
    """One broker with its log dir and its app on 127.0.0.1."""

    def __init__(self, broker_id: int, directory: Path) -> None:
        self.broker_id = broker_id
        self.directory = directory
        self.broker: Broker | None = None
        self.runner: web.AppRunner | None = None
        self.address = ""
        self.cut = False
        self.cut_when: Callable[[FetchResponse], bool] | None = None
        self.cut_now = asyncio.Event()  # set when `cut_when` cuts the link
        self.replica_fetches: list[FetchRequest] = []

    @property
    def log_manager(self) -> LogManager:
        assert self.broker is not None
        return self.broker.log_manager

    async def serve(self) -> None:
        app = web.Application()
        routes: dict[Api, Callable[[Any], Any]] = {
            Api.PRODUCE: lambda request: self._broker().produce(request),
            Api.FETCH: self._fetch,
            Api.LIST_OFFSETS: lambda request: self._broker().list_offsets(request),
            Api.OFFSETS_FOR_LEADER_EPOCH: lambda request: self._broker().offsets_for_leader_epoch(request),
            Api.DELETE_RECORDS: lambda request: self._broker().delete_records(request),
        }
        add_stream_route(app, lambda _request: _calls(routes), MAX_BODY_BYTES)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.address = f"{host}:{port}"

    def _broker(self) -> Broker:
        assert self.broker is not None, f"broker {self.broker_id} not started"
        return self.broker

    async def _fetch(self, request: FetchRequest) -> FetchResponse | None:
        is_replica = request.replica_id >= 0
        if is_replica:
            self.replica_fetches.append(request)
        if is_replica and self.cut:
            return None
        response = await self._broker().fetch(request)
        if is_replica and self.cut_when is not None and self.cut_when(response):
            self.cut = True
            self.cut_now.set()
        return None if is_replica and self.cut else response

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _calls(routes: dict[Api, Callable[[Any], Any]]) -> Call:
    async def call(api: Api, body: bytes) -> tuple[int, bytes]:
        answer = await routes[api](unpack(REQUESTS[api], body))
        if answer is None:
            return 503, pack(error_response(ErrorCode.NETWORK_EXCEPTION, "cut by the test"))
        return 200, pack(answer)

    return call


class Cluster:
    """Brokers 0..n-1 with one FakeQuorum and one Connections; `start`, then `stop`."""

    def __init__(self, root: Path, size: int = 3, **settings: Any) -> None:
        self.root = root
        self.quorum = FakeQuorum(wall_clock_ms)
        self.connections = Connections()
        self.nodes = [BrokerNode(broker_id, root / f"broker-{broker_id}") for broker_id in range(size)]
        self.settings = {
            "broker_heartbeat_interval_ms": 100,
            "replica_fetch_wait_max_ms": 200,
            "replica_fetch_backoff_ms": 50,
            "request_timeout_ms": 5_000,
            "controlled_shutdown_timeout_ms": 5_000,
            "replication": ReplicationConfig(replica_lag_time_max_ms=10_000),
            **settings,
        }

    def broker(self, broker_id: int) -> Broker:
        broker = self.nodes[broker_id].broker
        assert broker is not None
        return broker

    def log_config(self, topic: str) -> LogConfig:
        return LogConfig.from_properties({**LOG_DEFAULTS, **self.quorum.metadata.topic_configs(topic)})

    async def start(self) -> None:
        for node in self.nodes:
            await node.serve()
            await self._start_broker(node)
        async with asyncio.timeout(TIMEOUT_S):
            for node in self.nodes:
                await self.broker(node.broker_id).wait_unfenced()

    async def _start_broker(self, node: BrokerNode) -> None:
        settings = BrokerSettings(node_id=node.broker_id, advertised_endpoints={LISTENER: node.address},
                                  inter_broker_listener_name=LISTENER, cluster_id=CLUSTER_ID,
                                  broker_rack=f"rack-{node.broker_id}",
                                  **self.settings)
        claimed = meta_properties.ensure(node.directory, node.broker_id, CLUSTER_ID, random.Random())
        assert claimed.directory_id is not None
        log_manager = LogManager([node.directory], self.log_config, wall_clock_ms())
        node.broker = Broker(settings, self.quorum, self.connections, monotonic_ms, wall_clock_ms, log_manager,
                             (claimed.directory_id,))
        await node.broker.start()

    async def restart(self, broker_id: int) -> Broker:
        """A new broker process on the stopped broker's directory and address; returns it unfenced."""
        node = self.nodes[broker_id]
        assert node.broker is not None and node.broker.is_stopped, f"broker {broker_id} is running"
        await self._start_broker(node)
        async with asyncio.timeout(TIMEOUT_S):
            await self.broker(broker_id).wait_unfenced()
        return self.broker(broker_id)

    async def stop(self) -> None:
        for node in self.nodes:
            if node.broker is not None:
                await node.broker.stop(controlled=False)
        for node in self.nodes:
            await node.close()
        await self.connections.close()

    async def create_topic(self, name: str, assignments: dict[int, tuple[int, ...]],
                           configs: dict[str, str] | None = None) -> None:
        topic = CreatableTopic(name, assignments=assignments, configs=configs or {})
        response = await self.quorum.controller_request(CreateTopicsRequest((topic,)), 1_000)
        assert response.topics[0].error_code == ErrorCode.NONE, response
        await self.metadata_applied()

    async def metadata_applied(self) -> None:
        """Until every running broker has applied the last metadata to all its partitions."""
        async with asyncio.timeout(TIMEOUT_S):
            for node in self.nodes:
                if node.broker is not None and not node.broker.is_stopped:
                    await node.broker.wait_metadata_applied()

    async def delete_topic(self, name: str) -> None:
        response = await self.quorum.controller_request(DeleteTopicsRequest(topic_names=(name,)), 1_000)
        assert response.topics[0].error_code == ErrorCode.NONE, response

    async def call(self, broker_id: int, api: Api, request: Any, response_type: type[T]) -> T:
        return await self.connections.call(self.nodes[broker_id].address, api, request, response_type,
                                           TIMEOUT_S * 1000)

    async def produce(self, broker_id: int, topic_partition: TopicPartition, records: bytes, acks: int = -1,
                      current_leader_epoch: int = -1) -> ProducePartitionResponse:
        part = ProducePartition(topic_partition.topic, topic_partition.partition, records,
                                         current_leader_epoch)
        request = ProduceRequest(acks=acks, timeout_ms=10_000, partitions=(part,))
        response = await self.call(broker_id, Api.PRODUCE, request, ProduceResponse)
        return response.partitions[0]

    async def fetch(self, broker_id: int, topic_partition: TopicPartition, offset: int, max_wait_ms: int = 0,
                    min_bytes: int = 1, current_leader_epoch: int = -1,
                    rack_id: str = "") -> FetchPartitionResponse:
        """A consumer's fetch of one partition."""
        part = FetchPartition(topic_partition.topic, topic_partition.partition, offset,
                                       current_leader_epoch=current_leader_epoch)
        request = FetchRequest(partitions=(part,), max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                                        rack_id=rack_id)
        response = await self.call(broker_id, Api.FETCH, request, FetchResponse)
        return response.partitions[0]


@contextlib.asynccontextmanager
async def started(root: Path, size: int = 3) -> AsyncIterator[Cluster]:
    """A started Cluster, stopped on the way out (the body of the tests' `cluster` fixtures)."""
    cluster = Cluster(root, size)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


def batch(*values: bytes, timestamp_ms: int | None = None) -> bytes:
    """One record batch of `values`, stamped with the wall clock unless `timestamp_ms` is given."""
    return build_batch_from_values(list(values), timestamp_ms=wall_clock_ms() if timestamp_ms is None else timestamp_ms)


async def until(broker: Broker, topic_partition: TopicPartition, predicate: Callable[[], bool]) -> None:
    """Wait, without polling, until `predicate` holds; it is re-checked whenever a partition's log or
    HW changes on `broker` (and once a second as a safety net)."""
    async with asyncio.timeout(TIMEOUT_S):
        while not predicate():
            await broker.wait_for_change(1_000)


def log_bytes(broker: Broker, topic_partition: TopicPartition) -> bytes:
    """Every batch of the replica's log, as stored (one read per segment)."""
    log = broker.hosts[topic_partition].partition.log
    pieces, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30, max_offset=log.log_end_offset).records
        assert data, f"no batch at {offset} below LEO {log.log_end_offset}"
        pieces.append(data)
        offset = max(header.next_offset for _, header in iter_headers(data))
    return b"".join(pieces)
