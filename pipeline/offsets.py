"""Planning on the driver: which partitions exist, their offset bounds, and the offset ranges a
query reads (Spark's `KafkaOffsetReader` and `KafkaOffsetRangeCalculator`).

Every function here is synchronous (Spark calls the data source planner from plain Python) and
runs one short-lived async client under `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from client.consumer import Consumer
from client.errors import error_for
from pipeline.options import EARLIEST, LATEST, NoOffsetMatchedError, SourceOptions, StrategyOnNoMatch
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class Bounds:
    """Per partition: logStartOffset (`earliest`) and high watermark (`latest`), from each leader."""

    earliest: Mapping[TopicPartition, int]
    latest: Mapping[TopicPartition, int]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark partition: offsets [start, end) of topic-partition."""

    topic: str
    partition: int
    start: int
    end: int


async def _bounds(options: SourceOptions, timestamp: int | None) -> tuple[Bounds, dict[TopicPartition, int | None]]:
    async with Consumer(options.bootstrap) as consumer:
        consumer.metadata.add_topics(list(options.topics))
        await consumer.metadata.refresh()
        tps = [TopicPartition(topic, number)
               for topic in options.topics for number in sorted(consumer.metadata.require_topic(topic))]
        earliest = await consumer.beginning_offsets(tps)
        latest = await consumer.end_offsets(tps)
        by_time: dict[TopicPartition, int | None] = {}
        if timestamp is not None:
            found = await consumer.offsets_for_times(dict.fromkeys(tps, timestamp))
            by_time = {tp: None if hit is None else hit.offset for tp, hit in found.items()}
        return Bounds(earliest, latest), by_time


def fetch_bounds(options: SourceOptions) -> Bounds:
    """Every partition of the options' topics (new partitions included) and its bounds."""
    return asyncio.run(_bounds(options, None))[0]


def starting_offsets(options: SourceOptions) -> tuple[dict[TopicPartition, int], Bounds]:
    """Where a query starts in each partition: startingTimestamp if given, else startingOffsets."""
    bounds, by_time = asyncio.run(_bounds(options, options.starting_timestamp))
    if options.starting_timestamp is not None:
        return {tp: _by_timestamp(by_time[tp], tp, bounds, options) for tp in bounds.latest}, bounds
    return {tp: _resolve(options.starting.for_partition(tp), tp, bounds) for tp in bounds.latest}, bounds


def _by_timestamp(offset: int | None, tp: TopicPartition, bounds: Bounds, options: SourceOptions) -> int:
    """The first offset at or after startingTimestamp; with none, what startingOffsetsByTimestampStrategy
    says (Spark's Kafka source: `error` fails the query, `latest` starts at the end)."""
    if offset is not None:
        return offset
    if options.no_match is StrategyOnNoMatch.LATEST:
        return bounds.latest[tp]
    raise NoOffsetMatchedError(
        f"No offset matched from request of topic-partition {tp} and timestamp {options.starting_timestamp}: "
        f"it holds no record at or after that time. Set startingOffsetsByTimestampStrategy=latest to start such "
        f"partitions at their end, or use an earlier startingTimestamp")


def _resolve(offset: int, tp: TopicPartition, bounds: Bounds) -> int:
    if offset == EARLIEST:
        return bounds.earliest[tp]
    if offset == LATEST:
        return bounds.latest[tp]
    return offset


def batch_ranges(options: SourceOptions) -> list[OffsetRange]:
    """The ranges of a batch read: startingOffsets (or startingTimestamp) to endingOffsets."""
    starts, bounds = starting_offsets(options)
    ends = {tp: _resolve(options.ending.for_partition(tp), tp, bounds) for tp in bounds.latest}
    for tp, end in ends.items():
        if end > bounds.latest[tp]:
            raise error_for(ErrorCode.OFFSET_OUT_OF_RANGE, f"endingOffsets {end} for {tp} is beyond its high "
                            f"watermark {bounds.latest[tp]}; use latest or an offset <= {bounds.latest[tp]}")
        if starts[tp] > end:
            raise ValueError(f"startingOffsets {starts[tp]} for {tp} is after endingOffsets {end}; "
                             "the start must not come after the end")
    return plan(starts, ends, bounds, options)


def plan(starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int], bounds: Bounds,
         options: SourceOptions) -> list[OffsetRange]:
    """Ranges for [starts, ends) per partition, split by maxRecordsPerPartition. A start below the
    partition's logStartOffset is data loss: an error, or (failOnDataLoss=false) skipped."""
    ranges = []
    for tp, end in ends.items():
        start = starts[tp]
        earliest = bounds.earliest.get(tp, 0)
        if start < earliest:
            if options.fail_on_data_loss:
                raise error_for(ErrorCode.OFFSET_OUT_OF_RANGE, data_loss_message(tp, start, earliest))
            start = min(earliest, end)
        ranges.extend(split(tp, start, end, options.max_records_per_partition))
    return ranges


def data_loss_message(tp: TopicPartition, offset: int, earliest: int) -> str:
    return (f"offsets {offset}..{earliest - 1} of {tp} were deleted (retention or delete-records) before they "
            f"were read; the earliest offset is now {earliest}. Records were lost for this query: set "
            "failOnDataLoss=false to skip ahead, or start a new query")


def split(tp: TopicPartition, start: int, end: int, max_records: int | None) -> list[OffsetRange]:
    if start >= end:
        return []
    if max_records is None:
        return [OffsetRange(tp.topic, tp.partition, start, end)]
    pieces = math.ceil((end - start) / max_records)
    size = math.ceil((end - start) / pieces)
    return [OffsetRange(tp.topic, tp.partition, s, min(s + size, end)) for s in range(start, end, size)]


def rate_limit(starts: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               limit: int) -> dict[TopicPartition, int]:
    """End offsets taking about `limit` records in all, shared by each partition's backlog
    (Spark's `KafkaMicroBatchStream.rateLimit`: a share under one record rounds up, others down)."""
    backlog = {tp: max(0, end - starts.get(tp, end)) for tp, end in latest.items()}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    ends = {}
    for tp, end in latest.items():
        share = limit * backlog[tp] / total
        taken = math.ceil(share) if share < 1 else math.floor(share)
        ends[tp] = min(end, starts.get(tp, end) + taken)
    return ends

