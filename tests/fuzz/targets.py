"""Fuzz targets: the edges every byte from outside passes. Each takes one input and returns; any
exception it lets out is a bug (the edge may refuse an input only with its named error).

- `records`: a produced record batch, as the log validates it (CRC, framing, records, bounded
  decompression), then decoded; and a fetched one, as every fetch answer is checked.
- `requests`: a request body on any route (the first byte picks the route), as the server decodes
  and checks it.
- `peers`: a Raft message or a broker-to-controller request from a peer (the first byte picks the
  route), as the node decodes and validates it before any core sees it.
- `raft`: a Raft core (voter 1 of 3, over a real log) fed a sequence of events (see `raft_frames`):
  the Raft messages that pass the edge's validation, ticks, proposals and failed sends. Whatever
  validated messages say, the core may refuse them but never fail an assertion (its own invariants
  included) or raise.
"""

from __future__ import annotations

import random
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from crc32c import crc32c

from controller.quorum_config import QuorumConfig, VoterEndpoint
from controller.quorum_state import ElectionState, QuorumStateStore
from controller.raft import Raft
from controller.raft_driver import RaftDriver
from controller.raft_log import RaftLog, metadata_log_config
from controller.raft_messages import Event, Message, Propose, Tick, Unreachable
from node.controller_channel import request_from_envelope
from node.raft_transport import from_envelope
from node.server import decode_request
from storage.errors import StorageError
from storage.records import BATCH_HEADER_SIZE, LOG_OVERHEAD, check_batches, decode_records, validate_batch
from wire.api import REQUESTS, Api
from wire.codec import ProtocolError, encode, pack, unpack
from wire.envelope import Envelope

MAX_MESSAGE_BYTES = 1 << 20
MAX_DECOMPRESSED_BYTES = 8 << 20
MAX_LIST_LENGTH = 100_000
NODE_ID = 1
VOTERS = frozenset({1, 2, 3})
CLUSTER_ID = "fuzz-cluster"
ROUTES = tuple(REQUESTS)
_CRC_POSITION = 17  # the CRC-32C covers the batch from the attributes (byte 21) on
PEER_ROUTES = (Api.RAFT, Api.BROKER_REGISTRATION, Api.BROKER_HEARTBEAT, Api.CONTROLLED_SHUTDOWN, Api.ALTER_PARTITION,
               Api.ALLOCATE_PRODUCER_IDS)


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


RAFT_QUORUM = QuorumConfig(
    voters={voter: VoterEndpoint(voter, "127.0.0.1", 9090 + voter) for voter in VOTERS}, election_timeout_ms=100,
    fetch_timeout_ms=200, election_backoff_max_ms=50, request_timeout_ms=100, retry_backoff_ms=10,
    fetch_max_wait_ms=0, snapshot_interval_records=4)
RAFT_SCRATCH = Path("/dev/shm") if Path("/dev/shm").is_dir() else None  # a fresh log per input, in memory
TICK_STEP_MS = 8
_MESSAGE, _PROPOSE, _UNREACHABLE = 0x80, 0xF0, 0xF8


def raft(data: bytes) -> None:
    """The first byte: bit 0 starts the node as a voter without state (restoring), as a new disk
    does, else formatted at epoch 0. The rest: `raft_frames`."""
    if not data:
        return
    directory = Path(tempfile.mkdtemp(prefix="fuzz-raft-", dir=RAFT_SCRATCH))
    try:
        store = QuorumStateStore(directory)
        state = store.read() if data[0] & 1 else ElectionState(0)
        core = Raft(NODE_ID, RAFT_QUORUM, RaftLog.open(directory, 0, metadata_log_config(segment_bytes=2048)),
                    state, random.Random(0), 0)
        driver = RaftDriver(core, store, CountingStateMachine(), lambda message: None)
        now_ms = 0
        for advance_ms, event in raft_frames(data[1:]):
            now_ms += advance_ms
            driver.step(event, now_ms)
    finally:
        shutil.rmtree(directory)


def raft_frames(data: bytes) -> Iterator[tuple[int, Event]]:
    """Frames, each (time to advance, event): a byte below 0x80 is a Tick that many `TICK_STEP_MS`
    later; 0x80-0xEF, a 2-byte length and an `Envelope` from a peer, yielded only if the edge's
    `from_envelope` accepts it; 0xF0-0xF7 a proposal; 0xF8-0xFF a failed send to voter 2 or 3 (the
    correlation id of the core's last fetch or probe is not known here, so it is 0 or guessed by
    the fuzzer in the next 8 bytes)."""
    position = 0
    while position < len(data):
        op = data[position]
        position += 1
        if op < _MESSAGE:
            yield op * TICK_STEP_MS, Tick()
        elif op < _PROPOSE:
            length = int.from_bytes(data[position : position + 2], "big")
            frame, position = data[position + 2 : position + 2 + length], position + 2 + length
            try:
                yield 0, from_envelope(unpack(Envelope, frame, MAX_LIST_LENGTH), NODE_ID, VOTERS, CLUSTER_ID)
            except ProtocolError:
                continue
        elif op < _UNREACHABLE:
            yield 0, Propose(position, data[position : position + 8])
            position += 8
        else:
            yield 0, Unreachable(2 + op % 2, int.from_bytes(data[position : position + 8], "big"), refused=op & 2 == 2)
            position += 8


def raft_frame(event: Event, advance_ms: int = 0) -> bytes:
    """One frame of `raft_frames` (for the seed corpus); a tick's advance is rounded to the step."""
    if isinstance(event, Tick):
        return bytes([min(0x7F, advance_ms // TICK_STEP_MS)])
    if isinstance(event, Propose):
        return bytes([_PROPOSE]) + event.data[:8].ljust(8, b"\0")
    assert isinstance(event, Message), event
    envelope = pack(Envelope(type(event.body).__name__, encode(event.body), event.source_id, "127.0.0.1:9093",
                             CLUSTER_ID))
    return bytes([_MESSAGE]) + len(envelope).to_bytes(2, "big") + envelope


class CountingStateMachine:
    def __init__(self) -> None:
        self.applied = 0

    def apply(self, offset: int, epoch: int, data: bytes) -> None:
        self.applied += 1

    def snapshot(self) -> bytes:
        return self.applied.to_bytes(8, "big")

    def restore(self, offset: int, data: bytes) -> None:
        self.applied = int.from_bytes(data, "big")


TARGETS: dict[str, Callable[[bytes], None]] = {"records": records, "requests": requests, "peers": peers, "raft": raft}
