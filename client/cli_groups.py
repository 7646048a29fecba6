"""`tributary groups describe|reset-offsets`: a consumer group's committed offsets and lag, and
moving them (Kafka's kafka-consumer-groups.sh). A reset is refused while the group has members
(as Kafka requires an inactive group); like Kafka's tool it is a dry run without `--execute`.

`--topic` takes `TOPIC` (every partition) or `TOPIC:P[,P...]`. New offsets are clamped to each
partition's [earliest, latest], as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any, TextIO

from client.admin import Admin
from client.cli_cluster import format_rows
from client.cli_support import EXIT_OK, bootstrap_parent, run_command
from client.consumer import Consumer
from client.metadata import TopicPartition


def register(subcommands: Any) -> None:
    parent = bootstrap_parent()
    groups = subcommands.add_parser("groups", help="consumer groups: committed offsets, lag, resets")
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    describe = actions.add_parser("describe", parents=[parent], help="committed offset, log end offset and lag")
    describe.add_argument("--group", required=True)
    describe.add_argument("--json", action="store_true", help="print one JSON object")
    describe.set_defaults(run=run_command(describe_group))

    reset = actions.add_parser("reset-offsets", parents=[parent], help="move a group's committed offsets")
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True, action="append", metavar="TOPIC[:P,P...]",
                       help="the partitions to reset (repeatable)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="OFFSET")
    target.add_argument("--to-datetime", metavar="ISO-8601", help="the first offset at or after it (UTC if no zone)")
    target.add_argument("--shift-by", type=int, metavar="N", help="move the committed offset by N (may be negative)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    reset.set_defaults(run=run_command(reset_offsets))


async def describe_group(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Consumer(arguments.bootstrap, group_id=arguments.group) as consumer:
        committed = {tp: offset for tp, offset in (await consumer.committed()).items() if offset is not None}
        ends = await consumer.end_offsets(sorted(committed, key=_order)) if committed else {}
    rows = [(tp, committed[tp], ends[tp]) for tp in sorted(committed, key=_order)]
    if arguments.json:
        print(json.dumps({"group": arguments.group, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "committedOffset": offset, "logEndOffset": end,
             "lag": max(end - offset, 0)} for tp, offset, end in rows]}), file=out)
        return EXIT_OK
    if not rows:
        print(f"Consumer group '{arguments.group}' has no committed offsets.", file=out)
        return EXIT_OK
    table = [("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")] + [
        (arguments.group, tp.topic, str(tp.partition), str(offset), str(end), str(max(end - offset, 0)))
        for tp, offset, end in rows
    ]
    out.write("\n".join(format_rows(table)) + "\n")
    return EXIT_OK


async def reset_offsets(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap) as admin:
        described = await admin.describe_topics(sorted({spec.partition(":")[0] for spec in arguments.topic}))
    partitions = sorted({tp for spec in arguments.topic for tp in _partitions_of(spec, described)}, key=_order)
    async with Consumer(arguments.bootstrap, group_id=arguments.group) as consumer:
        earliest = await consumer.beginning_offsets(partitions)
        latest = await consumer.end_offsets(partitions)
        wanted = await _targets(arguments, consumer, partitions, earliest, latest)
        new = {tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in wanted.items()}
        if arguments.execute:
            await consumer.commit(new)
    table = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")] + [
        (arguments.group, tp.topic, str(tp.partition), str(new[tp])) for tp in partitions
    ]
    out.write("\n".join(format_rows(table)) + "\n")
    if not arguments.execute:
        print("(dry run: nothing was committed; add --execute to commit these offsets)", file=err)
    return EXIT_OK


async def _targets(arguments: argparse.Namespace, consumer: Consumer, partitions: list[TopicPartition],
                   earliest: dict[TopicPartition, int], latest: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Each partition's new offset before clamping."""
    if arguments.to_earliest:
        return dict(earliest)
    if arguments.to_latest:
        return dict(latest)
    if arguments.to_offset is not None:
        return dict.fromkeys(partitions, arguments.to_offset)
    if arguments.shift_by is not None:
        committed = await consumer.committed(partitions)
        missing = sorted(str(tp) for tp, offset in committed.items() if offset is None)
        if missing:
            raise ValueError(f"--shift-by needs a committed offset; {', '.join(missing)} has none "
                             f"(reset those with --to-earliest, --to-latest or --to-offset first)")
        return {tp: offset + arguments.shift_by for tp, offset in committed.items() if offset is not None}
    found = await consumer.offsets_for_times(dict.fromkeys(partitions, _parse_datetime_ms(arguments.to_datetime)))
    return {tp: latest[tp] if offset is None else offset.offset for tp, offset in found.items()}


def _partitions_of(spec: str, described: dict[str, list[Any]]) -> list[TopicPartition]:
    topic, _, numbers = spec.partition(":")
    known = sorted(info.partition for info in described.get(topic, []))
    if not numbers:
        return [TopicPartition(topic, partition) for partition in known]
    try:
        chosen = [int(number) for number in numbers.split(",")]
    except ValueError:
        raise ValueError(f"--topic {spec!r}: give TOPIC or TOPIC:P[,P...] with partition numbers") from None
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise ValueError(f"--topic {spec!r}: {topic} has partitions {known}, not {unknown}")
    return [TopicPartition(topic, partition) for partition in chosen]


def _parse_datetime_ms(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--to-datetime {text!r} is not ISO 8601 (e.g. 2026-11-22T09:30:00 or "
                         f"2026-11-22T09:30:00+01:00)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _order(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition
