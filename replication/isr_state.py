"""The leader's view of the ISR while AlterPartition proposals are in flight (Kafka's PartitionState).

Kafka's rule (KIP-497, Partition.scala): a leader proposes one ISR change at a time and applies it
only when the controller's answer (or newer metadata) arrives. While a change is in flight the
leader uses the *maximal* ISR for the HW and for acks=all: the union of the committed ISR and the
proposed one. So an expansion counts the joining follower at once (it may already be in the ISR),
and a shrink keeps counting the leaving follower until the controller agrees: the HW never moves
past a replica that the controller may still consider in sync (and so may elect).
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.ready import AlterPartitionProposal


@dataclass(frozen=True, slots=True)
class CommittedIsr:
    """No change in flight: `isr` is the controller's, in replica order."""

    isr: tuple[int, ...]

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class PendingExpandIsr:
    """`new_in_sync_replica_id` was proposed for the ISR; the maximal ISR already counts it."""

    new_in_sync_replica_id: int
    proposal: AlterPartitionProposal
    sent_ms: int
    last_committed: CommittedIsr

    @property
    def isr(self) -> tuple[int, ...]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.proposal.new_isr

    @property
    def is_inflight(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class PendingShrinkIsr:
    """`out_of_sync_replica_ids` were proposed to leave; the maximal ISR still counts them."""

    out_of_sync_replica_ids: tuple[int, ...]
    proposal: AlterPartitionProposal
    sent_ms: int
    last_committed: CommittedIsr

    @property
    def isr(self) -> tuple[int, ...]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.last_committed.isr

    @property
    def is_inflight(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class PendingLineage:
    """The ISR unchanged, proposed with this leader epoch's lineage for the controller to record
    (`Leader`): the first proposal of every leadership the metadata does not yet record."""

    proposal: AlterPartitionProposal
    last_committed: CommittedIsr

    @property
    def isr(self) -> tuple[int, ...]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        return self.last_committed.isr

    @property
    def is_inflight(self) -> bool:
        return True


IsrState = CommittedIsr | PendingExpandIsr | PendingShrinkIsr | PendingLineage
