"""Batch reads and writes through `format("tributary")` against a real 3-node cluster."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from node.dev import DevCluster
from tests.spark.helpers import consume_all, create_topic, produce

pytestmark = pytest.mark.spark


def read(spark: SparkSession, cluster: DevCluster, topic: str, **options: str) -> DataFrame:
    return spark.read.format("tributary").option("bootstrap", cluster.bootstrap).option("topic", topic) \
        .options(**options).load()


def offsets_by_partition(df: DataFrame) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for row in df.select("partition", "offset").orderBy("partition", "offset").collect():
        found.setdefault(row.partition, []).append(row.offset)
    return found


def test_rows_written_by_spark_are_read_back_by_spark_and_by_the_python_consumer(
    spark: SparkSession, cluster: DevCluster
) -> None:
    create_topic(cluster.bootstrap, "round-trip", 3)
    source = spark.range(3000).select(F.format_string("k%d", "id").alias("key"),
                                      F.format_string("v%d", "id").alias("value"))
    source.write.format("tributary").option("bootstrap", cluster.bootstrap).option("topic", "round-trip") \
        .mode("append").save()

    df = read(spark, cluster, "round-trip")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = df.collect()
    assert sorted((bytes(r.key), bytes(r.value)) for r in rows) == sorted(
        (b"k%d" % n, b"v%d" % n) for n in range(3000))
    assert {r.topic for r in rows} == {"round-trip"}
    assert {r.timestampType for r in rows} == {0}
    by_partition = offsets_by_partition(df)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values()), "contiguous from 0"
    spark_records = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows)
    assert spark_records == consume_all(cluster.bootstrap, "round-trip", 3)


def test_partition_and_headers_columns_are_written_and_read_back(spark: SparkSession, cluster: DevCluster) -> None:
    create_topic(cluster.bootstrap, "with-headers", 2)
    source = spark.createDataFrame(
        [("with-headers", 1, b"a", [("trace", b"t1")]), ("with-headers", 1, b"b", []), ("with-headers", 0, b"c", None)],
        "topic string, partition int, value binary, headers array<struct<key: string, value: binary>>",
    ).coalesce(1)  # one task: its rows keep their order in each partition
    source.write.format("tributary").option("bootstrap", cluster.bootstrap).mode("append").save()
    rows = read(spark, cluster, "with-headers").orderBy("partition", "offset").collect()
    assert [(r.partition, r.offset, bytes(r.value), [(h.key, bytes(h.value)) for h in r.headers]) for r in rows] == [
        (0, 0, b"c", []), (1, 0, b"a", [("trace", b"t1")]), (1, 1, b"b", [])]


def test_offset_ranges_timestamps_and_split_partitions_select_exactly_the_asked_records(
    spark: SparkSession, cluster: DevCluster
) -> None:
    create_topic(cluster.bootstrap, "ranges", 2)
    late = int(time.time() * 1000) - 60_000
    early = late - 600_000  # both inside retention.ms (7 days), or retention would delete them
    for partition in (0, 1):
        produce(cluster.bootstrap, "ranges", partition, [b"early-%d" % n for n in range(100)], early)
        produce(cluster.bootstrap, "ranges", partition, [b"late-%d" % n for n in range(100)], late)

    ranged = read(spark, cluster, "ranges", startingOffsets=json.dumps({"ranges": {"0": 10, "1": -2}}),
                  endingOffsets=json.dumps({"ranges": {"0": 50}}))
    assert offsets_by_partition(ranged) == {0: list(range(10, 50)), 1: list(range(200))}

    since = read(spark, cluster, "ranges", startingTimestamp=str(late - 1))
    assert offsets_by_partition(since) == {0: list(range(100, 200)), 1: list(range(100, 200))}
    assert {int(r.ts) for r in since.select((F.unix_micros("timestamp") / 1000).alias("ts")).collect()} == {late}

    split = read(spark, cluster, "ranges", maxRecordsPerPartition="30")
    assert split.rdd.getNumPartitions() == 2 * 7  # 200 offsets in ranges of <= 30
    assert offsets_by_partition(split) == {0: list(range(200)), 1: list(range(200))}


def test_reads_from_followers_and_nearest_replicas_equal_reads_from_leaders(
    spark: SparkSession, cluster: DevCluster
) -> None:
    create_topic(cluster.bootstrap, "replicated", 3)
    for partition in range(3):
        produce(cluster.bootstrap, "replicated", partition, [b"%d-%d" % (partition, n) for n in range(500)])
    leader = sorted(map(tuple, read(spark, cluster, "replicated").select("partition", "offset", "value").collect()))
    for replica in ("follower", "nearest"):
        other = read(spark, cluster, "replicated", readFrom=replica).select("partition", "offset", "value")
        assert sorted(map(tuple, other.collect())) == leader, replica
    assert len(leader) == 1500


def test_write_failures_fail_the_job_with_the_kafka_error_name(spark: SparkSession, cluster: DevCluster) -> None:
    source = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(PySparkException, match="UNKNOWN_TOPIC_OR_PARTITION"):
        source.write.format("tributary").option("bootstrap", cluster.bootstrap).option("topic", "no-such-topic") \
            .mode("append").save()
    with pytest.raises(PySparkException, match="Required attribute 'value' not found"):
        spark.createDataFrame([(b"k",)], "key binary").write.format("tributary") \
            .option("bootstrap", cluster.bootstrap).option("topic", "round-trip").mode("append").save()


def test_starting_timestamp_with_no_record_after_it_fails_the_read_or_starts_at_the_end_by_the_strategy(
    spark: SparkSession, cluster: DevCluster
) -> None:
    """Spark's Kafka source: a partition with no record at or after startingTimestamp fails the query
    naming the partition (startingOffsetsByTimestampStrategy=error, the default); with `latest` it
    starts at its end. Partition 1 holds only records older than the timestamp."""
    create_topic(cluster.bootstrap, "stamped", 2)
    recent = int(time.time() * 1000) - 60_000
    produce(cluster.bootstrap, "stamped", 0, [b"recent-%d" % n for n in range(10)], recent)
    produce(cluster.bootstrap, "stamped", 1, [b"older-%d" % n for n in range(10)], recent - 600_000)
    with pytest.raises(PySparkException, match=f"NoOffsetMatchedError: No offset matched from request of "
                                               f"topic-partition stamped-1 and timestamp {recent - 1}"):
        read(spark, cluster, "stamped", startingTimestamp=str(recent - 1)).collect()
    latest = read(spark, cluster, "stamped", startingTimestamp=str(recent - 1),
                  startingOffsetsByTimestampStrategy="latest")
    assert offsets_by_partition(latest) == {0: list(range(10))}


def test_unsupported_options_and_overwrite_are_refused_and_nothing_is_written(
    spark: SparkSession, cluster: DevCluster
) -> None:
    """Refused with a named error before any record moves: an option of Spark's Kafka source the
    tributary source does not implement, a Kafka producer setting on the sink, and mode("overwrite")
    (Spark's Kafka sink allows only Append and ErrorIfExists)."""
    create_topic(cluster.bootstrap, "refusing", 1)
    with pytest.raises(PySparkException, match=r"UnsupportedOptionError: the tributary source does not support "
                                               r"the option\(s\) 'endingtimestamp'; the supported options are "
                                               r"bootstrap, kafka\.bootstrap\.servers, topic, "):
        read(spark, cluster, "refusing", endingTimestamp=str(int(time.time() * 1000))).collect()
    source = spark.createDataFrame([(b"v",)], "value binary")
    writer = source.write.format("tributary").option("bootstrap", cluster.bootstrap).option("topic", "refusing")
    with pytest.raises(PySparkException, match=r"UnsupportedSaveModeError: save mode Overwrite is not allowed"):
        writer.mode("overwrite").save()
    with pytest.raises(PySparkException, match=r"the tributary sink does not support the option\(s\) 'kafka\.acks'"):
        writer.option("kafka.acks", "1").mode("append").save()
    assert consume_all(cluster.bootstrap, "refusing", 1) == []


def test_a_topic_with_no_records_reads_as_no_rows(spark: SparkSession, cluster: DevCluster) -> None:
    """A batch read that plans no offset range (a topic just created) gets Spark's placeholder
    partition, InputPartition(None), and reads it as nothing."""
    create_topic(cluster.bootstrap, "empty", 2)
    assert read(spark, cluster, "empty").collect() == []
