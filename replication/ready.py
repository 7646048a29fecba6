"""The outputs of the partition core: `Ready` and everything it carries (frozen dataclasses).

`Partition.handle(event, now_ms)` returns one `Ready`; its docstring fixes the order of the
owner's work. Completions answer requests by `request_id`; error codes are `ErrorCode`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from storage.log import LogStartOffsetIncrementReason
from storage.retention import SegmentDeletionReason
from wire.alter_partition import AlterPartitionData, EpochLineage
from wire.error_codes import ErrorCode


class Role(Enum):
    """The partition's role on this broker. NONE: no metadata yet; STOPPED: after StopReplica."""

    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True, order=True)
class EpochEndOffset:
    """A leader epoch and its end offset (Kafka's EpochEndOffset / the fetch response's
    DivergingEpoch): the replica has offsets of `epoch` up to `end_offset` (exclusive)."""

    epoch: int
    end_offset: int


# -- log changes (already done through storage.Log; listed for checkpoints, metrics and traces) ---


@dataclass(frozen=True, slots=True)
class Appended:
    """Batches [first_offset, last_offset] were appended, by the leader (stamped `leader_epoch`)
    or by a follower (the leader's bytes unchanged, `leader_epoch` None)."""

    first_offset: int
    last_offset: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class Truncated:
    """The log was cut to `end_offset` (its new LEO), through `LogManager.truncate_to`, which also
    lowered the cleaner checkpoint. `high_watermark_before` > `end_offset` means offsets below the
    HW went: only unclean election or lost disks allow that, and the simulator flags it."""

    end_offset: int
    high_watermark_before: int


@dataclass(frozen=True, slots=True)
class TruncatedFully:
    """Every segment was deleted and the log starts empty at `start_offset` (a follower behind the
    leader's logStartOffset)."""

    start_offset: int


@dataclass(frozen=True, slots=True)
class LogStartOffsetRaised:
    """logStartOffset moved from `old` to `new`; the owner checkpoints it
    (log-start-offset-checkpoint) at its cadence."""

    old: int
    new: int
    reason: LogStartOffsetIncrementReason


@dataclass(frozen=True, slots=True)
class SegmentsDeleted:
    """`count` whole segments left the log (files renamed `.deleted`; the owner's periodic
    `delete_expired_files` removes them)."""

    reason: SegmentDeletionReason
    count: int


@dataclass(frozen=True, slots=True)
class TruncatedDamaged:
    """A read found the batch at `end_offset` damaged (its CRC fails: bit rot, a bad sector), and
    the log was cut there (durably) before the log dir is given up (`Ready.log_dir_failure`)."""

    end_offset: int
    high_watermark_before: int
    reason: str


LogChange = Appended | Truncated | TruncatedFully | TruncatedDamaged | LogStartOffsetRaised | SegmentsDeleted


@dataclass(frozen=True, slots=True)
class HighWatermarkChange:
    """The HW moved from `old` to `new` (forward, except after a truncation below it)."""

    old: int
    new: int


# -- messages -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterPartitionProposal:
    """An ISR change for the controller (Kafka's AlterPartition), at the leader and partition
    epochs this leader knows. `new_isr_broker_epochs` pairs each member with the broker epoch the
    leader saw it fetch with (KIP-903; -1: unknown, not checked). The owner sends it and hands the
    answer back as `AlterPartitionResponse(proposal=this, ...)`. A proposal with `epoch_lineage`
    keeps the ISR and asks the controller to record where this leader epoch begins (`Leader`)."""

    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    new_isr_broker_epochs: tuple[int, ...]
    epoch_lineage: EpochLineage | None = None

    def as_data(self, topic_id: str, partition_index: int) -> AlterPartitionData:
        return AlterPartitionData(topic_id, partition_index, self.leader_epoch, self.partition_epoch, self.new_isr,
                                  self.new_isr_broker_epochs, self.epoch_lineage)


@dataclass(frozen=True, slots=True)
class FollowerFetchPosition:
    """Where a follower fetches next: from `leader_id` at `leader_epoch`, offset `fetch_offset`
    (its LEO), `last_fetched_epoch` (its latest leader epoch, NO_EPOCH for none: the leader checks
    the pair against its epoch cache, KIP-320) and its `log_start_offset`."""

    replica_id: int
    leader_id: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


# -- completions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """A produce's outcome: NONE with `base_offset` (the first offset appended), or an error.
    NOT_ENOUGH_REPLICAS: nothing was appended. NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT
    and NOT_LEADER_OR_FOLLOWER after the append: the records are in the leader's log and may or may
    not survive (a retry may duplicate them, as in Kafka without idempotence)."""

    request_id: int
    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A fetch's outcome (consumer or follower): raw batch bytes from the batch holding the fetch
    offset, the replica's HW, logStartOffset and LEO; for a follower maybe `diverging_epoch`
    instead of records (KIP-320). On OFFSET_OUT_OF_RANGE the offsets still say where the log is, and
    a follower behind logStartOffset gets `producer_snapshot`, the leader's producers' state there
    (`Log.producer_state_at_start`: not in Kafka, whose follower starts with none)."""

    request_id: int
    error: ErrorCode
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    error_message: str = ""
    producer_snapshot: bytes = b""


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    """`offset` (-1: no record at or after the timestamp below the HW) and its `timestamp`."""

    request_id: int
    error: ErrorCode
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpochResult:
    """The leader's `EpochEndOffset` for the requested epoch (UNDEFINED: -1, -1)."""

    request_id: int
    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    """NONE with the partition's `low_watermark` (lowest logStartOffset over the ISR), or an error."""

    request_id: int
    error: ErrorCode
    low_watermark: int = -1
    error_message: str = ""


Completion = ProduceResult | FetchResult | ListOffsetsResult | OffsetsForLeaderEpochResult | DeleteRecordsResult


@dataclass(frozen=True, slots=True)
class Ready:
    """The work one `Partition.handle` call hands back. The owner does it in this order:

    1. `log_changes`: what the call did to the log, in order. It is done already: the core writes
       through `storage.Log` (appends reach the page cache; `flush.messages` / `flush.ms` decide
       fsyncs, as in Kafka acks=all relies on replication, not fsync). The owner updates its
       checkpoints (log-start-offset, replication-offset) at its cadence and its metrics.
    2. `high_watermark`: if not None the HW moved; checkpoint it lazily (Kafka: every
       `replica.high.watermark.checkpoint.interval.ms`) and wake long polls the owner keeps itself.
    3. `messages`: send each AlterPartition proposal to the active controller and hand the answer
       back as `AlterPartitionResponse` (REQUEST_TIMED_OUT when none comes).
    4. `completions`: answer the requests, in order (their effects are in steps 1-2). A produce
       answer follows the append (acks 0/1) or the HW move (acks=all) that made it answerable.
    5. `fetch`: a follower's next fetch position (None: do not fetch). The fetcher sends one fetch
       at a time per partition and hands the answer back as `FetchResponseFromLeader`; when
       `fetch_backoff` is set (the answer was an error, or its records could not be appended
       here) it waits `replica.fetch.backoff.ms` before fetching this partition again.

    `log_dir_failure`: a read found a damaged batch in this replica's log (`TruncatedDamaged`): the
    log can no longer be trusted, the replica is offline and the owner must halt at once, before
    anything else in this Ready (see `BrokerReady`).

    `role`, `leader_epoch`, `partition_epoch`: the state after this call. `next_tick_ms`: the core
    wants a `Tick` no later than this (None: no timer); ticking earlier is harmless."""

    role: Role
    leader_epoch: int
    partition_epoch: int = -1
    log_changes: tuple[LogChange, ...] = ()
    high_watermark: HighWatermarkChange | None = None
    messages: tuple[AlterPartitionProposal, ...] = ()
    completions: tuple[Completion, ...] = ()
    fetch: FollowerFetchPosition | None = None
    fetch_backoff: bool = False
    next_tick_ms: int | None = None
    log_dir_failure: str | None = None
