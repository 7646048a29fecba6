"""Request streams: many calls over one persistent connection (a WebSocket on the HTTP listener).

One POST per call costs an HTTP exchange in each process (~140 µs of CPU on this machine's
class of core, six times a WebSocket frame's); an acks=all produce takes several calls between
nodes. A stream carries the same msgpack bodies as the POST routes, framed:

    request  = correlation id (uint32) | API name length (uint8) | API name (`Api.value`) | body
    response = correlation id (uint32) | HTTP status (uint16) | body (the POST route's body)

so a stream answers exactly what the route would (200 with the answer, 4xx/5xx with an
`ErrorResponse`). Requests on a stream are served concurrently, answers come as they are ready
(matched by correlation id), as Kafka's clients match responses on one connection per broker.
"""

from __future__ import annotations

import struct

from wire.api import PREFIX, Api
from wire.codec import ProtocolError

STREAM_PATH = PREFIX + "stream"

_REQUEST_HEAD = struct.Struct(">IB")
_RESPONSE_HEAD = struct.Struct(">IH")
_APIS = {api.value: api for api in Api}


def encode_request(correlation_id: int, api: Api, body: bytes) -> bytes:
    name = api.value.encode()
    return _REQUEST_HEAD.pack(correlation_id, len(name)) + name + body


def decode_request(frame: bytes) -> tuple[int, Api, bytes]:
    """The correlation id, API and body of a request frame; ProtocolError if it is not one."""
    if len(frame) < _REQUEST_HEAD.size:
        raise ProtocolError(f"a stream request frame of {len(frame)} bytes is shorter than its header")
    correlation_id, length = _REQUEST_HEAD.unpack_from(frame)
    start = _REQUEST_HEAD.size
    name = frame[start:start + length]
    api = _APIS.get(name.decode(errors="replace"))
    if api is None or len(name) < length:
        raise ProtocolError(f"a stream request frame names no API ({name!r}); "
                            f"names: {', '.join(_APIS)}")
    return correlation_id, api, frame[start + length:]


def encode_response(correlation_id: int, status: int, body: bytes) -> bytes:
    return _RESPONSE_HEAD.pack(correlation_id, status) + body


def decode_response(frame: bytes) -> tuple[int, int, bytes]:
    """The correlation id, HTTP status and body of a response frame."""
    if len(frame) < _RESPONSE_HEAD.size:
        raise ProtocolError(f"a stream response frame of {len(frame)} bytes is shorter than its header")
    correlation_id, status = _RESPONSE_HEAD.unpack_from(frame)
    return correlation_id, status, frame[_RESPONSE_HEAD.size:]
