"""Page views: a generator → a streaming aggregation → a compacted topic and Parquet → a batch read.

    .venv/bin/tributary-node dev                      # another terminal: a 3-node cluster (HTTP on 9192-9194)
    .venv/bin/python -m pipeline.examples.page_views  # --bootstrap HOST:PORT,... for another cluster

1. The generator writes `--events` JSON page views (`{"page": "/docs", "user": "u7", "ts": ms}`),
   keyed by user, with event times spread over the last `--minutes` minutes, to `page-views`.
2. A streaming job parses them, counts views per page in 1-minute event-time windows with a
   1-minute watermark, and writes each closed window (append mode) to the compacted topic
   `page-view-counts` (key = page, in window order, so compaction keeps each page's latest
   window) and to Parquet under `--work-dir`. The query runs with trigger availableNow and its
   checkpoint under `--work-dir`, so running the example again reads only the new page views.
3. A batch job reads `page-view-counts` and keeps the last record per key: the table a
   compacted topic stands for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

import pipeline
from client.admin import Admin, NewTopic
from client.errors import TributaryError
from client.producer import Producer
from wire.error_codes import ErrorCode

VIEWS_TOPIC = "page-views"
COUNTS_TOPIC = "page-view-counts"
PAGES = ("/", "/docs", "/pricing", "/blog", "/signup")
WINDOW = "1 minute"
WATERMARK = "1 minute"
EVENT_SCHEMA = "page string, user string, ts long"


@dataclass(frozen=True, slots=True)
class PageView:
    page: str
    user: str
    ts: int


def generate(count: int, minutes: int, seed: int, now_ms: int) -> list[PageView]:
    """`count` views in event-time order over the `minutes` before `now_ms`."""
    rng = random.Random(seed)
    start = now_ms - minutes * 60_000
    step = minutes * 60_000 / count
    return [PageView(rng.choice(PAGES), f"u{rng.randrange(100)}", int(start + n * step)) for n in range(count)]


async def setup_and_produce(bootstrap: str, views: list[PageView]) -> None:
    async with Admin(bootstrap) as admin:
        for topic in (NewTopic(VIEWS_TOPIC, 3, 3), NewTopic(COUNTS_TOPIC, 1, 3, {"cleanup.policy": "compact"})):
            try:
                await admin.create_topics([topic])
            except TributaryError as error:
                if error.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
    async with Producer(bootstrap, acks="all") as producer:
        values = [json.dumps({"page": v.page, "user": v.user, "ts": v.ts}).encode() for v in views]
        await (await producer.send_many(VIEWS_TOPIC, values, [v.user.encode() for v in views]))


def windowed_counts(spark: SparkSession, bootstrap: str) -> DataFrame:
    views = (
        spark.readStream.format("tributary").option("bootstrap", bootstrap).option("topic", VIEWS_TOPIC)
        .option("startingOffsets", "earliest").load()
        .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("view"))
        .select("view.page", F.timestamp_millis("view.ts").alias("event_time"))
    )
    return (
        views.withWatermark("event_time", WATERMARK)
        .groupBy(F.window("event_time", WINDOW).alias("window"), "page").count()
        .select("page", F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                F.col("count").alias("views"))
    )


def run_streaming(spark: SparkSession, bootstrap: str, work_dir: Path) -> None:
    """One availableNow query; each micro-batch of closed windows goes to both sinks."""

    def write_batch(counts: DataFrame, batch_id: int) -> None:
        # Sorted by window, in one task: the topic gets each page's windows in time order, so the
        # record compaction keeps for a page is its latest window.
        ordered = counts.orderBy("window_start", "page").coalesce(1)
        ordered.select(
            F.col("page").alias("key"),
            F.to_json(F.struct("page", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX").alias("window_start"),
                               "views")).alias("value"),
        ).write.format("tributary").option("bootstrap", bootstrap).option("topic", COUNTS_TOPIC).mode("append").save()
        # One directory per batch, overwritten if Spark runs the batch again after a failure.
        ordered.write.mode("overwrite").parquet(str(work_dir / "page_view_counts" / f"batch_id={batch_id}"))

    query = (windowed_counts(spark, bootstrap).writeStream.foreachBatch(write_batch).outputMode("append")
             .option("checkpointLocation", str(work_dir / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")


def latest_per_page(spark: SparkSession, bootstrap: str) -> DataFrame:
    """The compacted topic as a table: the last record per key (compaction may not have run yet)."""
    records = spark.read.format("tributary").option("bootstrap", bootstrap).option("topic", COUNTS_TOPIC).load()
    last = Window.partitionBy("key").orderBy(F.col("offset").desc())
    return (
        records.withColumn("rank", F.row_number().over(last)).where("rank = 1")
        .select(F.from_json(F.col("value").cast("string"), "page string, window_start string, views long").alias("c"))
        .select("c.page", "c.window_start", "c.views").orderBy("page")
    )


def run(spark: SparkSession, bootstrap: str, work_dir: Path, views: list[PageView]) -> DataFrame:
    """The whole example for these page views; returns the batch read of the compacted topic."""
    pipeline.register(spark)
    asyncio.run(setup_and_produce(bootstrap, views))
    print(f"produced {len(views)} page views to {VIEWS_TOPIC}", flush=True)
    run_streaming(spark, bootstrap, work_dir)
    parquet = spark.read.parquet(str(work_dir / "page_view_counts"))
    print(f"Parquet: {parquet.count()} closed (page, window) counts in {work_dir / 'page_view_counts'}", flush=True)
    return latest_per_page(spark, bootstrap)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.examples.page_views", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default=os.environ.get("TRIBUTARY_BOOTSTRAP",
                                                              "127.0.0.1:9192,127.0.0.1:9193,127.0.0.1:9194"))
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/tributary-page-views"),
                        help="Parquet output and streaming checkpoints")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--minutes", type=int, default=10, help="event times span this many minutes up to now")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers need this venv (pyarrow, pipeline)
    spark = (SparkSession.builder.master("local[2]").appName("tributary-page-views")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        views = generate(args.events, args.minutes, args.seed, int(time.time() * 1000))
        table = run(spark, args.bootstrap, args.work_dir, views)
        print(f"{COUNTS_TOPIC}, latest closed window per page:", flush=True)
        table.show(truncate=False)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
