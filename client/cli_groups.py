"""`tributary groups list|describe|reset-offsets|delete|delete-offsets`: consumer groups, their
members, committed offsets and lag, moving the offsets, deleting groups and offsets (Kafka's
kafka-consumer-groups.sh). A reset is refused while the group has members (as Kafka requires an
inactive group); like Kafka's tool it is a dry run without `--execute`. `delete` removes groups
without members with their offsets (`--delete`), `delete-offsets` a group's offsets of some
partitions (`--delete-offsets`: refused for a topic a member subscribes to); both print each
group's or partition's outcome and exit 1 if any failed.

`describe` shows Kafka's tool's views: each partition's committed offset, log end offset, lag and
owner (the member whose assignment holds it; "-" for none; a partition assigned and never committed
shows "-" for CURRENT-OFFSET and LAG), `--members` each member and its assignment, `--state` the
group's coordinator, assignor, state and member count. A group that does not exist is an error
(exit 1), where Kafka's tool prints the error and exits 0: a script can tell without parsing.

`--topic` takes `TOPIC` (every partition) or `TOPIC:P[,P...]`. New offsets are clamped to each
partition's [earliest, latest], as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any, TextIO

from client.admin import Admin, GroupDescription, MemberDescription
from client.cli_cluster import format_rows
from client.cli_support import EXIT_FAILED, EXIT_OK, bootstrap_parent, run_command
from client.consumer import Consumer
from client.errors import TributaryError
from wire.group_admin import ConsumerGroupState
from wire.topic_partition import TopicPartition


def register(subcommands: Any) -> None:
    parent = bootstrap_parent()
    groups = subcommands.add_parser("groups", help="consumer groups: members, committed offsets, lag, resets")
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[parent], help="every group, its state and protocol type")
    listing.add_argument("--state", type=_states, default=(), metavar="STATE[,STATE...]",
                         help="only groups in these states (KIP-518): Stable, Empty, PreparingRebalance, "
                              "CompletingRebalance, Dead (any case)")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(run=run_command(list_groups))

    describe = actions.add_parser("describe", parents=[parent],
                                  help="each partition's committed offset, log end offset, lag and owner")
    describe.add_argument("--group", required=True)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="the members, their hosts and assignments")
    view.add_argument("--state", action="store_true", help="the coordinator, assignor, state and member count")
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

    delete = actions.add_parser("delete", parents=[parent], help="delete groups without members, with their offsets")
    delete.add_argument("--group", required=True, action="append", help="a group to delete (repeatable)")
    delete.add_argument("--json", action="store_true", help="print one JSON object")
    delete.set_defaults(run=run_command(delete_groups))

    delete_offsets = actions.add_parser("delete-offsets", parents=[parent],
                                        help="delete a group's committed offsets of some partitions")
    delete_offsets.add_argument("--group", required=True)
    delete_offsets.add_argument("--topic", required=True, action="append", metavar="TOPIC[:P,P...]",
                                help="the partitions whose offsets go (repeatable)")
    delete_offsets.add_argument("--json", action="store_true", help="print one JSON object")
    delete_offsets.set_defaults(run=run_command(delete_group_offsets))


async def list_groups(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap) as admin:
        listed = await admin.list_groups(arguments.state)
    if arguments.json:
        print(json.dumps({"groups": [{"group": group.group_id, "state": group.state.value,
                                      "protocolType": group.protocol_type} for group in listed]}), file=out)
    elif listed:
        table = [("GROUP", "STATE", "PROTOCOL-TYPE")] + [
            (group.group_id, group.state.value, group.protocol_type or "-") for group in listed]
        out.write("\n".join(format_rows(table)) + "\n")
    return EXIT_OK


async def describe_group(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap) as admin:
        group = (await admin.describe_groups([arguments.group]))[arguments.group]
    if group.state is ConsumerGroupState.DEAD:
        print(f"Error: Consumer group '{arguments.group}' does not exist.", file=err)
        return EXIT_FAILED
    if group.state in (ConsumerGroupState.PREPARING_REBALANCE, ConsumerGroupState.COMPLETING_REBALANCE):
        print(f"Warning: Consumer group '{arguments.group}' is rebalancing.", file=err)
    if arguments.state:
        _print_state(group, arguments.json, out)
    elif arguments.members:
        _print_members(group, arguments.json, out)
    else:
        await _print_offsets(arguments.bootstrap, group, arguments.json, out)
    return EXIT_OK


async def _print_offsets(bootstrap: str, group: GroupDescription, as_json: bool, out: TextIO) -> None:
    """Kafka's default view: the partitions committed or assigned, each with its owner."""
    async with Consumer(bootstrap, group_id=group.group_id) as consumer:
        committed = {tp: offset for tp, offset in (await consumer.committed()).items() if offset is not None}
        owners = group.owners()
        partitions = sorted(set(committed) | set(owners), key=_order)
        ends = await consumer.end_offsets(partitions) if partitions else {}
    rows = [(tp, committed.get(tp), ends[tp], owners.get(tp)) for tp in partitions]
    if as_json:
        print(json.dumps({"group": group.group_id, "state": group.state.value, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "committedOffset": offset, "logEndOffset": end,
             "lag": None if offset is None else max(end - offset, 0),
             "consumerId": None if owner is None else owner.member_id,
             "host": None if owner is None else owner.client_host,
             "clientId": None if owner is None else owner.client_id} for tp, offset, end, owner in rows]}), file=out)
        return
    if not group.members:
        print(f"Consumer group '{group.group_id}' has no active members.", file=out)
    if not rows:
        return
    table = [("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
              "CLIENT-ID")] + [
        (group.group_id, tp.topic, str(tp.partition), _or_dash(offset), str(end),
         _or_dash(None if offset is None else max(end - offset, 0)), *_owner_cells(owner))
        for tp, offset, end, owner in rows
    ]
    out.write("\n".join(format_rows(table)) + "\n")


def _print_members(group: GroupDescription, as_json: bool, out: TextIO) -> None:
    if as_json:
        print(json.dumps({"group": group.group_id, "state": group.state.value, "members": [
            {"consumerId": member.member_id, "groupInstanceId": member.group_instance_id, "host": member.client_host,
             "clientId": member.client_id, "assignment": [{"topic": tp.topic, "partition": tp.partition}
                                                          for tp in sorted(member.assignment, key=_order)]}
            for member in group.members]}), file=out)
        return
    if not group.members:
        print(f"Consumer group '{group.group_id}' has no active members.", file=out)
        return
    table = [("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")] + [
        (group.group_id, *_owner_cells(member), str(len(member.assignment)), _assignment_text(member))
        for member in group.members
    ]
    out.write("\n".join(format_rows(table)) + "\n")


def _print_state(group: GroupDescription, as_json: bool, out: TextIO) -> None:
    coordinator = group.coordinator
    if as_json:
        print(json.dumps({"group": group.group_id, "coordinator": None if coordinator is None else {
            "id": coordinator.node_id, "host": coordinator.host, "port": coordinator.port},
            "assignmentStrategy": group.assignor, "state": group.state.value, "members": len(group.members)}),
            file=out)
        return
    where = "-" if coordinator is None else f"{coordinator.address} ({coordinator.node_id})"
    table = [("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
             (group.group_id, where, group.assignor or "-", group.state.value, str(len(group.members)))]
    out.write("\n".join(format_rows(table)) + "\n")


def _owner_cells(owner: MemberDescription | None) -> tuple[str, str, str]:
    if owner is None:
        return "-", "-", "-"
    return owner.member_id, owner.client_host or "-", owner.client_id or "-"


def _assignment_text(member: MemberDescription) -> str:
    """Kafka's tool's form: topic(0,1,2),other(4)."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(member.assignment, key=_order):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{topic}({','.join(map(str, numbers))})" for topic, numbers in by_topic.items()) or "-"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _states(text: str) -> tuple[ConsumerGroupState, ...]:
    """`--state Stable,empty`: Kafka's state names, in any case."""
    by_name = {state.value.lower(): state for state in ConsumerGroupState}
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in by_name]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: give states among {', '.join(s.value for s in by_name.values())}")
    return tuple(by_name[name] for name in names)


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


async def delete_groups(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap) as admin:
        outcomes = await admin.delete_groups(arguments.group)
    if arguments.json:
        print(json.dumps({"groups": [{"group": group_id, "error": _error_name(error), "message": _error_text(error)}
                                     for group_id, error in outcomes.items()]}), file=out)
    else:
        table = [("GROUP", "STATUS")] + [(group_id, _status(error)) for group_id, error in outcomes.items()]
        out.write("\n".join(format_rows(table)) + "\n")
    return EXIT_FAILED if any(outcomes.values()) else EXIT_OK


async def delete_group_offsets(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap) as admin:
        described = await admin.describe_topics(sorted({spec.partition(":")[0] for spec in arguments.topic}))
        partitions = sorted({tp for spec in arguments.topic for tp in _partitions_of(spec, described)}, key=_order)
        if not partitions:
            raise ValueError(f"--topic {' '.join(arguments.topic)}: no partitions found")
        outcomes = await admin.delete_offsets(arguments.group, partitions)
    rows = sorted(outcomes.items(), key=lambda item: _order(item[0]))
    if arguments.json:
        print(json.dumps({"group": arguments.group, "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "error": _error_name(error), "message": _error_text(error)}
            for tp, error in rows]}), file=out)
    else:
        table = [("TOPIC", "PARTITION", "STATUS")] + [(tp.topic, str(tp.partition), _status(error))
                                                     for tp, error in rows]
        out.write("\n".join(format_rows(table)) + "\n")
    return EXIT_FAILED if any(error is not None for _, error in rows) else EXIT_OK


def _status(error: TributaryError | None) -> str:
    """Kafka's tool's STATUS column: Successful, or the error."""
    return "Successful" if error is None else f"Error: {error}"


def _error_name(error: TributaryError | None) -> str | None:
    return None if error is None else error.code.name


def _error_text(error: TributaryError | None) -> str | None:
    return None if error is None else error.message


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
