"""Raw Kafka frames over a socket, for tests of what no client would send."""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer


async def exchange(address: str, frames: list[bytes], answers: int) -> tuple[list[bytes], bool]:
    """Send `frames` on one connection; read up to `answers` answer frames; (answers, closed by the node)."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for frame in frames:
            writer.write(frame)
        await writer.drain()
        received = []
        async with asyncio.timeout(10):
            for _ in range(answers):
                try:
                    size = struct.unpack(">i", await reader.readexactly(4))[0]
                    received.append(await reader.readexactly(size))
                except asyncio.IncompleteReadError:
                    return received, True
            closed = await reader.read(1) == b"" if len(received) < answers else False
        return received, closed
    finally:
        writer.close()


def request_frame(request: Any, correlation_id: int, client_id: str = "test") -> bytes:
    """A request entity with its header, size first."""
    buffer = io.BytesIO()
    header = request.__header_schema__
    entity_writer(header)(buffer, header(request_api_key=request.__api_key__, request_api_version=request.__version__,
                                         correlation_id=correlation_id, client_id=client_id))
    entity_writer(type(request))(buffer, request)
    data = buffer.getvalue()
    return struct.pack(">i", len(data)) + data


def read_response(frame: bytes, response_type: type) -> tuple[int, Any]:
    """(correlation id, response entity) of an answer frame."""
    header_type = response_type.__header_schema__
    header, used = entity_reader(header_type)(frame, 0)
    response, _ = entity_reader(response_type)(frame, used)
    return header.correlation_id, response
