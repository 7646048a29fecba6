"""Consumer-group rebalance benchmark: how long three members take to reach a stable assignment with
an eager assignor (range) and with cooperative-sticky (KIP-429), against real node processes.

Run `python -m bench.group_bench [--repeats 5]`. It starts a 3-node `DevCluster` on free loopback
ports (group.initial.rebalance.delay.ms=0), creates a topic of six partitions with a record written
to each every 20 ms throughout, and for each strategy and repeat uses a fresh group:
- start together: three members subscribe at once; the time until each holds two partitions, no
  two the same, and none has a rebalance in progress.
- third joins: two members hold three partitions each, then a third subscribes; the time until
  all three hold two, and the longest gap between two reads of a partition that one of the first
  two kept: how long they stopped reading what did not move; beside it the longest gap on any of
  their partitions in as long a time just before, with no rebalance (the poll and fetch cadence).
  The join comes at a random (seeded) point of the members' heartbeat interval: they learn of a
  rebalance by their heartbeats.
Members are in this process, heartbeat every 200 ms with a 2000 ms session (as the tests in
tests/node/test_consumer_groups.py) and poll with 100 ms timeouts. It prints one table (median and
max over the repeats) and stops the cluster, also on failure. Timings include the poll cadence.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import statistics
import tempfile
import time
from pathlib import Path

from client.admin import Admin, NewTopic
from client.consumer import Consumer
from client.producer import Producer
from node.dev import DevCluster
from tests.node.cluster_harness import start_cluster
from wire.topic_partition import TopicPartition

TOPIC = "rebalanced"
PARTITIONS = 6
STRATEGIES = ("range", "cooperative-sticky")
SETTLE_TIMEOUT_S = 60
HEARTBEAT_S = 0.2
CONSUMER_SETTINGS = {"auto_offset_reset": "latest", "session_timeout_ms": 2000, "heartbeat_interval_ms": 200,
                     "max_poll_interval_ms": 10000, "auto_commit_interval_ms": 200, "fetch_max_wait_ms": 100}


class Member:
    """A subscribed consumer polling in a task; `reads` has each partition's read times."""

    def __init__(self, bootstrap: str, group: str, strategy: str) -> None:
        self.consumer = Consumer(bootstrap, group_id=group, partition_assignment_strategy=strategy,
                                 **CONSUMER_SETTINGS)  # type: ignore[arg-type]
        self.consumer.subscribe([TOPIC])
        self.reads: dict[TopicPartition, list[float]] = {}
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            for record in await self.consumer.poll(timeout_ms=100):
                self.reads.setdefault(TopicPartition(record.topic, record.partition), []).append(time.monotonic())

    def holds(self) -> set[TopicPartition]:
        member = self.consumer.member
        return set() if member is None or member.needs_join else self.consumer.assignment()

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.consumer.close()


async def settle(members: list[Member], each: int) -> float:
    """Seconds until every member holds `each` partitions, no two the same, none rebalancing."""
    started = time.monotonic()
    while True:
        held = [member.holds() for member in members]
        if all(len(partitions) == each for partitions in held) and len(set().union(*held)) == each * len(members):
            return time.monotonic() - started
        if time.monotonic() - started > SETTLE_TIMEOUT_S:
            raise RuntimeError(f"no stable assignment in {SETTLE_TIMEOUT_S} s: {held}")
        await asyncio.sleep(0.005)  # members in other tasks: a short poll of their state


async def start_together(bootstrap: str, group: str, strategy: str) -> float:
    members = [Member(bootstrap, group, strategy) for _ in range(3)]
    try:
        return await settle(members, 2)
    finally:
        for member in members:
            await member.close()


def longest_gap(members: list[Member], partitions: list[set[TopicPartition]], start: float, end: float) -> float:
    """The longest time in [start, end] in which a member read nothing of one of its `partitions`."""
    gaps = [0.0]
    for member, held in zip(members, partitions, strict=False):
        for tp in held:
            times = [start, *(t for t in member.reads.get(tp, []) if start <= t <= end), end]
            gaps.append(max(later - earlier for earlier, later in itertools.pairwise(times)))
    return max(gaps)


async def third_joins(bootstrap: str, group: str, strategy: str, phase_s: float) -> tuple[float, float, float]:
    """Seconds to settle; the longest read gap on a partition the first two kept, and on any of
    theirs in as long a time before, with no rebalance (the poll and fetch cadence). `phase_s` moves
    the join within the members' heartbeat interval, by which they learn of the rebalance."""
    members = [Member(bootstrap, group, strategy) for _ in range(2)]
    try:
        await settle(members, 3)
        quiet = time.monotonic()
        await asyncio.sleep(1.0 + phase_s)  # a stable group reading, for the baseline gap
        joined = time.monotonic()
        before = [member.holds() for member in members]
        members.append(Member(bootstrap, group, strategy))
        seconds = await settle(members, 2)
        await asyncio.sleep(0.3)  # reads after the settling, so a gap that ends there is seen
        ended = time.monotonic()
        kept = [held & member.holds() for member, held in zip(members, before, strict=False)]
        return seconds, longest_gap(members, kept, joined, ended), longest_gap(
            members, before, quiet, min(joined, quiet + ended - joined))
    finally:
        for member in members:
            await member.close()


async def produce_steadily(bootstrap: str, stop: asyncio.Event) -> None:
    async with Producer(bootstrap) as producer:
        while not stop.is_set():
            await asyncio.gather(*[await producer.send(TOPIC, b"v", partition=n) for n in range(PARTITIONS)])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.02)


Row = tuple[str, list[float], list[float], list[float], list[float]]


async def run(cluster: DevCluster, repeats: int) -> list[Row]:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    stop = asyncio.Event()
    producing = asyncio.create_task(produce_steadily(cluster.bootstrap, stop))
    rows = []
    phases = random.Random(13)
    try:
        for strategy in STRATEGIES:
            together, joins, gaps, quiet_gaps = [], [], [], []
            for repeat in range(repeats):
                together.append(await start_together(cluster.bootstrap, f"{strategy}-together-{repeat}", strategy))
                seconds, gap, quiet_gap = await third_joins(cluster.bootstrap, f"{strategy}-join-{repeat}", strategy,
                                                            phases.uniform(0, HEARTBEAT_S))
                joins.append(seconds)
                gaps.append(gap)
                quiet_gaps.append(quiet_gap)
            rows.append((strategy, together, joins, gaps, quiet_gaps))
    finally:
        stop.set()
        await producing
    return rows


def print_table(rows: list[Row], repeats: int) -> None:
    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:7.0f} / {max(values) * 1000:5.0f}"

    print(f"\nThree members, six partitions, {repeats} repeats, ms as median / max")
    print(f"{'strategy':<20} {'start together':>16} {'third joins':>16} {'kept partitions idle':>22} "
          f"{'idle, no rebalance':>20}")
    for strategy, together, joins, gaps, quiet_gaps in rows:
        print(f"{strategy:<20} {ms(together):>16} {ms(joins):>16} {ms(gaps):>22} {ms(quiet_gaps):>20}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="group-bench-") as directory:
        cluster = start_cluster(Path(directory), **{"group.min.session.timeout.ms": "500",
                                                    "group.initial.rebalance.delay.ms": "0"})
        try:
            print_table(asyncio.run(run(cluster, arguments.repeats)), arguments.repeats)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
