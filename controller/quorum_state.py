"""The quorum's hard state (epoch, vote, leader) and its file, KRaft's `quorum-state`.

Raft is safe only if a node never votes twice in one epoch and never goes back to an older epoch,
even across crashes. So the epoch and the vote are written and fsynced before any message that
depends on them leaves the node (`Ready.hard_state` comes first; see controller/raft.py).

File: `<metadata log dir>/quorum-state`, KRaft's JSON shape (data_version 0), replaced atomically
with `storage.checkpoint.write_atomically` (temp file, fsync, rename, fsync of the directory):

    {"clusterId":"","leaderId":2,"leaderEpoch":7,"votedId":2,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

`leaderId`/`votedId` are -1 when unknown/none; `appliedOffset` is kept at 0 as KRaft does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from storage.checkpoint import write_atomically

QUORUM_STATE_FILE = "quorum-state"
DATA_VERSION = 0
NO_NODE = -1


class CorruptQuorumStateError(ValueError):
    """The quorum-state file does not parse; the message names the file and the fault."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What must survive a crash: the epoch, this node's vote in it, and its known leader.

    Invariants: `epoch >= 0`; `voted_id` and `leader_id` are node ids or None. Across the life of
    a node the persisted epoch never decreases and, within one epoch, `voted_id` never changes
    once set (the Raft core asserts both before asking for a write)."""

    epoch: int
    voted_id: int | None = None
    leader_id: int | None = None

    def __post_init__(self) -> None:
        assert self.epoch >= 0, f"epoch={self.epoch}"


class QuorumStateStore:
    """Reads and atomically writes one node's `quorum-state` file. Owner: the Raft driver."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / QUORUM_STATE_FILE

    def read(self) -> ElectionState:
        """The persisted state; a missing file is epoch 0 with no vote and no leader."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ElectionState(0)
        try:
            document = json.loads(text)
            version = document["data_version"]
            epoch = int(document["leaderEpoch"])
            voted = int(document["votedId"])
            leader = int(document["leaderId"])
        except (ValueError, KeyError, TypeError) as error:
            raise CorruptQuorumStateError(
                f"{self.path}: {error!r}; the file is damaged: restore it, or (losing this node's vote) remove it"
            ) from None
        if version != DATA_VERSION or epoch < 0:
            raise CorruptQuorumStateError(f"{self.path}: data_version={version} leaderEpoch={epoch} is not supported")
        return ElectionState(epoch, None if voted == NO_NODE else voted, None if leader == NO_NODE else leader)

    def write(self, state: ElectionState, voters: Iterable[int]) -> None:
        """Replace the file with `state`, durably (fsynced) and atomically."""
        document = {
            "clusterId": "",
            "leaderId": NO_NODE if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": NO_NODE if state.voted_id is None else state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": voter} for voter in sorted(voters)],
            "data_version": DATA_VERSION,
        }
        write_atomically(self.path, json.dumps(document, separators=(",", ":")))
