"""The node's end of request streams (wire/stream.py): a WebSocket on the HTTP listener whose
frames are calls, each served as its POST route would serve it.

Calls of one stream are served concurrently (a follower's held fetch does not hold up a produce)
and started in the order they came. At most `MAX_IN_FLIGHT` are served at once: the next frame is
read when one is answered, so one connection holds at most that many requests in memory (the
Kafka listener's read-ahead bound). A frame that is not a request (not binary, no API, over
`socket.request.max.bytes`) closes the stream, as Kafka closes a connection on a bad frame; the
peer's calls on it fail and it reconnects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import WSCloseCode, WSMsgType, web

from wire.api import Api
from wire.codec import ProtocolError
from wire.stream import STREAM_PATH, decode_request, encode_response

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 32
FRAME_HEAD_MAX = 5 + 255  # correlation id, name length, the longest API name
STREAMS = web.AppKey("streams", set[web.WebSocketResponse])

Call = Callable[[Api, bytes], Awaitable[tuple[int, bytes]]]  # one call: the status and body of its answer


def add_stream_route(app: web.Application, calls_of: Callable[[web.Request], Call], max_body_bytes: int) -> None:
    """Serve streams on `app`: each call of a stream opened by `request` is served by
    `calls_of(request)` (bound to the listener it came in on)."""
    app[STREAMS] = set()
    app.router.add_get(STREAM_PATH, _request_stream(calls_of, max_body_bytes))
    app.on_shutdown.append(_close_streams)


def _request_stream(calls_of: Callable[[web.Request], Call], max_body_bytes: int) -> Callable[
        [web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        stream = web.WebSocketResponse(max_msg_size=max_body_bytes + FRAME_HEAD_MAX)
        await stream.prepare(request)
        serve = calls_of(request)
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        calls: set[asyncio.Task[None]] = set()

        async def answer(correlation_id: int, api: Api, body: bytes) -> None:
            try:
                status, payload = await serve(api, body)
                if not stream.closed:
                    await stream.send_bytes(encode_response(correlation_id, status, payload))
            except ConnectionResetError:
                pass  # the peer went away; its call fails on its side
            finally:
                slots.release()

        streams = request.app[STREAMS]
        streams.add(stream)
        try:
            async for message in stream:
                if message.type is not WSMsgType.BINARY:
                    await stream.close(code=WSCloseCode.UNSUPPORTED_DATA, message=b"frames are binary requests")
                    break
                try:
                    correlation_id, api, body = decode_request(message.data)
                    if len(body) > max_body_bytes:
                        raise ProtocolError(f"a body of {len(body)} bytes is over socket.request.max.bytes")
                except ProtocolError as error:
                    await stream.close(code=WSCloseCode.UNSUPPORTED_DATA, message=str(error)[:120].encode())
                    break
                await slots.acquire()
                call = asyncio.create_task(answer(correlation_id, api, body), name=f"stream-{api.value}")
                calls.add(call)
                call.add_done_callback(calls.discard)
        finally:
            streams.discard(stream)
        return stream

    return handle


async def _close_streams(app: web.Application) -> None:
    """On shutdown: the open streams close (a stream's handler would otherwise hold the runner's
    cleanup until its peer hangs up)."""
    for stream in list(app[STREAMS]):
        await stream.close(code=WSCloseCode.GOING_AWAY, message=b"node stopping")
