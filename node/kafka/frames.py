"""Kafka's request and response frames: a 4-byte size, a header, a body (kio decodes and encodes).

A request's header and body schemas follow from its API key and version (flexible versions carry
header v2 and tagged fields). What cannot be parsed as a request of a known API and version is a
`FrameError`: the listener closes that connection (Kafka's InvalidRequestException), the others and
the logs are untouched. The correlation id sits at a fixed place, so a request we can parse but do
not serve is still answered in its own format (node/kafka/apis.py).
"""

from __future__ import annotations

import functools
import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """Not a request this listener can read: close the connection."""


@dataclass(frozen=True, slots=True)
class Frame:
    """A request frame: its key, version and correlation id, its header and body entities."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the fixed start of every request header."""
    if len(frame) < _HEADER_PREFIX.size:
        raise FrameError(f"a {len(frame)}-byte frame is shorter than a request header")
    return _HEADER_PREFIX.unpack_from(frame)


@functools.cache
def request_schema(api_key: int, api_version: int) -> type | None:
    """kio's request class, or None for a key or version Kafka's schemas (as kio has them) lack."""
    try:
        return load_request_schema(api_key, api_version)
    except Exception:  # kio raises its own index errors for unknown keys and versions
        return None


@functools.cache
def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


@functools.cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@functools.cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


def parse(frame: bytes) -> Frame:
    """The frame's header and body; FrameError if they do not decode."""
    api_key, api_version, correlation_id = peek(frame)
    schema = request_schema(api_key, api_version)
    if schema is None:
        raise FrameError(f"no API key {api_key} version {api_version} in Kafka's protocol")
    try:
        header, used = _reader(schema.__header_schema__)(frame, 0)
        body, _ = _reader(schema)(frame, used)
    except Exception as error:  # kio's decoders raise many kinds on malformed input
        raise FrameError(f"API key {api_key} v{api_version}: the body does not decode ({error!r})") from None
    # Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka 2.x sends three
    # more after a Metadata v12 request for every topic.
    return Frame(api_key, api_version, correlation_id, header.client_id, body)


def encode(correlation_id: int, response: Any) -> bytes:
    """A response frame: size, the response header its schema names, the body."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_schema = response.__header_schema__
    _writer(header_schema)(buffer, header_schema(correlation_id=correlation_id))
    _writer(type(response))(buffer, response)
    data = buffer.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - _SIZE.size)
    return bytes(data)
