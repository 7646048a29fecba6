"""The node's HTTP edge: one aiohttp app serving every `Api` route, `/metrics` and `/health`.

A route decodes its body with `wire.codec` (strict: bad msgpack, missing, unknown or
mistyped fields and out-of-range numbers are answered 400 with a named error and change nothing),
hands the request to the part of the node that owns it, and encodes the answer. A body over
`socket.request.max.bytes` is answered 413 before it is read; one the node cannot serve yet (still
starting) or ever (a broker's request on a controller-only node) 503 BROKER_NOT_AVAILABLE. An
unexpected exception is a bug:
it is logged and answered 500 UNKNOWN_SERVER_ERROR, and the node keeps serving.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from node.request_stream import Call, add_stream_route
from wire.api import CONTENT_TYPE, REQUESTS, Api, error_response
from wire.codec import ProtocolError, pack, unpack
from wire.error_codes import ErrorCode

if TYPE_CHECKING:
    from node.node import Node

log = logging.getLogger(__name__)

# Request fields that are counts, sizes or durations: a negative value is a malformed request.
NON_NEGATIVE = frozenset(
    {"timeout_ms", "max_wait_ms", "min_bytes", "max_bytes", "partition_max_bytes", "partition", "num_partitions"}
)

UNEXPECTED_ERROR = "the node hit an unexpected error (a bug; see its log); the request may be retried"

Handler = Callable[[Any], Awaitable[Any]]


class NotServingYet(Exception):
    """The node cannot answer this request yet: refused with 503 BROKER_NOT_AVAILABLE, which a
    client takes as an unreachable node (it asks another)."""


class NotOnThisListener(Exception):
    """Node-to-node traffic (Raft, broker-to-controller requests, a replica fetch) on a client
    listener: refused with 403 CLUSTER_AUTHORIZATION_FAILED (Kafka's answer to a cluster action a
    client may not take); the message names the listener that serves it."""


class NotABroker(Exception):
    """A broker's request on a controller-only node (Kafka's controller listener does not serve
    it): refused with 503 BROKER_NOT_AVAILABLE, so a client whose bootstrap list names controllers
    asks the next node; the message names the brokers."""


def build_app(node: Node) -> web.Application:
    """The app of one node. `node` owns the parts the routes call."""
    app = web.Application(client_max_size=node.config.socket_request_max_bytes, middlewares=[_errors(node)])
    for api in Api:
        app.router.add_post(api.path, _route(node, api))
    add_stream_route(app, _stream_calls(node), node.config.socket_request_max_bytes)
    app.router.add_get("/metrics", _metrics(node))
    app.router.add_get("/health", _health(node))
    return app


def _route(node: Node, api: Api) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        status, body = await serve(node, api, await request.read(), _listener_of(node, request), request.remote)
        return web.Response(status=status, body=body, content_type=CONTENT_TYPE)

    return handle


def _stream_calls(node: Node) -> Callable[[web.Request], Call]:
    def calls_of(request: web.Request) -> Call:
        listener, remote = _listener_of(node, request), request.remote
        return lambda api, body: serve(node, api, body, listener, remote)

    return calls_of


async def serve(node: Node, api: Api, body: bytes, listener: str, remote: str | None) -> tuple[int, bytes]:
    """One call of `api`, come as a POST or on a stream: the HTTP status and body to answer."""
    started = time.perf_counter()
    try:
        message = decode_request(REQUESTS[api], body, node.config.max_request_partitions)
        answer = await node.dispatch(api, message, listener, remote)
    except ProtocolError as error:
        node.metrics.observe_request(api.value, error.code.name, time.perf_counter() - started)
        return _refusal(400, error.code, f"{api.value}: {error}")
    except NotOnThisListener as error:
        node.metrics.observe_request(api.value, ErrorCode.CLUSTER_AUTHORIZATION_FAILED.name,
                                     time.perf_counter() - started)
        return _refusal(403, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{api.value}: {error}")
    except (NotServingYet, NotABroker) as error:
        node.metrics.observe_request(api.value, ErrorCode.BROKER_NOT_AVAILABLE.name, time.perf_counter() - started)
        return _refusal(503, ErrorCode.BROKER_NOT_AVAILABLE, f"{api.value}: {error}")
    except Exception:
        log.exception("node %s: unexpected error serving %s", node.config.node_id, api.path)
        return _refusal(500, ErrorCode.UNKNOWN_SERVER_ERROR, UNEXPECTED_ERROR)
    node.metrics.observe_request(api.value, "NONE", time.perf_counter() - started)
    return 200, pack(answer)


def decode_request(request_type: type, body: bytes, max_list_length: int) -> Any:
    """A request body as `request_type`, with what every route checks; ProtocolError names what is
    wrong (the edge every request passes, and what tests/fuzz feeds)."""
    try:
        message = unpack(request_type, body, max_list_length)
    except ProtocolError as error:
        if "exceeds max_" in str(error):
            raise ProtocolError(f"a list in the body is longer than max.request.partitions={max_list_length}; "
                                "split the request") from None
        raise
    _check_non_negative(message, request_type.__name__)
    return message


def _check_non_negative(message: Any, where: str) -> None:
    """Negative counts, sizes and durations are refused (Kafka: INVALID_REQUEST)."""
    found = _negative_field(message)
    if found is not None:
        path, value = found
        raise ProtocolError(f"{where}{path} is {value}; it must be 0 or more")


_SCALARS = frozenset({int, str, bytes, bool, float, type(None)})


@functools.cache
def _checked_fields(kind: type) -> tuple[tuple[str, bool], ...]:
    """A dataclass's field names, each with whether it must not be negative (none for other types)."""
    if not dataclasses.is_dataclass(kind):
        return ()
    return tuple((field.name, field.name in NON_NEGATIVE) for field in dataclasses.fields(kind))


def _negative_field(value: Any) -> tuple[str, int] | None:
    """The path and value of the first negative count, size or duration in `value`, if any (every
    request passes here: built to cost little when there is none)."""
    kind = type(value)
    if kind is tuple or kind is list:
        for index, item in enumerate(value):
            if type(item) not in _SCALARS and (found := _negative_field(item)) is not None:
                return f"[{index}]{found[0]}", found[1]
        return None
    for name, checked in _checked_fields(kind):
        item = getattr(value, name)
        item_kind = type(item)
        if checked and item_kind is int and item < 0:
            return f".{name}", item
        if item_kind not in _SCALARS and (found := _negative_field(item)) is not None:
            return f".{name}{found[0]}", found[1]
    return None


def _listener_of(node: Node, request: web.Request) -> str:
    """The name of the listener the request came in on (by local address), so metadata answers with
    the addresses a client on that network can reach (Kafka's per-listener advertised addresses)."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return node.config.listener_for(sockname[0], sockname[1]) if sockname else node.config.listener_for(None, None)


def _refusal(status: int, code: ErrorCode, message: str) -> tuple[int, bytes]:
    return status, pack(error_response(code, message))


def _refuse(status: int, code: ErrorCode, message: str) -> web.Response:
    body = _refusal(status, code, message)[1]
    return web.Response(status=status, body=body, content_type=CONTENT_TYPE)


def _errors(node: Node) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _refuse(
                413,
                ErrorCode.INVALID_REQUEST,
                f"the request body is larger than socket.request.max.bytes "
                f"({node.config.socket_request_max_bytes} bytes); send smaller requests (fewer or smaller batches)",
            )
        except web.HTTPNotFound:
            return _refuse(404, ErrorCode.INVALID_REQUEST, f"no route {request.method} {request.path}; "
                           f"APIs are POST /v1/<name>, names: {', '.join(api.value for api in Api)}")
        except web.HTTPMethodNotAllowed:
            return _refuse(405, ErrorCode.INVALID_REQUEST, f"{request.path} takes POST with a msgpack body")
        except web.HTTPException:
            raise
        except Exception:
            log.exception("node %s: unexpected error serving %s", node.config.node_id, request.path)
            return _refuse(500, ErrorCode.UNKNOWN_SERVER_ERROR, UNEXPECTED_ERROR)

    return middleware


def _metrics(node: Node) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        body, content_type = node.metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    return handle


def _health(node: Node) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        status = node.health()
        return web.Response(status=200 if status["healthy"] else 503, text=json.dumps(status),
                            content_type="application/json")

    return handle
