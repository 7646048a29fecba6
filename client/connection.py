"""Calls to one node over HTTP: one shared aiohttp session, msgpack bodies, named errors.

Used by the client library and by nodes talking to each other (node imports client, DESIGN §1).
"""

from __future__ import annotations

from typing import Any, TypeVar

import aiohttp

from wire.api import CONTENT_TYPE, Api, ErrorResponse
from wire.codec import ProtocolError, pack, unpack
from wire.error_codes import ErrorCode

T = TypeVar("T")


class NodeUnavailableError(Exception):
    """The node could not be reached, did not answer in time, or cannot serve yet (HTTP 503, a node
    still starting) (Kafka's NETWORK_EXCEPTION): retry, maybe on another node."""

    code = ErrorCode.NETWORK_EXCEPTION


class RequestRejectedError(Exception):
    """The node refused the request as a whole (HTTP 4xx/5xx but 503): `code` and `message` say why."""

    def __init__(self, response: ErrorResponse) -> None:
        super().__init__(f"{response.error}: {response.message}")
        self.code = response.error_code
        self.message = response.message


class Connections:
    """An aiohttp session for calls to any node by address ("host:port"). Close it when done."""

    def __init__(self, connect_timeout_ms: int = 3000, limit_per_host: int = 16) -> None:
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._limit_per_host = limit_per_host
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit_per_host=self._limit_per_host, ttl_dns_cache=10)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def call(self, address: str, api: Api, request: Any, response_type: type[T], timeout_ms: int) -> T:
        """POST `request` to `api` on `address`; the decoded answer, or an exception that says why not."""
        timeout = aiohttp.ClientTimeout(total=timeout_ms / 1000, sock_connect=self._connect_timeout_s)
        try:
            async with self._get_session().post(
                f"http://{address}{api.path}", data=pack(request), headers={"Content-Type": CONTENT_TYPE},
                timeout=timeout,
            ) as response:
                body = await response.read()
                status = response.status
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise NodeUnavailableError(f"{address} {api.value}: {type(error).__name__}: {error}") from None
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

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
