"""Streaming reads: restarts on one checkpoint while a producer keeps writing, data loss, rate
limits with availableNow, and partitions the stream did not know when it started."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from client.admin import Admin
from client.producer import Producer
from node.dev import DevCluster
from pipeline.offsets import OffsetRange
from pipeline.options import SourceOptions
from pipeline.source import StreamReader
from tests.spark.helpers import create_topic, produce
from wire.topic_partition import TopicPartition

pytestmark = pytest.mark.spark
WAIT_S = 120.0


class BackgroundProducer:
    """Writes values 0, 1, 2, ... in small acks=all batches round-robin over the partitions, on
    its own thread and event loop, until stopped; remembers every acknowledged value."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.acked: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="background-producer")

    async def _run(self) -> None:
        async with Producer(self.bootstrap, acks="all") as producer:
            number = 0
            while not self._stop.is_set():
                values = [b"%d" % n for n in range(number, number + 20)]
                await (await producer.send_many(self.topic, values, partition=(number // 20) % self.partitions))
                self.acked.extend(values)
                number += 20
                await asyncio.sleep(0.02)  # a steady trickle, not a flood

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)


def start_query(spark: SparkSession, cluster: DevCluster, topic: str, out: Path, available_now: bool = False,
                **options: str) -> StreamingQuery:
    stream = (spark.readStream.format("tributary").option("bootstrap", cluster.bootstrap).option("topic", topic)
              .option("startingOffsets", "earliest").options(**options).load()
              .selectExpr("partition", "offset", "CAST(value AS STRING) AS value"))
    writer = stream.writeStream.format("parquet").option("path", str(out / "data")) \
        .option("checkpointLocation", str(out / "checkpoint"))
    return (writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="200 milliseconds")) \
        .start()


def wait_for_batches(query: StreamingQuery, count: int) -> None:
    """Bounded poll of the query's progress (Spark gives no event to await)."""
    deadline = time.monotonic() + WAIT_S
    while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < count:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"fewer than {count} non-empty batches in {WAIT_S} s"
        time.sleep(0.2)


def test_two_restarts_on_one_checkpoint_read_every_record_exactly_once(
    spark: SparkSession, cluster: DevCluster, tmp_path: Path
) -> None:
    create_topic(cluster.bootstrap, "clicks", 3)
    with BackgroundProducer(cluster.bootstrap, "clicks", 3) as producer:
        for _ in range(2):  # the first run, then the first restart, each stopped mid-stream
            query = start_query(spark, cluster, "clicks", tmp_path, maxOffsetsPerTrigger="150")
            wait_for_batches(query, 1)
            query.stop()
    # The second restart reads what is left, up to the high watermarks when it starts, and ends.
    query = start_query(spark, cluster, "clicks", tmp_path, available_now=True)
    query.awaitTermination(WAIT_S)
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert len(producer.acked) > 300
    assert sorted(r.value.encode() for r in rows) == sorted(producer.acked), "every record exactly once"
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert {p: sorted(o) for p, o in by_partition.items()} == {p: list(range(len(o))) for p, o in by_partition.items()}


def test_max_offsets_per_trigger_splits_an_available_now_query_into_several_batches(
    spark: SparkSession, cluster: DevCluster, tmp_path: Path
) -> None:
    create_topic(cluster.bootstrap, "limited", 2)
    for partition in (0, 1):
        produce(cluster.bootstrap, "limited", partition, [b"%d" % n for n in range(60)])
    query = start_query(spark, cluster, "limited", tmp_path, available_now=True, maxOffsetsPerTrigger="50")
    query.awaitTermination(WAIT_S)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
    assert sizes == [50, 50, 20]
    assert spark.read.parquet(str(tmp_path / "data")).count() == 120


def test_offsets_deleted_before_they_were_read_fail_the_query_unless_fail_on_data_loss_is_false(
    spark: SparkSession, cluster: DevCluster, tmp_path: Path
) -> None:
    create_topic(cluster.bootstrap, "lossy", 1)
    produce(cluster.bootstrap, "lossy", 0, [b"%d" % n for n in range(100)])
    query = start_query(spark, cluster, "lossy", tmp_path, available_now=True)
    query.awaitTermination(WAIT_S)
    produce(cluster.bootstrap, "lossy", 0, [b"%d" % n for n in range(100, 200)])

    async def delete_below_150() -> None:
        async with Admin(cluster.bootstrap) as admin:
            await admin.delete_records({TopicPartition("lossy", 0): 150})

    asyncio.run(delete_below_150())
    query = start_query(spark, cluster, "lossy", tmp_path, available_now=True)
    with pytest.raises(PySparkException, match=r"OFFSET_OUT_OF_RANGE: offsets 100\.\.149 of lossy-0 were deleted"):
        query.awaitTermination(WAIT_S)

    query = start_query(spark, cluster, "lossy", tmp_path, available_now=True, failOnDataLoss="false")
    query.awaitTermination(WAIT_S)
    offsets = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "data")).collect())
    assert offsets == [*range(100), *range(150, 200)]


@pytest.fixture
def two_partitions(cluster: DevCluster) -> Iterator[str]:
    create_topic(cluster.bootstrap, "grown", 2)
    produce(cluster.bootstrap, "grown", 0, [b"a"] * 5)
    produce(cluster.bootstrap, "grown", 1, [b"b"] * 7)
    yield "grown"


def test_a_partition_missing_from_the_stream_offsets_is_read_from_its_earliest_offset(
    cluster: DevCluster, two_partitions: str
) -> None:
    """What a stream does when a topic gains partitions: the stored offsets name only the old ones."""
    reader = StreamReader(SourceOptions.parse({"bootstrap": cluster.bootstrap, "topic": two_partitions}, True))
    start = {two_partitions: {"0": 2}}  # written before partition 1 existed
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {two_partitions: {"0": 5, "1": 7}}
    assert reader.partitions(start, end) == [OffsetRange(two_partitions, 0, 2, 5), OffsetRange(two_partitions, 1, 0, 7)]


def test_a_streaming_write_copies_a_topic_record_for_record(
    spark: SparkSession, cluster: DevCluster, tmp_path: Path
) -> None:
    create_topic(cluster.bootstrap, "copy-from", 2)
    create_topic(cluster.bootstrap, "copy-to", 2)
    for partition in (0, 1):
        produce(cluster.bootstrap, "copy-from", partition, [b"%d-%d" % (partition, n) for n in range(50)],
                keys=[b"k%d" % n for n in range(50)])
    query = (spark.readStream.format("tributary").option("bootstrap", cluster.bootstrap).option("topic", "copy-from")
             .option("startingOffsets", "earliest").load().select("key", "value", "partition")
             .writeStream.format("tributary").option("bootstrap", cluster.bootstrap).option("topic", "copy-to")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(WAIT_S)
    assert query.exception() is None
    copied = spark.read.format("tributary").option("bootstrap", cluster.bootstrap).option("topic", "copy-to").load()
    assert sorted((r.partition, bytes(r.key), bytes(r.value)) for r in copied.collect()) == sorted(
        (p, b"k%d" % n, b"%d-%d" % (p, n)) for p in (0, 1) for n in range(50))
