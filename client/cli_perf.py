"""`tributary perf-produce` and `perf-consume`: Kafka's producer and consumer perf tools.

perf-produce sends `--num-records` records of `--record-size` bytes in chunks through
`Producer.send_many`, paced to `--throughput` records/s (-1: as fast as possible, bounded by
buffer.memory), and measures each chunk's latency from the send to its acknowledgement (each
record of a chunk counts once). perf-consume reads `--messages` records with `poll_batches`, so
records are counted from batch headers and never decoded. Both draw a progress line on stderr
and print Kafka's summary line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from client.cli_produce import producer_settings
from client.cli_support import EXIT_OK, bootstrap_parent, parse_properties, run_command
from client.consumer import Consumer
from client.producer import Producer
from wire.topic_partition import TopicPartition

CHUNK_RECORDS_MAX = 500
PERCENTILES = (50, 95, 99, 99.9)


def register(subcommands: Any) -> None:
    parent = bootstrap_parent()
    produce = subcommands.add_parser("perf-produce", parents=[parent], help="producer throughput and latency")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=int, required=True)
    produce.add_argument("--record-size", type=int, default=100, help="bytes per record value")
    produce.add_argument("--throughput", type=int, default=-1, help="records/s to aim for (-1: no limit)")
    produce.add_argument("--acks", default="all", choices=["0", "1", "-1", "all"])
    produce.add_argument("--producer-props", nargs="*", default=[], metavar="KEY=VALUE",
                         help="producer settings by their Kafka names, e.g. linger.ms=5 batch.size=65536")
    produce.set_defaults(run=run_command(perf_produce))

    consume = subcommands.add_parser("perf-consume", parents=[parent], help="consumer throughput")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=int, required=True, help="records to read")
    consume.add_argument("--from-follower", action="store_true", help="fetch from in-sync followers")
    consume.add_argument("--timeout-ms", type=int, default=10000, help="give up when no record comes for this long")
    consume.set_defaults(run=run_command(perf_consume))


@dataclass
class LatencyStats:
    """Latencies in ms, each with the number of records it stands for."""

    samples: list[tuple[float, int]] = field(default_factory=list)

    def add(self, latency_ms: float, count: int) -> None:
        self.samples.append((latency_ms, count))

    @property
    def count(self) -> int:
        return sum(count for _, count in self.samples)

    def average(self) -> float:
        total = self.count
        return sum(latency * count for latency, count in self.samples) / total if total else 0.0

    def maximum(self) -> float:
        return max((latency for latency, _ in self.samples), default=0.0)

    def percentiles(self, wanted: tuple[float, ...] = PERCENTILES) -> dict[float, float]:
        """The latency below which `p` % of the records fall (weighted by each sample's count)."""
        ordered = sorted(self.samples)
        total = self.count
        found = {}
        for p in wanted:
            rank = p / 100 * total
            seen = 0
            for latency, count in ordered:
                seen += count
                if seen >= rank:
                    found[p] = latency
                    break
            else:
                found[p] = 0.0
        return found


def produce_summary(records: int, elapsed_s: float, record_size: int, stats: LatencyStats) -> str:
    """Kafka's ProducerPerformance final line."""
    rate = records / elapsed_s if elapsed_s > 0 else 0.0
    mb_rate = rate * record_size / (1024 * 1024)
    p = stats.percentiles()
    return (f"{records} records sent, {rate:.1f} records/sec ({mb_rate:.2f} MB/sec), {stats.average():.2f} ms avg "
            f"latency, {stats.maximum():.2f} ms max latency, {p[50]:.1f} ms 50th, {p[95]:.1f} ms 95th, "
            f"{p[99]:.1f} ms 99th, {p[99.9]:.1f} ms 99.9th.")


def _progress(err: TextIO, label: str, total: int) -> Progress:
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), console=Console(file=err), transient=True)


async def perf_produce(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if arguments.num_records <= 0 or arguments.record_size < 0:
        raise ValueError("--num-records must be > 0 and --record-size >= 0")
    settings = {"acks": arguments.acks, **producer_settings(parse_properties(arguments.producer_props,
                                                                             "--producer-props"))}
    payload = bytes(random.Random(0).choices(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", k=arguments.record_size))
    throughput = arguments.throughput
    chunk_size = CHUNK_RECORDS_MAX if throughput <= 0 else max(1, min(CHUNK_RECORDS_MAX, throughput // 1000))
    stats = LatencyStats()
    acknowledged = [0]
    async with Producer(arguments.bootstrap, **settings) as producer:
        with _progress(err, "perf-produce", arguments.num_records) as progress:
            task = progress.add_task("send", total=arguments.num_records, rate="")
            start = time.perf_counter()
            futures = []
            sent = 0
            while sent < arguments.num_records:
                count = min(chunk_size, arguments.num_records - sent)
                future = await producer.send_many(arguments.topic, [payload] * count)
                future.add_done_callback(_record_latency(stats, acknowledged, time.perf_counter(), count))
                futures.append(future)
                sent += count
                if throughput > 0:
                    ahead_s = sent / throughput - (time.perf_counter() - start)
                    if ahead_s > 0:
                        await asyncio.sleep(ahead_s)
                if sent % (chunk_size * 20) < chunk_size:
                    elapsed = time.perf_counter() - start
                    progress.update(task, completed=acknowledged[0], rate=f"{acknowledged[0] / elapsed:,.0f} rec/s")
            await producer.flush()
            await asyncio.gather(*futures)
            elapsed = time.perf_counter() - start
    print(produce_summary(arguments.num_records, elapsed, arguments.record_size, stats), file=out)
    return EXIT_OK


def _record_latency(stats: LatencyStats, acknowledged: list[int], sent_at: float, count: int):
    def done(future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is None:
            stats.add((time.perf_counter() - sent_at) * 1000, count)
            acknowledged[0] += count

    return done


async def perf_consume(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if arguments.messages <= 0:
        raise ValueError("--messages must be > 0")
    read_from = "follower" if arguments.from_follower else "leader"
    stats = LatencyStats()
    records = size = 0
    async with Consumer(arguments.bootstrap, read_from=read_from, auto_offset_reset="earliest") as consumer:
        consumer.metadata.add_topics([arguments.topic])
        await consumer.metadata.refresh()
        partitions = consumer.metadata.require_topic(arguments.topic)
        consumer.assign([TopicPartition(arguments.topic, number) for number in sorted(partitions)])
        await consumer.seek_to_beginning()
        with _progress(err, "perf-consume", arguments.messages) as progress:
            task = progress.add_task("fetch", total=arguments.messages, rate="")
            start = last_record = time.perf_counter()
            while records < arguments.messages:
                polled_at = time.perf_counter()
                batches = await consumer.poll_batches(timeout_ms=1000)
                now = time.perf_counter()
                if not batches:
                    if (now - last_record) * 1000 >= arguments.timeout_ms:
                        break
                    continue
                count = sum(batch.next_offset - max(batch.start_offset, batch.base_offset) for batch in batches)
                stats.add((now - polled_at) * 1000, count)
                records += count
                size += sum(batch.size_in_bytes for batch in batches)
                last_record = now
                progress.update(task, completed=min(records, arguments.messages),
                                rate=f"{records / (now - start):,.0f} rec/s")
            elapsed = last_record - start
    print(consume_summary(records, size, elapsed, stats), file=out)
    return EXIT_OK


def consume_summary(records: int, size: int, elapsed_s: float, stats: LatencyStats) -> str:
    """Kafka's ConsumerPerformance figures, plus the poll latency percentiles."""
    rate = records / elapsed_s if elapsed_s > 0 else 0.0
    megabytes = size / (1024 * 1024)
    p = stats.percentiles()
    return (f"{records} records received, {rate:.1f} records/sec ({megabytes / elapsed_s if elapsed_s > 0 else 0:.2f}"
            f" MB/sec, {megabytes:.2f} MB in {elapsed_s:.2f} s), poll latency {stats.average():.2f} ms avg, "
            f"{p[50]:.1f} ms 50th, {p[99]:.1f} ms 99th, {p[99.9]:.1f} ms 99.9th.")
