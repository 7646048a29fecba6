"""CommittedBatch: one batch that was committed, and what became of it on every replica.

A batch is committed the first time it lies below some replica's HW (a consumer may read it) or a
leader acknowledges it with acks=all, whichever comes first (the ack moves the leader's HW past it,
so for an acks=all batch both happen in the same step). From then on the checker follows its
copies: the replicas whose logs hold these exact bytes at this offset. `holders` are the copies at
the moment that counts (the ack; for a batch never acked with acks=all, the commit), fixed then.
Every time a replica loses its copy the loss is recorded with its cause; a replica that appends the
batch again (fetched from a replica that still had it, or from a fetch answer still on the wire)
is a copy again, and only its last loss counts. A crash or wipe that cuts a log below a batch that
logStartOffset had already passed there overrides that deletion: the replica no longer knows the
offset was used.

Its fate is decided when another batch is committed over it once it has no copy left, or at the
end of the run (a copy in flight may still bring it back until then):
- DELETED: it was deleted by logStartOffset (retention, DeleteRecords: the contract, not a loss)
  and nothing was committed over it;
- LOST, excused: every holder's last loss was a recorded fault (a crash that cut it unflushed, a
  wiped disk, bit rot in it or in a batch before it, which cuts the log there): short of those, no
  system could have kept it (DESIGN §6.1);
- otherwise a violation: some holder lost it to the protocol (a truncation), or kept only a
  deletion another batch was then committed over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tests.sim.replication.observations import Batch


class LossCause(Enum):
    """How a replica's copy of a batch went."""

    TRUNCATED = "truncated by the protocol"
    CRASHED = "cut by a crash (unflushed)"
    WIPED = "wiped with its disk"
    ROTTED = "damaged on its disk (bit rot)"
    DELETED = "below logStartOffset (retention or DeleteRecords)"


FAULTS = frozenset({LossCause.CRASHED, LossCause.WIPED, LossCause.ROTTED})


class Fate(Enum):
    KEPT = "kept"  # the committed batch at its offset, with copies
    DISPLACED = "displaced"  # another batch was committed over it while it still had copies
    DELETED = "deleted"
    LOST = "lost, excused"


@dataclass(frozen=True, slots=True)
class Loss:
    cause: LossCause
    at_ms: int


@dataclass(frozen=True, slots=True)
class Ack:
    """An acks=all success: when, by which leader, and the committed ISR size it answered with."""

    at_ms: int
    leader_id: int
    isr_size: int
    min_insync_replicas: int


@dataclass(slots=True, eq=False)
class CommittedBatch:
    batch: Batch
    committed_ms: int
    committed_by: int  # the replica whose HW (or ack) committed it
    holders: frozenset[int]
    copies: set[int]
    losses: dict[int, Loss] = field(default_factory=dict)  # replica -> its last loss
    ack: Ack | None = None
    fate: Fate = Fate.KEPT
    deleted: bool = False  # a logStartOffset passed it while it was the committed batch at its offset
    consumed: bool = False  # a consumer was served it

    def lose(self, replica: int, cause: LossCause, now_ms: int) -> None:
        """`replica`'s copy went."""
        self.copies.discard(replica)
        self.losses[replica] = Loss(cause, now_ms)
        if cause is LossCause.DELETED and self.fate is Fate.KEPT:
            self.deleted = True

    def cut_after_deletion(self, replica: int, cause: LossCause, now_ms: int) -> None:
        """A fault cut `replica`'s log below this batch, which it had only deleted."""
        loss = self.losses.get(replica)
        if loss is not None and loss.cause is LossCause.DELETED:
            self.losses[replica] = Loss(cause, now_ms)

    def regain(self, replica: int) -> None:
        self.copies.add(replica)
        self.losses.pop(replica, None)

    def excuse(self) -> str | None:
        """The kind of excuse if every holder's last loss was a recorded fault, else None."""
        causes = {self.losses[holder].cause for holder in self.holders}
        if not causes <= FAULTS:
            return None
        if causes == {LossCause.CRASHED}:
            return "every holder crashed with it unflushed"
        if causes == {LossCause.WIPED}:
            return "every holder's disk was wiped"
        if causes == {LossCause.CRASHED, LossCause.WIPED}:
            return "every holder crashed with it unflushed or was wiped"
        return "every holder lost it to a fault, bit rot among them"

    def decide(self) -> str | None:
        """No copy is left and nothing was committed over it: set the fate; return the excuse's kind,
        None if it was deleted or its loss is not excused (then `describe_loss` words it)."""
        assert not self.copies, f"{self.batch.base_offset} still has copies {self.copies}"
        if self.deleted and self.fate is Fate.KEPT:
            self.fate = Fate.DELETED
            return None
        kind = self.excuse()
        if kind is not None:
            self.fate = Fate.LOST
        return kind

    def describe_loss(self) -> str:
        what = "acks=all batch" if self.ack is not None else "committed batch"
        when = (f"acknowledged by broker {self.ack.leader_id} at {self.ack.at_ms} ms with ISR size "
                f"{self.ack.isr_size} (min.insync.replicas={self.ack.min_insync_replicas})" if self.ack is not None
                else f"committed below broker {self.committed_by}'s HW at {self.committed_ms} ms")
        losses = "; ".join(
            f"broker {holder} {self.losses[holder].cause.value} at {self.losses[holder].at_ms} ms"
            for holder in sorted(self.holders)
        )
        deleted = ", deleted by logStartOffset," if self.deleted else ""
        displaced = "; another batch was committed over it while a copy remained" if self.fate is Fate.DISPLACED else ""
        return (f"{what} [{self.batch.base_offset}, {self.batch.next_offset}) epoch {self.batch.leader_epoch} "
                f"{when}, held then by {sorted(self.holders)}{deleted} is on no replica any more: {losses}{displaced}")
