"""The inputs of the partition core (`Partition.handle`): frozen dataclasses, one per event.

Requests carry a `request_id` chosen by the caller; the completion that answers them (in
`Ready.completions`) carries the same id. Epoch fields use NO_EPOCH (-1) for "not given": the
check is then skipped, as Kafka does for old clients. Field names follow Kafka's RPCs
(Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch, DeleteRecords, AlterPartition) in snake_case.

Metadata: `MakeLeader`, `MakeFollower`, `StopReplica` (from the controller's partition records).
Clients: `ProduceRequest`, `ConsumerFetch`, `ListOffsets`, `OffsetsForLeaderEpoch`, `DeleteRecords`.
Replication: `FollowerFetch` (a follower's fetch, on the leader), `FetchResponseFromLeader` (the
answer, on the follower), `AlterPartitionResponse` (the controller's answer, on the leader).
Local: `Tick` (time passed), `RunRetention` (the leader's retention pass).
"""

from __future__ import annotations

from dataclasses import dataclass

from replication.ready import (
    AlterPartitionProposal,
    Completion,
    DeleteRecordsResult,
    EpochEndOffset,
    FetchResult,
    FollowerFetchPosition,
    ListOffsetsResult,
    OffsetsForLeaderEpochResult,
    ProduceResult,
)
from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH, NO_LEADER

# -- metadata -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MakeLeader:
    """The controller's metadata names this broker leader: `leader_epoch` (a new epoch, or the
    current one with a newer `partition_epoch`, i.e. an ISR change), the ISR and the replicas.
    An event older than the core's state (lower leader epoch, or same epoch and no newer partition
    epoch) is ignored, as Kafka's makeLeader ignores stale LeaderAndIsr. `lineage_recorded`: the
    metadata records this leader epoch's lineage (`Leader`; the leader proposes it otherwise)."""

    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    log_start_offset: int = 0  # the partition's, from a recovery election (PartitionRegistration)
    lineage_recorded: bool = True


@dataclass(frozen=True, slots=True)
class MakeFollower:
    """The controller's metadata names `leader_id` (NO_LEADER: none) leader in `leader_epoch`;
    this broker is a follower and fetches from it. Stale events are ignored as for MakeLeader."""

    leader_id: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class UpdateBrokerEpochs:
    """The metadata's broker epoch of each replica's broker (KIP-903; Kafka's leader reads it from
    its MetadataCache): `broker_epochs` pairs replica ids with the epoch of their latest registration,
    NO_BROKER_EPOCH (-1) for one not registered. A leader refuses fetches from older epochs, forgets
    what an older process of a follower told it, and lets a follower join the ISR only with a fetch
    state from the registered process. Sent before the partition's MakeLeader/MakeFollower of the
    same metadata, and whenever a replica's broker registers again."""

    broker_epochs: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class StopReplica:
    """This broker no longer hosts the partition (topic deleted, replica moved). Every parked
    request is answered NOT_LEADER_OR_FOLLOWER; the core refuses everything afterwards. The owner
    deletes or keeps the log."""


# -- client requests ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """Append `records` (whole RecordBatch v2 bytes) as leader. `acks`: 0 or 1 (answered after the
    local append), -1 (all: answered when the HW passes the last offset, or on `timeout_ms`)."""

    request_id: int
    records: bytes
    acks: int
    timeout_ms: int
    current_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class ConsumerFetch:
    """A consumer reads from `fetch_offset`, up to `max_bytes` (at least one whole batch), below
    the serving replica's HW (KIP-392: any replica serves), answered at once (the long poll over a
    request's partitions is the broker's). `require_leader`: refuse on a follower
    (NOT_LEADER_OR_FOLLOWER)."""

    request_id: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = NO_EPOCH
    require_leader: bool = False

    def renumbered(self, request_id: int, max_bytes: int) -> ConsumerFetch:
        """This fetch as request `request_id`, reading at most `max_bytes` (the broker's read of a
        part; built directly, as `dataclasses.replace` walks the fields on every read)."""
        return ConsumerFetch(request_id, self.fetch_offset, max_bytes, self.current_leader_epoch,
                             self.require_leader)


@dataclass(frozen=True, slots=True)
class ListOffsets:
    """Kafka's ListOffsets for a consumer: `timestamp` -2 (earliest: logStartOffset), -1 (latest:
    the HW), or the first offset below the HW whose record timestamp is >= it."""

    request_id: int
    timestamp: int
    current_leader_epoch: int = NO_EPOCH
    require_leader: bool = True


@dataclass(frozen=True, slots=True)
class OffsetsForLeaderEpoch:
    """KIP-101/279: the end offset of `leader_epoch` in the leader's log (the start of the next
    higher epoch, or the LEO for the latest), for a follower that truncates before fetching."""

    request_id: int
    leader_epoch: int
    current_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class DeleteRecords:
    """Kafka's DeleteRecords on the leader: raise logStartOffset to `offset` (-1: the HW). Answered
    when every ISR member's logStartOffset has reached it (the low watermark), or at `timeout_ms`."""

    request_id: int
    offset: int
    timeout_ms: int


# -- replication ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """A follower's fetch, on the leader (Kafka's Fetch with replica_id >= 0): the follower holds
    every offset below `fetch_offset`, the batch before it has `last_fetched_epoch` (NO_EPOCH:
    empty log), its logStartOffset is `log_start_offset`, its broker epoch `broker_epoch` (KIP-903)."""

    request_id: int
    replica_id: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    current_leader_epoch: int
    max_bytes: int
    broker_epoch: int = -1

    def renumbered(self, request_id: int, max_bytes: int) -> FollowerFetch:
        """This fetch as request `request_id`, reading at most `max_bytes` (as `ConsumerFetch.renumbered`)."""
        return FollowerFetch(request_id, self.replica_id, self.fetch_offset, self.last_fetched_epoch,
                             self.log_start_offset, self.current_leader_epoch, max_bytes, self.broker_epoch)

    @staticmethod
    def from_position(position: FollowerFetchPosition, request_id: int, broker_epoch: int = -1) -> FollowerFetch:
        """The fetch a fetcher sends for the core's `Ready.fetch` position."""
        return FollowerFetch(
            request_id=request_id,
            replica_id=position.replica_id,
            fetch_offset=position.fetch_offset,
            last_fetched_epoch=position.last_fetched_epoch,
            log_start_offset=position.log_start_offset,
            current_leader_epoch=position.leader_epoch,
            max_bytes=position.max_bytes,
            broker_epoch=broker_epoch,
        )


@dataclass(frozen=True, slots=True)
class FetchResponseFromLeader:
    """The leader's answer to a `FollowerFetch`, on the follower. `leader_id`, `leader_epoch`,
    `fetch_offset` and `last_fetched_epoch` echo the request, so that a late or duplicated answer
    to an older position is ignored. Exactly one of: an error, `diverging_epoch` (truncate, then
    fetch again), or `records` (maybe empty). `log_end_offset` is the leader's LEO (not in Kafka's
    response, which makes the follower ask ListOffsets after OFFSET_OUT_OF_RANGE)."""

    leader_id: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    error: ErrorCode
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    diverging_epoch: EpochEndOffset | None = None
    producer_snapshot: bytes = b""

    @staticmethod
    def from_result(position: FollowerFetchPosition, result: FetchResult) -> FetchResponseFromLeader:
        """The follower-side event for the leader's `FetchResult` to a fetch sent for `position`."""
        return FetchResponseFromLeader(
            leader_id=position.leader_id,
            leader_epoch=position.leader_epoch,
            fetch_offset=position.fetch_offset,
            last_fetched_epoch=position.last_fetched_epoch,
            error=result.error,
            records=result.records,
            high_watermark=result.high_watermark,
            log_start_offset=result.log_start_offset,
            log_end_offset=result.log_end_offset,
            diverging_epoch=result.diverging_epoch,
            producer_snapshot=result.producer_snapshot,
        )


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The controller's answer to `proposal` (echoed by the owner, which pairs requests and
    answers): NONE with the partition's state after the change, or an error (the node maps the
    controller's `ErrorCode` to `ErrorCode` by name; REQUEST_TIMED_OUT for no answer)."""

    proposal: AlterPartitionProposal
    error: ErrorCode
    leader_id: int = NO_LEADER
    leader_epoch: int = NO_EPOCH
    partition_epoch: int = NO_EPOCH
    isr: tuple[int, ...] = ()


# -- local ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: expire parked requests, shrink the ISR, resend an unanswered AlterPartition.
    The core asks for its next tick with `Ready.next_tick_ms`; ticking earlier is harmless."""


@dataclass(frozen=True, slots=True)
class RunRetention:
    """The leader's retention pass (retention.ms, retention.bytes, logStartOffset) over its log.
    A follower ignores it: its logStartOffset follows the leader's (DESIGN §4)."""


PartitionRequest = ProduceRequest | ConsumerFetch | FollowerFetch | ListOffsets | OffsetsForLeaderEpoch | DeleteRecords
"""The events a client (or follower) sends; each is answered by one `Completion` with its `request_id`."""

Event = (
    MakeLeader | MakeFollower | UpdateBrokerEpochs | StopReplica | PartitionRequest | FetchResponseFromLeader
    | AlterPartitionResponse | Tick | RunRetention
)


def error_result(request: PartitionRequest, error: ErrorCode, message: str) -> Completion:
    """The completion of the right kind that answers `request` with `error` alone."""
    if isinstance(request, ProduceRequest):
        return ProduceResult(request.request_id, error, error_message=message)
    if isinstance(request, ConsumerFetch | FollowerFetch):
        return FetchResult(request.request_id, error, error_message=message)
    if isinstance(request, ListOffsets):
        return ListOffsetsResult(request.request_id, error, error_message=message)
    if isinstance(request, OffsetsForLeaderEpoch):
        return OffsetsForLeaderEpochResult(request.request_id, error, error_message=message)
    return DeleteRecordsResult(request.request_id, error, error_message=message)
