"""`tributary produce TOPIC`: one record per line of stdin, like kafka-console-producer.

Lines are read in chunks and sent with `Producer.send_many`, so piping a large file is fast;
with `--key-separator` each line is split at the first separator into key and value.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, BinaryIO, TextIO

from client.cli_support import EXIT_OK, bootstrap_parent, parse_properties, run_command
from client.producer import Producer

LINES_PER_CHUNK = 1000


def register(subcommands: Any) -> None:
    parser = subcommands.add_parser("produce", parents=[bootstrap_parent()], help="send stdin lines as records")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--key-separator", help="split each line into key and value at this string")
    parser.add_argument("--acks", default="all", choices=["0", "1", "-1", "all"])
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    parser.add_argument("--producer-property", action="append", metavar="KEY=VALUE",
                        help="a producer setting by its Kafka name, e.g. linger.ms=10 (repeatable)")
    parser.set_defaults(run=run_command(produce))


def producer_settings(properties: dict[str, str]) -> dict[str, Any]:
    """Kafka producer property names (`linger.ms`) as `Producer` keyword arguments."""
    settings: dict[str, Any] = {}
    for key, value in properties.items():
        if key == "bootstrap.servers":
            continue
        name = key.replace(".", "_")
        if name not in PRODUCER_SETTINGS:
            raise ValueError(f"unknown producer property {key!r}; known: {', '.join(sorted(PRODUCER_PROPERTIES))}")
        if name == "enable_idempotence":
            if value.lower() not in ("true", "false"):
                raise ValueError(f"enable.idempotence={value!r}: use true or false")
            settings[name] = value.lower() == "true"
        else:
            settings[name] = value if name in ("compression_type", "acks") else int(value)
    return settings


PRODUCER_PROPERTIES = (
    "acks", "linger.ms", "batch.size", "compression.type", "retries", "retry.backoff.ms", "delivery.timeout.ms",
    "request.timeout.ms", "max.in.flight.requests.per.connection", "max.request.size", "buffer.memory",
    "max.block.ms", "enable.idempotence",
)
PRODUCER_SETTINGS = frozenset(key.replace(".", "_") for key in PRODUCER_PROPERTIES)


async def produce(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    settings = {"acks": arguments.acks, **producer_settings(parse_properties(arguments.producer_property,
                                                                             "--producer-property"))}
    separator = None if arguments.key_separator is None else arguments.key_separator.encode()
    stdin: BinaryIO = sys.stdin.buffer
    async with Producer(arguments.bootstrap, **settings) as producer:
        pending = []
        chunk: list[bytes] = []
        for line in stdin:
            chunk.append(line.rstrip(b"\r\n"))
            if len(chunk) >= LINES_PER_CHUNK:
                pending.append(await _send(producer, arguments, chunk, separator))
                chunk = []
        if chunk:
            pending.append(await _send(producer, arguments, chunk, separator))
        await producer.flush()
        await asyncio.gather(*pending)  # raises the first failure, named by its error code
    return EXIT_OK


async def _send(producer: Producer, arguments: argparse.Namespace, lines: list[bytes], separator: bytes | None):
    if separator is None:
        return await producer.send_many(arguments.topic, lines, partition=arguments.partition)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for line in lines:
        key, found, value = line.partition(separator)
        keys.append(key if found else None)
        values.append(value if found else line)
    return await producer.send_many(arguments.topic, values, keys=keys, partition=arguments.partition)
