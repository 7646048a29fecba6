"""Real node processes on loopback for end-to-end tests: a `DevCluster` (the README's run command)
with short timeouts, and ways to look at each replica from outside."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from client.admin import Admin, ClusterDescription
from client.connection import Connections
from node.dev import DevCluster
from storage.records import iter_records
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchRequest, FetchResponse

FAST = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "2500",
    "controller.quorum.election.timeout.ms": "400",
    "controller.quorum.fetch.timeout.ms": "800",
    "controller.quorum.election.backoff.max.ms": "200",
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "100",
    "log.retention.check.interval.ms": "300",
    "request.timeout.ms": "5000",
    "offsets.topic.num.partitions": "3",
}
WAIT_S = 30.0


def free_port_block(count: int) -> int:
    """A base port with `count` consecutive free ports, below the kernel's ephemeral range: a port
    in that range can be taken as the local port of any outgoing connection while its node is down
    (a kill -9 and restart then fails to bind it)."""
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10_000, max(10_001, ephemeral_low - count))
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no block of free ports")


def start_cluster(data_dir: Path, nodes: int = 3, controllers: int = 0, **properties: str) -> DevCluster:
    """`nodes` combined nodes, or (`controllers` > 0) that many controller-only nodes and `nodes` brokers."""
    count = controllers + nodes
    base = free_port_block(2 * count)  # HTTP listeners, then the brokers' Kafka listeners
    cluster = DevCluster(data_dir, nodes, base, {**FAST, **properties}, controllers, kafka_base_port=base + count)
    cluster.start()
    return cluster


def stopped(cluster: DevCluster) -> Iterator[DevCluster]:
    try:
        yield cluster
    finally:
        cluster.stop()


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = WAIT_S) -> float:
    """Poll another process's state until `check()` holds; seconds it took. Processes give no events
    to await, so this is a bounded poll (every 50 ms, at most `timeout_s`)."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def describe(bootstrap: str) -> ClusterDescription:
    async with Admin(bootstrap, request_timeout_ms=3000) as admin:
        return await admin.describe_cluster()


async def read_replica(address: str, topic: str, partition: int) -> tuple[list[tuple[int, bytes | None]], int]:
    """Every (offset, value) a node serves a consumer for the partition (up to that replica's HW),
    from its logStartOffset, and that HW."""
    connections = Connections()
    records: list[tuple[int, bytes | None]] = []
    try:
        offset, high_watermark = 0, -1
        for _ in range(10_000):
            response = await connections.call(
                address, Api.FETCH,
                FetchRequest((FetchPartition(topic, partition, offset, 1 << 20),), max_wait_ms=0, min_bytes=0),
                FetchResponse, 5000)
            data = response.partitions[0]
            if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset < data.log_start_offset:
                offset = data.log_start_offset
                continue
            assert data.error_code == ErrorCode.NONE, (address, data)
            high_watermark = data.high_watermark
            if not data.records:
                return records, high_watermark
            for header, batch in iter_records(data.records):
                records.extend((r.offset, r.value) for r in batch if r.offset >= offset)
                offset = header.last_offset + 1
        raise AssertionError("partition larger than the test reads")
    finally:
        await connections.close()
