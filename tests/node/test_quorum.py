"""QuorumService over real HTTP on loopback: three nodes elect a leader, controller requests sent
to any node reach the active controller, every node applies the same metadata, the quorum
survives the loss of its leader, and a restarted node catches up from its own directories.

Method: each node is a QuorumService behind a small aiohttp app built here (the Raft route, the
broker routes in Envelopes, the topic admin routes in their wire form through node/admin.py's
conversion), on 127.0.0.1 with a port chosen by the OS. Raft timeouts are small. The tests await
futures and metadata listeners with bounded timeouts; they never sleep.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from client.connection import Connections
from node.config import NodeConfig
from node.quorum import QuorumService
from node.raft_transport import ACK
from node.request_stream import add_stream_route
from wire.api import REQUESTS, Api
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest
from wire.codec import ProtocolError, encode, pack, unpack
from wire.envelope import Envelope
from wire.error_codes import ErrorCode
from wire.topics import CreatableTopic, CreateTopicsRequest

TIMEOUT_S = 20
REQUEST_TIMEOUT_MS = 10_000
FAST_RAFT = {
    "controller.quorum.election.timeout.ms": "150",
    "controller.quorum.election.backoff.max.ms": "100",
    "controller.quorum.fetch.timeout.ms": "500",
    "controller.quorum.request.timeout.ms": "500",
    "controller.quorum.fetch.max.wait.ms": "100",
    "controller.quorum.retry.backoff.ms": "10",
    "broker.heartbeat.interval.ms": "100",
    "broker.session.timeout.ms": "60000",
}
BROKER_ROUTES = (Api.BROKER_REGISTRATION, Api.BROKER_HEARTBEAT, Api.CONTROLLED_SHUTDOWN, Api.ALTER_PARTITION)
ADMIN_ROUTES = (Api.CREATE_TOPICS, Api.DELETE_TOPICS, Api.INCREMENTAL_ALTER_CONFIGS)


def clock_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def build_app(service: QuorumService) -> web.Application:
    """The routes node/server.py serves for the quorum, reduced to what these tests need."""

    async def call(api: Api, body: bytes) -> tuple[int, bytes]:
        if api is Api.RAFT:
            await service.handle_raft(unpack(Envelope, body))
            return 200, pack(ACK)
        if api in BROKER_ROUTES:
            return 200, pack(await service.handle_controller(api, unpack(Envelope, body)))
        assert api in ADMIN_ROUTES, api
        wire_request = unpack(REQUESTS[api], body)
        return 200, pack(await service.controller_request(wire_request, getattr(wire_request, "timeout_ms", 30000)))

    app = web.Application()
    add_stream_route(app, lambda _request: call, 64 * 1024 * 1024)
    return app


def bound_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


class TestNode:
    """One node: its socket (kept across restarts), config, service and app runner."""

    __test__ = False

    def __init__(self, node_id: int, sock: socket.socket, root: Path) -> None:
        self.node_id = node_id
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.root = root
        self.config: NodeConfig | None = None
        self.service: QuorumService | None = None
        self.connections: Connections | None = None
        self.runner: web.AppRunner | None = None
        self.incarnation = 0

    async def start(self) -> None:
        assert self.config is not None
        self.incarnation += 1
        self.connections = Connections()
        rng = random.Random(self.node_id * 1000 + self.incarnation)
        self.service = QuorumService(self.config, self.connections, clock_ms, rng)
        self.runner = web.AppRunner(build_app(self.service), access_log=None)
        await self.runner.setup()
        await web.SockSite(self.runner, self.sock).start()
        await self.service.start()

    async def stop(self) -> None:
        assert self.service is not None and self.runner is not None and self.connections is not None
        await self.service.stop()
        await self.runner.cleanup()  # closes the socket: a restart binds the same port again
        await self.connections.close()
        self.sock = bound_socket(self.port)


class Cluster:
    """`size` voters (ids 1..size, broker and controller) and `observers` broker-only nodes after them."""

    def __init__(self, root: Path, size: int, observers: int = 0, **extra: str) -> None:
        self.nodes = {node_id: TestNode(node_id, bound_socket(), root / f"node-{node_id}")
                      for node_id in range(1, size + observers + 1)}
        voters = ",".join(f"{node_id}@127.0.0.1:{self.nodes[node_id].port}" for node_id in range(1, size + 1))
        for node in self.nodes.values():
            node.config = NodeConfig.from_properties({
                "node.id": str(node.node_id), "controller.quorum.voters": voters,
                "process.roles": "broker,controller" if node.node_id <= size else "broker",
                "listeners": f"HTTP://127.0.0.1:{node.port}", "log.dirs": str(node.root / "data"),
                # The brokers here are the test's requests: nothing listens at their endpoints, so the
                # controller's probe would rightly fence them at once (README, "Failover after kill -9").
                "broker.refused.connection.fencing.enable": "false",
                **FAST_RAFT, **extra,
            })

    def service(self, node_id: int) -> QuorumService:
        service = self.nodes[node_id].service
        assert service is not None, f"node {node_id} is not running"
        return service

    async def stop(self) -> None:
        for node in self.nodes.values():
            if node.service is not None and node.runner is not None:
                await node.stop()
            node.sock.close()


async def wait_for_metadata(service: QuorumService, predicate: Callable[[], bool]) -> None:
    """Until `predicate()` holds after some applied metadata (or already)."""
    if predicate():
        return
    reached = asyncio.Event()
    service.add_listener(lambda: reached.set() if predicate() else None)
    async with asyncio.timeout(TIMEOUT_S):
        await reached.wait()


async def register(service: QuorumService, broker_id: int) -> int:
    endpoints = {"HTTP": f"127.0.0.1:{9000 + broker_id}"}
    request = BrokerRegistrationRequest(broker_id, f"incarnation-{broker_id}", endpoints)
    response = await service.controller_request(request, REQUEST_TIMEOUT_MS)
    assert response.error_code is ErrorCode.NONE, response
    await wait_for_metadata(service, lambda: service.metadata.broker(broker_id) is not None)
    return response.broker_epoch


async def heartbeat(service: QuorumService, broker_id: int, broker_epoch: int) -> None:
    request = BrokerHeartbeatRequest(broker_id, broker_epoch, service.metadata_offset)
    response = await service.controller_request(request, REQUEST_TIMEOUT_MS)
    assert response.error_code is ErrorCode.NONE, response
    assert response.is_caught_up and not response.is_fenced, response


async def create_topic(service: QuorumService, name: str, partitions: int, replication_factor: int) -> None:
    request = CreateTopicsRequest((CreatableTopic(name, partitions, replication_factor),))
    response = await service.controller_request(request, REQUEST_TIMEOUT_MS)
    assert [result.error_code for result in response.topics] == [ErrorCode.NONE], response


async def converged(services: list[QuorumService], offset: int) -> None:
    """Every service has applied up to `offset`, and all hold equal metadata."""
    for service in services:
        await wait_for_metadata(service, lambda service=service: service.metadata_offset >= offset)
    first = services[0].metadata
    for service in services[1:]:
        assert service.metadata == first, f"{service.metadata} != {first}"


def other_than(cluster: Cluster, node_id: int | None) -> int:
    return next(candidate for candidate, node in cluster.nodes.items()
                if candidate != node_id and node.service is not None)


@pytest.mark.parametrize("snapshot_interval", ["20000", "3"], ids=["log", "snapshots"])
async def test_cluster_elects_forwards_fails_over_and_a_restarted_node_catches_up(
    tmp_path: Path, snapshot_interval: str
) -> None:
    """With a snapshot every 3 records, the restarted node's position falls below the leader's log
    start and it catches up by FetchSnapshot."""
    cluster = Cluster(tmp_path, 3, **{"metadata.log.max.records.between.snapshots": snapshot_interval})
    try:
        for node in cluster.nodes.values():
            await node.start()
        first_epoch = await register(cluster.service(1), 1)  # waits for a leader, wherever it is
        leader = cluster.service(1).active_controller_id
        assert leader is not None
        assert cluster.service(leader).is_active_controller
        follower = cluster.service(other_than(cluster, leader))
        assert follower.active_controller_id == leader and not follower.is_active_controller

        epochs = {1: first_epoch, 2: await register(follower, 2), 3: await register(follower, 3)}
        for broker_id, broker_epoch in epochs.items():
            await heartbeat(follower, broker_id, broker_epoch)
        await create_topic(follower, "orders", 3, 3)
        await converged([cluster.service(node_id) for node_id in cluster.nodes],
                        cluster.service(leader).metadata_offset)
        topic_id = follower.metadata.topic_id("orders")
        assert topic_id is not None
        assert [len(state.isr) for state in follower.metadata.partitions(topic_id)] == [3, 3, 3]

        await cluster.nodes[leader].stop()
        survivor = cluster.service(other_than(cluster, leader))
        await create_topic(survivor, "payments", 2, 3)
        new_leader = survivor.active_controller_id
        assert new_leader is not None and new_leader != leader
        survivors = [cluster.service(node_id) for node_id in cluster.nodes if node_id != leader]
        await converged(survivors, cluster.service(new_leader).metadata_offset)

        await cluster.nodes[leader].start()
        restarted = cluster.service(leader)
        await converged([*survivors, restarted], cluster.service(new_leader).metadata_offset)
        assert restarted.metadata.topic_id("payments") is not None
        assert not restarted.is_active_controller
    finally:
        await cluster.stop()


async def test_a_voter_whose_disk_was_wiped_follows_at_once_and_votes_once_every_voter_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Goal: a voter without state over the real transport (its probes and their answers). Method: a
    follower's data dir goes while it is down; restarted, it catches up; then the leader stops, and
    the two left elect, which takes the wiped voter's vote (or its standing) either way."""
    cluster = Cluster(tmp_path, 3)
    try:
        for node in cluster.nodes.values():
            await node.start()
        await register(cluster.service(1), 1)
        leader = cluster.service(1).active_controller_id
        assert leader is not None
        wiped = other_than(cluster, leader)
        await cluster.nodes[wiped].stop()
        shutil.rmtree(cluster.nodes[wiped].root / "data")
        with caplog.at_level(logging.INFO, logger="node.quorum"):
            await cluster.nodes[wiped].start()
            await converged([cluster.service(node_id) for node_id in cluster.nodes],
                            cluster.service(leader).metadata_offset)
            await cluster.nodes[leader].stop()
            await register(cluster.service(wiped), 2)
        assert cluster.service(wiped).active_controller_id not in (None, leader)
        assert f"node {wiped}: no quorum-state in" in caplog.text
        assert f"node {wiped}: every other voter has answered" in caplog.text
    finally:
        await cluster.stop()


async def test_non_leader_answers_not_controller_and_bad_envelopes_are_refused(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3)
    try:
        for node in cluster.nodes.values():
            await node.start()
        await register(cluster.service(1), 1)
        leader = cluster.service(1).active_controller_id
        # the Raft envelopes below come from node 2: the node asked is a follower other than node 2
        follower = cluster.service(next(candidate for candidate in cluster.nodes if candidate not in (leader, 2)))
        cluster_id = follower.config.cluster_id
        request = BrokerRegistrationRequest(7, "x", {"HTTP": "127.0.0.1:9"})
        envelope = Envelope("BrokerRegistrationRequest", encode(request), 7, "127.0.0.1:9", cluster_id)
        answer = await follower.handle_controller(Api.BROKER_REGISTRATION, envelope)
        assert answer.type == "BrokerRegistrationResponse"
        assert answer.body["error_code"] == ErrorCode.NOT_CONTROLLER.value
        with pytest.raises(ProtocolError, match="does not go to /v1/broker_heartbeat"):
            await follower.handle_controller(Api.BROKER_HEARTBEAT, envelope)
        foreign = dataclasses.replace(envelope, cluster_id="AnotherClusterAAAAAAAAA")
        with pytest.raises(ProtocolError, match="of cluster 'AnotherClusterAAAAAAAAA'") as refused:
            await follower.handle_controller(Api.BROKER_REGISTRATION, foreign)
        assert refused.value.code is ErrorCode.INCONSISTENT_CLUSTER_ID

        def raft(kind: str, body: dict[str, object], source_id: int = 2, cluster: str = cluster_id) -> Envelope:
            return Envelope(kind, body, source_id, "", cluster)

        with pytest.raises(ProtocolError, match="'Nonsense' is not a Raft message"):
            await follower.handle_raft(raft("Nonsense", {}))
        with pytest.raises(ProtocolError, match="VoteRequest is missing the required field"):
            await follower.handle_raft(raft("VoteRequest", {"epoch": 1}))
        with pytest.raises(ProtocolError, match="BeginQuorumEpoch from node 9, which is not a voter"):
            await follower.handle_raft(raft("BeginQuorumEpoch", {"epoch": 99, "leader_id": 9}, 9))
        with pytest.raises(ProtocolError, match=r"BeginQuorumEpoch\.epoch is -1; it must be 0 or more"):
            await follower.handle_raft(raft("BeginQuorumEpoch", {"epoch": -1, "leader_id": 2}))
        with pytest.raises(ProtocolError, match="of cluster 'AnotherClusterAAAAAAAAA'") as refused:
            await follower.handle_raft(raft("BeginQuorumEpoch", {"epoch": 99, "leader_id": 2},
                                            cluster="AnotherClusterAAAAAAAAA"))
        assert refused.value.code is ErrorCode.INCONSISTENT_CLUSTER_ID
        with pytest.raises(ProtocolError, match=r"BeginQuorumEpoch\.leader_id is 3 but node 2 sent it"):
            await follower.handle_raft(raft("BeginQuorumEpoch", {"epoch": 99, "leader_id": 3}))
        pre_vote = {"epoch": 2**31, "candidate_id": 2, "last_epoch": 0, "last_end_offset": 0, "pre_vote": True}
        with pytest.raises(ProtocolError, match=r"VoteRequest\.epoch is 2147483648, above 2147483647"):
            await follower.handle_raft(raft("VoteRequest", pre_vote))
        answer_epoch = {"epoch": 1, "leader_id": 1, "error": 0, "correlation_id": 1, "fetch_offset": 0,
                        "last_fetched_epoch": 0, "diverging_epoch": {"epoch": 2**31, "offset": 0}}
        with pytest.raises(ProtocolError, match=r"FetchResponse\.diverging_epoch\.epoch is 2147483648"):
            await follower.handle_raft(raft("FetchResponse", answer_epoch))
        answer_epoch["diverging_epoch"] = {"epoch": 1, "offset": -5}
        with pytest.raises(ProtocolError, match=r"FetchResponse\.diverging_epoch\.offset is -5; it must be 0 or more"):
            await follower.handle_raft(raft("FetchResponse", answer_epoch))
        assert follower.is_running and follower.active_controller_id == leader
    finally:
        await cluster.stop()


async def test_without_a_quorum_a_request_times_out_with_a_named_error(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3)
    try:
        await cluster.nodes[1].start()  # one voter of three can never win an election
        request = CreateTopicsRequest((CreatableTopic("orders", 1, 1),))
        started = clock_ms()
        response = await cluster.service(1).controller_request(request, 300)
        assert clock_ms() - started < TIMEOUT_S * 1000
        assert response.topics[0].error_code is ErrorCode.REQUEST_TIMED_OUT
        assert "within 300 ms" in (response.topics[0].error_message or "")
    finally:
        await cluster.stop()


async def test_an_observer_follows_the_metadata_and_forwards_requests(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, observers=1)
    try:
        for node in cluster.nodes.values():
            await node.start()
        observer = cluster.service(4)
        broker_epoch = await register(observer, 4)  # forwarded: an observer is never the controller
        await heartbeat(observer, 4, broker_epoch)
        await create_topic(observer, "orders", 2, 1)
        leader = observer.active_controller_id
        assert leader is not None and leader != 4
        await converged([observer, cluster.service(leader)], cluster.service(leader).metadata_offset)
        assert not observer.is_active_controller
    finally:
        await cluster.stop()


async def test_silent_brokers_are_fenced_by_the_controller_tick(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3, **{"broker.session.timeout.ms": "400"})
    try:
        for node in cluster.nodes.values():
            await node.start()
        service = cluster.service(1)
        broker_epoch = await register(service, 1)
        await heartbeat(service, 1, broker_epoch)
        await wait_for_metadata(service, lambda: not service.metadata.broker(1).fenced)
        await wait_for_metadata(service, lambda: service.metadata.broker(1).fenced)  # no more heartbeats
    finally:
        await cluster.stop()


async def test_a_leader_cut_off_from_its_quorum_answers_pending_requests_not_controller(tmp_path: Path) -> None:
    """The leader proposes, cannot commit without its followers, resigns by check-quorum, and the
    pending request is answered NOT_CONTROLLER instead of waiting for its timeout."""
    cluster = Cluster(tmp_path, 3, **{"request.timeout.ms": "15000"})
    try:
        for node in cluster.nodes.values():
            await node.start()
        await register(cluster.service(1), 1)
        leader = cluster.service(1).active_controller_id
        assert leader is not None
        for node_id in cluster.nodes:
            if node_id != leader:
                await cluster.nodes[node_id].stop()
        request = BrokerRegistrationRequest(2, "incarnation-2", {"HTTP": "127.0.0.1:9002"})
        envelope = Envelope("BrokerRegistrationRequest", encode(request), 2, "127.0.0.1:9002",
                            cluster.service(leader).config.cluster_id)
        started = clock_ms()
        async with asyncio.timeout(TIMEOUT_S):
            answer = await cluster.service(leader).handle_controller(Api.BROKER_REGISTRATION, envelope)
        assert answer.body["error_code"] == ErrorCode.NOT_CONTROLLER.value, answer
        assert clock_ms() - started < 15_000
        assert not cluster.service(leader).is_active_controller
    finally:
        await cluster.stop()


async def test_a_single_voter_is_its_own_active_controller(tmp_path: Path) -> None:
    """Also: the Raft metadata log is Kafka's `__cluster_metadata-0` partition directory in the first
    log dir, holding ordinary segment files (checked while the node is stopped, all flushed)."""
    first_log_dir, second_log_dir = tmp_path / "data-a", tmp_path / "data-b"
    cluster = Cluster(tmp_path, 1, **{"log.dirs": f"{first_log_dir},{second_log_dir}"})
    try:
        await cluster.nodes[1].start()
        service = cluster.service(1)
        broker_epoch = await register(service, 1)
        await heartbeat(service, 1, broker_epoch)
        await create_topic(service, "orders", 2, 1)
        assert service.active_controller_id == 1 and service.is_active_controller
        await cluster.nodes[1].stop()
        metadata_dir = first_log_dir / "__cluster_metadata-0"
        segment_files = sorted(path.name for path in metadata_dir.iterdir()
                               if path.suffix in (".log", ".index", ".timeindex"))
        base = "0" * 20
        assert segment_files == [f"{base}.index", f"{base}.log", f"{base}.timeindex"]
        assert (metadata_dir / f"{base}.log").stat().st_size > 0
        assert not (second_log_dir / "__cluster_metadata-0").exists()
        await cluster.nodes[1].start()  # re-elects itself, then commits and applies its log again
        restarted = cluster.service(1)
        await wait_for_metadata(restarted, lambda: restarted.metadata.topic_id("orders") is not None)
        await create_topic(restarted, "payments", 1, 1)
    finally:
        await cluster.stop()
