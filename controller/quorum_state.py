"""The quorum's hard state (epoch, vote, leader) and its file, KRaft's `quorum-state`.

Raft is safe only if a node never votes twice in one epoch and never goes back to an older epoch,
even across crashes. So the epoch and the vote are written and fsynced before any message that
depends on them leaves the node (`Ready.hard_state` comes first; see controller/raft.py).

File: `<metadata log dir>/quorum-state`, KRaft's JSON shape (data_version 0), replaced atomically
with `storage.checkpoint.write_atomically` (temp file, fsync, rename, fsync of the directory):

    {"clusterId":"","leaderId":2,"leaderEpoch":7,"votedId":2,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}

`leaderId`/`votedId` are -1 when unknown/none; `appliedOffset` is kept at 0 as KRaft does.

Not in KRaft: a voter that started without this file (a new node, a wiped or replaced disk, a
removed file) restores before it votes again (controller/raft.py, "A voter without state"). Until
it may vote as any other voter, every write of the file adds what it has learned since:

    "restoration":{"answeredVoters":[2,3],"epochBound":7,"logBoundEpoch":7,"logBoundOffset":120}

A missing file reads as epoch 0 restoring with nothing learned. A file that does not parse is
refused (CorruptQuorumStateError): it may be a newer version's, or damaged with the rest of the
directory, and a person should look before the node starts; the message gives the safe way out.
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
WAY_OUT = ("Move the file aside (keep it for diagnosis) and start the node again: it then starts as a voter "
           "without state, which follows the leader and votes again only once every other voter has answered "
           "it (README: a voter that starts without state). Move aside one voter's file at a time.")


class CorruptQuorumStateError(ValueError):
    """The quorum-state file does not parse; the message names the file, the fault and the way out."""


LogEnd = tuple[int, int]  # (last epoch, end offset): a log's end, ordered as Raft compares logs
NO_LOG_END: LogEnd = (0, 0)


@dataclass(frozen=True, slots=True)
class Restoration:
    """What a voter that lost its state has learned since, from the other voters' own answers.

    `answered`: the voters (never this node) that answered its probe since the loss.
    `epoch_bound`: the largest epoch among their answers; the voter votes, and stands, only in
    epochs above it. `log_bound`: the most up-to-date log end among their answers; the voter votes
    only for a log at least as up to date, until its own durable log is (then `NO_LOG_END`).
    Invariants: `answered` only grows and, while it does, the bounds only rise; a bound goes only
    once the voter's durable state makes it redundant (`settled`). Owner: the Raft core."""

    answered: frozenset[int] = frozenset()
    epoch_bound: int = 0
    log_bound: LogEnd = NO_LOG_END

    def __post_init__(self) -> None:
        assert self.epoch_bound >= 0, f"epoch_bound={self.epoch_bound}"
        assert min(self.log_bound) >= 0, f"log_bound={self.log_bound}"

    def learn(self, voter_id: int, epoch: int, log_end: LogEnd) -> Restoration:
        """Add one voter's answer: its own current epoch and log end."""
        return Restoration(self.answered | {voter_id}, max(self.epoch_bound, epoch), max(self.log_bound, log_end))

    def is_complete(self, others: frozenset[int]) -> bool:
        """Has every other voter answered?"""
        return others <= self.answered

    def allows_vote_in(self, others: frozenset[int], epoch: int) -> bool:
        """May a vote (for anyone, itself included) be cast in `epoch`?"""
        return self.is_complete(others) and epoch > self.epoch_bound

    def allows_vote(self, others: frozenset[int], epoch: int, log_end: LogEnd) -> bool:
        """May a vote be cast in `epoch` for a candidate whose log ends at `log_end`?"""
        return self.allows_vote_in(others, epoch) and log_end >= self.log_bound

    def settled(self, epoch: int, log_end: LogEnd) -> Restoration | None:
        """What is still needed once the voter's durable epoch and log end are these (called with
        every other voter answered): the log bound goes once the log reached it, and the whole
        restoration once the epoch is also above the epoch bound (None: a voter like any other)."""
        log_bound = NO_LOG_END if log_end >= self.log_bound else self.log_bound
        if log_bound == NO_LOG_END and epoch > self.epoch_bound:
            return None
        return Restoration(self.answered, self.epoch_bound, log_bound)


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What must survive a crash: the epoch, this node's vote in it, and its known leader.

    Invariants: `epoch >= 0`; `voted_id` and `leader_id` are node ids or None. Across the life of
    a node the persisted epoch never decreases and, within one epoch, `voted_id` never changes
    once set (the Raft core asserts both before asking for a write). `restoration` is not None
    while a voter that lost this state restores (see `Restoration`)."""

    epoch: int
    voted_id: int | None = None
    leader_id: int | None = None
    restoration: Restoration | None = None

    def __post_init__(self) -> None:
        assert self.epoch >= 0, f"epoch={self.epoch}"


class QuorumStateStore:
    """Reads and atomically writes one node's `quorum-state` file. Owner: the Raft driver."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / QUORUM_STATE_FILE

    def read(self) -> ElectionState:
        """The persisted state; a missing file is a voter without state: epoch 0, restoring."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ElectionState(0, restoration=Restoration())
        try:
            document = json.loads(text)
            version = document["data_version"]
            epoch = int(document["leaderEpoch"])
            voted = int(document["votedId"])
            leader = int(document["leaderId"])
            restoration = _restoration_from(document.get("restoration"))
        except (ValueError, KeyError, TypeError) as error:
            raise CorruptQuorumStateError(f"{self.path}: {error!r}: the file is damaged. {WAY_OUT}") from None
        if version != DATA_VERSION or epoch < 0:
            raise CorruptQuorumStateError(
                f"{self.path}: data_version={version} leaderEpoch={epoch} is not supported (this version writes "
                f"data_version={DATA_VERSION} and epochs >= 0): start the version that wrote it, or: {WAY_OUT}")
        return ElectionState(epoch, None if voted == NO_NODE else voted, None if leader == NO_NODE else leader,
                             restoration)

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
        restoration = state.restoration
        if restoration is not None:
            document["restoration"] = {
                "answeredVoters": sorted(restoration.answered),
                "epochBound": restoration.epoch_bound,
                "logBoundEpoch": restoration.log_bound[0],
                "logBoundOffset": restoration.log_bound[1],
            }
        write_atomically(self.path, json.dumps(document, separators=(",", ":")))


def _restoration_from(value: object) -> Restoration | None:
    """The `restoration` field (None when absent); a malformed one raises for `read` to name."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"restoration is {value!r}, not an object")
    answered = value["answeredVoters"]
    if not isinstance(answered, list):
        raise TypeError(f"answeredVoters is {answered!r}, not a list")
    numbers = (int(value["epochBound"]), int(value["logBoundEpoch"]), int(value["logBoundOffset"]))
    if min(numbers) < 0:
        raise ValueError(f"restoration {value!r} has a negative bound")
    return Restoration(frozenset(int(voter) for voter in answered), numbers[0], (numbers[1], numbers[2]))
