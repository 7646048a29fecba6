"""KafkaListener: one PLAINTEXT listener (Kafka's wire protocol) of a broker, on asyncio streams.

One task per connection reads frames; each request is handled in a task of its own as soon as it
is read (a client pipelines), and the answers are written in the order the requests came, as
Kafka requires. A handler's synchronous part runs in arrival order (tasks start in the order they
are created), so two Produce requests on one connection append in the order they were sent. At
most `MAX_IN_FLIGHT` requests of a connection are read ahead of their answers; the next waits.

A frame over `socket.request.max.bytes`, shorter than a header, or that does not decode as a
request of a known API and version closes its connection (Kafka's InvalidReceiveException and
InvalidRequestException): the answers owed for earlier requests are dropped with it, nothing it
carried reached a log, and other connections are untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from node.kafka.apis import CloseConnection, RequestContext
from node.kafka.dispatch import API_VERSIONS_KEY, answer, unsupported_api_versions
from node.kafka.frames import FrameError, parse, peek, request_schema

if TYPE_CHECKING:
    from node.node import Node

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 32  # requests of one connection read ahead of their answers
_SIZE = struct.Struct(">i")


class KafkaListener:
    """Serves listener `name` on `host`:`port` for `node` (start, then stop)."""

    def __init__(self, node: Node, name: str, host: str, port: int) -> None:
        self.node = node
        self.name = name
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._ready: Callable[[], Awaitable[None]] | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, ready: Callable[[], Awaitable[None]]) -> None:
        """Bind now (a taken port fails the start); serve each connection once `ready()` returns: the
        broker has caught up with the metadata log, as a Kafka broker binds at start and enables
        request processing only then (its answers would come from stale metadata)."""
        self._ready = ready
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        log.info("node %s: Kafka listener %s on %s:%s", self.node.config.node_id, self.name, self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            assert self._ready is not None, "started"
            await self._ready()
            await self._serve(reader, writer)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client_host = peer[0] if isinstance(peer, tuple) else None
        answers: asyncio.Queue[asyncio.Task[bytes | None]] = asyncio.Queue(MAX_IN_FLIGHT)
        writing = asyncio.create_task(self._write_answers(answers, writer))
        limit = self.node.config.socket_request_max_bytes
        try:
            while not writing.done():
                try:
                    size = _SIZE.unpack(await reader.readexactly(_SIZE.size))[0]
                    if not 0 < size <= limit:
                        raise FrameError(f"a frame of {size} bytes (socket.request.max.bytes={limit})")
                    task = asyncio.create_task(self._answer(await reader.readexactly(size), client_host))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break  # the client closed the connection
                except FrameError as error:
                    log.info("node %s: closing Kafka connection from %s on %s: %s", self.node.config.node_id,
                             peer, self.name, error)
                    break
                await answers.put(task)
        finally:
            writing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writing

    def _answer(self, frame_bytes: bytes, client_host: str | None) -> Coroutine[Any, Any, bytes | None]:
        """The coroutine answering one frame; FrameError (at once) if it is not a request we can read."""
        api_key, api_version, correlation_id = peek(frame_bytes)
        if api_key == API_VERSIONS_KEY and request_schema(api_key, api_version) is None:
            return _ready(unsupported_api_versions(correlation_id))
        frame = parse(frame_bytes)
        return answer(frame, RequestContext(self.node, self.name, frame.client_id, client_host, frame.api_version))

    @staticmethod
    async def _write_answers(answers: asyncio.Queue[asyncio.Task[bytes | None]], writer: asyncio.StreamWriter) -> None:
        """Each request's answer in arrival order. On leaving (the connection failed or is closing),
        the transport is closed and the answers still owed are cancelled, so a reader waiting for
        room in the queue goes on and finds the connection closed."""
        try:
            while True:
                task = await answers.get()
                data = await task
                if data is not None:
                    writer.write(data)
                    await writer.drain()
        except ConnectionError:
            pass
        except CloseConnection as reason:
            log.info("closing a Kafka connection: %s", reason)
        finally:
            writer.close()
            while not answers.empty():
                answers.get_nowait().cancel()


async def _ready(data: bytes) -> bytes:
    return data
