"""Topic creation and failover on a 3-node cluster: how long each node's event loop stalls (issue 15).

Run `python -m bench.create_bench [--topics T] [--partitions P] [--failover] [--profile DIR]`. It
starts a 3-node `DevCluster`, creates T topics of P partitions RF=3 one after another (every node
hosts every partition: 2,000 per node with the defaults) and prints, per creation, the time the
CreateTopics request took, the time until every node hosted all its partitions (DescribeReplicas:
each a leader or a follower; the controller's metadata alone says so at once), and each
node's event-loop lag maximum over the creation (`tributary_event_loop_lag_max_seconds`, the
largest over the node's last 1,000 probes: the bench waits `SETTLE_S` before each step so that the
window holds only that step). `--failover` then kills node 3 (SIGKILL) and prints the lag of nodes
1 and 2 until every partition has a leader other than 3, and the time until an acks=all record sent
to every partition at the kill is acknowledged on each (a new leader first has its epoch's lineage
recorded by the controller), then starts node 3 again and prints every node's lag until every ISR is
full again. The same writes are timed first with every node up, for reference. `--profile DIR` runs the nodes under
`bench.profile_node` and prints each node's top functions by own CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.cluster_bench import bench_cluster, print_profiles
from client.admin import Admin, NewTopic
from client.connection import Connections
from client.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from client.producer import Producer
from node.dev import DevCluster
from wire.api import Api
from wire.metadata import DescribeReplicasRequest, DescribeReplicasResponse

SETTLE_S = 12.0  # > the 1,000 probes (10 ms apart) the max gauge covers
POLL_S = 0.2
STEP_TIMEOUT_S = 300.0


def loop_lag_max_ms(cluster: DevCluster, node_ids: Sequence[int]) -> dict[int, float]:
    """Each node's `tributary_event_loop_lag_max_seconds`, in ms."""
    figures = {}
    for node_id in node_ids:
        with urllib.request.urlopen(f"http://{cluster.nodes[node_id].address}/metrics", timeout=30) as response:
            text = response.read().decode()
        samples = {sample.name: sample.value for family in text_string_to_metric_families(text)
                   for sample in family.samples}
        figures[node_id] = samples["tributary_event_loop_lag_max_seconds"] * 1000
    return figures


async def wait_partitions(admin: Admin, topics: Sequence[str], partitions: int, replicas: int,
                          not_leader: int | None = None) -> None:
    """Until each topic has `partitions` partitions, each with a leader (not `not_leader`) and
    `replicas` in its ISR."""
    deadline = time.perf_counter() + STEP_TIMEOUT_S
    while time.perf_counter() < deadline:
        try:
            described = await admin.describe_topics(topics)
        except UnknownTopicOrPartitionError:  # the node asked has not applied the creation yet
            described = {}
        if all(len(described.get(topic, [])) == partitions
               and all(p.leader >= 0 and p.leader != not_leader and len(p.isr) == replicas
                       for p in described[topic])
               for topic in topics):
            return
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"partitions of {len(topics)} topics not settled after {STEP_TIMEOUT_S} s")


async def wait_hosted(cluster: DevCluster, connections: Connections, topic: str, partitions: int) -> None:
    """Until every node hosts the topic's `partitions` replicas, each a leader or a follower
    (DescribeReplicas: the brokers' own view, not the controller's)."""
    deadline = time.perf_counter() + STEP_TIMEOUT_S
    waiting = sorted(cluster.nodes)
    while waiting and time.perf_counter() < deadline:
        for node_id in list(waiting):
            response = await connections.call(cluster.nodes[node_id].address, Api.DESCRIBE_REPLICAS,
                                              DescribeReplicasRequest((topic,)), DescribeReplicasResponse, 60_000)
            if sum(replica.role in ("leader", "follower") for replica in response.replicas) == partitions:
                waiting.remove(node_id)
        if waiting:
            await asyncio.sleep(POLL_S)
    if waiting:
        raise TimeoutError(f"{topic} not hosted on nodes {waiting} after {STEP_TIMEOUT_S} s")


def line(label: str, lag_ms: dict[int, float], *times: str) -> str:
    lags = "  ".join(f"node {node_id} {value:7.1f} ms" for node_id, value in sorted(lag_ms.items()))
    return f"{label:<22} {'  '.join(times)}  loop-lag max: {lags}"


async def create_topics(cluster: DevCluster, topics: int, partitions: int) -> list[str]:
    names = []
    all_nodes = sorted(cluster.nodes)
    connections = Connections()
    async with Admin(cluster.bootstrap, request_timeout_ms=120_000, connections=connections) as admin:
        for index in range(topics):
            await asyncio.sleep(SETTLE_S)
            name = f"create-{index}"
            started = time.perf_counter()
            with contextlib.suppress(TopicAlreadyExistsError):  # a retry after a timed-out attempt that was applied
                await admin.create_topics([NewTopic(name, partitions, 3, {"min.insync.replicas": "2"})])
            answered_s = time.perf_counter() - started
            await wait_partitions(admin, [name], partitions, 3)
            await wait_hosted(cluster, connections, name, partitions)
            hosted_s = time.perf_counter() - started
            names.append(name)
            print(line(f"create {name}", loop_lag_max_ms(cluster, all_nodes),
                       f"CreateTopics {answered_s * 1000:6.0f} ms", f"hosted on all {hosted_s:5.1f} s"), flush=True)
    await connections.close()
    return names


async def write_everywhere(bootstrap: str, names: list[str], partitions: int) -> list[float]:
    """Seconds until each of one acks=all record per partition, all sent at once, is acknowledged."""
    started = time.perf_counter()
    async with Producer(bootstrap, acks="all", linger_ms=0, request_timeout_ms=30_000) as producer:
        futures = [await producer.send(name, b"x", partition=index) for name in names for index in range(partitions)]

        async def acknowledged(future: asyncio.Future[object]) -> float:
            await future
            return time.perf_counter() - started

        return sorted(await asyncio.gather(*map(acknowledged, futures)))


def percentiles(label: str, seconds: list[float]) -> str:
    p50, p99 = (seconds[int(len(seconds) * q)] for q in (0.5, 0.99))
    return f"{label} p50 {p50:4.1f} s p99 {p99:4.1f} s max {seconds[-1]:4.1f} s"


async def failover(cluster: DevCluster, names: list[str], partitions: int) -> None:
    async with Admin(cluster.nodes[1].address, request_timeout_ms=120_000) as admin:
        await asyncio.sleep(SETTLE_S)
        # The same writes with every node up: what sending them costs without a failover.
        print(line("no failure", loop_lag_max_ms(cluster, sorted(cluster.nodes)), percentiles(
            "acks=all written", await write_everywhere(cluster.nodes[1].address, names, partitions))), flush=True)
        await asyncio.sleep(SETTLE_S)
        started = time.perf_counter()
        cluster.kill_node(3)
        written = asyncio.create_task(write_everywhere(cluster.nodes[1].address, names, partitions))
        await wait_partitions(admin, names, partitions, 2, not_leader=3)
        moved_s = time.perf_counter() - started
        written_s = await written
        print(line("kill node 3", loop_lag_max_ms(cluster, [1, 2]), f"leaders moved {moved_s:5.1f} s",
                   percentiles("acks=all written", written_s)), flush=True)
        await asyncio.sleep(SETTLE_S)
        started = time.perf_counter()
        cluster.start_node(3, wait=False)
        await asyncio.to_thread(cluster.wait_healthy, [3], STEP_TIMEOUT_S)
        await wait_partitions(admin, names, partitions, 3)
        print(line("restart node 3", loop_lag_max_ms(cluster, sorted(cluster.nodes)),
                   f"all ISR full {time.perf_counter() - started:5.1f} s"), flush=True)


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.create_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=8, help="topics created one after another")
    parser.add_argument("--partitions", type=int, default=250, help="partitions per topic (RF=3)")
    parser.add_argument("--failover", action="store_true", help="then kill node 3 and start it again")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="run the nodes under cProfile, profiles in DIR")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    root, cluster = bench_cluster("tributary-create-bench-", arguments.profile)
    try:
        cluster.start()
        names = asyncio.run(create_topics(cluster, arguments.topics, arguments.partitions))
        if arguments.failover:
            asyncio.run(failover(cluster, names, arguments.partitions))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if arguments.profile is not None:
        print_profiles(arguments.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
