"""ReplicationChecker on hand-written observation streams: what it excuses, what it flags.

Goal: pin down the rules of checker.py one schedule at a time, independent of any simulator.
Method: three replicas of one partition, batches of made-up bytes, and the observations a broker
would produce (steps with edits and offsets, crashes with their cuts, wipes, consumer polls); each
test ends with the verdict, or with `finish()` and the figures.
"""

from __future__ import annotations

import pytest

from replication.group_coordinator import encode_key, encode_value
from storage.records import build_batch, build_batch_from_values
from tests.sim.replication.checker import InvariantViolation, ObservationError, ReplicationChecker
from tests.sim.replication.committed_batch import CommittedBatch, Fate
from tests.sim.replication.group_rule import GroupOffsetsRule
from tests.sim.replication.observations import (
    TAIL,
    AppendedBatches,
    Batch,
    BrokerCrashed,
    BrokerWiped,
    ConsumerPolled,
    DeletedBelow,
    EmptiedAt,
    FetchServed,
    GroupCommitAcked,
    GroupOffsetsFetched,
    LogEdit,
    LogOffsets,
    ProduceAnswered,
    ReadReason,
    ReplicaLogRead,
    ReplicaStepped,
    TruncatedTo,
    idempotent_value,
)
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

TP = TopicPartition("orders", 0)
ACKS_ALL = -1


def batch(base_offset: int, tag: bytes, epoch: int = 0, count: int = 1) -> Batch:
    return Batch(base_offset, base_offset + count, epoch, bytes(TAIL) + tag * 8)


class Cluster:
    """Three replicas as the checker sees them: logs opened empty, then driven step by step."""

    def __init__(self) -> None:
        self.checker = ReplicationChecker([TP])
        self.now_ms = 0
        self.ends = {1: 0, 2: 0, 3: 0}
        self.starts = {1: 0, 2: 0, 3: 0}
        self.incarnations = {1: 1, 2: 1, 3: 1}
        for broker_id in (1, 2, 3):
            self.open(broker_id, ())

    def open(self, broker_id: int, batches: tuple[Batch, ...], high_watermark: int = 0) -> None:
        end = batches[-1].next_offset if batches else self.ends[broker_id]
        self.ends[broker_id] = end
        self.checker.observe(ReplicaLogRead(self.now_ms, broker_id, self.incarnations[broker_id], TP, ReadReason.OPENED,
                                            LogOffsets(self.starts[broker_id], high_watermark, end), batches))

    def step(self, broker_id: int, *edits: LogEdit, high_watermark: int, leader: bool = False, epoch: int = 0,
             answers: tuple[ProduceAnswered, ...] = (), served: tuple[FetchServed, ...] = ()) -> None:
        self.now_ms += 10
        for edit in edits:
            if isinstance(edit, AppendedBatches):
                self.ends[broker_id] = edit.batches[-1].next_offset
            elif isinstance(edit, TruncatedTo):
                self.ends[broker_id] = edit.end_offset
            elif isinstance(edit, DeletedBelow):
                self.starts[broker_id] = edit.log_start_offset
            elif isinstance(edit, EmptiedAt):
                self.starts[broker_id] = self.ends[broker_id] = edit.start_offset
        offsets = LogOffsets(self.starts[broker_id], high_watermark, self.ends[broker_id])
        self.checker.observe(ReplicaStepped(self.now_ms, broker_id, self.incarnations[broker_id], TP, leader, epoch,
                                            edits, offsets, answers, served))

    def crash(self, broker_id: int, cut_from: int | None, restart_with: tuple[Batch, ...]) -> None:
        """Crash (cutting the log from `cut_from`, None: nothing cut), restart with `restart_with`."""
        self.now_ms += 10
        cuts = () if cut_from is None else ((TP, cut_from),)
        self.checker.observe(BrokerCrashed(self.now_ms, broker_id, cuts))
        if cut_from is not None:
            self.ends[broker_id] = cut_from
        self.incarnations[broker_id] += 1
        self.open(broker_id, restart_with)

    def replicate_acked(self, record: Batch, isr_size: int = 3) -> None:
        """Broker 1 leads: it appends `record`, both followers fetch it, the HW passes it and the
        leader acknowledges it (acks=all)."""
        self.step(1, AppendedBatches((record,)), high_watermark=record.base_offset, leader=True)
        self.step(2, AppendedBatches((record,)), high_watermark=record.base_offset)
        self.step(3, AppendedBatches((record,)), high_watermark=record.base_offset)
        ack = ProduceAnswered(record.tail, ACKS_ALL, ErrorCode.NONE, record.base_offset, isr_size, 2)
        self.step(1, high_watermark=record.next_offset, leader=True, answers=(ack,))


def test_acked_record_every_holder_crashed_with_is_excused_by_kind() -> None:
    """Every replica that held the record at the ack lost it in a crash: no system keeps it."""
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    for broker_id in (1, 2, 3):
        cluster.crash(broker_id, 0, ())
    figures = cluster.checker.finish()
    assert figures.excused == {"every holder crashed with it unflushed": 1}


def test_acked_record_truncated_by_the_protocol_on_one_holder_is_a_violation() -> None:
    """The last replica standing (KIP-966): two holders crash with the record unflushed, a new
    leader without it makes the third truncate it. The old checker excused this (every ISR member
    at the time of the loss had lost it); a holder's protocol truncation is no excuse."""
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    cluster.crash(1, 0, ())
    cluster.crash(3, 0, ())
    cluster.step(2, TruncatedTo(0), high_watermark=0)
    with pytest.raises(InvariantViolation, match=r"acks=all batch \[0, 1\).*broker 2 truncated by the protocol"):
        cluster.checker.finish()


def test_a_holders_last_loss_counts_not_its_first() -> None:
    """A holder that lost the record in a crash, fetched it again and then truncated it by the
    protocol lost it to the protocol."""
    cluster = Cluster()
    record = batch(0, b"a")
    cluster.replicate_acked(record)
    cluster.crash(2, 0, ())
    cluster.step(2, AppendedBatches((record,)), high_watermark=1)
    cluster.crash(1, 0, ())
    cluster.crash(3, 0, ())
    cluster.step(2, TruncatedTo(0), high_watermark=0)
    with pytest.raises(InvariantViolation, match="broker 2 truncated by the protocol"):
        cluster.checker.finish()


def test_a_copy_fetched_after_every_holder_lost_it_keeps_the_record() -> None:
    """A fetch answer still on the wire brings the record back: it is not lost."""
    cluster = Cluster()
    record = batch(0, b"a")
    cluster.replicate_acked(record)
    for broker_id in (1, 2, 3):
        cluster.crash(broker_id, 0, ())
    cluster.step(2, AppendedBatches((record,)), high_watermark=1)
    assert cluster.checker.finish().excused == {}


def test_wiped_holders_excuse_the_loss_as_wiped() -> None:
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    for broker_id in (1, 2, 3):
        cluster.checker.observe(BrokerWiped(cluster.now_ms, broker_id))
        cluster.ends[broker_id] = 0
        cluster.incarnations[broker_id] += 1
        cluster.open(broker_id, ())
    assert cluster.checker.finish().excused == {"every holder's disk was wiped": 1}


def test_an_uncommitted_batch_may_be_overwritten() -> None:
    """An acks=1 write the leader lost before anyone had it below an HW: truncation by leader epoch
    overwrites it (Kafka's contract)."""
    cluster = Cluster()
    cluster.step(1, AppendedBatches((batch(0, b"a"),)), high_watermark=0, leader=True)
    cluster.step(1, TruncatedTo(0), high_watermark=0)
    cluster.step(2, AppendedBatches((batch(0, b"b", epoch=1),)), high_watermark=1, leader=True, epoch=1)
    assert cluster.checker.finish().offsets_reused == 0


def test_a_committed_batch_overwritten_while_a_copy_lives_is_a_violation() -> None:
    """Broker 3 still holds the committed batch when broker 2 commits another at its offset."""
    cluster = Cluster()
    committed = batch(0, b"a")
    cluster.step(1, AppendedBatches((committed,)), high_watermark=0, leader=True)
    cluster.step(3, AppendedBatches((committed,)), high_watermark=1)
    cluster.crash(1, 0, ())
    cluster.step(2, AppendedBatches((batch(0, b"b", epoch=1),)), high_watermark=1, leader=True, epoch=1)
    with pytest.raises(InvariantViolation, match="replaced at its offset and still exists on \\[3\\]"):
        cluster.checker.finish()


def test_a_committed_batch_overwritten_then_truncated_on_its_last_holder_is_a_violation() -> None:
    """Another batch is committed over it while broker 3 still holds it; broker 3 then truncates it
    by the protocol: the loss is judged at the end and says what happened."""
    cluster = Cluster()
    committed = batch(0, b"a")
    cluster.step(1, AppendedBatches((committed,)), high_watermark=0, leader=True)
    cluster.step(3, AppendedBatches((committed,)), high_watermark=1)
    cluster.crash(1, 0, ())
    cluster.step(2, AppendedBatches((batch(0, b"b", epoch=1),)), high_watermark=1, leader=True, epoch=1)
    cluster.step(3, TruncatedTo(0), high_watermark=0)
    with pytest.raises(InvariantViolation, match=r"broker 3 truncated by the protocol.*committed over it while"):
        cluster.checker.finish()


def test_a_batch_committed_again_over_its_replacement_is_judged_as_first_acknowledged() -> None:
    """A stale HW on broker 2 commits the acknowledged batch again over the one a new leader
    committed; broker 2 then truncates it. The loss is the acknowledged record's, with the holders
    it had at the ack."""
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    cluster.crash(3, 0, ())
    cluster.crash(1, 0, ())
    cluster.step(3, AppendedBatches((batch(0, b"b", epoch=1),)), high_watermark=1, leader=True, epoch=1)
    cluster.step(2, high_watermark=1)
    assert (cluster.checker.figures.committed, cluster.checker.figures.displaced) == (2, 2)
    cluster.step(2, TruncatedTo(0), high_watermark=0)
    with pytest.raises(InvariantViolation, match=r"acks=all batch \[0, 1\).*held then by \[1, 2, 3\]"):
        cluster.checker.finish()


def test_offsets_are_reused_after_an_excused_loss() -> None:
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    for broker_id in (1, 2, 3):
        cluster.crash(broker_id, 0, ())
    cluster.step(2, AppendedBatches((batch(0, b"b", epoch=1),)), high_watermark=1, leader=True, epoch=1)
    figures = cluster.checker.finish()
    assert (figures.offsets_reused, figures.excused["every holder crashed with it unflushed"]) == (1, 1)


def test_deleted_offsets_are_reused_only_after_every_holder_crashed_below_them() -> None:
    """DeleteRecords passed the batch on every replica; a crash then cuts one replica's log below it
    (its logStartOffset checkpoint was older) and that replica, re-elected, writes at offset 0
    while the others still know offset 0 was used."""
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    for broker_id in (1, 2, 3):
        cluster.step(broker_id, DeletedBelow(1), high_watermark=1, leader=broker_id == 1)
    cluster.starts[1] = 0
    cluster.crash(1, 0, ())
    with pytest.raises(InvariantViolation, match="deleted by logStartOffset"):
        cluster.step(1, AppendedBatches((batch(0, b"b", epoch=1),)), high_watermark=1, leader=True, epoch=1)


def test_a_follower_emptied_at_the_leaders_log_start_deleted_what_lay_below_it() -> None:
    """A follower behind the leader's logStartOffset empties its log and starts at it: the batches
    it drops were deleted by that logStartOffset, not truncated by the protocol, so once every disk
    that knew the offsets were used is wiped, reusing them is excused (replication seed 63370329
    was failed for it: broker 1 emptied at the leader's start 46, then every disk was wiped)."""
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    cluster.step(1, DeletedBelow(1), high_watermark=1, leader=True)
    cluster.step(2, EmptiedAt(1), high_watermark=1)
    cluster.step(3, DeletedBelow(1), high_watermark=1)
    for broker_id in (1, 2, 3):
        cluster.checker.observe(BrokerWiped(cluster.now_ms, broker_id))
        cluster.starts[broker_id] = cluster.ends[broker_id] = 0
        cluster.incarnations[broker_id] += 1
        cluster.open(broker_id, ())
    cluster.step(2, AppendedBatches((batch(0, b"b", epoch=1),)), high_watermark=1, leader=True, epoch=1)
    assert cluster.checker.finish().excused == {"every holder's disk was wiped": 1}


def test_a_produce_answered_nothing_appended_must_append_nothing() -> None:
    cluster = Cluster()
    record = batch(0, b"a")
    refused = ProduceAnswered(record.tail, ACKS_ALL, ErrorCode.NOT_ENOUGH_REPLICAS, -1, 1, 2)
    with pytest.raises(InvariantViolation, match="NOT_ENOUGH_REPLICAS"):
        cluster.step(1, AppendedBatches((record,)), high_watermark=0, leader=True, answers=(refused,))


def test_nothing_above_the_high_watermark_is_served() -> None:
    cluster = Cluster()
    record = batch(0, b"a")
    served = FetchServed(101, ErrorCode.NONE, 0, (record,))
    with pytest.raises(InvariantViolation, match="at or above its HW 0"):
        cluster.step(1, AppendedBatches((record,)), high_watermark=0, leader=True, served=(served,))


def test_the_high_watermark_served_to_a_consumer_never_falls() -> None:
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    cluster.step(2, high_watermark=1, served=(FetchServed(101, ErrorCode.NONE, 1, ()),))
    with pytest.raises(InvariantViolation, match="went backwards"):
        cluster.step(2, high_watermark=1, served=(FetchServed(101, ErrorCode.NONE, 0, ()),))


def test_a_consumer_answer_that_skips_records_is_a_violation() -> None:
    cluster = Cluster()
    skipped = ConsumerPolled(cluster.now_ms, 101, TP, 1, 0, ErrorCode.NONE, 0, (batch(1, b"b"),), 0, 2)
    with pytest.raises(InvariantViolation, match="skips records"):
        cluster.checker.observe(skipped)


def test_a_consumer_jumps_only_up_to_the_log_start_offset() -> None:
    """Out of range below the logStartOffset: the records there were deleted, the consumer moves up
    to it. Out of range above it (the log end is behind): the consumer must not move."""
    cluster = Cluster()
    cluster.checker.observe(ConsumerPolled(0, 101, TP, 1, 0, ErrorCode.OFFSET_OUT_OF_RANGE, 5, (), 0, 5))
    with pytest.raises(InvariantViolation, match="position moved 5 -> 9, expected 5"):
        cluster.checker.observe(ConsumerPolled(0, 101, TP, 1, 5, ErrorCode.OFFSET_OUT_OF_RANGE, 3, (), 5, 9))


def test_a_restart_must_open_what_the_crash_left() -> None:
    """The crash says it cut nothing; the log opens shorter: the crash model and recovery disagree."""
    cluster = Cluster()
    cluster.replicate_acked(batch(0, b"a"))
    cluster.ends[1] = 0
    with pytest.raises(ObservationError, match="the log is \\[0, 0\\)"):
        cluster.crash(1, None, ())


def commit_entry(base_offset: int, commit_id: int, offset: int) -> CommittedBatch:
    """A committed `__consumer_offsets` batch holding commit `commit_id` of orders-0 at `offset`."""
    data = bytearray(build_batch([(encode_key("g", "orders", 0), encode_value(offset, str(commit_id), 0))]))
    data[0:8] = base_offset.to_bytes(8, "big")
    batch = Batch(base_offset, base_offset + 1, 0, bytes(data))
    return CommittedBatch(batch, 0, 1, frozenset({1}), {1})


def test_group_offsets_answered_before_an_acknowledged_commit_fail_unless_its_batch_was_lost() -> None:
    orders = TopicPartition("orders", 0)
    rule = GroupOffsetsRule()
    first, second = commit_entry(0, 1, 5), commit_entry(1, 2, 9)
    rule.committed(first)
    rule.committed(second)
    assert rule.commit_acked(GroupCommitAcked(10, 1, ((orders, 5),))) is None
    assert rule.commit_acked(GroupCommitAcked(20, 2, ((orders, 9),))) is None
    assert rule.fetched(GroupOffsetsFetched(30, 15, ((orders, 5, "1"),))) is None, "sent before commit 2's ack"
    assert rule.finish() is None
    assert rule.fetched(GroupOffsetsFetched(40, 25, ((orders, 5, "1"),))) is None
    problem = rule.finish()
    assert problem is not None and "went backwards" in problem and "commit 2" in problem
    second.fate = Fate.LOST
    assert rule.finish() is None and rule.lost_commits == 1, "commit 2's batch was lost, and excused"
    assert "no committed batch" in (rule.fetched(GroupOffsetsFetched(50, 45, ((orders, 7, "99"),))) or "")


def idempotent_batch(base_offset: int, epoch: int, sequence: int, numbers: range) -> Batch:
    """The idempotent producer's batch of records `numbers` (rule 11 reads them from the values)."""
    data = build_batch_from_values([idempotent_value(0, number) for number in numbers], timestamp_ms=0,
                                   producer_id=7, producer_epoch=epoch, base_sequence=sequence)
    return Batch(base_offset, base_offset + len(numbers), 0, data)


def test_an_idempotent_producers_records_resequenced_under_a_new_epoch_follow_in_order() -> None:
    """KIP-360: records 2-3, refused as out of order after a lost batch, go again as epoch 1 from
    sequence 0; committed after records 0-1 they are in the order the producer took them."""
    cluster = Cluster()
    cluster.replicate_acked(idempotent_batch(0, 0, 0, range(0, 2)))
    cluster.replicate_acked(idempotent_batch(2, 1, 0, range(2, 4)))
    assert cluster.checker.finish().idempotent_committed == 2


def test_an_idempotent_producers_record_committed_again_under_a_new_epoch_is_a_violation() -> None:
    """Rule 9 cannot see it (another epoch, other bytes): the same records written twice."""
    cluster = Cluster()
    cluster.replicate_acked(idempotent_batch(0, 0, 0, range(0, 2)))
    with pytest.raises(InvariantViolation, match=r"records 0\.\.1 \(epoch 1\) are committed at 2, after its "
                                                 r"records up to 1 at 0: out of order or twice"):
        cluster.replicate_acked(idempotent_batch(2, 1, 0, range(0, 2)))


def test_an_idempotent_producers_records_committed_out_of_order_are_a_violation() -> None:
    cluster = Cluster()
    cluster.replicate_acked(idempotent_batch(0, 0, 0, range(2, 3)))
    with pytest.raises(InvariantViolation, match="out of order or twice"):
        cluster.replicate_acked(idempotent_batch(1, 0, 1, range(0, 2)))


def test_an_idempotent_producers_records_lost_by_every_holder_may_be_written_again() -> None:
    """Every holder crashed with records 0-1 unflushed (answer lost: the producer retries them):
    written again later, they are no duplicate of a copy nobody holds."""
    cluster = Cluster()
    first = idempotent_batch(0, 0, 0, range(0, 2))
    cluster.step(1, AppendedBatches((first,)), high_watermark=0, leader=True)
    cluster.step(2, AppendedBatches((first,)), high_watermark=0)
    cluster.step(1, high_watermark=2, leader=True)
    for broker_id in (1, 2, 3):
        cluster.crash(broker_id, 0 if broker_id != 3 else None, ())
    cluster.replicate_acked(idempotent_batch(0, 1, 0, range(0, 2)))
    assert cluster.checker.finish().idempotent_committed == 2


def test_an_idempotent_producers_records_deleted_everywhere_then_written_again_are_counted() -> None:
    """logStartOffset deleted records 0-1 on every replica; a leader that never had them took the
    producer's retry as new: counted (rule 11), not a violation."""
    cluster = Cluster()
    cluster.replicate_acked(idempotent_batch(0, 0, 0, range(0, 2)))
    cluster.step(1, DeletedBelow(2), high_watermark=2, leader=True)
    for broker_id in (2, 3):
        cluster.step(broker_id, DeletedBelow(2), high_watermark=2)
    cluster.replicate_acked(idempotent_batch(2, 0, 0, range(0, 2)))
    assert cluster.checker.finish().idempotent_rewritten_after_deletion == 1
