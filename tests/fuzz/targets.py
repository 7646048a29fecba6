"""Fuzz targets: the edges every byte from outside passes. Each takes one input and returns; any
exception it lets out is a bug (the edge may refuse an input only with its named error).

- `records`: a produced record batch, as the log validates it (CRC, framing, records, bounded
  decompression), then decoded; and a fetched one, as every fetch answer is checked.
- `requests`: a request body on any route (the first byte picks the route), as the server decodes
  and checks it.
- `peers`: a Raft message or a broker-to-controller request from a peer (the first byte picks the
  route), as the node decodes and validates it before any core sees it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from crc32c import crc32c

from client.protocol import REQUESTS, Api, Envelope, ProtocolError, unpack
from node.controller_channel import request_from_envelope
from node.raft_transport import from_envelope
from node.server import decode_request
from storage.errors import StorageError
from storage.records import BATCH_HEADER_SIZE, LOG_OVERHEAD, check_batches, decode_records, validate_batch

MAX_MESSAGE_BYTES = 1 << 20
MAX_DECOMPRESSED_BYTES = 8 << 20
MAX_LIST_LENGTH = 100_000
NODE_ID = 1
VOTERS = frozenset({1, 2, 3})
CLUSTER_ID = "fuzz-cluster"
ROUTES = tuple(REQUESTS)
_CRC_POSITION = 17  # the CRC-32C covers the batch from the attributes (byte 21) on
PEER_ROUTES = (Api.RAFT, Api.BROKER_REGISTRATION, Api.BROKER_HEARTBEAT, Api.CONTROLLED_SHUTDOWN, Api.ALTER_PARTITION)


def records(data: bytes) -> None:
    """The input as it is, then with its CRC made right, so that mutations get past the CRC to the
    framing, the records and the codecs."""
    for batch in (data, _with_crc(data)):
        check_batches(batch, 0)
        try:
            validate_batch(batch, 0, MAX_MESSAGE_BYTES, True, MAX_DECOMPRESSED_BYTES)
        except StorageError:
            continue
        decode_records(batch)


def _with_crc(data: bytes) -> bytes:
    if len(data) < BATCH_HEADER_SIZE:
        return data
    fixed = bytearray(data)
    end = min(len(data), LOG_OVERHEAD + max(0, int.from_bytes(data[8:12], "big", signed=True)))
    struct.pack_into(">I", fixed, _CRC_POSITION, crc32c(bytes(fixed[_CRC_POSITION + 4 : end])))
    return bytes(fixed)


def requests(data: bytes) -> None:
    if not data:
        return
    api = ROUTES[data[0] % len(ROUTES)]
    try:
        decode_request(REQUESTS[api], data[1:], MAX_LIST_LENGTH)
    except ProtocolError:
        return


def peers(data: bytes) -> None:
    if not data:
        return
    api = PEER_ROUTES[data[0] % len(PEER_ROUTES)]
    try:
        envelope = unpack(Envelope, data[1:], MAX_LIST_LENGTH)
        if api is Api.RAFT:
            from_envelope(envelope, NODE_ID, VOTERS, CLUSTER_ID)
        else:
            request_from_envelope(api, envelope, CLUSTER_ID)
    except ProtocolError:
        return


TARGETS: dict[str, Callable[[bytes], None]] = {"records": records, "requests": requests, "peers": peers}
