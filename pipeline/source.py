"""`spark.read.format("tributary")` and `spark.readStream.format("tributary")`.

Theory of operation (Spark's Kafka source): a query's position is one offset per partition, as
JSON `{"topic": {"0": 23}}`. The driver plans [start, end) per partition from leaders' ListOffsets
(`offsets`); each range becomes one or more Spark partitions that tasks read with a consumer
(`reader`), from the leader or a follower, never past the end, which is at most the high
watermark: a consumer sees nothing above it. A stream stores its offsets in the checkpoint before
a micro-batch runs, so a restarted query replans the same ranges and reads each record once
(given an exactly-once sink).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from pipeline.offsets import Bounds, OffsetRange, batch_ranges, fetch_bounds, plan, rate_limit, starting_offsets
from pipeline.options import SourceOptions, offsets_from_json, offsets_to_json
from pipeline.reader import read_range
from wire.topic_partition import TopicPartition


class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return list(batch_ranges(self.options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            # Spark's stand-in when partitions() planned no range (an empty topic, or start = end).
            assert partition.value is None, f"not an OffsetRange: {partition!r}"
            return iter(())
        return read_range(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets of every partition of the topics; partitions created later join at their earliest offset."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.available_now: dict[TopicPartition, int] | None = None

    def initialOffset(self) -> dict:
        starts, _ = starting_offsets(self.options)
        return offsets_to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: read up to today's high watermarks, in as many batches as the limit needs."""
        self.available_now = dict(fetch_bounds(self.options).latest)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        bounds = fetch_bounds(self.options)
        latest = dict(bounds.latest)
        if self.available_now is not None:
            latest = {tp: min(end, self.available_now[tp]) for tp, end in latest.items() if tp in self.available_now}
        starts = self._starts(start, bounds)
        latest = {tp: max(end, starts[tp]) for tp, end in latest.items()}  # never behind the start
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(starts, latest, limit.max_rows)
        return offsets_to_json(latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ends = offsets_from_json(end)
        bounds = fetch_bounds(self.options)
        return list(plan(self._starts(start, bounds, ends), ends, bounds, self.options))

    def _starts(self, start: dict, bounds: Bounds, ends: dict | None = None) -> dict[TopicPartition, int]:
        """The start's offsets; partitions it does not know (created since) from their earliest."""
        known = offsets_from_json(start)
        wanted = bounds.latest if ends is None else ends
        return {tp: known[tp] if tp in known else bounds.earliest.get(tp, 0) for tp in wanted}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange), f"not an OffsetRange: {partition!r}"
        return read_range(self.options, partition)
