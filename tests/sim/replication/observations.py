"""What the replication checker is told: a small, explicit stream of observations.

The checker (`checker.py`) reads nothing else: no simulator object, no core, no `storage.Log`.
Whatever drives the brokers (the simulator, on the node's broker core: `observer.py`) turns
what happened into these frozen values, in the order it happened:

- `ReplicaLogRead` (OPENED): a replica's whole log when an incarnation opens it (after recovery),
  and (FINAL) every replica's log at the end of the run;
- `ReplicaStepped`: one step of one replica — the edits to its log, in order, with the batches
  appended; its offsets after the step; its role; the produce answers and consumer fetch answers
  it gave in that step;
- `BrokerCrashed` / `BrokerWiped` / `BatchRotted`: the fault log — which offsets a crash actually
  cut from each of a broker's logs (what the crash left is what recovery must open: `ReplicaLogRead`
  OPENED is compared with it), that the broker's disk was wiped, or that a batch on it rotted;
- `ConsumerPolled`: a consumer took a fetch answer, and its position before and after;
- `GroupCommitAcked` / `GroupOffsetsFetched`: the consumer group's client had an offset commit
  acknowledged, or an offset fetch answered.

Batches are whole RecordBatch v2 bytes as the log holds them, so "the same record" means the same
bytes at the same offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

from storage.records import NO_PRODUCER_ID, decode_records, iter_headers
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

# A produced batch's bytes from the magic byte on: what a leader does not rewrite (it sets
# baseOffset, and partitionLeaderEpoch, which come first; batchLength stays).
TAIL = 16
_PRODUCER = struct.Struct(">qhi")
_PRODUCER_POSITION = 43  # producerId, producerEpoch, baseSequence (storage/records.py BatchHeader)


def idempotent_value(partition: int, number: int) -> bytes:
    """The value of the idempotent producer's `number`th record on `partition` (numbered from 0 in
    the order the producer took them), distinct from every other producer's."""
    return b"i%d:%d" % (partition, number)


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch in a log: offsets [base_offset, next_offset), the leader epoch that appended it,
    and its bytes."""

    base_offset: int
    next_offset: int
    leader_epoch: int
    data: bytes

    @property
    def tail(self) -> bytes:
        return self.data[TAIL:]

    @property
    def producer(self) -> tuple[int, int, int] | None:
        """An idempotent producer's (id, epoch, first sequence), None for any other batch (and for
        the checker tests' short stand-ins)."""
        if len(self.data) < _PRODUCER_POSITION + _PRODUCER.size:
            return None
        producer_id, epoch, sequence = _PRODUCER.unpack_from(self.data, _PRODUCER_POSITION)
        return None if producer_id == NO_PRODUCER_ID else (producer_id, epoch, sequence)

    def record_numbers(self) -> tuple[int, int]:
        """An idempotent producer's batch: the numbers of its first and last records (`idempotent_value`)."""
        records = decode_records(self.data)
        return _record_number(records[0].value), _record_number(records[-1].value)


def _record_number(value: bytes | None) -> int:
    assert value is not None and value.startswith(b"i"), f"not an idempotent producer's record: {value!r}"
    return int(value.split(b":")[1])


def batches_of(data: bytes) -> tuple[Batch, ...]:
    """The whole batches in `data` (a log read or a fetch answer's records)."""
    return tuple(
        Batch(header.base_offset, header.next_offset, header.partition_leader_epoch,
              bytes(data[position : position + header.size_in_bytes]))
        for position, header in iter_headers(data)
    )


@dataclass(frozen=True, slots=True)
class LogOffsets:
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


# -- edits to a log, as a step made them (in order) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendedBatches:
    """These batches were appended at the log end (by a leader or a follower)."""

    batches: tuple[Batch, ...]


@dataclass(frozen=True, slots=True)
class TruncatedTo:
    """The protocol cut the log to `end_offset` (truncation by leader epoch, or to the leader's LEO)."""

    end_offset: int


@dataclass(frozen=True, slots=True)
class EmptiedAt:
    """The protocol deleted every batch; the log starts empty at `start_offset` (a follower behind
    the leader's logStartOffset)."""

    start_offset: int


@dataclass(frozen=True, slots=True)
class DeletedBelow:
    """logStartOffset rose to `log_start_offset` (retention, DeleteRecords, or a follower following
    its leader): batches wholly below it are gone by the contract, not lost."""

    log_start_offset: int


@dataclass(frozen=True, slots=True)
class DamageCut:
    """A read found the batch at `end_offset` damaged and the replica cut its log there before
    halting (a failed log dir)."""

    end_offset: int


LogEdit = AppendedBatches | TruncatedTo | EmptiedAt | DeletedBelow | DamageCut


# -- answers a replica gave ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceAnswered:
    """A produce answered by this replica (its leader): `tail` is the produced batch from its magic
    byte on; `isr_size` the leader's committed ISR when it answered, against its effective
    `min_insync_replicas`."""

    tail: bytes
    acks: int
    error: ErrorCode
    base_offset: int
    isr_size: int
    min_insync_replicas: int


@dataclass(frozen=True, slots=True)
class FetchServed:
    """A consumer's fetch answered by this replica (leader or follower, KIP-392)."""

    consumer_id: int
    error: ErrorCode
    high_watermark: int
    batches: tuple[Batch, ...]


# -- observations ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaStepped:
    """One step of one replica of `topic_partition` on `broker_id` (in its `incarnation`, a process
    lifetime): what it did to its log, where its offsets are after the step, and what it answered."""

    now_ms: int
    broker_id: int
    incarnation: int
    topic_partition: TopicPartition
    is_leader: bool
    leader_epoch: int
    edits: tuple[LogEdit, ...]
    offsets: LogOffsets
    produce_answers: tuple[ProduceAnswered, ...] = ()
    fetches_served: tuple[FetchServed, ...] = ()


class ReadReason(Enum):
    OPENED = "opened"  # an incarnation opened the log (after recovery, if it crashed)
    FINAL = "final"  # the end of the run


@dataclass(frozen=True, slots=True)
class ReplicaLogRead:
    """A replica's whole log from its logStartOffset."""

    now_ms: int
    broker_id: int
    incarnation: int
    topic_partition: TopicPartition
    reason: ReadReason
    offsets: LogOffsets
    batches: tuple[Batch, ...]


@dataclass(frozen=True, slots=True)
class BrokerCrashed:
    """The broker lost power: `cuts` gives, per partition it cut, the first offset of its log the
    crash destroyed (unflushed, torn or damaged bytes; everything from there on is gone)."""

    now_ms: int
    broker_id: int
    cuts: tuple[tuple[TopicPartition, int], ...]


@dataclass(frozen=True, slots=True)
class BrokerWiped:
    """The broker's log directory was lost (a replaced disk): every log on it is gone."""

    now_ms: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class BatchRotted:
    """Bit rot: one byte of the records of a batch of the broker's log changed on its disk; `batch`
    is the batch as the disk now holds it (same offsets, other bytes)."""

    now_ms: int
    broker_id: int
    topic_partition: TopicPartition
    batch: Batch


@dataclass(frozen=True, slots=True)
class ConsumerPolled:
    """A consumer took a fetch answer for `fetch_offset` from `broker_id`; its position in the
    partition before and after taking it."""

    now_ms: int
    consumer_id: int
    topic_partition: TopicPartition
    broker_id: int
    fetch_offset: int
    error: ErrorCode
    log_start_offset: int
    batches: tuple[Batch, ...]
    position_before: int
    position_after: int


@dataclass(frozen=True, slots=True)
class GroupCommitAcked:
    """The group's client had its offset commit `commit_id` (the metadata of each of its records)
    acknowledged: `offsets` per partition."""

    now_ms: int
    commit_id: int
    offsets: tuple[tuple[TopicPartition, int], ...]


@dataclass(frozen=True, slots=True)
class GroupOffsetsFetched:
    """The group's client, having sent an offset fetch at `sent_ms`, was answered: per partition the
    committed offset and its metadata (the commit id; offset -1 and "": none)."""

    now_ms: int
    sent_ms: int
    fetched: tuple[tuple[TopicPartition, int, str], ...]


Observation = (ReplicaStepped | ReplicaLogRead | BrokerCrashed | BrokerWiped | BatchRotted | ConsumerPolled
               | GroupCommitAcked | GroupOffsetsFetched)
