"""Cluster benchmark (issue 4 §5): `tributary perf-produce` / `perf-consume` against a 3-node dev cluster.

Run `python -m bench.cluster_bench [--records N] [--partitions P] [--quick] [--profile DIR]
[--idempotence [--repeats R]]`. It starts a `DevCluster` (three `node.main` processes) in a fresh
temp dir on free loopback ports, creates one topic per scenario with `tributary topics create`,
runs the CLI perf tools as subprocesses (what a user runs), prints one table and stops the
cluster, also on failure.

Scenarios: 100-byte records, one producer, unthrottled, with acks=all RF=3 (the target) with
enable.idempotence on (the default) and off, acks=1 RF=3 and acks=1 RF=1; acks=all RF=3 again
paced to 10 % of the 200,000 records/s target, for its latency, with the default linger.ms=5 and
with linger.ms=0 (a record then waits only for its partition's request in flight); then
perf-consume of the acks=all topic from a follower (KIP-392) and from the leader.
`--idempotence` runs only the two acks=all RF=3 rows, `--repeats` times each (alternating, each
on a fresh topic): the cost of idempotence.
Produce latency is send to acknowledgement per chunk of records; consume latency is per poll.
Each row also gives the CPU time the tool's process and the three nodes spent per record (from
`getrusage` and /proc): on a shared 2-core machine throughput follows the CPU per record.

`--profile DIR` runs each node under cProfile timed by CPU (`bench.profile_node`, to
DIR/node-N.prof), writes the profiles when the cluster stops and prints each node's top
functions by own CPU time.
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from node.dev import DevCluster

RECORD_BYTES = 100
TARGET_PRODUCE_RECORDS_PER_S = 200_000
LOW_LOAD_RECORDS_PER_S = TARGET_PRODUCE_RECORDS_PER_S // 10
LOW_LOAD_SECONDS = 8
PORT_TRIES_MAX = 50
PROFILE_LINES = 25
NODE_COUNT = 3
TOOL_TIMEOUT_S = 600

_PRODUCE_LINE = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), (?P<avg>[\d.]+) ms avg "
    r"latency, [\d.]+ ms max latency, (?P<p50>[\d.]+) ms 50th, [\d.]+ ms 95th, (?P<p99>[\d.]+) ms 99th, "
    r"(?P<p999>[\d.]+) ms 99.9th"
)
_CONSUME_LINE = re.compile(
    r"(?P<records>\d+) records received, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec, .*poll latency "
    r"(?P<avg>[\d.]+) ms avg, (?P<p50>[\d.]+) ms 50th, (?P<p99>[\d.]+) ms 99th, (?P<p999>[\d.]+) ms 99.9th"
)


@dataclass(frozen=True, slots=True)
class Result:
    """One row: a tool's summary line parsed (MB is MiB, as Kafka's tools print it)."""

    scenario: str
    records: int
    records_per_s: float
    mib_per_s: float
    latency_ms_avg: float
    latency_ms_p50: float
    latency_ms_p99: float
    latency_ms_p999: float
    tool_cpu_us_per_record: float
    nodes_cpu_us_per_record: float


class ProfiledCluster(DevCluster):
    """A DevCluster whose nodes run under `bench.profile_node`; each writes its profile on a clean stop."""

    profile_dir: Path

    def start_node(self, node_id: int, wait: bool = True) -> None:
        node = self.nodes[node_id]
        assert not node.running(), f"node {node_id} is running"
        self.write_config(node)
        with node.log_path.open("ab") as log:
            node.process = subprocess.Popen(
                [sys.executable, "-m", "bench.profile_node", str(self.profile_dir / f"node-{node_id}.prof"),
                 "--config", str(node.config_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        if wait:
            self.wait_healthy([node_id])


def bench_cluster(prefix: str, profile: Path | None) -> tuple[Path, DevCluster]:
    """A 3-node cluster (not started) in a new temporary directory, under cProfile with `profile`
    (the profiles' directory); says where it is and the machine's load."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        cluster: DevCluster = ProfiledCluster(root, NODE_COUNT, free_base_port())
        cluster.profile_dir = profile.resolve()
    else:
        cluster = DevCluster(root, NODE_COUNT, free_base_port())
    print(f"{NODE_COUNT} nodes on {cluster.bootstrap}, data in {root}; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    return root, cluster


def free_base_port() -> int:
    """A port P with P, P+1 and P+2 free on 127.0.0.1 (the OS picks P; the next two are checked)."""
    for _ in range(PORT_TRIES_MAX):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + NODE_COUNT <= 65535 and all(_port_free(base + offset) for offset in range(NODE_COUNT)):
            return base
    raise RuntimeError(f"no {NODE_COUNT} consecutive free ports after {PORT_TRIES_MAX} tries")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True, slots=True)
class ToolRun:
    """A CLI run's stdout and the CPU seconds it and the nodes used meanwhile."""

    out: str
    tool_cpu_s: float
    nodes_cpu_s: float


def tributary(cluster: DevCluster, *arguments: str) -> ToolRun:
    """Run the `tributary` CLI; its stdout and CPU time, or RuntimeError with its stderr."""
    command = [sys.executable, "-m", "client.cli", "--bootstrap", cluster.bootstrap, *arguments]
    tool_before, nodes_before = _children_cpu_s(), _nodes_cpu_s(cluster)
    done = subprocess.run(command, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(arguments[:3])} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return ToolRun(done.stdout, _children_cpu_s() - tool_before, _nodes_cpu_s(cluster) - nodes_before)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _nodes_cpu_s(cluster: DevCluster) -> float:
    """User + system CPU seconds of the running nodes (fields 14 and 15 of /proc/PID/stat)."""
    ticks = 0
    for node in cluster.nodes.values():
        if node.process is not None and node.running():
            fields = Path(f"/proc/{node.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def create_topic(cluster: DevCluster, topic: str, partitions: int, replication_factor: int) -> None:
    tributary(cluster, "topics", "create", "--topic", topic, "--partitions", str(partitions),
              "--replication-factor", str(replication_factor))


def produce(cluster: DevCluster, scenario: str, topic: str, records: int, acks: str, throughput: int = -1,
            properties: Sequence[str] = ()) -> Result:
    run = tributary(cluster, "perf-produce", "--topic", topic, "--num-records", str(records),
                    "--record-size", str(RECORD_BYTES), "--acks", acks, "--throughput", str(throughput),
                    "--producer-props", *properties)
    return _parse(scenario, _PRODUCE_LINE, run)


def consume(cluster: DevCluster, scenario: str, topic: str, records: int, from_follower: bool) -> Result:
    follower = ["--from-follower"] if from_follower else []
    run = tributary(cluster, "perf-consume", "--topic", topic, "--messages", str(records), *follower)
    return _parse(scenario, _CONSUME_LINE, run)


def _parse(scenario: str, pattern: re.Pattern[str], run: ToolRun) -> Result:
    match = pattern.search(run.out)
    if match is None:
        raise RuntimeError(f"{scenario}: no summary line in {run.out!r}")
    records = int(match["records"])
    return Result(scenario, records, float(match["rate"]), float(match["mb"]), float(match["avg"]),
                  float(match["p50"]), float(match["p99"]), float(match["p999"]),
                  run.tool_cpu_s / records * 1e6, run.nodes_cpu_s / records * 1e6)


IDEMPOTENCE = {"on": "enable.idempotence=true", "off": "enable.idempotence=false"}


def produce_acks_all(cluster: DevCluster, topic: str, partitions: int, records: int, idempotence: str,
                     properties: Sequence[str] = ()) -> Result:
    create_topic(cluster, topic, partitions, 3)
    return produce(cluster, f"produce acks=all RF=3 idempotence {idempotence}", topic, records, "all",
                   properties=[IDEMPOTENCE[idempotence], *properties])


def run_idempotence(cluster: DevCluster, records: int, partitions: int, repeats: int,
                    properties: Sequence[str]) -> list[Result]:
    return [produce_acks_all(cluster, f"bench-rf3-all-{idempotence}-{run}", partitions, records, idempotence,
                             properties)
            for run in range(repeats) for idempotence in IDEMPOTENCE]


def run_scenarios(cluster: DevCluster, records: int, partitions: int) -> list[Result]:
    create_topic(cluster, "bench-rf3-all", partitions, 3)
    create_topic(cluster, "bench-rf3-one", partitions, 3)
    create_topic(cluster, "bench-rf1-one", partitions, 1)
    create_topic(cluster, "bench-rf3-low", partitions, 3)
    low_load_records = LOW_LOAD_RECORDS_PER_S * LOW_LOAD_SECONDS
    return [
        produce(cluster, "produce acks=all RF=3 idempotence on", "bench-rf3-all", records, "all",
                properties=[IDEMPOTENCE["on"]]),
        produce_acks_all(cluster, "bench-rf3-all-off", partitions, records, "off"),
        produce(cluster, "produce acks=1 RF=3", "bench-rf3-one", records, "1"),
        produce(cluster, "produce acks=1 RF=1", "bench-rf1-one", records, "1"),
        produce(cluster, f"produce acks=all RF=3 at {LOW_LOAD_RECORDS_PER_S:,}/s", "bench-rf3-low",
                low_load_records, "all", LOW_LOAD_RECORDS_PER_S),
        produce(cluster, f"produce acks=all RF=3 at {LOW_LOAD_RECORDS_PER_S:,}/s linger 0", "bench-rf3-low",
                low_load_records, "all", LOW_LOAD_RECORDS_PER_S, ["linger.ms=0"]),
        consume(cluster, "consume RF=3 from a follower", "bench-rf3-all", records, from_follower=True),
        consume(cluster, "consume RF=3 from the leader", "bench-rf3-all", records, from_follower=False),
    ]


def format_table(results: Sequence[Result]) -> str:
    header = ("scenario", "records", "records/s", "MiB/s", "avg ms", "p50 ms", "p99 ms", "p99.9 ms",
              "tool CPU us/rec", "nodes CPU us/rec")
    rows = [header] + [
        (r.scenario, f"{r.records:,}", f"{r.records_per_s:,.0f}", f"{r.mib_per_s:.2f}", f"{r.latency_ms_avg:.1f}",
         f"{r.latency_ms_p50:.1f}", f"{r.latency_ms_p99:.1f}", f"{r.latency_ms_p999:.1f}",
         f"{r.tool_cpu_us_per_record:.2f}", f"{r.nodes_cpu_us_per_record:.2f}")
        for r in results
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = [
        "  ".join(cell.ljust(widths[0]) if column == 0 else cell.rjust(widths[column])
                  for column, cell in enumerate(row))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def print_profiles(profile_dir: Path) -> None:
    for path in sorted(profile_dir.glob("node-*.prof")):
        print(f"\n== {path.stem}: top {PROFILE_LINES} by own CPU time ==")
        pstats.Stats(str(path)).sort_stats("tottime").print_stats(PROFILE_LINES)


def loop_lag_line(cluster: DevCluster) -> str:
    """Each node's event-loop lag p99 and max over its last 1,000 probes, from `/metrics`."""
    figures = []
    for node_id, node in sorted(cluster.nodes.items()):
        with urllib.request.urlopen(f"http://{node.address}/metrics", timeout=5) as response:
            samples = {sample.name: sample.value for family in text_string_to_metric_families(response.read().decode())
                       for sample in family.samples}
        figures.append(f"node {node_id} p99 {samples['tributary_event_loop_lag_p99_seconds'] * 1000:.1f} ms "
                       f"max {samples['tributary_event_loop_lag_max_seconds'] * 1000:.1f} ms")
    return "  * event-loop lag over the last 1,000 probes (10 s or more): " + "; ".join(figures)


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per unthrottled run")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic")
    parser.add_argument("--quick", action="store_true", help="200,000 records per run (a smoke run)")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="run the nodes under cProfile, profiles in DIR")
    parser.add_argument("--idempotence", action="store_true",
                        help="only acks=all RF=3 with enable.idempotence on and off")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each row with --idempotence")
    parser.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE",
                        help="more producer settings for the rows of --idempotence, e.g. batch.size=262144")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    records = 200_000 if arguments.quick else arguments.records
    root, cluster = bench_cluster("tributary-cluster-bench-", arguments.profile)
    started = time.perf_counter()
    try:
        cluster.start()
        if arguments.idempotence:
            results = run_idempotence(cluster, records, arguments.partitions, arguments.repeats,
                                      arguments.producer_props)
        else:
            results = run_scenarios(cluster, records, arguments.partitions)
        loop_lag = loop_lag_line(cluster)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(format_table(results))
    extra = "".join(f", {setting}" for setting in arguments.producer_props)
    print(f"  * {RECORD_BYTES}-byte records, {arguments.partitions} partitions per topic, one producer "
          f"(perf-produce defaults: linger.ms=5, batch.size=16384{extra}); load average at the end "
          f"{os.getloadavg()[0]:.2f}; {time.perf_counter() - started:.0f} s in all")
    print(loop_lag)
    if arguments.profile is not None:
        print_profiles(arguments.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
