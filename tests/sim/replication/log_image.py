"""LogImage: the checker's copy of one replica's log, built only from observations.

It holds the batches of one partition on one broker, by base offset, from the log's start to its
end, and outlives the broker's incarnations as the disk does: a crash cuts it where the fault log
says, and the next incarnation must open exactly what is left (`checker.py` compares them). It is
how the checker knows, at any moment, which replicas hold a batch — also replicas that are down.

Besides the batches: the offsets the replica last reported, the incarnation that reported them, how
far the checker has held its batches below the HW against the history (`committed_to`), and the
highest HW each consumer was served by this incarnation (DESIGN §6.3).
"""

from __future__ import annotations

import bisect

from tests.sim.replication.observations import Batch


class LogImage:
    def __init__(self, log_start_offset: int) -> None:
        self.bases: list[int] = []
        self.batches: dict[int, Batch] = {}
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_start_offset
        self.high_watermark = log_start_offset
        self.incarnation = -1
        self.committed_to = log_start_offset  # every batch starting below it was committed
        self.served_high_watermarks: dict[int, int] = {}  # consumer id -> highest HW served
        # Batches held as bit rot left them: base offset -> the batch before the rot (None: not
        # known, a rotted batch a crash brought back from below logStartOffset).
        self.rotted: dict[int, Batch | None] = {}
        self.rotted_data: set[bytes] = set()  # every rotted batch's bytes (a crash may bring one back)
        self.rotted_deleted: set[int] = set()  # rotted batches deleted below logStartOffset (ditto)

    def get(self, base_offset: int) -> Batch | None:
        return self.batches.get(base_offset)

    def last(self) -> Batch | None:
        return self.batches[self.bases[-1]] if self.bases else None

    def append(self, batch: Batch) -> str | None:
        """Add a batch at the log end; the reason it cannot go there (DESIGN §6.6: offsets unique
        and increasing, epochs never falling), else None."""
        last = self.last()
        if batch.next_offset <= batch.base_offset:
            return f"batch [{batch.base_offset}, {batch.next_offset}) is empty or reversed"
        if last is not None and batch.base_offset != last.next_offset:
            return f"batch at {batch.base_offset} follows one ending at {last.next_offset}: offsets not contiguous"
        if last is None and not batch.base_offset <= self.log_end_offset < batch.next_offset:
            return (f"batch [{batch.base_offset}, {batch.next_offset}) appended to an empty log ending at "
                    f"{self.log_end_offset}")
        if last is not None and batch.leader_epoch < last.leader_epoch:
            return f"epoch {batch.leader_epoch} at {batch.base_offset} after epoch {last.leader_epoch}"
        self.bases.append(batch.base_offset)
        self.batches[batch.base_offset] = batch
        self.log_end_offset = batch.next_offset
        return None

    def rot(self, batch: Batch) -> Batch:
        """The held batch at `batch.base_offset` now has `batch`'s (damaged) bytes; returns the one
        it replaces."""
        held = self.batches[batch.base_offset]
        assert held.next_offset == batch.next_offset, f"rot changed the offsets of {held.base_offset}"
        self.batches[batch.base_offset] = batch
        self.rotted.setdefault(batch.base_offset, held)
        self.rotted_data.add(batch.data)
        return held

    def _forget_rot(self) -> None:
        for base_offset in [base_offset for base_offset in self.rotted if base_offset not in self.batches]:
            del self.rotted[base_offset]

    def cut_from(self, offset: int) -> list[Batch]:
        """Remove the batches ending above `offset` (a truncation or a crash); return them. The log
        then ends at `offset`, or at the start of a batch the cut fell inside of."""
        slot = bisect.bisect_left(self.bases, offset)
        if slot > 0 and self.batches[self.bases[slot - 1]].next_offset > offset:
            slot -= 1
        removed = [self.batches.pop(base) for base in self.bases[slot:]]
        del self.bases[slot:]
        self._forget_rot()
        self.log_end_offset = min(self.log_end_offset, offset, removed[0].base_offset if removed else offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)  # a cut below it: a shorter file
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.committed_to = min(self.committed_to, self.log_end_offset)
        for consumer_id, served in self.served_high_watermarks.items():
            self.served_high_watermarks[consumer_id] = min(served, self.log_end_offset)
        return removed

    def empty_at(self, start_offset: int) -> list[Batch]:
        """Remove every batch; the log starts empty at `start_offset`."""
        removed = [self.batches[base] for base in self.bases]
        self.bases.clear()
        self.batches.clear()
        self.rotted.clear()
        self.log_start_offset = self.log_end_offset = self.high_watermark = start_offset
        self.committed_to = start_offset
        self.served_high_watermarks.clear()
        return removed

    def delete_below(self, log_start_offset: int) -> list[Batch]:
        """Raise logStartOffset; remove the batches wholly below it and return them."""
        self.log_start_offset = max(self.log_start_offset, log_start_offset)
        slot = 0
        while slot < len(self.bases) and self.batches[self.bases[slot]].next_offset <= self.log_start_offset:
            slot += 1
        removed = [self.batches.pop(base) for base in self.bases[:slot]]
        del self.bases[:slot]
        self.rotted_deleted.update(base for base in self.rotted if base not in self.batches)
        self._forget_rot()
        # A batch the new start falls inside of is still there and may not be committed yet.
        first = self.bases[0] if self.bases else self.log_end_offset
        self.committed_to = max(self.committed_to, min(self.log_start_offset, self.log_end_offset, first))
        return removed

    def restore_front(self, batches: list[Batch], log_start_offset: int) -> None:
        """An older logStartOffset came back (its checkpoint trails memory), and with it the batches
        from there to the first batch held."""
        first = self.bases[0] if self.bases else self.log_end_offset
        assert all(batch.next_offset <= first for batch in batches), f"{batches} overlap {first}"
        self.bases[:0] = [batch.base_offset for batch in batches]
        self.batches.update((batch.base_offset, batch) for batch in batches)
        self.rotted.update((batch.base_offset, None) for batch in batches if batch.data in self.rotted_data)
        self.log_start_offset = min(self.log_start_offset, log_start_offset)

    def between(self, start_offset: int, end_offset: int) -> list[Batch]:
        """The batches starting in [start_offset, end_offset)."""
        low = bisect.bisect_left(self.bases, start_offset)
        high = bisect.bisect_left(self.bases, end_offset)
        return [self.batches[base] for base in self.bases[low:high]]

    def all_batches(self) -> list[Batch]:
        return [self.batches[base] for base in self.bases]
