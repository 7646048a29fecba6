"""`tributary consume TOPIC`: print one value per line, like kafka-console-consumer.

Where reading starts: `--offset` (with `--partition`, or on every partition), `--from-beginning`,
`--timestamp` (the first record at or after it), the `--group`'s committed offsets, else the end
(only new records, as Kafka's console consumer). `--max-records` and `--timeout-ms` (no record
for that long) end the run. With `--group` alone the consumer joins the group (`subscribe`: it
reads the partitions the group gives it, from the group's committed offsets, and commits as it
goes and at the end); with `--group` and a `--partition`, `--offset` or `--timestamp` it reads
what it is told and commits the positions reached at the end (refused while the group has
members, as Kafka refuses it). `--consumer-property KEY=VALUE` sets a consumer setting by its
Kafka name, e.g. `partition.assignment.strategy=range` (the assignors by Kafka's short or class
names, comma-separated).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any, TextIO

from client.cli_support import EXIT_OK, bootstrap_parent, parse_properties, run_command
from client.consumer import Consumer
from client.fetched_batch import ConsumerRecord
from wire.topic_partition import TopicPartition


def register(subcommands: Any) -> None:
    parser = subcommands.add_parser("consume", parents=[bootstrap_parent()], help="print records, one per line")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--partition", type=int, help="read only this partition")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", type=int, help="start at this offset")
    start.add_argument("--timestamp", type=int, help="start at the first record with a timestamp >= this (ms)")
    parser.add_argument("--from-follower", action="store_true", help="fetch from an in-sync follower, not the leader")
    parser.add_argument("--client-rack", help="read from the replica the leader prefers for this rack (KIP-392)")
    parser.add_argument("--print-key", action="store_true", help="print the key, a tab, then the value")
    parser.add_argument("--print-offset", action="store_true", help="print Partition:P Offset:N before each record")
    parser.add_argument("--max-records", type=int, help="stop after this many records")
    parser.add_argument("--timeout-ms", type=int, help="stop when no record arrives for this long")
    parser.add_argument("--group", help="start at, and commit, this consumer group's offsets")
    parser.add_argument("--consumer-property", action="append", metavar="KEY=VALUE",
                        help="a consumer setting by its Kafka name, e.g. partition.assignment.strategy=range "
                             "(repeatable)")
    parser.set_defaults(run=run_command(consume))


def format_record(record: ConsumerRecord, print_key: bool, print_offset: bool) -> str:
    """kafka-console-consumer's DefaultMessageFormatter: fields separated by tabs, null as "null"."""
    fields = []
    if print_offset:
        fields.append(f"Partition:{record.partition}\tOffset:{record.offset}")
    if print_key:
        fields.append(_text(record.key))
    fields.append(_text(record.value))
    return "\t".join(fields)


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


CONSUMER_PROPERTIES = (
    "group.instance.id", "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
    "max.poll.interval.ms", "enable.auto.commit", "auto.commit.interval.ms", "fetch.max.wait.ms",
    "fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes", "request.timeout.ms", "retry.backoff.ms",
)


def consumer_settings(properties: dict[str, str]) -> dict[str, Any]:
    """Kafka consumer property names (`session.timeout.ms`) as `Consumer` keyword arguments;
    `group.instance.id` makes the consumer a static member of its `--group` (KIP-345)."""
    settings: dict[str, Any] = {}
    for key, value in properties.items():
        if key not in CONSUMER_PROPERTIES:
            raise ValueError(f"unknown consumer property {key!r}; known: {', '.join(sorted(CONSUMER_PROPERTIES))}")
        name = key.replace(".", "_")
        if key in ("partition.assignment.strategy", "group.instance.id"):
            settings[name] = value
        elif key == "enable.auto.commit":
            if value.lower() not in ("true", "false"):
                raise ValueError(f"enable.auto.commit={value!r}: use true or false")
            settings[name] = value.lower() == "true"
        else:
            settings[name] = int(value)
    return settings


def read_from(arguments: argparse.Namespace) -> str:
    if arguments.from_follower:
        return "follower"
    return "nearest" if arguments.client_rack else "leader"


async def consume(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if arguments.max_records is not None and arguments.max_records < 0:
        raise ValueError("--max-records must be >= 0")
    consumer = Consumer(
        arguments.bootstrap, read_from=read_from(arguments), group_id=arguments.group,
        client_rack=arguments.client_rack, auto_offset_reset="earliest" if arguments.from_beginning else "latest",
        **consumer_settings(parse_properties(arguments.consumer_property, "--consumer-property")),
    )
    subscribed = arguments.group is not None and arguments.partition is None and arguments.offset is None \
        and arguments.timestamp is None
    async with consumer:
        if subscribed:
            consumer.subscribe([arguments.topic])
        else:
            await _position(consumer, arguments)
        printed = 0
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        limit = arguments.max_records
        while limit is None or printed < limit:
            wait_ms = 1000 if arguments.timeout_ms is None else max(1, arguments.timeout_ms)
            records = await consumer.poll(wait_ms, 500 if limit is None else min(500, limit - printed))
            for record in records:
                print(format_record(record, arguments.print_key, arguments.print_offset), file=out)
            out.flush()
            printed += len(records)
            if records:
                idle_since = loop.time()
            elif arguments.timeout_ms is not None and (loop.time() - idle_since) * 1000 >= arguments.timeout_ms:
                break
        if arguments.group is not None and not subscribed:
            await consumer.commit()
    print(f"Processed a total of {printed} messages", file=err)
    return EXIT_OK


async def _position(consumer: Consumer, arguments: argparse.Namespace) -> None:
    consumer.metadata.add_topics([arguments.topic])
    await consumer.metadata.refresh()
    partitions = consumer.metadata.require_topic(arguments.topic)
    if arguments.partition is not None and arguments.partition not in partitions:
        raise ValueError(f"{arguments.topic} has partitions 0..{len(partitions) - 1}, not {arguments.partition}")
    numbers = sorted(partitions) if arguments.partition is None else [arguments.partition]
    tps = [TopicPartition(arguments.topic, number) for number in numbers]
    consumer.assign(tps)
    if arguments.offset is not None:
        for tp in tps:
            consumer.seek(tp, arguments.offset)
    elif arguments.from_beginning and arguments.group is None:
        await consumer.seek_to_beginning()  # with a group, only where it committed nothing (Kafka's rule)
    elif arguments.timestamp is not None:
        found = await consumer.offsets_for_times(dict.fromkeys(tps, arguments.timestamp))
        ends = await consumer.end_offsets([tp for tp, offset in found.items() if offset is None])
        for tp, offset in found.items():
            consumer.seek(tp, ends[tp] if offset is None else offset.offset)
