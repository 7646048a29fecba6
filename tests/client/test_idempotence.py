"""PartitionSequences with the accumulator against a real `storage.Log` as the leader: up to five
batches in flight (a backlog merged into one), arriving in any order, answered in any order, with
lost requests, lost answers, retriable and fatal errors (a merged batch refused as too large is sent
again as its parts), and a leader that loses its whole log (an unclean election, or every replica's
disk wiped: it then has no state for the producer and takes any sequence, KIP-360); the log must hold
each record at most once, in send order, and every acknowledged record a wipe did not take; at most
five batches are in flight and, but for a split batch's parts, numbering never runs more than five
batches ahead of the oldest one unacknowledged; records sent once the faults are over are all
acknowledged (a gap left by a failed batch is closed by a new epoch).

Method: hypothesis draws the schedule. The producer's side is the accumulator (gate, drain,
reenqueue) and `PartitionSequences`, driven as `Producer._send_loop` and `_handle_error` drive them;
the leader is `Log.append_as_leader` with its producer state (storage/producer_state.py). Faults
stop after a drawn number of steps, then the run must finish (liveness: no batch waits forever).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from client.accumulator import RecordAccumulator
from client.batch_retry import Retry, after_error
from client.errors import error_for
from client.idempotence import PartitionSequences
from client.producer_batch import ProducerBatch
from storage.config import LogConfig
from storage.errors import StorageError
from storage.log import Log
from storage.log_loader import LogLoader
from storage.records import Compression, iter_records
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
LEADER = 1
ATTEMPTS_MAX = 6  # stands for delivery.timeout.ms: a batch failing this often fails for good
FAULTS = ("none", "none", "none", "lost request", "lost answer", "retriable", "fatal")
LATE_RECORDS = 3  # sent after the faults
LOOP = asyncio.new_event_loop()


def teardown_module() -> None:
    LOOP.close()


class Run:
    """One producer partition and its leader; `step_*` are the moves hypothesis interleaves."""

    def __init__(self, directory: Path, records: int) -> None:
        self.sequences = PartitionSequences(producer_id=7, max_in_flight=5)
        self.accumulator = RecordAccumulator(batch_size=100, linger_ms=0, gate=self._gate)
        self.directory = directory
        self.log: Log = LogLoader(directory, LogConfig(), 0).load()
        self.wiped: set[bytes] = set()  # records a wipe took with the log
        self.to_send = [b"%03d" % n + b"." * 61 for n in range(records)]  # one record fills a batch
        self.late = [b"%03d" % n + b"." * 61 for n in range(records, records + LATE_RECORDS)]
        self.in_transit: list[ProducerBatch] = []
        self.answers: list[tuple[ProducerBatch, ErrorCode]] = []
        self.acknowledged: list[bytes] = []
        self.splits = 0

    def _gate(self, batch: ProducerBatch) -> bool:
        self.sequences.maybe_start_new_epoch()
        return self.sequences.may_send(batch)

    @property
    def busy(self) -> bool:
        return bool(self.to_send or self.accumulator.has_unsent() or self.in_transit or self.answers)

    def step_append(self) -> None:
        value = self.to_send.pop(0)
        self.accumulator.append(TP, None, value, 0, None, LOOP.create_future(), 0)

    def step_drain(self) -> None:
        for batch in self.accumulator.drain({LEADER}, 0, lambda tp: LEADER).get(LEADER, []):
            self.sequences.sent(batch)
            batch.attempts += 1
            self.in_transit.append(batch)
        assert self.sequences.sending <= 5, self.sequences.sending
        assert len(self.sequences.window) <= 5 or self.splits, "only a split batch's parts go past five"

    def step_arrive(self, index: int, fault: str) -> None:
        """The request at `index` reaches the leader (any order: several HTTP connections)."""
        batch = self.in_transit.pop(index)
        if fault == "lost request":
            self.answers.append((batch, ErrorCode.NETWORK_EXCEPTION))
            return
        if fault in ("retriable", "fatal"):
            code = ErrorCode.NOT_ENOUGH_REPLICAS if fault == "retriable" else ErrorCode.MESSAGE_TOO_LARGE
            self.answers.append((batch, code))
            return
        try:
            self.log.append_as_leader(batch.encode(Compression.NONE), 0, 0)
            code = ErrorCode.NONE
        except StorageError as error:
            code = ErrorCode[error.error_name]
        self.answers.append((batch, ErrorCode.NETWORK_EXCEPTION if fault == "lost answer" else code))

    def step_wipe(self) -> None:
        """The leader loses its log and with it the producer's state: it takes the next batch with any
        sequence. (A state lost while the log keeps the producer's batches, Kafka's expiry after
        producer.id.expiration.ms of silence, cannot meet a retry: delivery.timeout.ms is far shorter.)"""
        self.wiped.update(self.log_values())
        self.log.close()
        shutil.rmtree(self.directory)
        self.log = LogLoader(self.directory, LogConfig(), 0).load()

    def step_answer(self, index: int) -> None:
        """The producer handles an answer (any order), as `Producer._handle_error` does."""
        batch, code = self.answers.pop(index)
        self.sequences.answered(batch, code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        if code is ErrorCode.NONE:
            self.sequences.acknowledged(batch)
            self.acknowledged.extend(batch.values)  # type: ignore[arg-type]
            return
        decision = after_error(batch, error_for(code), self.sequences, ATTEMPTS_MAX - 1, 1 << 62, 0)
        if decision is Retry.SPLIT:  # its parts go again
            parts = batch.split()
            self.splits += 1
            self.sequences.split(batch, parts)
            for part in reversed(parts):
                self.accumulator.reenqueue(part, 0)
        elif decision in (Retry.RETRY, Retry.RETRY_NOW):
            self.accumulator.reenqueue(batch, 0)
        else:
            self.sequences.failed(batch)
            self.accumulator.release(batch)

    def finish(self) -> None:
        """No more faults: everything queued must go through in bounded steps."""
        self.to_send += self.late
        for _ in range(1000):
            if not self.busy:
                return
            if self.to_send:
                self.step_append()
            self.step_drain()
            while self.in_transit:
                self.step_arrive(0, "none")
            while self.answers:
                self.step_answer(0)
        raise AssertionError(f"stuck: {len(self.sequences.window)} in the window, epoch {self.sequences.epoch}")

    def log_values(self) -> list[bytes]:
        data = self.log.read(0, 1 << 30).records
        return [record.value for _, records in iter_records(data) for record in records]  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(records=st.integers(1, 20), data=st.data())
def test_the_log_holds_each_record_at_most_once_in_send_order(records: int, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as directory:
        run = Run(Path(directory) / "t-0", records)
        try:
            for _ in range(data.draw(st.integers(0, 120), label="steps")):
                moves = [move for move, possible in (("append", run.to_send), ("drain", True),
                                                     ("arrive", run.in_transit), ("answer", run.answers),
                                                     ("wipe", data.draw(st.integers(0, 9)) == 0)) if possible]
                move = data.draw(st.sampled_from(moves))
                if move == "append":
                    run.step_append()
                elif move == "drain":
                    run.step_drain()
                elif move == "wipe":
                    run.step_wipe()
                elif move == "arrive":
                    index = data.draw(st.integers(0, len(run.in_transit) - 1))
                    run.step_arrive(index, data.draw(st.sampled_from(FAULTS)))
                else:
                    run.step_answer(data.draw(st.integers(0, len(run.answers) - 1)))
            run.finish()
            written = run.log_values()
        finally:
            run.log.close()
    assert len(written) == len(set(written)), f"a record twice: {written}"
    assert written == sorted(written), f"out of send order: {written}"
    assert set(run.acknowledged) - run.wiped <= set(written), "an acknowledged record is missing"
    assert set(run.late) <= set(run.acknowledged), "a record sent after the faults was not acknowledged"


def _numbered_batch(sequences: PartitionSequences, value: bytes) -> ProducerBatch:
    batch = ProducerBatch(TP, 0, 100)
    batch.append_many([value], None, 0, LOOP.create_future())
    sequences.sent(batch)
    return batch


def _acknowledged_behind(sequences: PartitionSequences) -> tuple[ProducerBatch, ProducerBatch]:
    """A is written, then B; B's answer arrives, A's is lost."""
    first = _numbered_batch(sequences, b"a")
    sequences.answered(first, out_of_order=False)
    sequences.acknowledged(first)  # the leader knows the producer: several in flight now
    a, b = _numbered_batch(sequences, b"b"), _numbered_batch(sequences, b"c")
    sequences.answered(b, out_of_order=False)
    sequences.acknowledged(b)
    sequences.answered(a, out_of_order=False)  # its answer was lost
    return a, b


def test_a_batch_behind_an_acknowledged_one_refused_as_out_of_order_is_never_numbered_again() -> None:
    """A's retry is refused as out of order: the leader's window of five moved past it (replication
    sim seed 774512936, where A was numbered anew under a new epoch and written twice) or the leader
    lost both (seed 40125). Either way A fails as most likely written: no new epoch, no renumbering,
    and the next batch follows B in the same epoch."""
    sequences = PartitionSequences(producer_id=7, max_in_flight=5)
    a, b = _acknowledged_behind(sequences)
    assert sequences.behind_acknowledged(a) and sequences.may_send(a)
    sequences.sent(a)
    sequences.answered(a, out_of_order=True)
    assert not sequences.new_epoch_needed
    sequences.failed(a)  # the producer fails it at once (Producer._handle_error)
    assert not sequences.maybe_start_new_epoch()
    assert (sequences.epoch, a.producer_epoch, a.sequence, list(sequences.window)) == (0, 0, 1, [])
    c = _numbered_batch(sequences, b"d")
    assert (c.producer_epoch, c.sequence) == (0, b.sequence_end)


def test_a_batch_behind_an_acknowledged_one_that_times_out_leaves_no_gap() -> None:
    """Kafka's maybeResolveSequences: A expires (delivery.timeout.ms) after B was acknowledged, so A was
    written: no new epoch is needed."""
    sequences = PartitionSequences(producer_id=7, max_in_flight=5)
    a, _ = _acknowledged_behind(sequences)
    sequences.failed(a)
    assert not sequences.new_epoch_needed and not sequences.window


def test_a_batch_overtaken_by_one_whose_answer_was_lost_fails_and_that_one_goes_again_with_its_sequence() -> None:
    """Replication sim seed 51987047: A is refused (not enough replicas), then a leader that lost the
    producer's state takes B with any sequence and B's answer is lost. A's retry is refused as out
    of order. A new epoch would number both anew and write A after B and B twice: A fails instead,
    and B, sent again as it was, is answered as the duplicate it is."""
    with tempfile.TemporaryDirectory() as directory:
        run = Run(Path(directory) / "t-0", records=3)
        try:
            run.step_append()
            run.step_drain()
            run.step_arrive(0, "none")
            run.step_answer(0)  # the leader knows the producer: several batches in flight now
            run.step_append()
            run.step_drain()
            run.step_append()
            run.step_drain()
            a, b = run.in_transit
            run.step_arrive(0, "retriable")
            run.step_wipe()
            run.step_arrive(0, "lost answer")
            run.step_answer(0)
            run.step_answer(0)
            run.step_drain()  # A again, refused: B may be in the log
            run.step_arrive(0, "none")
            run.step_answer(0)
            assert a not in run.sequences.window and run.sequences.epoch == 0
            run.finish()
            written = run.log_values()
        finally:
            run.log.close()
    assert [value[:3] for value in written] == [b"002", b"003", b"004", b"005"]  # 000 went with the wipe
    assert b.values[0] in run.acknowledged and a.values[0] not in run.acknowledged
