"""PartitionHistory: one partition's committed batches, as the checker has seen them committed.

`canonical` holds the committed batch at each base offset, whatever became of it (kept, deleted,
lost and excused), in offset order (`bases`), for the overlap checks of invariant 8. `tracked`
holds, by base offset, every committed batch whose fate is not decided yet: those still kept, and
those another batch was committed over while they had copies (displaced). A batch is found again
by its bytes (`copies_of`) whenever a replica appends or loses one.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from tests.sim.replication.committed_batch import CommittedBatch
from tests.sim.replication.observations import Batch


@dataclass(slots=True)
class PartitionHistory:
    """One partition's committed batches: `canonical` (the committed batch at each base offset,
    whatever its fate), `tracked` (those not yet decided: they still have copies) and
    `idempotent` (the last committed batch of each idempotent producer's (id, epoch, sequence)) and
    `records_in_order` (each idempotent producer's committed batches by base offset, for rule 11)."""

    canonical: dict[int, CommittedBatch] = field(default_factory=dict)
    bases: list[int] = field(default_factory=list)
    tracked: dict[int, list[CommittedBatch]] = field(default_factory=dict)
    max_leader_log_start: int = 0
    idempotent: dict[tuple[int, int, int], CommittedBatch] = field(default_factory=dict)
    records_in_order: dict[int, list[CommittedBatch]] = field(default_factory=dict)

    def overlapping(self, batch: Batch) -> list[CommittedBatch]:
        slot = bisect.bisect_left(self.bases, batch.base_offset)
        if slot > 0 and self.canonical[self.bases[slot - 1]].batch.next_offset > batch.base_offset:
            slot -= 1
        found = []
        while slot < len(self.bases) and self.bases[slot] < batch.next_offset:
            found.append(self.canonical[self.bases[slot]])
            slot += 1
        return found

    def neighbours(self, producer_id: int, entry: CommittedBatch) -> tuple[CommittedBatch | None, ...]:
        """Place an idempotent producer's committed batch among its others by base offset; return the
        nearest before and after it that are still the committed batch at their offsets and not lost
        (a replica holds them, or logStartOffset deleted them). The others leave the list."""
        entries = self.records_in_order.setdefault(producer_id, [])
        entries[:] = [other for other in entries if self.canonical.get(other.batch.base_offset) is other
                      and (other.copies or other.deleted)]
        slot = bisect.bisect_left(entries, entry.batch.base_offset, key=lambda other: other.batch.base_offset)
        entries.insert(slot, entry)
        return (entries[slot - 1] if slot else None), (entries[slot + 1] if slot + 1 < len(entries) else None)

    def add(self, entry: CommittedBatch) -> None:
        base_offset = entry.batch.base_offset
        bisect.insort(self.bases, base_offset)
        self.canonical[base_offset] = entry
        self.tracked.setdefault(base_offset, []).append(entry)

    def recanonicalize(self, entry: CommittedBatch) -> None:
        """A tracked batch is the committed one at its offset again."""
        base_offset = entry.batch.base_offset
        assert base_offset not in self.canonical, f"{base_offset} is canonical already"
        bisect.insort(self.bases, base_offset)
        self.canonical[base_offset] = entry

    def remove_canonical(self, entry: CommittedBatch) -> None:
        base_offset = entry.batch.base_offset
        del self.canonical[base_offset]
        del self.bases[bisect.bisect_left(self.bases, base_offset)]

    def copies_of(self, batch: Batch) -> list[CommittedBatch]:
        return [entry for entry in self.tracked.get(batch.base_offset, ()) if entry.batch == batch]

    def untrack(self, entry: CommittedBatch) -> None:
        entries = self.tracked[entry.batch.base_offset]
        entries.remove(entry)
        if not entries:
            del self.tracked[entry.batch.base_offset]
