"""PartitionSequences: an idempotent producer's numbering of one partition's batches (KIP-98, KIP-360).

Theory of operation (Kafka's TransactionManager for a producer without transactions, with its epoch
kept per partition: the brokers keep producer state per partition, so a partition can start a new
epoch alone and the others keep theirs):
- A batch gets its epoch and first sequence when it is drained (`sent`), and keeps them on every
  retry, so a retry of a batch the leader already wrote is answered with its first offsets.
- Up to `max_in_flight` (at most 5) batches may be sequenced ahead of the oldest one not yet
  acknowledged: the brokers keep the last 5 batches of a producer, so a retry is always within
  their window and is never taken for a new batch or refused as out of order.
- A merged batch (client/accumulator.py) the leader refuses as too large at its first attempt was
  not written (a retry's earlier attempt may have been: it fails for good then): its parts take
  its place with its sequences (`split`) and go one at a time, as retries do, so the window may
  then hold more than five batches, never more than five in flight.
- The leader takes a producer's batches in sequence only. If one fails with a retriable error, the
  later batches in flight are refused with OUT_OF_ORDER_SEQUENCE_NUMBER; each goes back to its
  partition's queue in sequence order (`RecordAccumulator.reenqueue`), and a queued batch with a
  sequence is sent again only once it is the oldest not yet acknowledged (`may_send`), so batches
  are retried one at a time, in order, and never reordered.
- A batch lost for good (delivery.timeout.ms, retries or a non-retriable error) leaves a gap the
  leader would refuse every later batch for: the partition needs a new epoch (KIP-360). It starts
  once nothing of the partition is in flight (`maybe_start_new_epoch`) and new batches wait until
  then. If the batches still queued were refused as out of order (so neither they nor any later
  one is in the log), they get the new epoch and sequences from 0 and go again in order, as Kafka
  re-sequences its in-flight batches after the bump. A queued batch whose outcome is unknown (its
  answer was lost: `may_be_in_log`) is first sent again with its own sequence: numbering it anew could
  write it twice, where Kafka re-sequences it. If every batch numbered was acknowledged after all
  (the failed one was written), no new epoch is needed (Kafka's `maybeResolveSequences`).
- A later batch whose answer was lost may be in the log although the leader refuses an earlier
  one as out of order: a leader with no state for the producer took it (replication sim seed
  51987047: a merged backlog refused as too large, the next batch written by a leader that had lost
  the producer's state, its answer lost). The earlier batch is `overtaken` and fails: sent again,
  or numbered anew, it would be written after it. The later one goes again with its own sequence
  and learns its fate.
- Until the leader has acknowledged one batch of the partition in the current epoch, one batch goes
  at a time: a broker with no state for a producer takes any sequence (Kafka's rule since KIP-360),
  so if the first batch is refused (too large, not enough replicas) the second would be written
  without it; and requests to different leaders, or over a stream that was replaced, are not
  ordered, so a second batch could overtake the first. Kafka sends up to five at once there.
- A batch refused as out of order although it was sent after every batch before it was
  acknowledged means the leader lost them (an unclean election, unflushed data lost in a crash): a
  new epoch too (KIP-360). (Sent earlier, it may just have overtaken its predecessor on another
  connection.)
- A batch whose sequences lie below a later acknowledged batch of its epoch (`behind_acknowledged`)
  was written before it: the leader takes a producer's batches in sequence only. It is never
  numbered anew, which could write it twice (replication sim seed 774512936: its answer lost, four
  later batches acknowledged, its retry refused as out of order by a new leader whose window of five
  had moved past it). Refused as out of order, it fails at once as most likely written (its offsets
  are unknown; the leader will never take it again); failed for good, it leaves no gap (Kafka's
  `maybeResolveSequences`). If the leader lost both (a crash losing unflushed data), the refusal
  fails it too: a failed send may be missing, a numbered-again one may not be written twice.

Sequences here are unbounded ints; the batch carries them modulo 2^31 (they wrap to 0, Kafka's rule).
Pure bookkeeping: the producer calls it from its sender; no I/O, no clock.
"""

from __future__ import annotations

from collections import deque

from client.producer_batch import ProducerBatch

MAX_IN_FLIGHT = 5  # Kafka: max.in.flight.requests.per.connection <= 5 with idempotence (the brokers keep 5)
EPOCH_MAX = 2**15 - 1


class EpochExhaustedError(Exception):
    """A partition used every epoch of its producer id (i16): the producer needs a new id."""


class PartitionSequences:
    """One partition's epoch, next sequence and batches in flight. Owner: the producer's sender."""

    def __init__(self, producer_id: int, max_in_flight: int) -> None:
        assert 1 <= max_in_flight <= MAX_IN_FLIGHT, f"max_in_flight={max_in_flight}"
        self.producer_id = producer_id
        self.max_in_flight = max_in_flight
        self.epoch = 0
        self.next_sequence = 0
        self.acked_end = 0  # the sequence after the last record acknowledged in this epoch
        # Sequenced batches from the oldest not acknowledged on, in sequence order; acknowledged ones
        # leave from the left only, so len() is how far numbering runs ahead of the oldest unacked.
        self.window: deque[ProducerBatch] = deque()
        self.sending = 0  # batches of the window in a request not yet answered
        self.leader_knows_producer = False  # a batch was acknowledged: the leader checks sequences
        self.new_epoch_needed = False

    def may_send(self, batch: ProducerBatch) -> bool:
        """Whether the partition's first queued batch may go now."""
        if batch.sequence is not None:  # a retry: only the oldest not acknowledged, one at a time
            return self._oldest_unacked() is batch
        if self.new_epoch_needed:
            return False
        return len(self.window) < (self.max_in_flight if self.leader_knows_producer else 1)

    def sent(self, batch: ProducerBatch) -> None:
        """The batch goes in a request: a new one is numbered."""
        if batch.sequence is None:
            batch.number(self.producer_id, self.epoch, self.next_sequence)
            self.next_sequence += batch.record_count
            self.window.append(batch)
        assert batch in self.window, f"{batch.tp}: a retry of a batch that left the window"
        batch.sent_oldest = self.window[0] is batch
        batch.may_be_in_log = True
        self.sending += 1

    def answered(self, batch: ProducerBatch, out_of_order: bool) -> None:
        """The batch's request is over, one way or another (acknowledged, refused, no answer)."""
        self.sending -= 1
        assert self.sending >= 0, f"{batch.tp}: sending={self.sending}"
        batch.refused_out_of_order = out_of_order
        batch.may_be_in_log = not out_of_order
        if out_of_order and batch.sent_oldest and not self.behind_acknowledged(batch):
            self.new_epoch_needed = True  # every batch before it was acknowledged: the leader lost them

    def acknowledged(self, batch: ProducerBatch) -> None:
        batch.acknowledged = True
        self.leader_knows_producer = True
        self.acked_end = max(self.acked_end, batch.sequence_end)
        self._retire()

    def behind_acknowledged(self, batch: ProducerBatch) -> bool:
        """A later batch of its epoch was acknowledged: the leader wrote this one before it."""
        return (batch.sequence is not None and batch.producer_epoch == self.epoch
                and batch.sequence_end <= self.acked_end)

    def overtaken(self, batch: ProducerBatch) -> bool:
        """The leader refused `batch` as out of order although every batch before it was
        acknowledged, nothing is in flight, and a later batch of the window may be in the log (its
        answer was lost, or it was acknowledged): `batch` cannot be written after it."""
        return (batch.refused_out_of_order and batch.sent_oldest and not self.sending
                and any(later.may_be_in_log for later in self.window if later is not batch))

    def failed(self, batch: ProducerBatch) -> None:
        """The batch failed for good; if it was numbered, its sequences are a gap (or maybe not)."""
        if batch in self.window:
            self.window.remove(batch)
            self.new_epoch_needed = self.new_epoch_needed or not self.behind_acknowledged(batch)
            self._retire()

    def split(self, merged: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """A merged batch the leader refused as too large (so not written) is sent again as its
        parts, numbered with its sequences in turn (`ProducerBatch.split`): no gap, no new epoch."""
        index = self.window.index(merged)
        del self.window[index]
        for offset, part in enumerate(parts):
            self.window.insert(index + offset, part)

    def maybe_start_new_epoch(self) -> bool:
        """Resolve a gap once nothing is in flight (see the module docstring); True if a new epoch began."""
        if not self.new_epoch_needed or self.sending:
            return False
        if not self.window:
            if self.acked_end == self.next_sequence:
                self.new_epoch_needed = False  # every batch numbered was written: no gap after all
                return False
        elif not self.window[0].refused_out_of_order or any(batch.may_be_in_log for batch in self.window):
            return False  # an outcome is unknown: that batch goes again with its own sequence first
        if self.epoch == EPOCH_MAX:
            raise EpochExhaustedError(f"producer {self.producer_id} used every epoch on a partition")
        assert not any(batch.acknowledged for batch in self.window), "the refused batch is behind an acknowledged one"
        self.epoch += 1
        self.next_sequence = 0
        self.acked_end = 0
        self.leader_knows_producer = False  # no leader knows the new epoch yet
        for batch in self.window:  # none of them in the leader's log: numbered anew, in order
            batch.number(self.producer_id, self.epoch, self.next_sequence)
            self.next_sequence += batch.record_count
        self.new_epoch_needed = False
        return True

    def _oldest_unacked(self) -> ProducerBatch | None:
        return self.window[0] if self.window else None

    def _retire(self) -> None:
        while self.window and self.window[0].acknowledged:
            self.window.popleft()
