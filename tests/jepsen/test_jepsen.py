"""Jepsen-style: three real node processes, each in a network namespace of its own, under writers
with acks=all and unique values and consumers from leaders and followers, while a nemesis kills
(-9) and restarts nodes, pauses them (SIGSTOP), partitions the network between them (two way and
one way, by blackhole routes) and steps a node's wall clock (libfaketime). Then it heals and
checks: no acknowledged value lost, no value twice in the log (the writers' producers are
idempotent, as by default with acks=all: a retried send is never written twice), no offset holding
two values, every replica identical below the high watermark, every consumer's reads in order.
`JEPSEN_SECONDS` (default 30) sets the faults' duration,
`JEPSEN_SEED` the nemesis' choices. It prints the figures."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from client.admin import Admin, NewTopic
from client.consumer import Consumer
from client.errors import TributaryError
from client.producer import Producer
from node.dev import DevCluster
from tests.jepsen import netns
from tests.node.cluster_harness import FAST, eventually, read_replica

pytestmark = pytest.mark.jepsen

TOPIC = "jepsen"
PARTITIONS = 2
WRITERS = 3
PORT = 9092  # node N listens on its own address, port PORT + N - 1
DURATION_S = float(os.environ.get("JEPSEN_SECONDS", "30"))
SEED = int(os.environ.get("JEPSEN_SEED", "1"))
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@dataclass
class History:
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (partition, offset)
    failed: int = 0
    indeterminate: int = 0
    seen: dict[tuple[int, int], bytes | None] = field(default_factory=dict)  # (partition, offset) -> value
    reads: int = 0
    out_of_order: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)


@pytest.fixture
def network() -> Iterator[netns.Network]:
    why = netns.available()
    if why is not None:
        pytest.skip(why)
    network = netns.Network(3).open()
    try:
        yield network
    finally:
        network.close()


@pytest.fixture
def cluster(network: netns.Network, tmp_path: Path) -> Iterator[tuple[DevCluster, dict[int, Path]]]:
    clocks = {node: tmp_path / f"clock-{node}" for node in (1, 2, 3)}
    environments = {}
    for node, clock in clocks.items():
        clock.write_text("+0\n")
        environments[node] = {"LD_PRELOAD": str(FAKETIME), "FAKETIME_TIMESTAMP_FILE": str(clock),
                              "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    if not FAKETIME.exists():
        environments = {}  # no clock steps without libfaketime (Debian package faketime)
    properties = {**FAST, "min.insync.replicas": "2", "default.replication.factor": "3",
                  "unclean.leader.election.enable": "false"}
    dev = DevCluster(tmp_path / "nodes", 3, PORT, properties,
                     hosts={node: network.host(node) for node in (1, 2, 3)},
                     wrappers={node: network.wrapper(node) for node in (1, 2, 3)}, environments=environments)
    dev.start()
    try:
        yield dev, clocks if environments else {}
    finally:
        for node in dev.nodes.values():
            if node.running():
                node.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        dev.stop()


async def writer(bootstrap: str, number: int, history: History, stop: asyncio.Event) -> None:
    async with Producer(bootstrap, acks="all", linger_ms=1, request_timeout_ms=2000, retry_backoff_ms=100,
                        delivery_timeout_ms=15000, enable_idempotence=True) as producer:
        sequence = 0
        while not stop.is_set():
            value = b"w%d-%d" % (number, sequence)
            sequence += 1
            try:
                metadata = await (await producer.send(TOPIC, value, partition=sequence % PARTITIONS))
            except TributaryError as error:
                if error.retriable:
                    history.indeterminate += 1
                else:
                    history.failed += 1
                continue
            history.acked[value] = (metadata.partition, metadata.offset)


async def consumer(bootstrap: str, read_from: str, history: History, stop: asyncio.Event) -> None:
    last: dict[int, int] = {}
    consumer = Consumer(bootstrap, read_from=read_from, auto_offset_reset="earliest", request_timeout_ms=2000,
                        fetch_max_wait_ms=200)
    try:
        consumer.assign([(TOPIC, partition) for partition in range(PARTITIONS)])
        while not stop.is_set():
            try:
                records = await consumer.poll(timeout_ms=300)
            except TributaryError:
                # A poll can fail before it awaits anything (a node answered metadata without the
                # topic): back off, or this loop would starve the event loop, the nemesis included.
                await asyncio.sleep(0.1)
                continue
            for record in records:
                history.reads += 1
                key = (record.partition, record.offset)
                if record.offset <= last.get(record.partition, -1):
                    history.out_of_order.append(f"{read_from} read {key} after offset {last[record.partition]}")
                last[record.partition] = record.offset
                if history.seen.setdefault(key, record.value) != record.value:
                    history.conflicts.append(f"{key}: {history.seen[key]!r} and {record.value!r}")
    finally:
        await consumer.close()


async def nemesis(dev: DevCluster, network: netns.Network, clocks: dict[int, Path], history: History) -> None:
    """One fault at a time, each healed before the next: the cluster of three tolerates one."""
    rng = random.Random(SEED)
    kinds = ["kill", "pause", "partition", "one-way"] + (["clock"] if clocks else [])
    deadline = time.monotonic() + DURATION_S
    while time.monotonic() < deadline:
        kind = rng.choice(kinds)
        node = rng.choice([1, 2, 3])
        others = [other for other in (1, 2, 3) if other != node]
        history.faults[kind] += 1
        hold_s = rng.uniform(2, 5)
        if kind == "kill":
            dev.kill_node(node)
            await asyncio.sleep(hold_s)
            dev.start_node(node, wait=False)
        elif kind == "pause":
            dev.signal_node(node, signal.SIGSTOP)
            await asyncio.sleep(hold_s)
            dev.signal_node(node, signal.SIGCONT)
        elif kind == "partition":
            for other in others:
                network.drop(node, other)
                network.drop(other, node)
            await asyncio.sleep(hold_s)
            network.heal()
        elif kind == "one-way":
            network.drop(node, rng.choice(others))
            await asyncio.sleep(hold_s)
            network.heal()
        else:
            clocks[node].write_text(f"{rng.choice(['+3600', '-3600', '+600', '-600'])}\n")
            await asyncio.sleep(hold_s)
            clocks[node].write_text("+0\n")
        await asyncio.sleep(rng.uniform(1, 2))


async def test_acknowledged_writes_survive_kills_pauses_partitions_and_clock_steps(
    network: netns.Network, cluster: tuple[DevCluster, dict[int, Path]]
) -> None:
    dev, clocks = cluster
    async with Admin(dev.bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})])
    history = History()
    stop = asyncio.Event()
    clients = [asyncio.create_task(writer(dev.bootstrap, number, history, stop)) for number in range(WRITERS)]
    clients += [asyncio.create_task(consumer(dev.bootstrap, read_from, history, stop))
                for read_from in ("leader", "follower")]
    await nemesis(dev, network, clocks, history)
    network.heal()
    for node in dev.nodes:
        if not dev.nodes[node].running():
            dev.start_node(node, wait=False)
    dev.wait_healthy()
    await asyncio.sleep(3)  # writes go on against the healed cluster
    stop.set()
    await asyncio.gather(*clients)

    logs: dict[int, list[tuple[int, bytes | None]]] = {}
    for partition in range(PARTITIONS):
        async def replicas_agree(partition: int = partition) -> bool:
            answers = [await read_replica(node.address, TOPIC, partition) for node in dev.nodes.values()]
            logs[partition] = answers[0][0]
            return all(answer == answers[0] for answer in answers)

        await eventually(replicas_agree, f"every replica of partition {partition} holds the same records "
                                         "up to the same high watermark", timeout_s=60)
    where: dict[bytes | None, list[tuple[int, int]]] = {}
    for partition, records in logs.items():
        for offset, value in records:
            where.setdefault(value, []).append((partition, offset))
    lost = [value for value, at in history.acked.items() if at not in where.get(value, [])]
    duplicates = sum(len(at) - 1 for at in where.values() if len(at) > 1)
    served = {(partition, offset): value for partition, records in logs.items() for offset, value in records}
    unlike_the_log = [f"{key}: read {value!r}, the log holds {served[key]!r}" for key, value in history.seen.items()
                      if key in served and served[key] != value]
    print(f"\njepsen: {DURATION_S:.0f} s of faults {dict(history.faults)}; acks=all writes: "
          f"{len(history.acked)} acknowledged, {history.failed} failed, {history.indeterminate} indeterminate; "
          f"lost {len(lost)}; duplicates {duplicates}; records in the log {sum(map(len, logs.values()))}; "
          f"consumer reads {history.reads}, out of order {len(history.out_of_order)}, "
          f"offsets read with two values {len(history.conflicts) + len(unlike_the_log)}")
    assert history.acked, "no write was acknowledged"
    assert not lost, f"{len(lost)} acknowledged values lost, e.g. {lost[:5]}"
    assert not duplicates, [(value, at) for value, at in where.items() if len(at) > 1][:5]
    assert not history.conflicts and not unlike_the_log, (history.conflicts + unlike_the_log)[:5]
    assert not history.out_of_order, history.out_of_order[:5]
