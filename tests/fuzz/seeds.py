"""Writes the seed corpus in `tests/fuzz/corpus/` (kept in the repo): well-formed inputs of every
shape each target takes, for the fuzzer to mutate. `python -m tests.fuzz.seeds` rewrites them."""

from __future__ import annotations

import hashlib
import random
import tempfile
from pathlib import Path

from controller import raft_messages as raft
from controller.quorum_state import ElectionState, QuorumStateStore
from controller.raft import Raft
from controller.raft_driver import RaftDriver
from controller.raft_log import RaftLog, metadata_log_config
from controller.raft_messages import Event, Message, Propose, Tick
from storage.records import Compression, build_batch
from tests.fuzz.targets import (
    CLUSTER_ID,
    NODE_ID,
    PEER_ROUTES,
    RAFT_QUORUM,
    ROUTES,
    TICK_STEP_MS,
    VOTERS,
    CountingStateMachine,
    raft_frame,
)
from wire.api import REQUESTS, Api
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest, ReplicaLogInfo
from wire.codec import encode, pack
from wire.envelope import Envelope
from wire.fetch import FetchPartition, FetchRequest
from wire.log_offsets import ListOffsetsPartition, ListOffsetsRequest
from wire.produce import ProducePartition, ProduceRequest

CORPUS = Path(__file__).parent / "corpus"


def record_seeds() -> list[bytes]:
    seeds = []
    for codec in Compression:
        seeds.append(build_batch([(b"key", b"value"), (None, b"x" * 300), (b"k", None)], compression=codec,
                                 base_offset=7, partition_leader_epoch=3))
    seeds.append(build_batch([(b"a", b"b")]) + build_batch([(b"c", b"d")], base_offset=1))
    return seeds


def request_seeds() -> list[bytes]:
    batch = build_batch([(b"key", b"value")])
    examples = [
        ProduceRequest(-1, 1000, (ProducePartition("orders", 0, batch),)),
        FetchRequest((FetchPartition("orders", 0, 5, 1024),), replica_id=2, broker_epoch=4),
        ListOffsetsRequest((ListOffsetsPartition("orders", 0, -1),)),
    ]
    routes = {REQUESTS[api]: index for index, api in enumerate(ROUTES)}
    seeds = [bytes([routes[type(example)]]) + pack(example) for example in examples]
    seeds.extend(bytes([index]) + pack({}) for index in range(len(ROUTES)))
    return seeds


def peer_seeds() -> list[bytes]:
    messages = [
        raft.VoteRequest(5, 2, 4, 100, pre_vote=True),
        raft.VoteResponse(5, None, vote_granted=True, pre_vote=False),
        raft.BeginQuorumEpoch(6, 2),
        raft.FetchRequest(6, 2, 100, 5, 1 << 20, 17, high_watermark=90),
        raft.FetchResponse(6, 2, raft.RaftError.NONE, 17, 100, 5, 100, 0, b"",
                           raft.OffsetAndEpoch(4, 80)),
    ]
    seeds = [bytes([0]) + pack(Envelope(type(message).__name__, encode(message), 2, "127.0.0.1:9093", CLUSTER_ID))
             for message in messages]
    controller_requests = [
        BrokerRegistrationRequest(4, "incarnation", {"PLAINTEXT": "h:9092"}, None),
        BrokerHeartbeatRequest(4, 3, 100, replica_log_info=(ReplicaLogInfo("t" * 22, 0, 2, 1, 10, 0, ((0, 0),)),)),
    ]
    for route, request in zip((Api.BROKER_REGISTRATION, Api.BROKER_HEARTBEAT), controller_requests, strict=True):
        envelope = Envelope(type(request).__name__, encode(request), 4, "h:9092", CLUSTER_ID)
        seeds.append(bytes([PEER_ROUTES.index(route)]) + pack(envelope))
    return seeds


def raft_seeds() -> list[bytes]:
    """Node 1's events in short runs of three cores, each built as the `raft` target builds node 1
    (so a replay meets the same correlation ids): elections it wins or loses, proposals, fetches
    and snapshots, from a formatted start and from one without state."""
    seeds = []
    for restoring in (False, True):
        for others_seed, others_start_ms in ((0, 0), (1, 0), (2, 250), (3, 250)):
            with tempfile.TemporaryDirectory() as root:
                seeds.append(bytes([int(restoring)]) + _raft_run(Path(root), restoring, others_seed, others_start_ms))
    return seeds


def _raft_run(root: Path, restoring: bool, others_seed: int, others_start_ms: int, duration_ms: int = 600) -> bytes:
    """Voters 2 and 3 tick from `others_start_ms` on (before it, node 1 alone times out, and leads)."""
    outbox: list[Message] = []
    drivers = {}
    for node_id in sorted(VOTERS):
        store = QuorumStateStore(root / str(node_id))
        state = store.read() if restoring else ElectionState(0)
        rng = random.Random(0 if node_id == NODE_ID else others_seed * 10 + node_id)
        log = RaftLog.open(root / str(node_id), 0, metadata_log_config(segment_bytes=2048))
        drivers[node_id] = RaftDriver(Raft(node_id, RAFT_QUORUM, log, state, rng, 0), store,
                                      CountingStateMachine(), outbox.append)
    frames = bytearray()
    for now_ms in range(TICK_STEP_MS, duration_ms, TICK_STEP_MS):
        events: list[tuple[int, Event]] = [(node_id, Tick()) for node_id in drivers
                                           if node_id == NODE_ID or now_ms >= others_start_ms]
        leader = next((driver.raft for driver in drivers.values() if driver.raft.leader_ready), None)
        if leader is not None and now_ms % 48 == 0:
            events.append((leader.node_id, Propose(now_ms, b"r%07d" % now_ms)))
        for _ in range(20):
            for node_id, event in events:
                if node_id == NODE_ID:
                    frames += raft_frame(event, TICK_STEP_MS)
                drivers[node_id].step(event, now_ms)
            events = [(message.destination_id, message) for message in outbox]
            outbox.clear()
            if not events:
                break
    return bytes(frames)


def main() -> None:
    for target, seeds in (("records", record_seeds()), ("requests", request_seeds()), ("peers", peer_seeds()),
                          ("raft", raft_seeds())):
        directory = CORPUS / target
        directory.mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            (directory / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
        print(f"{target}: {len(seeds)} seeds in {directory}")


if __name__ == "__main__":
    main()
