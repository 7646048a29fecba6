"""Tributary next to NATS JetStream R3 (issue 15): the same figures, the same record size, one run.

Run `python -m bench.nats_bench [--quick] [--partitions P] [--idle-partitions N]`. It starts a
3-node Tributary `DevCluster` (topic RF=3, min.insync.replicas=2, acks=all), measures it, stops
it; then a 3-node JetStream cluster of Debian's `nats-server` (a stream with replicas=3, file
storage), measures it and stops it: each system has the machine to itself. 100-byte records, one
producer in this process: our client, librdkafka's (confluent-kafka, over the Kafka listener) and
nats-py (JetStream publishes are acknowledged once a quorum stored the message).

Figures: (1) unthrottled throughput (batches sent asynchronously, bounded by each client's
buffer); (2) send-to-acknowledgement latency at 20,000 rec/s and at 10 % of the system's own
unthrottled rate, open loop: records are due at fixed times, latency runs from a record's due time
to its acknowledgement, so a sender that falls behind shows it; (3) one awaited send at a time
(NATS's sync publish); (4) CPU the server processes spent per record during the 20,000 rec/s run
(utime + stime from /proc/PID/stat); (5) an idle cluster hosting `--idle-partitions` partitions
RF=3 (in topics of 250; NATS: as many R3 streams; each created until a time limit): CPU % of
a core per server.
Latency rows use linger.ms=0 (a record waits only for the request in flight), throughput rows the
defaults (linger.ms=5).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench.nats_cluster import NatsCluster
from client.admin import Admin, NewTopic
from client.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError
from client.producer import Producer
from node.dev import DevCluster
from tests.node.cluster_harness import free_port_block

RECORD_BYTES = 100
PAYLOAD = b"x" * RECORD_BYTES
FIXED_RATE = 20_000
LOW_FRACTION = 0.10
CHUNK_RECORDS = 500  # per send_many / gathered run of NATS async publishes
NATS_MAX_PENDING = 4000  # nats-py's default bound on unacknowledged async publishes
STREAM_CREATE_CONCURRENCY = 16
SETTLE_S = 5.0
IDLE_TOPIC_PARTITIONS = 250
TOPIC = "bench"

Sender = Callable[[int], Awaitable["asyncio.Future[object]"]]  # queue N records; the future: all acknowledged


@dataclass(frozen=True, slots=True)
class Plan:
    throughput_s: float
    paced_s: float
    sync_sends: int
    idle_partitions: int
    idle_window_s: float
    stream_create_s: float


FULL = Plan(throughput_s=10, paced_s=10, sync_sends=2000, idle_partitions=2000, idle_window_s=30, stream_create_s=90)
QUICK = Plan(throughput_s=3, paced_s=3, sync_sends=300, idle_partitions=300, idle_window_s=10, stream_create_s=40)


@dataclass
class Figures:
    """One system's (or client's) figures; None where not measured."""

    throughput: float | None = None
    low_rate: int | None = None
    low: tuple[float, float] | None = None  # p50, p99 ms
    fixed: tuple[float, float] | None = None
    sync: tuple[float, float] | None = None
    cpu_us_per_record: float | None = None
    idle_cpu_percent: list[float] | None = None
    idle_partitions: int | None = None


def cpu_seconds(pids: Sequence[int]) -> list[float]:
    """User + system CPU seconds of each process (fields 14 and 15 of /proc/PID/stat)."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = []
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        seconds.append((int(fields[11]) + int(fields[12])) / ticks)
    return seconds


def percentiles(latencies_s: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies_s)
    return tuple(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 for q in (0.50, 0.99))  # type: ignore[return-value]


async def unthrottled(send: Sender, seconds: float) -> float:
    """Records/s: chunks queued for `seconds` (the client's buffer bounds what is in flight), all acknowledged."""
    start = time.perf_counter()
    futures = []
    sent = 0
    while time.perf_counter() - start < seconds:
        futures.append(await send(CHUNK_RECORDS))
        sent += CHUNK_RECORDS
    await asyncio.gather(*futures)
    return sent / (time.perf_counter() - start)


async def paced(send: Sender, rate: int, seconds: float) -> list[float]:
    """Open loop: record k is due at start + k / rate; its latency runs from then to its acknowledgement."""
    latencies: list[float] = []
    total = int(rate * seconds)
    start = time.perf_counter()
    futures = []
    sent = 0

    def acknowledged(first: int, count: int) -> Callable[[asyncio.Future[object]], None]:
        def done(future: asyncio.Future[object]) -> None:
            if not future.cancelled() and future.exception() is None:
                now = time.perf_counter()
                latencies.extend(now - (start + index / rate) for index in range(first, first + count))
        return done

    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1) - sent
        if due > 0:
            future = await send(due)
            future.add_done_callback(acknowledged(sent, due))
            futures.append(future)
            sent += due
        await asyncio.sleep(max(0.0, start + sent / rate - time.perf_counter()))
    await asyncio.gather(*futures)
    return latencies


async def one_in_flight(send_one: Callable[[], Awaitable[object]], count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        sent_at = time.perf_counter()
        await send_one()
        latencies.append(time.perf_counter() - sent_at)
    return latencies


async def latency_and_cpu(figures: Figures, send: Sender, pids: Sequence[int], plan: Plan) -> None:
    """(2) at FIXED_RATE, with the servers' CPU per record over that run (4), then at LOW_FRACTION."""
    before = sum(cpu_seconds(pids))
    fixed = await paced(send, FIXED_RATE, plan.paced_s)
    figures.cpu_us_per_record = (sum(cpu_seconds(pids)) - before) / (FIXED_RATE * plan.paced_s) * 1e6
    figures.fixed = percentiles(fixed)
    assert figures.throughput is not None
    figures.low_rate = max(1, int(figures.throughput * LOW_FRACTION))
    figures.low = percentiles(await paced(send, figures.low_rate, plan.paced_s))


async def idle_cpu(pids: Sequence[int], window_s: float) -> list[float]:
    await asyncio.sleep(SETTLE_S)
    before = cpu_seconds(pids)
    started = time.perf_counter()
    await asyncio.sleep(window_s)
    elapsed = time.perf_counter() - started
    return [(after - earlier) / elapsed * 100 for after, earlier in zip(cpu_seconds(pids), before, strict=True)]


# --- Tributary ---------------------------------------------------------------------------------

def tributary_sender(producer: Producer) -> Sender:
    async def send(count: int) -> asyncio.Future[object]:
        return await producer.send_many(TOPIC, [PAYLOAD] * count)  # type: ignore[return-value]
    return send


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async with Admin(bootstrap) as admin:
        with contextlib.suppress(TopicAlreadyExistsError):  # a retry after a timed-out attempt that was applied
            await admin.create_topics([NewTopic(name, partitions, 3, {"min.insync.replicas": "2"})])
        while True:  # until every partition has a leader and its three replicas in sync
            try:
                described = (await admin.describe_topics([name])).get(name, [])
            except UnknownTopicOrPartitionError:  # the node asked has not applied the creation yet
                described = []
            if len(described) == partitions and all(p.leader >= 0 and len(p.isr) == 3 for p in described):
                return
            await asyncio.sleep(0.2)


async def create_idle_topics(bootstrap: str, partitions: int, limit_s: float) -> int:
    """Topics idle-0.. of IDLE_TOPIC_PARTITIONS each (one CreateTopics of thousands can outlast its timeout
    on a loaded machine) until `partitions` or `limit_s`. How many partitions were created."""
    deadline = time.perf_counter() + limit_s
    created = 0
    while created < partitions and time.perf_counter() < deadline:
        count = min(IDLE_TOPIC_PARTITIONS, partitions - created)
        await create_topic(bootstrap, f"idle-{created}", count)
        created += count
    return created


async def measure_tributary(cluster: DevCluster, partitions: int, plan: Plan) -> tuple[Figures, Figures]:
    pids = [node.process.pid for node in cluster.nodes.values() if node.process is not None]
    ours = Figures()
    await create_topic(cluster.bootstrap, TOPIC, partitions)
    async with Producer(cluster.bootstrap, acks="all") as producer:
        ours.throughput = await unthrottled(tributary_sender(producer), plan.throughput_s)
    async with Producer(cluster.bootstrap, acks="all", linger_ms=0) as producer:
        await latency_and_cpu(ours, tributary_sender(producer), pids, plan)
        ours.sync = percentiles(await one_in_flight(lambda: producer.send_and_wait(TOPIC, PAYLOAD), plan.sync_sends))
    librdkafka = measure_librdkafka(cluster.kafka_bootstrap, pids, plan)
    ours.idle_partitions = await create_idle_topics(cluster.bootstrap, plan.idle_partitions, plan.stream_create_s)
    ours.idle_cpu_percent = await idle_cpu(pids, plan.idle_window_s)
    return ours, librdkafka


def measure_librdkafka(bootstrap: str, pids: Sequence[int], plan: Plan) -> Figures:
    """confluent-kafka's producer over the Kafka listener: (1) with its defaults, (2)-(4) with linger.ms=0."""
    from confluent_kafka import Producer as KafkaProducer

    figures = Figures()
    errors: list[object] = []

    def failed(error: object, _message: object) -> None:
        if error is not None:
            errors.append(error)

    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "delivery.report.only.error": True,
                              "on_delivery": failed})
    start = time.perf_counter()
    sent = 0
    while time.perf_counter() - start < plan.throughput_s:
        try:
            producer.produce(TOPIC, PAYLOAD)
            sent += 1
        except BufferError:
            producer.poll(0.001)
        if sent % 1000 == 0:
            producer.poll(0)
    producer.flush()
    figures.throughput = sent / (time.perf_counter() - start)

    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    before = sum(cpu_seconds(pids))
    figures.fixed = percentiles(_librdkafka_paced(producer, FIXED_RATE, plan.paced_s))
    figures.cpu_us_per_record = (sum(cpu_seconds(pids)) - before) / (FIXED_RATE * plan.paced_s) * 1e6
    figures.low_rate = max(1, int(figures.throughput * LOW_FRACTION))
    figures.low = percentiles(_librdkafka_paced(producer, figures.low_rate, plan.paced_s))
    sync = []
    for _ in range(plan.sync_sends):
        sent_at = time.perf_counter()
        producer.produce(TOPIC, PAYLOAD)
        producer.flush()
        sync.append(time.perf_counter() - sent_at)
    figures.sync = percentiles(sync)
    if errors:
        raise RuntimeError(f"librdkafka: {len(errors)} records failed, first {errors[0]}")
    return figures


def _librdkafka_paced(producer: object, rate: int, seconds: float) -> list[float]:
    """Open loop as `paced`; delivery reports are served by poll() while waiting for the next due record."""
    latencies: list[float] = []
    total = int(rate * seconds)
    start = time.perf_counter()

    def acknowledged(due_at: float) -> Callable[[object, object], None]:
        def done(error: object, _message: object) -> None:
            if error is None:
                latencies.append(time.perf_counter() - due_at)
        return done

    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            try:
                producer.produce(TOPIC, PAYLOAD, on_delivery=acknowledged(start + sent / rate))  # type: ignore[attr-defined]
            except BufferError:  # its queue is full: the backlog counts in the latency of what waits
                producer.poll(0.001)  # type: ignore[attr-defined]
                continue
            sent += 1
        producer.poll(max(0.0, start + sent / rate - time.perf_counter()))  # type: ignore[attr-defined]
    producer.flush()  # type: ignore[attr-defined]
    return latencies


# --- NATS JetStream ----------------------------------------------------------------------------

async def measure_nats(cluster: NatsCluster, plan: Plan) -> Figures:
    import nats
    from nats.js.api import StorageType, StreamConfig

    figures = Figures()
    connection = await nats.connect(servers=cluster.servers)
    try:
        js = connection.jetstream(publish_async_max_pending=NATS_MAX_PENDING)
        await js.add_stream(StreamConfig(name=TOPIC, subjects=[TOPIC], num_replicas=3, storage=StorageType.FILE))

        async def send(count: int) -> asyncio.Future[object]:
            return asyncio.gather(*[await js.publish_async(TOPIC, PAYLOAD) for _ in range(count)])

        figures.throughput = await unthrottled(send, plan.throughput_s)
        await latency_and_cpu(figures, send, cluster.pids, plan)
        figures.sync = percentiles(await one_in_flight(lambda: js.publish(TOPIC, PAYLOAD), plan.sync_sends))
        figures.idle_partitions = await create_streams(js, plan.idle_partitions, plan.stream_create_s)
    finally:
        await connection.close()
    figures.idle_cpu_percent = await idle_cpu(cluster.pids, plan.idle_window_s)
    return figures


async def create_streams(js: object, count: int, limit_s: float) -> int:
    """R3 file streams idle-0..; stops at `limit_s`. How many were created."""
    from nats.js.api import StorageType, StreamConfig

    deadline = time.perf_counter() + limit_s
    created = 0
    next_index = iter(range(count))

    async def worker() -> None:
        nonlocal created
        for index in next_index:
            if time.perf_counter() > deadline:
                return
            await js.add_stream(StreamConfig(name=f"idle-{index}", subjects=[f"idle.{index}"],  # type: ignore[attr-defined]
                                             num_replicas=3, storage=StorageType.FILE))
            created += 1

    await asyncio.gather(*[worker() for _ in range(STREAM_CREATE_CONCURRENCY)])
    return created


# --- the table ---------------------------------------------------------------------------------

def _ms(pair: tuple[float, float] | None) -> str:
    return "-" if pair is None else f"{pair[0]:.2f} / {pair[1]:.2f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    return "-" if ours is None or not theirs else f"{ours / theirs:.2f}x"


def _pair_ratio(ours: tuple[float, float] | None, theirs: tuple[float, float] | None) -> str:
    if ours is None or theirs is None:
        return "-"
    return f"{_ratio(ours[0], theirs[0])} / {_ratio(ours[1], theirs[1])}"


def _idle(figures: Figures) -> str:
    if figures.idle_cpu_percent is None:
        return "-"
    return f"{' '.join(f'{p:.1f}' for p in figures.idle_cpu_percent)} ({figures.idle_partitions:,})"


def format_table(ours: Figures, librdkafka: Figures, nats: Figures) -> str:
    header = ("figure", "Tributary (our client)", "Tributary (librdkafka)", "NATS R3 (nats-py)",
              "ours/NATS", "target")
    rows = [
        ("(1) acks=all throughput, rec/s", f"{ours.throughput:,.0f}", f"{librdkafka.throughput:,.0f}",
         f"{nats.throughput:,.0f}", _ratio(ours.throughput, nats.throughput), ">= 800,000 (ours)"),
        (f"(2) p50 / p99 ms at {FIXED_RATE:,} rec/s", _ms(ours.fixed), _ms(librdkafka.fixed), _ms(nats.fixed),
         _pair_ratio(ours.fixed, nats.fixed), "<= 1 / 3"),
        ("(2) p50 / p99 ms at 10 % of (1)", f"{_ms(ours.low)} @{ours.low_rate:,}",
         f"{_ms(librdkafka.low)} @{librdkafka.low_rate:,}", f"{_ms(nats.low)} @{nats.low_rate:,}",
         _pair_ratio(ours.low, nats.low), "<= 1 / 3"),
        ("(3) one awaited send, p50 / p99 ms", _ms(ours.sync), _ms(librdkafka.sync), _ms(nats.sync),
         _pair_ratio(ours.sync, nats.sync), "-"),
        (f"(4) server CPU us/record at {FIXED_RATE:,}/s", f"{ours.cpu_us_per_record:.1f}",
         f"{librdkafka.cpu_us_per_record:.1f}", f"{nats.cpu_us_per_record:.1f}",
         _ratio(ours.cpu_us_per_record, nats.cpu_us_per_record), "<= 10"),
        ("(5) idle CPU % of a core per server (partitions)", _idle(ours), "-", _idle(nats),
         _ratio(max(ours.idle_cpu_percent or [0]), max(nats.idle_cpu_percent or [0])), "< 5"),
    ]
    table = [header, *rows]
    widths = [max(len(row[column]) for row in table) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[column]) for column, cell in enumerate(row)) for row in table]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.nats_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs and 300 idle partitions (~2 min)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of Tributary's bench topic")
    parser.add_argument("--idle-partitions", type=int, help="partitions (and NATS streams) for the idle figure")
    return parser.parse_args(argv)


async def run(plan: Plan, partitions: int, root: Path) -> tuple[Figures, Figures, Figures]:
    base = free_port_block(12)
    cluster = DevCluster(root / "tributary", 3, base, kafka_base_port=base + 3)
    try:
        cluster.start()
        ours, librdkafka = await measure_tributary(cluster, partitions, plan)
    finally:
        cluster.stop()
    print(f"Tributary measured; load average {load_average()}", flush=True)
    (root / "nats").mkdir()
    nats_cluster = NatsCluster(root / "nats", client_base=base + 6, route_base=base + 9)
    try:
        nats_cluster.start()
        await nats_cluster.wait_ready()
        nats = await measure_nats(nats_cluster, plan)
    finally:
        nats_cluster.stop()
    return ours, librdkafka, nats


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    plan = QUICK if arguments.quick else FULL
    if arguments.idle_partitions is not None:
        plan = replace(plan, idle_partitions=arguments.idle_partitions)
    root = Path(tempfile.mkdtemp(prefix="tributary-nats-bench-"))
    print(f"{os.cpu_count()} cores; load average at the start {load_average()}; {plan}", flush=True)
    started = time.perf_counter()
    try:
        ours, librdkafka, nats = asyncio.run(run(plan, arguments.partitions, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(format_table(ours, librdkafka, nats))
    print(f"  * {RECORD_BYTES}-byte records, one producer; Tributary: 3 nodes, topic RF=3 min.insync.replicas=2 "
          f"{arguments.partitions} partitions, acks=all; NATS: 3 servers, one stream R3 file storage")
    print("  * latency rows linger.ms=0, open loop from each record's due time; ratios > 1x are ours higher")
    print(f"  * load average at the end {load_average()}; {time.perf_counter() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
