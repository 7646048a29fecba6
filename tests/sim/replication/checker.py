"""ReplicationChecker: DESIGN §6 invariants 1, 2, 3, 4, 6, 8, 9, 10 and 11, judged from observations only.

It reads the stream of `observations.py` and nothing else, so it does not care what drives the
brokers. From that stream it keeps a `LogImage` of every replica (down ones too: a crash cuts the
image where the fault log says, and the next incarnation must open exactly what is left) and, per
partition, the history of committed batches (`CommittedBatch`). After every observation:

(6) A replica's batches are contiguous, with leader epochs that never fall.
(4) One leader per (partition, leader epoch). Retention runs only on leaders: a follower's
    logStartOffset never passes the highest a leader had.
(2) Replicas agree below the HW: whenever a replica's HW passes one of its batches, that batch is
    the committed batch at its offset, or it is committed now. A different committed batch there
    is displaced, which only an excused loss of the earlier one allows (rule 8 below).
(1) An acks=all batch acknowledged while the leader's committed ISR had at least
    min.insync.replicas members is never lost, unless every replica that held it at the moment of
    the ack (its "holders": the images holding those exact bytes at that offset, up or down) lost
    it to a recorded fault: a crash that cut it (unflushed, torn or damaged bytes, as the
    `BrokerCrashed` cuts say) or a wiped disk. It is judged once no replica holds it, when another
    batch is committed over it or at the end of the run (until then a fetch answer on the wire may
    bring it back), from each holder's *last* loss (one that fetched it again and then lost it
    counts by that later loss); a holder that lost it to a protocol truncation is no excuse. It is
    decided from the fault log and the replicas' logs, never from the ISR at the time of the loss.
    Excused batches are counted by kind ("every holder crashed with it unflushed", ...).
    (An ack with the committed ISR below min.insync.replicas gets no promise from rule 1; it is
    counted, and rule 8 holds it all the same, since the ack moved the HW past it.)
(8) No offset maps to two different records over the run, with one exception, stated exactly:
    the batch at an offset may be replaced by another only if the earlier one was never committed
    (never below any replica's HW, never acknowledged with acks=all: an acks=1 or unacknowledged
    write the leader lost before its followers had it, which Kafka's truncation by leader epoch
    overwrites) or its loss is excused as in rule 1 (every replica that held it when it was
    committed lost it to a recorded fault). Why the second: once every copy is destroyed by a fault
    the offsets are free and a new leader reuses them; no replication protocol can prevent it
    (Kafka's contract with unflushed data), and forbidding it would only forbid the fault. So a
    committed batch at an offset is never overwritten while some replica still holds it, unless
    that copy, too, is later lost to a fault; every other replacement is a violation, found when
    the later batch is committed over an earlier one no replica holds, or at the end. A deleted
    batch (below logStartOffset) counts as held by a replica until a fault cuts that replica's log
    below it: a replica that still knows the offset was used must not see it reused. Reuses after
    excused losses are counted.
(9) An idempotent producer's batch (its producer id, epoch and first sequence) is committed at one
    offset only: a retry the leader answers from its producer state is never written again, on
    any leader, while some replica still holds the first copy (once none does, that copy's loss is
    judged by rules 1 and 8, and the producer's retry is what restores the record).
(11) An idempotent producer's records on a partition (numbered in the order it took them:
    `observations.idempotent_value`) are committed in that order, each at most once, across its
    epochs too: in offset order, a committed batch's records all come after those of the producer's
    committed batch before it and before those of the one after it. Within an epoch the leader's
    sequence check gives this; across a new epoch (KIP-360) it holds because the client numbers
    anew only batches the leader refused as out of order (neither they nor any later batch were
    written) and never sends again a batch it gave up, whose records may then be missing, never
    written after later ones. Judged, as rule 9, while a replica holds the earlier batch (one no
    replica holds is lost: rules 1 and 8 judge it). One that logStartOffset deleted on every replica
    that held it is counted instead (`idempotent_rewritten_after_deletion`): a replica that knows
    nothing of the producer (every replica that held its batches was wiped) takes a retry of a
    deleted batch as new once it leads, as Kafka's brokers do (KIP-360: a producer with no state
    may start at any sequence). A follower that empties its log at the leader's logStartOffset
    starts with the leader's producers' state there (seed 659147698; in Kafka it starts with none).
(3) A consumer is served only batches below the serving replica's HW, and they are committed
    batches; the HW served to a consumer by one replica incarnation never falls (unless that
    replica truncated below it, which rules 1 and 8 judge).
(10) A consumer's position never goes backwards and never skips a record: each answer it takes
    starts with the batch holding its fetch offset, its batches are contiguous and the position
    moves to the end of the last one; an out-of-range answer moves it only up to the replica's
    logStartOffset (records deleted by the contract). Nothing is read that definitely failed: a
    produce answered with an error saying nothing was appended (`NOTHING_APPENDED`) appended
    nothing in that step, so its bytes reach no log below any HW. Committed group offsets never go
    backwards (`group_rule.py`): an offset fetch answers a commit written at or after the last one
    acknowledged before it was sent, unless that one's batch was lost and excused.
At the end (`finish`), every replica's log must equal its image, and no displaced batch may
still have a copy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tests.sim.replication.committed_batch import Ack, CommittedBatch, Fate, LossCause
from tests.sim.replication.group_rule import GroupOffsetsRule
from tests.sim.replication.log_image import LogImage
from tests.sim.replication.observations import (
    AppendedBatches,
    Batch,
    BatchRotted,
    BrokerCrashed,
    BrokerWiped,
    ConsumerPolled,
    DamageCut,
    DeletedBelow,
    EmptiedAt,
    FetchServed,
    GroupCommitAcked,
    GroupOffsetsFetched,
    Observation,
    ProduceAnswered,
    ReadReason,
    ReplicaLogRead,
    ReplicaStepped,
    TruncatedTo,
)
from tests.sim.replication.partition_history import PartitionHistory
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

ACKS_ALL = -1
# Produce errors that say nothing was appended (the request was refused before the append, or the
# append was taken back: KAFKA_STORAGE_ERROR, see README "what a failed disk write answers").
# NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT and a NOT_LEADER_OR_FOLLOWER after the append
# are indefinite (the records are in the leader's log) and so are not listed; nor is
# NOT_LEADER_OR_FOLLOWER at all, since its code alone does not say which of the two it was.
NOTHING_APPENDED = frozenset({
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.INVALID_REQUIRED_ACKS,
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.INVALID_RECORD,
    ErrorCode.MESSAGE_TOO_LARGE,
    ErrorCode.RECORD_LIST_TOO_LARGE,
    ErrorCode.KAFKA_STORAGE_ERROR,
})


class InvariantViolation(AssertionError):
    """A DESIGN §6 invariant does not hold."""


class ObservationError(AssertionError):
    """The observations contradict each other: a bug in whatever builds them, not in the brokers."""


@dataclass(slots=True)
class CheckerFigures:
    """What the checker counted over a run."""

    committed: int = 0
    idempotent_committed: int = 0
    idempotent_rewritten_after_deletion: int = 0  # rule 11 against a batch deleted on every replica
    acked_all: int = 0
    acked_below_min_isr: int = 0
    excused: Counter[str] = field(default_factory=Counter)  # acks=all batches, by kind of excuse
    excused_unacked: int = 0  # committed batches never acked with acks=all, lost and excused
    consumed_then_lost: int = 0  # excused batches a consumer had been served
    deleted: int = 0
    displaced: int = 0
    offsets_reused: int = 0
    truncations_below_high_watermark: int = 0
    checked_batches: int = 0
    consumed_batches: int = 0
    group_commits_acked: int = 0
    group_fetches_checked: int = 0
    group_regressions_excused: int = 0  # answered before an acknowledged commit whose batch was lost


class ReplicationChecker:
    def __init__(self, partitions: list[TopicPartition], offsets_partition: TopicPartition | None = None) -> None:
        """`offsets_partition`: the `__consumer_offsets` partition the group's commits go to."""
        self.histories = {topic_partition: PartitionHistory() for topic_partition in partitions}
        self.offsets_partition = offsets_partition
        self.group = GroupOffsetsRule()
        self.images: dict[tuple[int, TopicPartition], LogImage] = {}
        self.leaders: dict[tuple[TopicPartition, int], int] = {}
        self.positions: dict[tuple[int, TopicPartition], int] = {}
        self.figures = CheckerFigures()

    def fail(self, message: str) -> None:
        raise InvariantViolation(message)

    def observe(self, observation: Observation) -> None:
        if isinstance(observation, ReplicaStepped):
            self._stepped(observation)
        elif isinstance(observation, ReplicaLogRead):
            self._read(observation)
        elif isinstance(observation, BrokerCrashed):
            self._crashed(observation)
        elif isinstance(observation, BrokerWiped):
            self._wiped(observation)
        elif isinstance(observation, BatchRotted):
            self._rotted(observation)
        elif isinstance(observation, GroupCommitAcked):
            self.figures.group_commits_acked += 1
            problem = self.group.commit_acked(observation)
            if problem is not None:
                self.fail(problem)
        elif isinstance(observation, GroupOffsetsFetched):
            self.figures.group_fetches_checked += 1
            problem = self.group.fetched(observation)
            if problem is not None:
                self.fail(problem)
        else:
            self._polled(observation)

    # -- a replica's step ------------------------------------------------------------------------

    def _stepped(self, step: ReplicaStepped) -> None:
        topic_partition, broker_id = step.topic_partition, step.broker_id
        image = self.images.get((broker_id, topic_partition))
        if image is None or image.incarnation != step.incarnation:
            raise ObservationError(f"{topic_partition} on broker {broker_id} stepped in incarnation "
                                   f"{step.incarnation} before that incarnation opened its log")
        self._check_leadership(step, image)
        high_watermark_before = image.high_watermark
        appended_tails = self._edit(step, image)
        offsets = step.offsets
        if (image.log_start_offset, image.log_end_offset) != (offsets.log_start_offset, offsets.log_end_offset):
            raise ObservationError(f"{topic_partition} on broker {broker_id}: the edits leave "
                                   f"[{image.log_start_offset}, {image.log_end_offset}), the log is "
                                   f"[{offsets.log_start_offset}, {offsets.log_end_offset})")
        truncated = any(isinstance(edit, TruncatedTo | EmptiedAt | DamageCut) for edit in step.edits)
        if offsets.high_watermark < high_watermark_before and not truncated:
            self.fail(f"{topic_partition} HW fell on broker {broker_id} without a truncation: "
                      f"{high_watermark_before} -> {offsets.high_watermark}")
        image.high_watermark = offsets.high_watermark
        self._commit_below_high_watermark(topic_partition, broker_id, image, step.now_ms)
        for answer in step.produce_answers:
            self._produce_answered(step, image, answer, appended_tails)
        for served in step.fetches_served:
            self._served(step, image, served)

    def _check_leadership(self, step: ReplicaStepped, image: LogImage) -> None:
        """(4), and retention only on leaders."""
        topic_partition, broker_id = step.topic_partition, step.broker_id
        history = self.histories[topic_partition]
        if step.is_leader:
            owner = self.leaders.setdefault((topic_partition, step.leader_epoch), broker_id)
            if owner != broker_id:
                self.fail(f"{topic_partition} epoch {step.leader_epoch} has two leaders: {owner} and {broker_id}")
            history.max_leader_log_start = max(history.max_leader_log_start, step.offsets.log_start_offset)
        elif step.offsets.log_start_offset > max(history.max_leader_log_start, image.log_start_offset):
            self.fail(f"{topic_partition} replica {broker_id} has logStartOffset {step.offsets.log_start_offset} above "
                      f"any leader's ({history.max_leader_log_start}): it ran retention itself")

    def _edit(self, step: ReplicaStepped, image: LogImage) -> set[bytes]:
        """Apply the step's edits to the image, in order; return the tails of the batches appended."""
        topic_partition, broker_id, now_ms = step.topic_partition, step.broker_id, step.now_ms
        appended_tails: set[bytes] = set()
        for edit in step.edits:
            if isinstance(edit, AppendedBatches):
                for batch in edit.batches:
                    problem = image.append(batch)
                    if problem is not None:
                        self.fail(f"{topic_partition} replica {broker_id}: {problem}")
                    appended_tails.add(batch.tail)
                    self._gained(topic_partition, broker_id, batch)
            elif isinstance(edit, TruncatedTo):
                if edit.end_offset < image.high_watermark:
                    self.figures.truncations_below_high_watermark += 1
                self._lost(topic_partition, broker_id, image.cut_from(edit.end_offset), LossCause.TRUNCATED, now_ms)
            elif isinstance(edit, EmptiedAt):
                # A follower empties its log when the leader's logStartOffset is past its log end:
                # what lies below that start was deleted by the leader's logStartOffset, not truncated.
                removed = image.empty_at(edit.start_offset)
                below = [batch for batch in removed if batch.next_offset <= edit.start_offset]
                self._lost(topic_partition, broker_id, below, LossCause.DELETED, now_ms)
                self._lost(topic_partition, broker_id, removed[len(below):], LossCause.TRUNCATED, now_ms)
            elif isinstance(edit, DamageCut):
                if edit.end_offset not in image.rotted:
                    self.fail(f"{topic_partition} replica {broker_id} cut its log at {edit.end_offset} as damaged, "
                              f"but no fault damaged a batch there (rotted: {sorted(image.rotted)})")
                self._lost(topic_partition, broker_id, image.cut_from(edit.end_offset), LossCause.ROTTED, now_ms)
            else:
                assert isinstance(edit, DeletedBelow), edit
                self._lost(topic_partition, broker_id, image.delete_below(edit.log_start_offset), LossCause.DELETED,
                           now_ms)
        return appended_tails

    # -- commits and copies ----------------------------------------------------------------------

    def _commit_below_high_watermark(self, topic_partition: TopicPartition, broker_id: int, image: LogImage,
                                     now_ms: int) -> None:
        """(2): every batch of the replica the HW has passed since the last step is committed."""
        if image.high_watermark <= image.committed_to:
            return
        for batch in image.between(image.committed_to, image.high_watermark):
            # A rotted batch: the HW commits the record it was (its other copies hold it), not the
            # damaged bytes; unknown, nothing is claimed (reading the bytes halts the broker).
            original = image.rotted.get(batch.base_offset, batch)
            if original is not None:
                self._commit(topic_partition, broker_id, original, now_ms, image.log_start_offset)
        image.committed_to = min(image.high_watermark, image.log_end_offset)

    def _commit(self, topic_partition: TopicPartition, broker_id: int, batch: Batch, now_ms: int,
                log_start_offset: int) -> None:
        """`batch` lies below the replica's HW. A batch its logStartOffset falls inside of commits
        only its offsets from there on (the ones below are deleted: no consumer is served them as
        records, and a committed batch that lies wholly below is deleted there, not displaced)."""
        history = self.histories[topic_partition]
        self.figures.checked_batches += 1
        known = history.canonical.get(batch.base_offset)
        if known is not None and known.batch == batch:
            return
        for earlier in history.overlapping(batch):
            if earlier.batch.next_offset <= log_start_offset:
                history.remove_canonical(earlier)
                continue
            self._displace(topic_partition, history, earlier, batch)
        displaced = history.copies_of(batch)
        if displaced:
            # Committed before, then displaced while a copy remained, and now committed again over
            # its replacement (a replica's stale HW): the same record, judged by its first holders.
            displaced[0].fate = Fate.KEPT
            history.recanonicalize(displaced[0])
            return
        holders = frozenset(
            replica for (replica, partition), image in self.images.items()
            if partition == topic_partition and image.get(batch.base_offset) == batch
        )
        rotted = frozenset(
            replica for (replica, partition), image in self.images.items()
            if partition == topic_partition and image.rotted.get(batch.base_offset) == batch
        )
        assert broker_id in holders | rotted, f"{topic_partition}: broker {broker_id} commits a batch it does not hold"
        entry = CommittedBatch(batch, now_ms, broker_id, holders | rotted, set(holders))
        for replica in rotted:
            entry.lose(replica, LossCause.ROTTED, now_ms)
        self._commit_once(topic_partition, history, entry)
        history.add(entry)
        self.figures.committed += 1
        if topic_partition == self.offsets_partition:
            self.group.committed(entry)

    def _commit_once(self, topic_partition: TopicPartition, history: PartitionHistory, entry: CommittedBatch) -> None:
        """(9): an idempotent producer's batch is committed at one offset only, while it is kept; (11): its
        records in the order it took them."""
        producer = entry.batch.producer
        if producer is None:
            return
        first = history.idempotent.get(producer)
        # A first copy that no replica holds any more is lost (rules 1 and 8 judge that loss): the
        # producer's retry writing it again is the producer doing its job, not a duplicate.
        if first is not None and first.fate is Fate.KEPT and first.copies \
                and first.batch.base_offset != entry.batch.base_offset:
            self.fail(f"{topic_partition}: the idempotent batch (producer, epoch, sequence) {producer} is committed "
                      f"at {entry.batch.base_offset} and still at {first.batch.base_offset}: written twice")
        history.idempotent[producer] = entry
        self.figures.idempotent_committed += 1
        first_record, last_record = entry.batch.record_numbers()
        before, after = history.neighbours(producer[0], entry)
        if before is not None and before.batch.record_numbers()[1] >= first_record:
            self._records_out_of_order(topic_partition, entry, before, f"after its records up to "
                                       f"{before.batch.record_numbers()[1]} at {before.batch.base_offset}")
        if after is not None and after.batch.record_numbers()[0] <= last_record:
            self._records_out_of_order(topic_partition, entry, after, f"before its records from "
                                       f"{after.batch.record_numbers()[0]} at {after.batch.base_offset}")

    def _records_out_of_order(self, topic_partition: TopicPartition, entry: CommittedBatch, other: CommittedBatch,
                              where: str) -> None:
        """(11) broken against `other`: a violation while a replica holds `other`; counted if it was
        deleted on every replica that held it (see rule 11)."""
        if not other.copies:
            self.figures.idempotent_rewritten_after_deletion += 1
            return
        producer_id, epoch, _ = entry.batch.producer or (0, 0, 0)
        first_record, last_record = entry.batch.record_numbers()
        self.fail(f"{topic_partition}: producer {producer_id}'s records {first_record}..{last_record} (epoch {epoch}) "
                  f"are committed at {entry.batch.base_offset}, {where}: out of order or twice")

    def _displace(self, topic_partition: TopicPartition, history: PartitionHistory, earlier: CommittedBatch,
                  batch: Batch) -> None:
        """(8): `batch` is committed over `earlier`. With no copy of `earlier` left its loss is judged
        now; with copies it is judged when they go (at the latest, at the end)."""
        history.remove_canonical(earlier)
        self.figures.displaced += 1
        if earlier.copies:
            earlier.fate = Fate.DISPLACED
            return
        history.untrack(earlier)
        kind = earlier.excuse()
        if kind is None:
            self.fail(f"{topic_partition}: {earlier.describe_loss()}; batch [{batch.base_offset}, "
                      f"{batch.next_offset}) epoch {batch.leader_epoch} was committed over it")
        earlier.fate = Fate.LOST
        self._count_excuse(earlier, kind)
        self.figures.offsets_reused += 1

    def _gained(self, topic_partition: TopicPartition, broker_id: int, batch: Batch) -> None:
        for entry in self.histories[topic_partition].copies_of(batch):
            entry.regain(broker_id)

    def _lost(self, topic_partition: TopicPartition, broker_id: int, batches: list[Batch], cause: LossCause,
              now_ms: int) -> None:
        history = self.histories[topic_partition]
        for batch in batches:
            for entry in history.copies_of(batch):
                if broker_id in entry.copies:
                    entry.lose(broker_id, cause, now_ms)

    def _cut_after_deletion(self, topic_partition: TopicPartition, broker_id: int, offset: int, cause: LossCause,
                            now_ms: int) -> None:
        """A fault cut the broker's log from `offset`: that holds for batches it had deleted, too."""
        for entries in self.histories[topic_partition].tracked.values():
            for entry in entries:
                if entry.batch.next_offset > offset:
                    entry.cut_after_deletion(broker_id, cause, now_ms)

    def _count_excuse(self, entry: CommittedBatch, kind: str) -> None:
        if entry.ack is not None:
            self.figures.excused[kind] += 1
        else:
            self.figures.excused_unacked += 1
        if entry.consumed:
            self.figures.consumed_then_lost += 1

    # -- answers ---------------------------------------------------------------------------------

    def _produce_answered(self, step: ReplicaStepped, image: LogImage, answer: ProduceAnswered,
                          appended_tails: set[bytes]) -> None:
        topic_partition = step.topic_partition
        if answer.error in NOTHING_APPENDED and answer.tail in appended_tails:
            self.fail(f"{topic_partition}: broker {step.broker_id} answered a produce {answer.error.name} (nothing "
                      f"appended) but appended its batch")
        if answer.error != ErrorCode.NONE or answer.acks != ACKS_ALL:
            return
        if answer.base_offset < image.log_start_offset:
            # An idempotent producer's retry answered from the producer state with the offsets of its
            # first write, which retention or DeleteRecords has deleted since (Kafka answers the same).
            deleted = self.histories[topic_partition].canonical.get(answer.base_offset)
            if deleted is None or deleted.batch.tail != answer.tail or deleted.fate is not Fate.KEPT:
                self.fail(f"{topic_partition}: acks=all success at {answer.base_offset}, below broker "
                          f"{step.broker_id}'s logStartOffset {image.log_start_offset}, is not the batch committed "
                          "there")
            return
        batch = image.rotted.get(answer.base_offset) or image.get(answer.base_offset)
        if batch is None or batch.tail != answer.tail:
            self.fail(f"{topic_partition}: acks=all success at {answer.base_offset} on broker {step.broker_id} is not "
                      f"the batch its log holds there")
        assert batch is not None
        entry = self.histories[topic_partition].canonical.get(answer.base_offset)
        if entry is None or entry.batch != batch or entry.fate is not Fate.KEPT:
            self.fail(f"{topic_partition}: acks=all success at {answer.base_offset} on broker {step.broker_id} "
                      f"before its HW ({image.high_watermark}) passed it")
        assert entry is not None
        entry.ack = Ack(step.now_ms, step.broker_id, answer.isr_size, answer.min_insync_replicas)
        entry.holders = frozenset(entry.copies)
        self.figures.acked_all += 1
        if answer.isr_size < answer.min_insync_replicas:
            self.figures.acked_below_min_isr += 1

    def _served(self, step: ReplicaStepped, image: LogImage, served: FetchServed) -> None:
        """(3)."""
        if served.error != ErrorCode.NONE:
            return
        topic_partition, broker_id = step.topic_partition, step.broker_id
        floor = image.served_high_watermarks.get(served.consumer_id, -1)
        if served.high_watermark < floor:
            self.fail(f"{topic_partition}: broker {broker_id} served consumer {served.consumer_id} HW "
                      f"{served.high_watermark} after {floor}: the HW it sees went backwards")
        image.served_high_watermarks[served.consumer_id] = served.high_watermark
        history = self.histories[topic_partition]
        for batch in served.batches:
            if batch.next_offset > served.high_watermark:
                self.fail(f"{topic_partition}: broker {broker_id} served offset {batch.next_offset - 1} to a "
                          f"consumer at or above its HW {served.high_watermark}")
            entries = history.copies_of(batch)
            if not entries:
                self.fail(f"{topic_partition}: broker {broker_id} served a consumer batch [{batch.base_offset}, "
                          f"{batch.next_offset}), which is not committed")
            for entry in entries:
                entry.consumed = True
            self.figures.consumed_batches += 1

    def _polled(self, poll: ConsumerPolled) -> None:
        """(10): the consumer's position."""
        key = (poll.consumer_id, poll.topic_partition)
        where = f"{poll.topic_partition}: consumer {poll.consumer_id} (answer of broker {poll.broker_id} for offset " \
                f"{poll.fetch_offset})"
        position = self.positions.get(key, poll.position_before)
        if poll.position_before != position:
            raise ObservationError(f"{where}: position {poll.position_before} before, {position} after the last poll")
        expected = position
        if poll.error == ErrorCode.OFFSET_OUT_OF_RANGE and position < poll.log_start_offset:
            expected = poll.log_start_offset
        elif poll.error == ErrorCode.NONE and poll.batches:
            first = poll.batches[0]
            if not first.base_offset <= poll.fetch_offset < first.next_offset:
                self.fail(f"{where}: the answer starts at [{first.base_offset}, {first.next_offset}): it skips records")
            for earlier, later in zip(poll.batches, poll.batches[1:], strict=False):
                if later.base_offset != earlier.next_offset:
                    self.fail(f"{where}: batch at {later.base_offset} follows one ending at {earlier.next_offset}")
            expected = max(position, poll.batches[-1].next_offset)
        if poll.position_after != expected:
            self.fail(f"{where}: position moved {position} -> {poll.position_after}, expected {expected}")
        self.positions[key] = poll.position_after

    # -- faults ----------------------------------------------------------------------------------

    def _crashed(self, crash: BrokerCrashed) -> None:
        for topic_partition, offset in crash.cuts:
            image = self.images.get((crash.broker_id, topic_partition))
            if image is None:
                raise ObservationError(f"broker {crash.broker_id}'s crash cut {topic_partition}, never opened")
            self._lost(topic_partition, crash.broker_id, image.cut_from(offset), LossCause.CRASHED, crash.now_ms)
            self._cut_after_deletion(topic_partition, crash.broker_id, offset, LossCause.CRASHED, crash.now_ms)

    def _rotted(self, rot: BatchRotted) -> None:
        """The replica's copy of the batch is gone (its bytes are not the record's any more); a read
        of it must cut the log there (`DamageCut`), and recovery may (`_reopened`)."""
        image = self.images.get((rot.broker_id, rot.topic_partition))
        if image is None or image.get(rot.batch.base_offset) is None:
            raise ObservationError(f"broker {rot.broker_id}'s {rot.topic_partition} rotted at "
                                   f"{rot.batch.base_offset}, which its log does not hold")
        held = image.rot(rot.batch)
        self._lost(rot.topic_partition, rot.broker_id, [held], LossCause.ROTTED, rot.now_ms)

    def _wiped(self, wipe: BrokerWiped) -> None:
        for broker_id, topic_partition in [key for key in self.images if key[0] == wipe.broker_id]:
            image = self.images.pop((broker_id, topic_partition))
            self._lost(topic_partition, broker_id, image.all_batches(), LossCause.WIPED, wipe.now_ms)
            self._cut_after_deletion(topic_partition, broker_id, 0, LossCause.WIPED, wipe.now_ms)

    # -- whole logs ------------------------------------------------------------------------------

    def _read(self, read: ReplicaLogRead) -> None:
        key = (read.broker_id, read.topic_partition)
        image = self.images.get(key)
        if image is None:
            image = self.images[key] = LogImage(read.offsets.log_start_offset)
            for batch in read.batches:
                problem = image.append(batch)
                if problem is not None:
                    raise ObservationError(f"{read.topic_partition} on broker {read.broker_id}: {problem}")
                self._gained(read.topic_partition, read.broker_id, batch)
        elif read.reason is ReadReason.OPENED:
            self._reopened(image, read)
        self._compare(image, read)
        if read.reason is ReadReason.OPENED:
            image.incarnation = read.incarnation
            image.high_watermark = read.offsets.high_watermark
            image.served_high_watermarks.clear()

    def _reopened(self, image: LogImage, read: ReplicaLogRead) -> None:
        """A new incarnation opens a log the checker knows: its logStartOffset may be older than the
        last one (the checkpoint trails memory), bringing back batches deleted below it."""
        topic_partition, broker_id = read.topic_partition, read.broker_id
        end = read.offsets.log_end_offset
        if end < image.log_end_offset and (end in image.rotted or end in image.rotted_deleted):
            # Recovery (after a shutdown that was not clean) checks the batches past the recovery
            # point and cuts the log at the first that fails, as Kafka's does: maybe one deleted
            # below the logStartOffset, which came back older (its checkpoint trails memory).
            self._lost(topic_partition, broker_id, image.cut_from(end), LossCause.ROTTED, read.now_ms)
            self._cut_after_deletion(topic_partition, broker_id, end, LossCause.ROTTED, read.now_ms)
        if read.offsets.log_start_offset > image.log_start_offset:
            deleted = image.delete_below(read.offsets.log_start_offset)
            self._lost(topic_partition, broker_id, deleted, LossCause.DELETED, read.now_ms)
        first = image.bases[0] if image.bases else image.log_end_offset
        back = [batch for batch in read.batches if batch.next_offset <= first]
        image.restore_front(back, read.offsets.log_start_offset)
        for batch in back:
            self._gained(topic_partition, broker_id, batch)

    def _compare(self, image: LogImage, read: ReplicaLogRead) -> None:
        """The replica's log is what the observations made of it (after a crash: what the crash left)."""
        held = image.all_batches()
        if held != list(read.batches) or (image.log_start_offset, image.log_end_offset) != (
            read.offsets.log_start_offset, read.offsets.log_end_offset
        ):
            differ = next((mine.base_offset for mine, theirs in zip(held, read.batches, strict=False)
                           if mine != theirs), None)
            raise ObservationError(
                f"{read.topic_partition} on broker {read.broker_id} ({read.reason.value}): the log is "
                f"[{read.offsets.log_start_offset}, {read.offsets.log_end_offset}) with {len(read.batches)} batches, "
                f"the observations made [{image.log_start_offset}, {image.log_end_offset}) with {len(held)} "
                f"(first difference at {differ})"
            )

    def finish(self) -> CheckerFigures:
        """The end of the run: judge every committed batch no replica holds (rules 1 and 8), and
        fail if one that another batch was committed over still has a copy (two records at one
        offset would survive)."""
        for topic_partition, history in self.histories.items():
            for entries in list(history.tracked.values()):
                for entry in list(entries):
                    if entry.copies and entry.fate is Fate.DISPLACED:
                        self.fail(f"{topic_partition}: committed batch [{entry.batch.base_offset}, "
                                  f"{entry.batch.next_offset}) was replaced at its offset and still exists on "
                                  f"{sorted(entry.copies)}")
                    if entry.copies:
                        continue
                    history.untrack(entry)
                    kind = entry.decide()
                    if entry.fate is Fate.DELETED:
                        self.figures.deleted += 1
                    elif kind is None:
                        self.fail(f"{topic_partition}: {entry.describe_loss()}")
                    else:
                        self._count_excuse(entry, kind)
        problem = self.group.finish()
        if problem is not None:
            self.fail(problem)
        self.figures.group_regressions_excused = self.group.lost_commits
        return self.figures
