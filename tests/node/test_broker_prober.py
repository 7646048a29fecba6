"""The controller's prober (node/broker_prober.py) reports a refused connection to the office, with
the time taken before connecting, and nothing for a listener that accepts (README, "Failover after kill -9")."""

from __future__ import annotations

import asyncio
import socket

from controller.controller_api import BrokerConnectionRefused, BrokerProbe
from node.broker_prober import BrokerProber


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_refused_probe_is_reported_and_an_accepted_one_is_not() -> None:
    accepted: asyncio.Event = asyncio.Event()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    live_port = server.sockets[0].getsockname()[1]
    dead_port = closed_port()
    probes = (BrokerProbe(1, 10, f"127.0.0.1:{live_port}"), BrokerProbe(2, 20, f"127.0.0.1:{dead_port}"))
    reported: asyncio.Queue[BrokerConnectionRefused] = asyncio.Queue()

    async def call(request: BrokerConnectionRefused) -> None:
        await reported.put(request)

    prober = BrokerProber(lambda: probes, lambda: 1234, call)
    prober.start()
    try:
        refusal = await asyncio.wait_for(reported.get(), 10)
        await asyncio.wait_for(accepted.wait(), 10)
    finally:
        await prober.stop()
        server.close()
        await server.wait_closed()
    assert refusal == BrokerConnectionRefused(2, 20, 1234)
    assert all(item.broker_id == 2 for item in [refusal, *[reported.get_nowait() for _ in range(reported.qsize())]])
