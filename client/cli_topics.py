"""`tributary topics create|list|describe|delete|alter-config` (Kafka's kafka-topics.sh and
kafka-configs.sh flags) and `tributary delete-records`."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from client.admin import Admin, NewTopic
from client.cli_support import EXIT_OK, bootstrap_parent, parse_properties, run_command
from client.errors import TopicAlreadyExistsError
from wire.topic_partition import TopicPartition


def register(subcommands: Any) -> None:
    parent = bootstrap_parent()
    topics = subcommands.add_parser("topics", help="create, list, describe, delete topics and alter their configs")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", parents=[parent], help="create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=-1, help="default: the cluster's num.partitions")
    create.add_argument("--replication-factor", type=int, default=-1,
                        help="default: the cluster's default.replication.factor")
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists")
    create.set_defaults(run=run_command(create_topic))

    listing = actions.add_parser("list", parents=[parent], help="list topic names")
    listing.add_argument("--exclude-internal", action="store_true", help="hide topics starting with __")
    listing.set_defaults(run=run_command(list_topics))

    describe = actions.add_parser("describe", parents=[parent], help="partitions, leaders, ISR and configs")
    describe.add_argument("--topic", help="one topic (default: all)")
    describe.set_defaults(run=run_command(describe_topics))

    delete = actions.add_parser("delete", parents=[parent], help="delete a topic")
    delete.add_argument("--topic", required=True)
    delete.set_defaults(run=run_command(delete_topic))

    alter = actions.add_parser("alter-config", parents=[parent], help="set or delete topic configs")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--config", action="append", metavar="KEY=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", metavar="KEY", help="remove an override (repeatable)")
    alter.set_defaults(run=run_command(alter_config))

    delete_records = subcommands.add_parser("delete-records", parents=[parent],
                                            help="delete the records of a partition below an offset")
    delete_records.add_argument("--topic", required=True)
    delete_records.add_argument("--partition", type=int, required=True)
    delete_records.add_argument("--offset", type=int, required=True, help="first offset to keep (-1: the HW)")
    delete_records.set_defaults(run=run_command(delete_records_below))


async def create_topic(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    configs = parse_properties(arguments.config, "--config")
    async with Admin(arguments.bootstrap) as admin:
        try:
            await admin.create_topics([NewTopic(arguments.topic, arguments.partitions,
                                                arguments.replication_factor, configs)])
        except TopicAlreadyExistsError:
            if not arguments.if_not_exists:
                raise
            return EXIT_OK
    print(f"Created topic {arguments.topic}.", file=out)
    return EXIT_OK


async def list_topics(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap) as admin:
        for name in await admin.list_topics(include_internal=not arguments.exclude_internal):
            print(name, file=out)
    return EXIT_OK


async def describe_topics(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap) as admin:
        described = await admin.describe_topics(None if arguments.topic is None else [arguments.topic])
        for name, partitions in described.items():
            configs = admin.metadata.topic_configs.get(name, {})
            factor = len(partitions[0].replicas) if partitions else 0
            config_text = ",".join(f"{key}={value}" for key, value in sorted(configs.items()))
            print(f"Topic: {name}\tPartitionCount: {len(partitions)}\tReplicationFactor: {factor}\t"
                  f"Configs: {config_text}", file=out)
            for info in partitions:
                print(f"\tTopic: {name}\tPartition: {info.partition}\tLeader: {_node(info.leader)}\t"
                      f"LeaderEpoch: {info.leader_epoch}\tReplicas: {_nodes(info.replicas)}\t"
                      f"Isr: {_nodes(info.isr)}\tElr: {_nodes(info.elr)}\tLastKnownElr: {_nodes(info.last_known_elr)}",
                      file=out)
    return EXIT_OK


def _node(node_id: int) -> str:
    return "none" if node_id < 0 else str(node_id)


def _nodes(node_ids: tuple[int, ...]) -> str:
    return ",".join(map(str, node_ids))


async def delete_topic(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    async with Admin(arguments.bootstrap) as admin:
        await admin.delete_topics([arguments.topic])
    print(f"Deleted topic {arguments.topic}.", file=out)
    return EXIT_OK


async def alter_config(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    changes: dict[str, str | None] = dict(parse_properties(arguments.config, "--config"))
    changes.update(dict.fromkeys(arguments.delete_config or []))
    if not changes:
        raise ValueError("give at least one --config KEY=VALUE or --delete-config KEY")
    async with Admin(arguments.bootstrap) as admin:
        await admin.incremental_alter_configs(arguments.topic, changes)
    print(f"Completed updating config for topic {arguments.topic}.", file=out)
    return EXIT_OK


async def delete_records_below(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    tp = TopicPartition(arguments.topic, arguments.partition)
    async with Admin(arguments.bootstrap) as admin:
        low_watermarks = await admin.delete_records({tp: arguments.offset})
    print(f"partition: {tp}\tlow_watermark: {low_watermarks[tp]}", file=out)
    return EXIT_OK
