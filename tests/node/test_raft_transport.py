"""RaftTransport's report of undelivered fetches: a fetch to a voter that refuses connections (a
killed process) reaches Raft as `Unreachable` at once, so it asks elsewhere instead of waiting out
the request timeout; other messages are dropped like lost packets (Raft resends them).

Method: voter 2's address is a loopback port with nothing listening (bound, then closed); the
test awaits the transport's callback with a bounded timeout."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from client.connection import Connections
from controller.raft_messages import FetchRequest, Message, Unreachable, VoteRequest
from node.config import NodeConfig
from node.raft_transport import RaftTransport


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_fetch_to_a_refusing_voter_is_reported_and_a_vote_is_not(tmp_path: Path) -> None:
    config = NodeConfig.from_properties({
        "node.id": "1", "process.roles": "broker,controller", "log.dirs": str(tmp_path),
        "controller.quorum.voters": f"1@127.0.0.1:{closed_port()},2@127.0.0.1:{closed_port()}",
        "listeners": f"HTTP://127.0.0.1:{closed_port()}", "controller.quorum.request.timeout.ms": "30000",
    })
    reported: asyncio.Queue[Unreachable] = asyncio.Queue()
    connections = Connections()
    transport = RaftTransport(config, connections, reported.put_nowait)
    try:
        transport.send(Message(1, 2, VoteRequest(3, 1, 0, 0, pre_vote=True)))
        transport.send(Message(1, 2, FetchRequest(3, 1, 0, 0, 1 << 20, 17)))
        async with asyncio.timeout(5):  # well below the 30 s request timeout
            assert await reported.get() == Unreachable(2, 17)
        await transport.close()
        assert reported.empty(), "only the fetch is reported"
    finally:
        await connections.close()
