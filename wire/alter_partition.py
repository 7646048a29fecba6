"""AlterPartition: a partition leader's proposed ISR to the active controller (KIP-497, KIP-903).
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.error_codes import ErrorCode
from wire.sentinels import NO_VALUE


@dataclass(frozen=True, slots=True)
class EpochLineage:
    """Where a leader epoch begins in its leader's log: that log's end offset and latest leader epoch
    (-1: none) when the broker took `leader_epoch`. The records below `start_offset` are the history
    the epoch continues; those from it on are the epoch's own. Ours, not Kafka's: the controller keeps
    the newest it was told, which says which records no leader can have committed (see
    `QuorumController._recovery_leader`)."""

    leader_epoch: int
    previous_epoch: int
    start_offset: int

    def as_record(self) -> tuple[int, int, int]:
        return self.leader_epoch, self.previous_epoch, self.start_offset


@dataclass(frozen=True, slots=True)
class AlterPartitionData:
    """A leader's proposed ISR for one partition, at the leader and partition epochs it knows.
    `new_isr_broker_epochs`, when given, pairs each ISR member with the broker epoch the leader saw
    it fetch with (KIP-903); -1 skips the check for that member. `epoch_lineage` (ours) is the
    leader's lineage of `leader_epoch`, sent with its ISR unchanged until the controller has recorded
    it: the leader holds its HW until then."""

    topic_id: str
    partition_index: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    new_isr_broker_epochs: tuple[int, ...] | None = None
    epoch_lineage: EpochLineage | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    partitions: tuple[AlterPartitionData, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """On NONE, the partition's state after the change (which the leader adopts). On
    INELIGIBLE_REPLICA too: the refusal bumped the partition epoch (see `QuorumController`)."""

    topic_id: str
    partition_index: int
    error_code: ErrorCode
    error_message: str | None = None
    leader_id: int = NO_VALUE
    leader_epoch: int = NO_VALUE
    isr: tuple[int, ...] = ()
    partition_epoch: int = NO_VALUE


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """A top-level error (unknown broker, stale broker epoch) leaves `partitions` empty."""

    error_code: ErrorCode
    error_message: str | None = None
    partitions: tuple[AlterPartitionResult, ...] = ()
