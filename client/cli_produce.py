"""`tributary produce TOPIC`: one record per line of stdin, like kafka-console-producer.

Each line goes to the producer as soon as it is read, so `tail -F app.log | tributary produce
logs` streams; the producer's `linger.ms` and `batch.size` do the batching, as for
kafka-console-producer and `kcat -P`. A thread reads stdin (a pipe, a terminal or a file alike)
in chunks of whatever has arrived, and every complete line of a chunk goes in one
`Producer.send_many`, so piping a large file stays fast. With `--key-separator` each line is
split at the first separator into key and value. At EOF the producer flushes; the first record
that fails ends the command with its Kafka error name.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from typing import Any, BinaryIO, TextIO

from client.cli_support import EXIT_OK, bootstrap_parent, parse_properties, run_command
from client.producer import Producer

CHUNK_BYTES = 65536  # at most this much of stdin per read: one pipe buffer on Linux
CHUNKS_AHEAD = 2  # chunks read before the loop takes them


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
    async with Producer(arguments.bootstrap, **settings) as producer:
        with StdinChunks(sys.stdin.buffer) as chunks:
            await _send_lines(producer, arguments, separator, chunks)
    return EXIT_OK


async def _send_lines(
    producer: Producer, arguments: argparse.Namespace, separator: bytes | None, chunks: StdinChunks
) -> None:
    """Hand each chunk's complete lines to the producer; at EOF flush and raise the first failure
    (named by its error code). A failure while stdin is quiet ends the command at once."""
    pending: set[asyncio.Future[Any]] = set()
    failures: list[BaseException] = []

    def settled(future: asyncio.Future[Any]) -> None:
        pending.discard(future)
        error = None if future.cancelled() else future.exception()
        if error is not None:
            failures.append(error)
            chunks.interrupt(error)

    partial: list[bytes] = []
    async for chunk in chunks:
        lines = complete_lines(partial, chunk)
        if lines:
            sent = await _send(producer, arguments, lines, separator)
            pending.add(sent)
            sent.add_done_callback(settled)
    if partial:  # the last line has no newline
        pending.add(await _send(producer, arguments, [b"".join(partial).rstrip(b"\r")], separator))
    await producer.flush()
    await asyncio.gather(*pending)
    if failures:
        raise failures[0]


def complete_lines(partial: list[bytes], chunk: bytes) -> list[bytes]:
    """The lines `chunk` completes, without their line ends (`\n` or `\r\n`); the unfinished rest is
    kept in `partial` for the next chunk."""
    end = chunk.rfind(b"\n")
    if end < 0:
        partial.append(chunk)
        return []
    text = chunk[:end]
    if partial:
        text = b"".join([*partial, text])
        partial.clear()
    if end + 1 < len(chunk):
        partial.append(chunk[end + 1:])
    lines = text.split(b"\n")
    return [line.rstrip(b"\r") for line in lines] if b"\r" in text else lines


class StdinChunks:
    """Stdin as it arrives: `async for chunk in chunks` yields whatever a read returned (up to
    CHUNK_BYTES), never waiting for more, and ends at EOF.

    A daemon thread does the blocking reads, so a quiet pipe or terminal never blocks the event
    loop and the producer's sender keeps sending. Not the loop's executor: a read that never
    returns (stdin held open after a failure) must not hold the process at exit, and asyncio.run
    waits for executor threads. At most CHUNKS_AHEAD chunks wait for the loop, so a large file is
    read no faster than it is sent. `interrupt(error)` makes the waiting iteration raise `error`."""

    def __init__(self, stdin: BinaryIO) -> None:
        # The unbuffered file under `sys.stdin.buffer`: a daemon thread inside a buffered read holds
        # its lock, and the interpreter aborts at exit ("could not acquire lock ... daemon threads").
        self._stdin: BinaryIO = getattr(stdin, "raw", stdin)
        self._loop = asyncio.get_running_loop()
        self._chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._room = threading.Semaphore(CHUNKS_AHEAD)
        self._stopped = False
        self._thread = threading.Thread(target=self._read, name="tributary-produce-stdin", daemon=True)

    def __enter__(self) -> StdinChunks:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopped = True
        self._room.release()  # a thread waiting for room wakes up and ends

    def __aiter__(self) -> StdinChunks:
        return self

    async def __anext__(self) -> bytes:
        chunk = await self._chunks.get()
        if isinstance(chunk, BaseException):
            raise chunk
        if not chunk:
            raise StopAsyncIteration
        self._room.release()
        return chunk

    def interrupt(self, error: BaseException) -> None:
        self._chunks.put_nowait(error)

    def _read(self) -> None:
        while True:
            self._room.acquire()
            if self._stopped:
                return
            try:
                chunk: bytes | BaseException = self._stdin.read(CHUNK_BYTES) or b""
            except (OSError, ValueError) as error:
                chunk = error
            try:
                self._loop.call_soon_threadsafe(self._chunks.put_nowait, chunk)
            except RuntimeError:
                return  # the loop has closed: no one reads any more
            if not isinstance(chunk, bytes) or not chunk:
                return


async def _send(
    producer: Producer, arguments: argparse.Namespace, lines: list[bytes], separator: bytes | None
) -> asyncio.Future[Any]:
    if separator is None:
        return await producer.send_many(arguments.topic, lines, partition=arguments.partition)
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for line in lines:
        key, found, value = line.partition(separator)
        keys.append(key if found else None)
        values.append(value if found else line)
    return await producer.send_many(arguments.topic, values, keys=keys, partition=arguments.partition)
