"""The options of the `tributary` data source, by the names of Spark's Kafka source.

- `bootstrap` (or `kafka.bootstrap.servers`), required: `host:port,host:port` of any nodes.
- `topic` (or `subscribe`), required: one topic or a comma-separated list to read.
- `startingOffsets`: `earliest` (batch default), `latest` (stream default) or JSON
  `{"t": {"0": 23, "1": -2}}` with -2 for earliest and -1 for latest.
- `endingOffsets` (batch reads only): `latest` (default) or JSON as above.
- `startingTimestamp`: ms since the epoch; each partition starts at its first record at or after
  it; wins over startingOffsets. A partition with no such record fails the query
  (`NoOffsetMatchedError`, Spark's "No offset matched ...") unless
  `startingOffsetsByTimestampStrategy` is `latest`, which starts it at its high watermark.
- `readFrom`: `leader` (default), `follower` or `nearest` (KIP-392).
- `maxRecordsPerPartition`: split an offset range into Spark partitions of at most this many.
- `maxOffsetsPerTrigger` (streams): at most about this many records per micro-batch, shared by
  the partitions' backlogs.
- `failOnDataLoss`: `true` (default) fails a query whose next offsets fell below a partition's
  logStartOffset (retention, delete-records); `false` skips ahead to it.
- `kafkaConsumer.pollTimeoutMs`: how long a task waits for offsets it was told exist, e.g. for
  a follower catching up (default 120000).
- `includeHeaders`: accepted as `true` only, for Spark code that sets it: the `headers` column is
  always read.

Any other option is refused with `UnsupportedOptionError` listing the supported ones (keys are
case-insensitive, as Spark's). Spark's Kafka source refuses the Kafka settings it cannot honour
(`kafka.auto.offset.reset`, ...); here every option not listed is refused, so an option of Spark's
Kafka source we do not implement (`endingTimestamp`, `assign`, `kafka.group.id`) or a misspelt one
never silently reads something other than what was asked.

Partitions missing from a JSON offsets option take the option's default (`earliest` for starting
offsets, `latest` for ending offsets); partitions a stream discovers later start at `earliest`,
as in Spark's Kafka source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from client.consumer import READ_FROM
from wire.topic_partition import TopicPartition

EARLIEST = -2  # Spark's Kafka source: -2 in a JSON offsets option is the earliest offset
LATEST = -1

SOURCE_OPTIONS = (
    "bootstrap", "kafka.bootstrap.servers", "topic", "subscribe", "startingOffsets", "endingOffsets",
    "startingTimestamp", "startingOffsetsByTimestampStrategy", "readFrom", "maxRecordsPerPartition",
    "maxOffsetsPerTrigger", "failOnDataLoss", "kafkaConsumer.pollTimeoutMs", "includeHeaders",
)


class UnsupportedOptionError(ValueError):
    """An option the tributary source or sink does not support (see the module docstring)."""


class NoOffsetMatchedError(ValueError):
    """startingTimestamp found no record at or after it in a partition, and the strategy is `error`."""


class StrategyOnNoMatch(Enum):
    """`startingOffsetsByTimestampStrategy` (Spark's StrategyOnNoMatchStartingOffset): what a
    partition with no record at or after startingTimestamp starts from."""

    ERROR = "error"  # Spark's default: fail the query naming the partition
    LATEST = "latest"  # its high watermark: only records written from now on


def check_supported(options: Mapping[str, str], supported: Sequence[str], what: str) -> None:
    """Raise UnsupportedOptionError naming every key of `options` not in `supported` (any case)."""
    known = {name.lower() for name in supported}
    unsupported = sorted(key for key in options if key.lower() not in known)
    if unsupported:
        raise UnsupportedOptionError(f"{what} does not support the option(s) {', '.join(map(repr, unsupported))}; "
                                     f"the supported options are {', '.join(supported)}")


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """`earliest`, `latest`, or per-partition offsets (EARLIEST / LATEST allowed as values);
    `default` applies to partitions the JSON does not name."""

    default: int
    offsets: Mapping[TopicPartition, int]

    def for_partition(self, tp: TopicPartition) -> int:
        return self.offsets.get(tp, self.default)


def parse_offsets(name: str, value: str | None, default: int) -> OffsetSpec:
    if value is None:
        return OffsetSpec(default, {})
    text = value.strip()
    if text.lower() == "earliest":
        return OffsetSpec(EARLIEST, {})
    if text.lower() == "latest":
        return OffsetSpec(LATEST, {})
    try:
        parsed = json.loads(text)
        offsets = {
            TopicPartition(topic, int(partition)): int(offset)
            for topic, partitions in parsed.items()
            for partition, offset in partitions.items()
        }
    except (ValueError, AttributeError, TypeError) as error:
        raise ValueError(f'{name}={value!r}: use earliest, latest or JSON like {{"topic": {{"0": 23, "1": -2}}}} '
                         f"({error})") from None
    bad = {str(tp): offset for tp, offset in offsets.items() if offset < EARLIEST}
    if bad:
        raise ValueError(f"{name}: offsets {bad} are invalid; use an offset >= 0, -2 (earliest) or -1 (latest)")
    return OffsetSpec(default, offsets)


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset format: {"topic": {"0": 23}}, keys strings (streaming offsets are JSON)."""
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets, key=lambda tp: (tp.topic, tp.partition)):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result


def offsets_from_json(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def _flag(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise ValueError(f"{name}={value!r}: use true or false")
    return value.lower() == "true"


def _strategy(value: str | None) -> StrategyOnNoMatch:
    if value is None:
        return StrategyOnNoMatch.ERROR
    try:
        return StrategyOnNoMatch(value.lower())
    except ValueError:
        raise ValueError(f"startingOffsetsByTimestampStrategy={value!r}: use error (the default) or latest") from None


def _positive(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"{name}={value!r}: use a positive integer")
    return number


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None
    no_match: StrategyOnNoMatch
    read_from: str
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    poll_timeout_ms: int

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> SourceOptions:
        check_supported(options, SOURCE_OPTIONS, "the tributary source")
        bootstrap = options.get("bootstrap") or options.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise ValueError('option "bootstrap" is required: host:port of any Tributary node(s)')
        topic = options.get("topic") or options.get("subscribe")
        topics = tuple(t.strip() for t in (topic or "").split(",") if t.strip())
        if not topics:
            raise ValueError('option "topic" is required: one topic or a comma-separated list')
        read_from = options.get("readFrom", "leader")
        if read_from not in READ_FROM:
            raise ValueError(f"readFrom={read_from!r}: use one of {', '.join(READ_FROM)}")
        if streaming and "endingOffsets" in options:
            raise ValueError("endingOffsets is for batch reads; a stream reads on as records arrive")
        timestamp = options.get("startingTimestamp")
        if timestamp is not None and (not timestamp.isdigit()):
            raise ValueError(f"startingTimestamp={timestamp!r}: use milliseconds since the epoch")
        if not _flag("includeHeaders", options.get("includeHeaders"), True):
            raise ValueError("includeHeaders=false: the headers column is always read; drop it with df.drop('headers')")
        return cls(
            bootstrap=bootstrap,
            topics=topics,
            starting=parse_offsets("startingOffsets", options.get("startingOffsets"),
                                   LATEST if streaming else EARLIEST),
            ending=parse_offsets("endingOffsets", options.get("endingOffsets"), LATEST),
            starting_timestamp=None if timestamp is None else int(timestamp),
            no_match=_strategy(options.get("startingOffsetsByTimestampStrategy")),
            read_from=read_from,
            max_records_per_partition=_positive("maxRecordsPerPartition", options.get("maxRecordsPerPartition")),
            max_offsets_per_trigger=_positive("maxOffsetsPerTrigger", options.get("maxOffsetsPerTrigger")),
            fail_on_data_loss=_flag("failOnDataLoss", options.get("failOnDataLoss"), True),
            poll_timeout_ms=_positive("kafkaConsumer.pollTimeoutMs", options.get("kafkaConsumer.pollTimeoutMs"))
            or 120000,
        )
