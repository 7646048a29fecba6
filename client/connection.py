"""Calls to nodes: one request stream per node (wire/stream.py, a WebSocket over the HTTP
listener), msgpack bodies, named errors.

Used by the client library and by nodes talking to each other (node imports client, DESIGN §1).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any, TypeVar

import aiohttp

from wire.api import Api, ErrorResponse
from wire.codec import ProtocolError, pack, unpack
from wire.error_codes import ErrorCode
from wire.stream import STREAM_PATH, decode_response, encode_request

T = TypeVar("T")
# Closing a stream waits this long for the peer's close frame (a paused peer sends none).
WS_TIMEOUT = aiohttp.ClientWSTimeout(ws_close=1.0)


class NodeUnavailableError(Exception):
    """The node could not be reached, did not answer in time, or cannot serve yet (HTTP 503, a node
    still starting) (Kafka's NETWORK_EXCEPTION): retry, maybe on another node. `refused`: the
    connection was refused (ECONNREFUSED: nothing listens at the address, the process is gone), not
    timed out, reset or closed."""

    code = ErrorCode.NETWORK_EXCEPTION

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class RequestRejectedError(Exception):
    """The node refused the request as a whole (HTTP 4xx/5xx but 503): `code` and `message` say why."""

    def __init__(self, response: ErrorResponse) -> None:
        super().__init__(f"{response.error}: {response.message}")
        self.code = response.error_code
        self.message = response.message


class _Stream:
    """One request stream (wire/stream.py) to a node: calls matched to answers by correlation id."""

    def __init__(self, address: str, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.address = address
        self.closed = False
        self._socket = socket
        self._pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._ids = itertools.count()
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # see Connections.stream_closed
        self._reader = asyncio.create_task(self._read(), name=f"stream-{address}")

    async def call(self, api: Api, body: bytes) -> tuple[int, bytes]:
        """The status and body of the answer; ConnectionResetError if the stream closes first."""
        correlation_id = next(self._ids) & 0xFFFFFFFF
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        try:
            await self._socket.send_bytes(encode_request(correlation_id, api, body))
            return await future
        finally:
            self._pending.pop(correlation_id, None)

    def abandon(self) -> None:
        """Close it and fail its calls: a call that timed out leaves a stream nobody can trust to
        answer (as Kafka's clients disconnect on a request timeout); the next call reconnects."""
        self.closed = True
        self._reader.cancel()

    async def close(self) -> None:
        self.abandon()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def _read(self) -> None:
        try:
            async for message in self._socket:
                if message.type is not aiohttp.WSMsgType.BINARY:
                    break
                correlation_id, status, body = decode_response(message.data)
                future = self._pending.pop(correlation_id, None)
                if future is not None and not future.done():
                    future.set_result((status, body))
        except ProtocolError:
            pass  # not our peer's frame: the stream is closed below
        finally:
            self.closed = True
            if not self.ended.done():
                self.ended.set_result(None)
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionResetError(f"the stream to {self.address} closed"))
            self._pending.clear()
            await self._socket.close()


class Connections:
    """Request streams to any node by address ("host:port"), one per address, opened on first use
    over one aiohttp session. Close it when done."""

    def __init__(self, connect_timeout_ms: int = 3000) -> None:
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._session: aiohttp.ClientSession | None = None
        self._streams: dict[str, _Stream] = {}
        self._connecting: dict[str, asyncio.Lock] = {}

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(sock_connect=self._connect_timeout_s)
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ttl_dns_cache=10), timeout=timeout)
        return self._session

    async def _stream(self, address: str) -> _Stream:
        stream = self._streams.get(address)
        if stream is not None and not stream.closed:
            return stream
        async with self._connecting.setdefault(address, asyncio.Lock()):
            stream = self._streams.get(address)
            if stream is None or stream.closed:
                socket = await self._get_session().ws_connect(f"http://{address}{STREAM_PATH}", max_msg_size=0,
                                                              timeout=WS_TIMEOUT)
                stream = self._streams[address] = _Stream(address, socket)
            return stream

    async def call(self, address: str, api: Api, request: Any, response_type: type[T], timeout_ms: int) -> T:
        """`request` to `api` on `address`; the decoded answer, or an exception that says why not."""
        stream = None
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                stream = await self._stream(address)
                status, body = await stream.call(api, pack(request))
        except TimeoutError:
            if stream is not None:
                stream.abandon()
            raise NodeUnavailableError(f"{address} {api.value}: no answer in {timeout_ms} ms") from None
        except (aiohttp.ClientError, OSError) as error:
            refused = isinstance(error, ConnectionRefusedError) or isinstance(
                getattr(error, "os_error", None), ConnectionRefusedError)  # ws_connect's ClientConnectorError
            raise NodeUnavailableError(f"{address} {api.value}: {type(error).__name__}: {error}", refused) from None
        if status != 200:
            try:
                refusal = unpack(ErrorResponse, body)
            except ProtocolError:
                raise NodeUnavailableError(f"{address} {api.value}: HTTP {status}") from None
            if status == 503:
                raise NodeUnavailableError(f"{address} {refusal.error}: {refusal.message}")
            raise RequestRejectedError(refusal)
        try:
            return unpack(response_type, body)
        except ProtocolError as error:
            raise NodeUnavailableError(f"{address} {api.value}: unreadable answer: {error}") from None

    def stream_closed(self, address: str) -> asyncio.Future[None]:
        """Done when the stream now open to `address` closes (done already if none is open), one
        future per stream: a peer that dies closes it (its kernel sends FIN or RST) though no call of
        ours may be in flight to fail, e.g. while the peer holds a request it answers later by
        another route (a parked Raft fetch). Do not cancel it."""
        stream = self._streams.get(address)
        if stream is None:
            ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ended.set_result(None)
            return ended
        return stream.ended

    async def close(self) -> None:
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            await stream.close()
        if self._session is not None:
            await self._session.close()
            self._session = None
