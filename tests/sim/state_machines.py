"""State machines the simulator can run, behind one plug (`StateMachineSpec`).

The Raft-level checks need only the committed entries; a spec adds a state machine to apply them
to, a payload generator for the workload, and optionally a cheap digest that the checker compares
against the digest of the canonical history at the same offset (after every apply and restore).

`METADATA` (the default) is the cluster-metadata state machine, `ClusterMetadata`, fed by the
active controller's `QuorumController` (tests/sim/metadata_workload.py). `HASH_LIST` (`--spec
tests.sim.state_machines:HASH_LIST`) is an append-only list of opaque payloads with a running
SHA-256 over (offset, payload), which the checker compares after every apply.
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from controller.metadata import ClusterMetadata
from controller.metadata_records import MetadataRecord, decode_record
from controller.raft import StateMachine

EMPTY_DIGEST = b"\x00" * 32


def chain_digest(digest: bytes, offset: int, data: bytes) -> bytes:
    """The running digest after applying `data` at `offset` (shared with the checker)."""
    return hashlib.sha256(digest + offset.to_bytes(8, "big") + data).digest()


class HashListStateMachine:
    """Applied payloads in order and their running digest. Snapshot format: count (i32), digest
    (32 bytes), then each payload as length (i32) + bytes. The last applied offset is not in it (the
    snapshot's offset says it), so every node's snapshot at one offset is the same bytes."""

    def __init__(self) -> None:
        self.last_applied_offset = -1
        self.payloads: list[bytes] = []
        self.digest = EMPTY_DIGEST

    def apply(self, offset: int, epoch: int, data: bytes) -> None:
        assert offset > self.last_applied_offset, f"apply {offset} after {self.last_applied_offset}"
        self.payloads.append(data)
        self.digest = chain_digest(self.digest, offset, data)
        self.last_applied_offset = offset

    def snapshot(self) -> bytes:
        head = struct.pack(">i", len(self.payloads)) + self.digest
        return head + b"".join(struct.pack(">i", len(payload)) + payload for payload in self.payloads)

    def restore(self, offset: int, data: bytes) -> None:
        (count,) = struct.unpack_from(">i", data, 0)
        position = 4
        digest = data[position : position + 32]
        position += 32
        payloads = []
        for _ in range(count):
            (length,) = struct.unpack_from(">i", data, position)
            payloads.append(data[position + 4 : position + 4 + length])
            position += 4 + length
        assert position == len(data), f"snapshot has {len(data) - position} trailing bytes"
        self.payloads, self.digest, self.last_applied_offset = payloads, digest, offset


def hash_list_payload(rng: random.Random, sequence: int) -> bytes:
    """Small opaque payloads: unique (the sequence number) with a random tail of 0-40 bytes."""
    return b"p%d:" % sequence + rng.randbytes(rng.randint(0, 40))


@dataclass(frozen=True, slots=True)
class StateMachineSpec:
    """What a simulation applies: a factory, the workload's payloads, an optional digest of a state
    machine that must equal `chain_digest` over the canonical history (None: not checked), and whether
    two nodes' snapshots at one offset must be the same bytes (False if a snapshot records, say, the
    offset of the last record applied, which a restored node knows only as the snapshot's end).
    `controller`: the state machine is `ClusterMetadata` and the workload is controller requests
    (the payload function is not used); the checker also checks the metadata invariants."""

    name: str
    factory: Callable[[], StateMachine]
    payload: Callable[[random.Random, int], bytes]
    digest: Callable[[StateMachine], bytes] | None
    identical_snapshots: bool = True
    controller: bool = False


def _hash_list_digest(state_machine: StateMachine) -> bytes:
    assert isinstance(state_machine, HashListStateMachine), type(state_machine)
    return state_machine.digest


HASH_LIST = StateMachineSpec("hash-list", HashListStateMachine, hash_list_payload, _hash_list_digest)


DECODED_RECORDS_MAX = 100_000


class SimClusterMetadata(ClusterMetadata):
    """`ClusterMetadata` whose nodes share decoded records: every node applies the same committed
    bytes, and `decode_record` (which checks every wire type) is a pure function of them, so each
    distinct record is decoded once per process (a bounded memo, emptied when full) and applied on
    every node by the real `apply_record`."""

    decoded: ClassVar[dict[bytes, MetadataRecord]] = {}

    def apply(self, offset: int, epoch: int, data: bytes) -> None:
        assert epoch >= 0, f"epoch={epoch} offset={offset}"
        record = self.decoded.get(data)
        if record is None:
            if len(self.decoded) >= DECODED_RECORDS_MAX:
                self.decoded.clear()
            record = self.decoded[data] = decode_record(data)
        self.apply_record(offset, record)


def _no_payload(rng: random.Random, sequence: int) -> bytes:
    raise AssertionError("the metadata workload proposes controller records, not payloads")


METADATA = StateMachineSpec("metadata", SimClusterMetadata, _no_payload, None, controller=True)
