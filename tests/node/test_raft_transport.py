"""RaftTransport's report of undelivered fetches: a fetch to a voter that refuses connections (a
killed process) reaches Raft as a refused `Unreachable` at once, so it asks elsewhere (or, if that
voter leads, stands) instead of waiting out the request timeout; a fetch the voter took is reported,
not refused, when its stream closes; other messages are dropped like lost packets (Raft resends
them).

Method: voter 2's address is a loopback port with nothing listening (bound, then closed), or a
stream route that acknowledges every call and is then shut down; the test awaits the transport's
callback with a bounded timeout."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from aiohttp import web

from client.connection import Connections
from controller.raft_messages import FetchRequest, Message, Unreachable, VoteRequest
from node.config import NodeConfig
from node.raft_transport import ACK, RaftTransport
from node.request_stream import add_stream_route
from wire.api import Api
from wire.codec import pack
from wire.envelope import Envelope


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def node_config(tmp_path: Path, voter_2_port: int) -> NodeConfig:
    return NodeConfig.from_properties({
        "node.id": "1", "process.roles": "broker,controller", "log.dirs": str(tmp_path),
        "controller.quorum.voters": f"1@127.0.0.1:{closed_port()},2@127.0.0.1:{voter_2_port}",
        "listeners": f"HTTP://127.0.0.1:{closed_port()}", "controller.quorum.request.timeout.ms": "30000",
    })


async def test_a_fetch_to_a_refusing_voter_is_reported_and_a_vote_is_not(tmp_path: Path) -> None:
    config = node_config(tmp_path, closed_port())
    reported: asyncio.Queue[Unreachable] = asyncio.Queue()
    connections = Connections()
    transport = RaftTransport(config, connections, reported.put_nowait)
    try:
        transport.send(Message(1, 2, VoteRequest(3, 1, 0, 0, pre_vote=True)))
        transport.send(Message(1, 2, FetchRequest(3, 1, 0, 0, 1 << 20, 17)))
        async with asyncio.timeout(5):  # well below the 30 s request timeout
            assert await reported.get() == Unreachable(2, 17, refused=True)
        await transport.close()
        assert reported.empty(), "only the fetch is reported"
    finally:
        await connections.close()


async def test_a_delivered_fetch_is_reported_not_refused_when_its_stream_closes_then_refused(tmp_path: Path) -> None:
    """Goal: a leader killed while it holds a follower's fetch leaves no call in flight to fail; the
    stream's close must report the fetch (not refused: a closed stream may be a pause or a restart),
    and the retry, with nothing listening any more, is refused. Method: voter 2 is a stream route
    that acknowledges every call; a fetch is delivered (nothing reported), the route is shut down
    (its streams close, its socket with them), then a second fetch is sent."""

    async def acknowledge(api: Api, body: bytes) -> tuple[int, bytes]:
        return 200, pack(ACK)

    app = web.Application()
    add_stream_route(app, lambda _request: acknowledge, 1 << 20)
    runner = web.AppRunner(app)
    await runner.setup()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, listening)
    await site.start()
    config = node_config(tmp_path, listening.getsockname()[1])
    reported: asyncio.Queue[Unreachable] = asyncio.Queue()
    connections = Connections()
    transport = RaftTransport(config, connections, reported.put_nowait)
    address = f"127.0.0.1:{listening.getsockname()[1]}"
    try:
        transport.send(Message(1, 2, FetchRequest(3, 1, 0, 0, 1 << 20, 17)))
        # A call of our own on the same stream, answered after the fetch's: when it returns, the
        # transport has taken the fetch's answer (asyncio wakes in order).
        await connections.call(address, Api.RAFT, ACK, Envelope, 5000)
        assert reported.empty(), "a delivered fetch is not reported while its stream is open"
        await runner.cleanup()
        async with asyncio.timeout(5):
            assert await reported.get() == Unreachable(2, 17, refused=False)
        transport.send(Message(1, 2, FetchRequest(3, 1, 0, 0, 1 << 20, 18)))
        async with asyncio.timeout(5):
            assert await reported.get() == Unreachable(2, 18, refused=True)
    finally:
        await transport.close()
        await connections.close()
        await runner.cleanup()
