"""Spark benchmark (issue 6 §4): the `tributary` data source against a 3-node dev cluster.

Run `python -m bench.spark_bench [--records N] [--partitions P] [--repeats R]`. It starts a
`DevCluster` in a fresh temp dir on free loopback ports and a local[2] Spark session, then:

1. writes N rows of 100-byte values with `df.write.format("tributary")` (Arrow writer, acks=all)
   to a P-partition RF=3 topic: write rows/s;
2. reads the topic into Spark's `noop` sink from the leaders and from followers (`readFrom`):
   read rows/s, best of R (a small read first starts the Python workers, ~10 s, untimed);
3. reads the same data with the Python consumer in this process: `poll_batches` (whole batches,
   records counted from headers) and `poll` (a `ConsumerRecord` per record).

It prints one table and stops the cluster, also on failure. Not a timed test: the machine is
shared, so compare the load averages printed at the start and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import pipeline
from client.admin import Admin, NewTopic
from client.consumer import Consumer
from node.dev import DevCluster
from tests.node.cluster_harness import free_port_block
from wire.topic_partition import TopicPartition

TOPIC = "spark-bench"
VALUE_BYTES = 100


@dataclass(frozen=True, slots=True)
class Row:
    path: str
    rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def create_topic(bootstrap: str, partitions: int) -> None:
    async def create() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic(TOPIC, partitions, 3)])
        async with Consumer(bootstrap) as consumer:  # until every partition has a leader
            tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
            await consumer.end_offsets(tps)

    asyncio.run(create())


def python_consumer(bootstrap: str, partitions: int, records: int, decode: bool) -> Row:
    async def consume() -> int:
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        async with Consumer(bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=8 << 20,
                            fetch_max_bytes=64 << 20) as consumer:
            consumer.assign(tps)
            count = 0
            while count < records:
                if decode:
                    count += len(await consumer.poll(1000, 100_000))
                else:
                    count += sum(b.next_offset - max(b.start_offset, b.base_offset)
                                 for b in await consumer.poll_batches(1000))
            return count

    started = time.perf_counter()
    count = asyncio.run(consume())
    return Row(f"Python consumer, {'poll (records)' if decode else 'poll_batches (no decode)'}, leaders", count,
               time.perf_counter() - started)


def spark_session() -> SparkSession:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("tributary-spark-bench")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    return spark


def run(cluster: DevCluster, records: int, partitions: int, repeats: int) -> list[Row]:
    bootstrap = cluster.bootstrap
    create_topic(bootstrap, partitions)
    spark = spark_session()
    try:
        rows = spark.range(records, numPartitions=2).select(
            F.concat(F.lpad(F.col("id").cast("string"), 12, "0"), F.lit("x" * (VALUE_BYTES - 12))).alias("value"))
        rows.limit(10).write.format("tributary").option("bootstrap", bootstrap).option("topic", TOPIC) \
            .mode("append").save()  # untimed: starts the Python workers
        started = time.perf_counter()
        rows.write.format("tributary").option("bootstrap", bootstrap).option("topic", TOPIC).mode("append").save()
        results = [Row("Spark write (Arrow writer, acks=all, 2 tasks)", records, time.perf_counter() - started)]
        total = records + 10
        def reader(**options: str) -> DataFrame:  # a new DataFrameReader each time: .option() mutates it
            return spark.read.format("tributary").option("bootstrap", bootstrap).option("topic", TOPIC) \
                .options(**options).load()

        ending = json.dumps({TOPIC: {str(p): 10 for p in range(partitions)}})
        for read_from in ("leader", "follower"):  # untimed: starts the Python workers
            reader(readFrom=read_from, endingOffsets=ending).write.format("noop").mode("overwrite").save()
        for read_from in ("leader", "follower"):
            best = None
            for _ in range(repeats):
                started = time.perf_counter()
                reader(readFrom=read_from).write.format("noop").mode("overwrite").save()
                seconds = time.perf_counter() - started
                best = seconds if best is None else min(best, seconds)
            assert best is not None, "repeats >= 1"
            results.append(Row(f"Spark read → noop, readFrom={read_from} ({partitions} tasks)", total, best))
        count = reader().count()
        assert count == total, f"read {count} rows, wrote {total}"
    finally:
        spark.stop()
    results.append(python_consumer(bootstrap, partitions, total, decode=False))
    results.append(python_consumer(bootstrap, partitions, total, decode=True))
    return results


def print_table(results: list[Row]) -> None:
    width = max(len(r.path) for r in results)
    print(f"{'path':<{width}}  {'rows':>9}  {'seconds':>7}  {'rows/s':>9}")
    print(f"{'-' * width}  {'-' * 9}  {'-' * 7}  {'-' * 9}")
    for r in results:
        print(f"{r.path:<{width}}  {r.rows:>9,}  {r.seconds:>7.2f}  {r.rows_per_s:>9,.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()}; {os.cpu_count()} CPUs", flush=True)
    data_dir = Path(tempfile.mkdtemp(prefix="tributary-spark-bench-"))
    cluster = DevCluster(data_dir, 3, free_port_block(3))
    try:
        cluster.start()
        results = run(cluster, args.records, args.partitions, args.repeats)
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"{args.records:,} rows of {VALUE_BYTES}-byte values, {args.partitions} partitions, RF=3, local[2]")
    print_table(results)
    print(f"load average at the end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
