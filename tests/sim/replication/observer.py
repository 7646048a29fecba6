"""BrokerObserver: what one broker incarnation's core did, as the checker's observations.

The only code that reads the simulated broker's insides (its `BrokerReady`'s partition steps, the
partition cores, their `storage.Log`) on the checker's behalf (`observations.py`). One observer per
incarnation: a new process numbers its partition requests from the start again.

A `ReplicaManager.handle` call may step one partition more than once (a produce, then the parked
fetches it made answerable); the observer folds the steps of one partition in one call into one
`ReplicaStepped`, with the log as the call left it: nothing runs between the steps of a call, so
nobody could have seen the log in between. A produce is answered in the step that completes its
partition request (at once, or later when the HW passes it): the observer remembers each produce
request it saw, by the core's partition request id, until then.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replication.broker_ready import BrokerReady, PartitionStep
from replication.events import ConsumerFetch, MakeFollower, MakeLeader, ProduceRequest, StopReplica
from replication.partition import Partition
from replication.ready import (
    Appended,
    FetchResult,
    LogStartOffsetRaised,
    ProduceResult,
    Role,
    Truncated,
    TruncatedDamaged,
    TruncatedFully,
)
from storage.log import Log
from storage.log_manager import LogManager
from tests.sim.replication.observations import (
    TAIL,
    AppendedBatches,
    Batch,
    DamageCut,
    DeletedBelow,
    EmptiedAt,
    FetchServed,
    LogEdit,
    LogOffsets,
    ProduceAnswered,
    ReadReason,
    ReplicaLogRead,
    ReplicaStepped,
    TruncatedTo,
    batches_of,
)
from wire.topic_partition import TopicPartition

READS_MAX = 100_000


def read_batches(log: Log, start_offset: int, end_offset: int) -> tuple[Batch, ...]:
    """The batches of `log` from the one holding `start_offset` up to `end_offset`."""
    batches: list[Batch] = []
    offset = start_offset
    for _ in range(READS_MAX):
        if offset >= end_offset:
            return tuple(batches)
        found = batches_of(log.read(offset, 1 << 20, max_offset=end_offset).records)
        assert found, f"{log.name}: nothing readable at {offset} below {end_offset}"
        batches.extend(found)
        offset = found[-1].next_offset
    raise AssertionError(f"{log.name}: more than {READS_MAX} reads from {start_offset} to {end_offset}")


def offsets_of(log: Log) -> LogOffsets:
    return LogOffsets(log.log_start_offset, log.high_watermark, log.log_end_offset)


def log_read(now_ms: int, broker_id: int, incarnation: int, topic_partition: TopicPartition, log: Log,
             reason: ReadReason) -> ReplicaLogRead:
    return ReplicaLogRead(now_ms, broker_id, incarnation, topic_partition, reason, offsets_of(log),
                          read_batches(log, log.log_start_offset, log.log_end_offset))


@dataclass(slots=True)
class _Fold:
    """The steps of one partition within one call, folded."""

    edits: list[LogEdit] = field(default_factory=list)
    produce_answers: list[ProduceAnswered] = field(default_factory=list)
    fetches_served: list[FetchServed] = field(default_factory=list)
    seen: bool = False  # a step the checker must see: a log change, an HW move, a role change, an answer
    is_leader: bool = False
    leader_epoch: int = -1


@dataclass(slots=True)
class BrokerObserver:
    """One incarnation of broker `broker_id`: its logs as it opened them, then its calls."""

    broker_id: int
    incarnation: int
    consumer_id: int
    opened: set[TopicPartition] = field(default_factory=set)
    produces: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # partition request id -> (acks, tail)

    def opened_logs(self, now_ms: int, manager: LogManager) -> list[ReplicaLogRead]:
        """Every log the incarnation found on disk, as recovery left it."""
        reads = []
        for topic_partition, log in sorted(manager, key=lambda item: item[0]):
            self.opened.add(topic_partition)
            reads.append(log_read(now_ms, self.broker_id, self.incarnation, topic_partition, log, ReadReason.OPENED))
        return reads

    def handled(self, now_ms: int, ready: BrokerReady,
                partitions: dict[TopicPartition, Partition]) -> list[ReplicaLogRead | ReplicaStepped]:
        """One call's partition steps, one `ReplicaStepped` per partition that changed something the
        checker sees (most ticks and replica fetches change nothing: skipped, to keep campaigns fast).
        A log the call created comes first as an empty log opened. A call that ends in a halt
        (`log_dir_failure`) answered nobody: the process ended before its answers left."""
        folds: dict[TopicPartition, _Fold] = {}
        answered = ready.log_dir_failure is None
        # A damaged batch found in a call cuts what the call appended before (it all lies above it).
        damage_cuts = {step.topic_partition: change.end_offset for step in ready.steps
                       for change in step.ready.log_changes if isinstance(change, TruncatedDamaged)}
        for step in ready.steps:
            self._fold(folds.setdefault(step.topic_partition, _Fold()), step, partitions[step.topic_partition],
                       answered, damage_cuts.get(step.topic_partition))
        observations: list[ReplicaLogRead | ReplicaStepped] = []
        for topic_partition, fold in folds.items():
            if topic_partition not in self.opened:
                self.opened.add(topic_partition)
                observations.append(ReplicaLogRead(now_ms, self.broker_id, self.incarnation, topic_partition,
                                                   ReadReason.OPENED, LogOffsets(0, 0, 0), ()))
            if not fold.seen:
                continue
            log = partitions[topic_partition].log
            observations.append(ReplicaStepped(
                now_ms, self.broker_id, self.incarnation, topic_partition, fold.is_leader, fold.leader_epoch,
                tuple(fold.edits), offsets_of(log), tuple(fold.produce_answers), tuple(fold.fetches_served),
            ))
        return observations

    def _fold(self, fold: _Fold, step: PartitionStep, partition: Partition, answered: bool,
              damage_cut: int | None) -> None:
        event, ready = step.event, step.ready
        if isinstance(event, ProduceRequest):
            self.produces[event.request_id] = (event.acks, event.records[TAIL:])
        fold.edits.extend(self._edits(partition.log, step, damage_cut))
        fold.is_leader = ready.role == Role.LEADER
        fold.leader_epoch = ready.leader_epoch
        for completion in ready.completions if answered else ():
            if isinstance(completion, ProduceResult) and completion.request_id in self.produces:
                acks, tail = self.produces.pop(completion.request_id)
                # The partition as the whole call left it: a later step of the same call may have
                # made a leader a follower (the metadata's UpdateBrokerEpochs, then MakeFollower).
                min_insync_replicas = (partition.min_insync_replicas() if partition.role == Role.LEADER
                                       else partition.log.config.min_insync_replicas)
                fold.produce_answers.append(ProduceAnswered(tail, acks, completion.error, completion.base_offset,
                                                            len(partition.isr), min_insync_replicas))
            elif (isinstance(completion, FetchResult) and isinstance(event, ConsumerFetch)
                  and completion.request_id == event.request_id):
                fold.fetches_served.append(FetchServed(self.consumer_id, completion.error, completion.high_watermark,
                                                       batches_of(completion.records)))
        fold.seen = fold.seen or bool(
            ready.log_changes or ready.high_watermark or fold.produce_answers or fold.fetches_served
            or isinstance(event, MakeLeader | MakeFollower | StopReplica)
        )

    @staticmethod
    def _edits(log: Log, step: PartitionStep, damage_cut: int | None) -> list[LogEdit]:
        """The step's log changes as edits, the appended batches read back from the log (none that a
        later step of the call cut at a damaged batch: their bytes are gone, and so are they)."""
        edits: list[LogEdit] = []
        for change in step.ready.log_changes:
            if isinstance(change, Appended) and damage_cut is not None and change.first_offset >= damage_cut:
                continue
            if isinstance(change, Appended):
                # From the batch holding the log start, if the same step raised it into this append
                # (a follower that started at the leader's first batch, then followed its start).
                start = max(change.first_offset, log.log_start_offset)
                edits.append(AppendedBatches(read_batches(log, start, change.last_offset + 1)))
            elif isinstance(change, Truncated):
                edits.append(TruncatedTo(change.end_offset))
            elif isinstance(change, TruncatedFully):
                edits.append(EmptiedAt(change.start_offset))
            elif isinstance(change, TruncatedDamaged):
                edits.append(DamageCut(change.end_offset))
            elif isinstance(change, LogStartOffsetRaised):
                edits.append(DeletedBelow(change.new))
        return edits
