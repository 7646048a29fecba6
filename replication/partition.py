"""Partition: one topic-partition's replica on one broker, as a pure state machine over its log.

Theory of operation
-------------------
The controller's metadata makes this broker the partition's leader (`MakeLeader`) or a follower
of another broker (`MakeFollower`), in a leader epoch; the role's state lives in a `Leader` or
`Follower` object, replaced on each new epoch (etcd's `becomeFollower` swaps `step` the same way).
Every input goes through `handle(event, now_ms)`, which returns a `Ready` (see `ready.py` for the
order of the owner's work). The core reads no clock, opens no socket and draws no random number;
it writes its log through `storage.Log` (synchronous, in-process), listing each change in
`Ready.log_changes`.

Leader (Kafka's Partition.scala): appends produced batches with its epoch stamped; learns each
follower's LEO from its fetches (after the KIP-320 diverging-epoch check); moves the HW to the
lowest LEO over the maximal ISR, only forward; proposes ISR shrinks (a follower not caught up
for `replica.lag.time.max.ms`) and expansions (a follower at the HW and past this epoch's start) as
AlterPartition messages, one at a time, and lets the controller's answer decide; answers acks=all
produces when the HW passes their last offset. Retention runs only here (`RunRetention`).

Follower (Kafka's ReplicaFetcherThread): fetches at its LEO with its latest epoch; appends the
leader's bytes unchanged; truncates to the largest common epoch's end on a diverging epoch
(KIP-101/279/320); follows the leader's HW (never lowering its own) and logStartOffset.

Both serve consumers (KIP-392) below their own HW, and fence requests from stale or future leader
epochs (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).

Purgatory as data: parked acks=all produces and DeleteRecords wait in lists (`purgatory.py`).
After every event, `_settle` checks them against the HW, role and time, so the answers leave in
the `Ready` of the call that made them answerable; the owner ticks the core at `Ready.next_tick_ms`
for timeouts and the ISR check. Nothing polls. Fetches are answered at once: the long poll over
many partitions (min_bytes / max_wait_ms) is the broker's (`replica_manager.py`), in one place.

Two clocks (DESIGN §2): `now_ms` is monotonic and drives every timeout (ISR lag, produce and
DeleteRecords deadlines, AlterPartition resends); `wall_clock_ms` only reaches storage (record and
segment timestamps, retention, file deletion delays), so a wall-clock step never fires or freezes a
timeout.

Invariants (asserted after every call): logStartOffset <= HW <= LEO (storage); the HW never falls
except by a truncation below it (reported in the Ready; only lost disks or an unclean election
cause one); the leader epoch never falls; every purgatory stays within its bound.
"""

from __future__ import annotations

from collections.abc import Callable

from replication.config import ReplicationConfig
from replication.errors import error_of
from replication.events import (
    AlterPartitionResponse,
    ConsumerFetch,
    DeleteRecords,
    Event,
    FetchResponseFromLeader,
    FollowerFetch,
    ListOffsets,
    MakeFollower,
    MakeLeader,
    OffsetsForLeaderEpoch,
    PartitionRequest,
    ProduceRequest,
    RunRetention,
    StopReplica,
    Tick,
    UpdateBrokerEpochs,
    error_result,
)
from replication.follower import Follower
from replication.leader import Leader
from replication.lease import BrokerLease
from replication.outbox import Outbox, epoch_error
from replication.purgatory import DelayedDeleteRecords, DelayedList, DelayedProduce, ProducePurgatory
from replication.ready import (
    DeleteRecordsResult,
    FetchResult,
    FollowerFetchPosition,
    HighWatermarkChange,
    ListOffsetsResult,
    OffsetsForLeaderEpochResult,
    ProduceResult,
    Ready,
    Role,
    Truncated,
    TruncatedDamaged,
    TruncatedFully,
)
from replication.replica_log import ReplicaLog
from storage.errors import CorruptRecordError, StorageError
from storage.log import Log, LogStartOffsetIncrementReason
from storage.log_manager import LogManager
from storage.records import DamagedBatch, check_batches
from wire.error_codes import ErrorCode
from wire.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, NO_EPOCH, NO_LEADER
from wire.topic_partition import TopicPartition

ACKS_ALL = -1
VALID_ACKS = (0, 1, ACKS_ALL)


class Partition:
    """One partition's replica on this broker: role state, parked requests, and the log.

    Built from the node's `LogManager` (the log is opened or created there, recovered state and
    all) and config; `handle` is the only thing that changes it. Owner: the partition's driver
    task in the node, or the simulator. One owner, no locks.
    """

    def __init__(self, topic_partition: TopicPartition, log_manager: LogManager, broker_id: int,
                 config: ReplicationConfig, lease: BrokerLease, now_ms: int, wall_clock_ms: int) -> None:
        self.topic_partition = topic_partition
        self.broker_id = broker_id
        self.config = config
        self.lease = lease  # the broker's, only read here (replication/lease.py)
        self.replica_log = ReplicaLog(log_manager, topic_partition, wall_clock_ms)
        self.state: Leader | Follower | None = None
        self.broker_epochs: tuple[tuple[int, int], ...] = ()  # the replicas' registered broker epochs (KIP-903)
        self.stopped = False
        self.offline_reason: str | None = None  # a damaged batch took the log offline (KIP-112)
        self.produce_purgatory = ProducePurgatory(config.delayed_produce_max)
        self.delete_records_purgatory = DelayedList(config.delayed_delete_records_max)
        self.now_ms = now_ms
        self.wall_clock_ms = wall_clock_ms

    # -- reads ----------------------------------------------------------------------------------

    @property
    def log(self) -> Log:
        return self.replica_log.log

    @property
    def role(self) -> Role:
        if self.stopped:
            return Role.STOPPED
        if isinstance(self.state, Leader):
            return Role.LEADER
        return Role.NONE if self.state is None else Role.FOLLOWER

    @property
    def leader_epoch(self) -> int:
        return NO_EPOCH if self.state is None else self.state.leader_epoch

    @property
    def partition_epoch(self) -> int:
        return NO_EPOCH if self.state is None else self.state.partition_epoch

    @property
    def leader_id(self) -> int:
        if isinstance(self.state, Leader):
            return self.broker_id
        return NO_LEADER if self.state is None else self.state.leader_id

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR as this replica knows it (a leader's own view, a follower's metadata)."""
        if isinstance(self.state, Leader):
            return self.state.isr_state.isr
        return () if self.state is None else self.state.isr

    def fetch_position(self) -> FollowerFetchPosition | None:
        if not isinstance(self.state, Follower) or self.stopped or self.offline_reason is not None:
            return None
        return self.state.position(self.broker_id, self.replica_log, self.config.replica_fetch_max_bytes)

    def min_insync_replicas(self) -> int:
        """`min.insync.replicas`, at most the replication factor (Kafka's effectiveMinIsr)."""
        assert isinstance(self.state, Leader), f"{self.topic_partition} is not leader"
        return min(self.log.config.min_insync_replicas, len(self.state.replicas))

    # -- the entry point -------------------------------------------------------------------------

    def handle(self, event: Event, now_ms: int, wall_clock_ms: int) -> Ready:
        """Apply one event at monotonic time `now_ms` (wall clock `wall_clock_ms`, for storage only);
        return the work for the owner."""
        assert now_ms >= self.now_ms, f"time went back: {now_ms} < {self.now_ms} in {self.topic_partition}"
        self.now_ms = now_ms
        self.wall_clock_ms = wall_clock_ms
        out = Outbox()
        log = self.log
        before = (log.high_watermark, self.leader_epoch)
        handler = _HANDLERS.get(type(event))
        assert handler is not None, f"not a partition event: {event!r}"
        if self.stopped and not isinstance(event, StopReplica | Tick):
            self._refuse(event, out)
        elif self.offline_reason is not None:
            self._refuse_offline(event, out)
        else:
            handler(self, event, now_ms, out)
        self._settle(now_ms, out)
        high_watermark_before, leader_epoch_before = before
        self._check_invariants(high_watermark_before, leader_epoch_before, out)
        change = None
        if log.high_watermark != high_watermark_before:
            change = HighWatermarkChange(high_watermark_before, log.high_watermark)
        return out.ready(self.role, self.leader_epoch, self.partition_epoch, change, self.fetch_position(),
                         self._next_tick_ms())

    def _check_invariants(self, high_watermark_before: int, leader_epoch_before: int, out: Outbox) -> None:
        log = self.log
        assert log.high_watermark >= high_watermark_before or any(
            isinstance(change, Truncated | TruncatedFully | TruncatedDamaged) for change in out.log_changes
        ), f"HW fell {high_watermark_before} -> {log.high_watermark} without truncation in {self.topic_partition}"
        assert self.leader_epoch >= leader_epoch_before, (
            f"leader epoch fell {leader_epoch_before} -> {self.leader_epoch} in {self.topic_partition}"
        )
        assert len(self.produce_purgatory) <= self.config.delayed_produce_max, len(self.produce_purgatory)
        assert len(self.delete_records_purgatory) <= self.config.delayed_delete_records_max, (
            len(self.delete_records_purgatory)
        )
        if isinstance(self.state, Leader):
            assert self.broker_id in self.state.isr_state.isr, f"leader not in ISR {self.state.isr_state}"

    def _next_tick_ms(self) -> int | None:
        earliest = self.produce_purgatory.next_deadline_ms()
        for time in (
            self.delete_records_purgatory.next_deadline_ms(),
            self.state.next_timer_ms() if isinstance(self.state, Leader) and self.offline_reason is None else None,
        ):
            if time is not None and (earliest is None or time < earliest):
                earliest = time
        return earliest

    # -- metadata --------------------------------------------------------------------------------

    def _is_stale(self, leader_epoch: int, partition_epoch: int) -> bool:
        """Older than what the core has (Kafka skips such LeaderAndIsr / metadata deltas)."""
        if self.state is None:
            return False
        if leader_epoch != self.state.leader_epoch:
            return leader_epoch < self.state.leader_epoch
        return partition_epoch <= self.state.partition_epoch

    def _on_make_leader(self, event: MakeLeader, now_ms: int, out: Outbox) -> None:
        if self._is_stale(event.leader_epoch, event.partition_epoch):
            return
        if isinstance(self.state, Leader) and self.state.leader_epoch == event.leader_epoch:
            self.state.update(event.partition_epoch, event.isr, event.replicas, now_ms, event.lineage_recorded)
            return
        assert not isinstance(self.state, Follower) or self.state.leader_epoch < event.leader_epoch, (
            f"{self.topic_partition}: epoch {event.leader_epoch} has leader {self.leader_id}, not {self.broker_id}"
        )
        self.state = Leader(self.broker_id, self.log, self.config, event.leader_epoch, event.partition_epoch,
                            event.isr, event.replicas, now_ms, self.broker_epochs, event.lineage_recorded)
        self._adopt_log_start(event.log_start_offset, now_ms, out)

    def _adopt_log_start(self, log_start_offset: int, now_ms: int, out: Outbox) -> None:
        """A recovery election found offsets below `log_start_offset` used by records deleted after
        they were committed: this leader's own records there may be a deposed leader's that were
        never committed, so it must not serve them. Offsets below it were committed, so the HW
        rises to it first (a log start never passes the HW)."""
        log = self.log
        start = min(log_start_offset, log.log_end_offset)
        if start <= log.log_start_offset:
            return
        self.replica_log.maybe_increment_high_watermark(start)
        if self.replica_log.maybe_increment_log_start_offset(start, LogStartOffsetIncrementReason.RECOVERY_ELECTION,
                                                             out):
            self.replica_log.delete_segments_below_log_start_offset(now_ms, out)

    def _on_update_broker_epochs(self, event: UpdateBrokerEpochs, now_ms: int, out: Outbox) -> None:
        """Keep the replicas' registered broker epochs for this and any later leadership; a leader
        forgets what older processes of its followers reported (Leader.update_broker_epochs)."""
        self.broker_epochs = event.broker_epochs
        if isinstance(self.state, Leader):
            self.state.update_broker_epochs(event.broker_epochs)

    def _on_make_follower(self, event: MakeFollower, now_ms: int, out: Outbox) -> None:
        assert event.leader_id != self.broker_id, f"{self.topic_partition}: MakeFollower names this broker leader"
        if self._is_stale(event.leader_epoch, event.partition_epoch):
            return
        if isinstance(self.state, Follower) and self.state.leader_epoch == event.leader_epoch:
            assert self.state.leader_id == event.leader_id, (
                f"{self.topic_partition}: epoch {event.leader_epoch} has two leaders, "
                f"{self.state.leader_id} and {event.leader_id}"
            )
            self.state.update(event.partition_epoch, event.isr, event.replicas)
            return
        assert not isinstance(self.state, Leader) or self.state.leader_epoch < event.leader_epoch, (
            f"{self.topic_partition}: epoch {event.leader_epoch} has leader {event.leader_id}, not {self.broker_id}"
        )
        if isinstance(self.state, Leader):
            self._fail_leader_requests(out, "is no longer the leader")
        self.state = Follower(event.leader_id, event.leader_epoch, event.partition_epoch, event.isr, event.replicas)
        # An epoch this broker led without appending has its entry at the LEO; as a follower its
        # latest epoch must be that of its last batch (see ReplicaLog.truncate_to).
        self.log.leader_epoch_cache.truncate_from_end(self.log.log_end_offset)

    def _on_stop_replica(self, event: StopReplica, now_ms: int, out: Outbox) -> None:
        self._fail_leader_requests(out, "is no longer hosted on this broker")
        self.stopped = True

    def _fail_leader_requests(self, out: Outbox, reason: str) -> None:
        """Answer every parked produce and DeleteRecords NOT_LEADER_OR_FOLLOWER."""
        message = f"broker {self.broker_id} {reason} for {self.topic_partition}; refresh metadata and retry"
        for delayed in self.produce_purgatory.pop_all():
            out.completions.append(ProduceResult(delayed.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                 delayed.base_offset, error_message=message))
        for item in self.delete_records_purgatory.take_all():
            out.completions.append(DeleteRecordsResult(item.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                       error_message=message))

    def _refuse(self, event: Event, out: Outbox) -> None:
        """A request to a stopped replica: NOT_LEADER_OR_FOLLOWER; any other event is ignored."""
        if isinstance(event, PartitionRequest):
            message = f"{self.topic_partition} is not hosted on broker {self.broker_id}"
            out.completions.append(error_result(event, ErrorCode.NOT_LEADER_OR_FOLLOWER, message))

    def _refuse_offline(self, event: Event, out: Outbox) -> None:
        """A request to a replica whose log went offline: KAFKA_STORAGE_ERROR (the log is not
        read or written); any other event is ignored (the owner is halting)."""
        if isinstance(event, PartitionRequest):
            message = f"the log of {self.topic_partition} on broker {self.broker_id} is offline: {self.offline_reason}"
            out.completions.append(error_result(event, ErrorCode.KAFKA_STORAGE_ERROR, message))

    # -- checks shared by requests ---------------------------------------------------------------

    def _request_error(self, current_leader_epoch: int, require_leader: bool) -> tuple[ErrorCode, str]:
        """Kafka's localLogWithEpochOrThrow: the epoch check first, then the role."""
        error = epoch_error(current_leader_epoch, self.leader_epoch)
        if error != ErrorCode.NONE and self.state is not None:
            verb = "is older than" if error == ErrorCode.FENCED_LEADER_EPOCH else "is newer than"
            return error, (f"leader epoch {current_leader_epoch} {verb} {self.leader_epoch} of "
                           f"{self.topic_partition} on broker {self.broker_id}; refresh metadata")
        if self.state is None or (require_leader and not isinstance(self.state, Leader)):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, (
                f"broker {self.broker_id} is not the leader of {self.topic_partition} (leader {self.leader_id}); "
                "refresh metadata"
            )
        return ErrorCode.NONE, ""

    def _out_of_range(self, offset: int) -> str | None:
        log = self.log
        if log.log_start_offset <= offset <= log.log_end_offset:
            return None
        return (f"offset {offset} is outside [{log.log_start_offset}, {log.log_end_offset}] of "
                f"{self.topic_partition}; seek to {log.log_start_offset} (earliest) or {log.high_watermark} (latest)")

    # -- produce ---------------------------------------------------------------------------------

    def _on_produce(self, event: ProduceRequest, now_ms: int, out: Outbox) -> None:
        error, message = self._produce_error(event)
        if error != ErrorCode.NONE:
            out.completions.append(ProduceResult(event.request_id, error, error_message=message))
            return
        assert isinstance(self.state, Leader)
        try:
            info = self.replica_log.append_as_leader(event.records, self.state.leader_epoch, self.wall_clock_ms, out)
        except StorageError as storage_error:
            out.completions.append(ProduceResult(event.request_id, error_of(storage_error),
                                                 error_message=str(storage_error)))
            return
        if event.acks != ACKS_ALL:
            out.completions.append(ProduceResult(event.request_id, ErrorCode.NONE, info.first_offset,
                                                 info.log_append_time_ms, self.log.log_start_offset))
            return
        self.produce_purgatory.add(DelayedProduce(event.request_id, info.first_offset, info.last_offset + 1,
                                                  info.log_append_time_ms, now_ms + max(event.timeout_ms, 0)))

    def _produce_error(self, event: ProduceRequest) -> tuple[ErrorCode, str]:
        """Why a produce is refused before any append, or (NONE, "")."""
        error, message = self._request_error(event.current_leader_epoch, require_leader=True)
        if error != ErrorCode.NONE:
            return error, message
        assert isinstance(self.state, Leader)
        if event.acks not in VALID_ACKS:
            return ErrorCode.INVALID_REQUIRED_ACKS, f"acks={event.acks}; use 0, 1 or -1 (all)"
        isr_size, min_isr = len(self.state.isr_state.isr), self.min_insync_replicas()
        if event.acks == ACKS_ALL and isr_size < min_isr:
            return ErrorCode.NOT_ENOUGH_REPLICAS, (
                f"{self.topic_partition} has {isr_size} in-sync replicas {list(self.state.isr_state.isr)}, "
                f"min.insync.replicas={min_isr}; retry when followers catch up, or use acks=1"
            )
        if event.acks == ACKS_ALL and self.produce_purgatory.is_full:
            return ErrorCode.REQUEST_TIMED_OUT, (
                f"{len(self.produce_purgatory)} acks=all produces already wait on {self.topic_partition}; retry later"
            )
        return ErrorCode.NONE, ""

    # -- fetch -----------------------------------------------------------------------------------

    def _on_follower_fetch(self, event: FollowerFetch, now_ms: int, out: Outbox) -> None:
        error, message = self._request_error(event.current_leader_epoch, require_leader=True)
        if error != ErrorCode.NONE:
            out.completions.append(self._fetch_error(event.request_id, error, message))
            return
        leader = self.state
        assert isinstance(leader, Leader)
        refused = leader.check_follower_fetch(event)
        if refused is not None and self._cuts_follower_log(refused) and not self.lease.holds(now_ms):
            refused = self._fetch_error(event.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER, (
                f"broker {self.broker_id} holds no lease to lead {self.topic_partition} (no heartbeat of the last "
                "broker.session.timeout.ms was answered unfenced), so it tells no follower to truncate: the "
                "controller may have moved the leadership; refresh metadata"))
        if refused is not None:
            out.completions.append(refused)
            return
        leader.record_follower_fetch(event, now_ms)
        proposal = leader.maybe_expand_isr(event.replica_id, now_ms)
        if proposal is not None:
            out.messages.append(proposal)
        self._maybe_increment_leader_high_watermark()
        out.completions.append(self._read(event, out))

    @staticmethod
    def _cuts_follower_log(answer: FetchResult) -> bool:
        """The answer makes the follower truncate (replication/follower.py)."""
        return answer.diverging_epoch is not None or answer.error == ErrorCode.OFFSET_OUT_OF_RANGE

    def _on_consumer_fetch(self, event: ConsumerFetch, now_ms: int, out: Outbox) -> None:
        error, message = self._request_error(event.current_leader_epoch, event.require_leader)
        if error == ErrorCode.NONE:
            message = self._out_of_range(event.fetch_offset) or ""
            error = ErrorCode.OFFSET_OUT_OF_RANGE if message else ErrorCode.NONE
        if error != ErrorCode.NONE:
            out.completions.append(self._fetch_error(event.request_id, error, message))
            return
        out.completions.append(self._read(event, out))

    def _fetch_error(self, request_id: int, error: ErrorCode, message: str) -> FetchResult:
        log = self.log
        return FetchResult(request_id, error, b"", log.high_watermark, log.log_start_offset, log.log_end_offset,
                           None, message)

    def _read(self, request: ConsumerFetch | FollowerFetch, out: Outbox) -> FetchResult:
        """Whole batches from the fetch offset: below the LEO for a follower, the HW for a consumer.
        Every batch is checked (CRC) before it leaves: a damaged one is never served."""
        log = self.log
        bound = log.log_end_offset if isinstance(request, FollowerFetch) else log.high_watermark
        try:
            data = log.read(request.fetch_offset, request.max_bytes, max_offset=bound)
        except CorruptRecordError as error:  # a batch header the log cannot walk past: where is not known
            return self._take_offline(request.request_id, DamagedBatch(log.log_end_offset, str(error)), out)
        end, damaged = check_batches(data.records, request.fetch_offset)
        if damaged is not None:
            return self._take_offline(request.request_id, damaged, out)
        if isinstance(request, FollowerFetch):
            self.replica_log.served(end)
        return FetchResult(request.request_id, ErrorCode.NONE, data.records, log.high_watermark,
                           log.log_start_offset, log.log_end_offset)

    def _take_offline(self, request_id: int, damaged: DamagedBatch, out: Outbox) -> FetchResult:
        """A batch of this replica's own log is damaged (bit rot, a bad sector): Kafka's answer to a
        failed log dir (KIP-112), for a broker with one log dir: halt. Kafka does not look (its
        followers find the damage and retry the same fetch forever, so the partition stalls while
        the leader keeps its role); here every read is checked and the replica gives up its log.

        Before the halt, the log is cut at the damaged batch and the cut made durable: the restarted
        process registers without a clean shutdown (KIP-966), so the controller takes it out of
        every ISR and ELR, and its replicas rejoin as followers that fetch what was cut from the
        leaders. Carrying on instead would be unsafe: a replica that lost acknowledged records while
        still in the ISR could be elected. Parked requests get NOT_LEADER_OR_FOLLOWER (a produce
        parked here was appended: its outcome is unknown, not failed)."""
        cut = self.log.damaged_from(damaged.base_offset)
        reason = f"the batch at offset {cut} of {self.topic_partition} is damaged: {damaged.reason}"
        self._fail_leader_requests(out, "took its log offline")
        self.offline_reason = reason
        self.replica_log.truncate_damaged(cut, reason, self.wall_clock_ms, out)
        out.log_dir_failure = reason
        return self._fetch_error(request_id, ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"the log of {self.topic_partition} on broker {self.broker_id} is offline: {reason}")

    # -- offsets ---------------------------------------------------------------------------------

    def _on_list_offsets(self, event: ListOffsets, now_ms: int, out: Outbox) -> None:
        error, message = self._request_error(event.current_leader_epoch, event.require_leader)
        log = self.log
        if error == ErrorCode.NONE and isinstance(self.state, Leader) and (
            log.high_watermark < self.state.leader_epoch_start_offset
        ):
            # Kafka: a new leader's HW may lag the start of its epoch until its followers fetch;
            # "latest" would then be a stale answer.
            error, message = ErrorCode.OFFSET_NOT_AVAILABLE, (
                f"the HW {log.high_watermark} of {self.topic_partition} lags the start of leader epoch "
                f"{self.leader_epoch} ({self.state.leader_epoch_start_offset}); retry shortly"
            )
        if error != ErrorCode.NONE:
            out.completions.append(ListOffsetsResult(event.request_id, error, error_message=message))
            return
        cache = log.leader_epoch_cache
        if event.timestamp == EARLIEST_TIMESTAMP:
            offset, timestamp = log.log_start_offset, -1
        elif event.timestamp == LATEST_TIMESTAMP:
            offset, timestamp = log.high_watermark, -1
        else:
            if event.timestamp == MAX_TIMESTAMP:
                found = log.offset_for_max_timestamp()
            else:
                found = log.offset_for_timestamp(event.timestamp)
            if found is None or found.offset >= log.high_watermark:
                out.completions.append(ListOffsetsResult(event.request_id, ErrorCode.NONE))
                return
            offset, timestamp = found.offset, found.timestamp
        epoch = cache.epoch_for_offset(offset)
        out.completions.append(ListOffsetsResult(event.request_id, ErrorCode.NONE, offset, timestamp,
                                                 self.leader_epoch if epoch is None else epoch))

    def _on_offsets_for_leader_epoch(self, event: OffsetsForLeaderEpoch, now_ms: int, out: Outbox) -> None:
        error, message = self._request_error(event.current_leader_epoch, require_leader=True)
        if error != ErrorCode.NONE:
            out.completions.append(OffsetsForLeaderEpochResult(event.request_id, error, error_message=message))
            return
        epoch, end_offset = self.log.leader_epoch_cache.end_offset_for(event.leader_epoch, self.log.log_end_offset)
        out.completions.append(OffsetsForLeaderEpochResult(event.request_id, ErrorCode.NONE, epoch, end_offset))

    def _on_delete_records(self, event: DeleteRecords, now_ms: int, out: Outbox) -> None:
        error, message = self._request_error(NO_EPOCH, require_leader=True)
        log = self.log
        target = log.high_watermark if event.offset == -1 else event.offset
        if error == ErrorCode.NONE and not 0 <= target <= log.high_watermark:
            error, message = ErrorCode.OFFSET_OUT_OF_RANGE, (
                f"cannot delete records of {self.topic_partition} before offset {event.offset}: use -1 (the HW) or "
                f"an offset in [0, {log.high_watermark}]"
            )
        if error == ErrorCode.NONE and self.delete_records_purgatory.is_full:
            error, message = ErrorCode.REQUEST_TIMED_OUT, "too many DeleteRecords wait; retry later"
        if error != ErrorCode.NONE:
            out.completions.append(DeleteRecordsResult(event.request_id, error, error_message=message))
            return
        reason = LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION
        if self.replica_log.maybe_increment_log_start_offset(target, reason, out):
            self.replica_log.delete_segments_below_log_start_offset(self.wall_clock_ms, out)
        self.delete_records_purgatory.add(DelayedDeleteRecords(event.request_id, target,
                                                               now_ms + max(event.timeout_ms, 0)))

    # -- replication -----------------------------------------------------------------------------

    def _on_fetch_response(self, event: FetchResponseFromLeader, now_ms: int, out: Outbox) -> None:
        if isinstance(self.state, Follower):
            self.state.on_fetch_response(event, self.replica_log, self.wall_clock_ms, out)

    def _on_alter_partition_response(self, event: AlterPartitionResponse, now_ms: int, out: Outbox) -> None:
        if isinstance(self.state, Leader):
            self.state.on_alter_partition_response(event, now_ms)

    def _on_run_retention(self, event: RunRetention, now_ms: int, out: Outbox) -> None:
        if isinstance(self.state, Leader):
            self.replica_log.delete_old_segments(self.wall_clock_ms, out)

    def _on_tick(self, event: Tick, now_ms: int, out: Outbox) -> None:
        """Timers are examined by `_settle`, after every event."""

    # -- after every event -----------------------------------------------------------------------

    def _settle(self, now_ms: int, out: Outbox) -> None:
        """Work every event may have made due: ISR shrink and resends, the leader's HW, and the
        purgatories (a parked request leaves in the Ready of the call that made it answerable)."""
        leader = (self.state if isinstance(self.state, Leader) and not self.stopped and self.offline_reason is None
                  else None)
        if leader is not None:
            for proposal in (leader.maybe_shrink_isr(now_ms), leader.maybe_resend(now_ms)):
                if proposal is not None:
                    out.messages.append(proposal)
            self._maybe_increment_leader_high_watermark()
            self._complete_delayed_produces(leader, now_ms, out)
            self._complete_delayed_delete_records(leader, now_ms, out)

    def _maybe_increment_leader_high_watermark(self) -> None:
        """The HW holds while the committed ISR is below min.insync.replicas (Kafka's KIP-966): records
        then reach no consumer until enough replicas hold them, so acks=1 writes to a shrunken ISR
        cannot be read and then lost with the leader. It holds too until the controller has recorded
        this epoch's lineage (`Leader`)."""
        assert isinstance(self.state, Leader)
        log = self.log
        if log.high_watermark == log.log_end_offset or not self.state.lineage_recorded:
            return  # the target is never above the LEO: nothing to do (every event of an idle leader)
        if len(self.state.isr_state.isr) < self.min_insync_replicas():
            return
        self.replica_log.maybe_increment_high_watermark(self.state.high_watermark_target())

    def _complete_delayed_produces(self, leader: Leader, now_ms: int, out: Outbox) -> None:
        """acks=all: done when the HW passes the last offset, with NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if the maximal ISR is below min.insync.replicas then (Kafka's checkEnoughReplicasReachOffset);
        REQUEST_TIMED_OUT at the deadline."""
        if not self.produce_purgatory:
            return
        log = self.log
        maximal_isr = leader.isr_state.maximal_isr
        enough = len(maximal_isr) >= self.min_insync_replicas()
        for delayed in self.produce_purgatory.pop_reached(log.high_watermark):
            if enough:
                out.completions.append(ProduceResult(delayed.request_id, ErrorCode.NONE, delayed.base_offset,
                                                     delayed.log_append_time_ms, log.log_start_offset))
            else:
                out.completions.append(ProduceResult(
                    delayed.request_id, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, delayed.base_offset,
                    error_message=f"appended to {self.topic_partition}, but its ISR {list(maximal_isr)} shrank below "
                    f"min.insync.replicas={self.min_insync_replicas()}; the records may be lost or duplicated on retry",
                ))
        for delayed in self.produce_purgatory.pop_expired(now_ms):
            out.completions.append(ProduceResult(
                delayed.request_id, ErrorCode.REQUEST_TIMED_OUT, delayed.base_offset,
                error_message=f"offsets [{delayed.base_offset}, {delayed.required_offset}) of {self.topic_partition} "
                f"were not replicated to the ISR within the timeout (HW {log.high_watermark}); retry may duplicate",
            ))

    def _complete_delayed_delete_records(self, leader: Leader, now_ms: int, out: Outbox) -> None:
        if not self.delete_records_purgatory:
            return
        low_watermark = leader.low_watermark()
        for item in self.delete_records_purgatory.take_all():
            assert isinstance(item, DelayedDeleteRecords), item
            if low_watermark >= item.offset:
                out.completions.append(DeleteRecordsResult(item.request_id, ErrorCode.NONE, low_watermark))
            elif item.deadline_ms <= now_ms:
                out.completions.append(DeleteRecordsResult(
                    item.request_id, ErrorCode.REQUEST_TIMED_OUT, low_watermark,
                    f"logStartOffset of {self.topic_partition} is {self.log.log_start_offset} on the leader, but the "
                    f"ISR's lowest is {low_watermark}; followers will follow",
                ))
            else:
                self.delete_records_purgatory.add(item)


_HANDLERS: dict[type, Callable[[Partition, Event, int, Outbox], None]] = {
    MakeLeader: Partition._on_make_leader,
    MakeFollower: Partition._on_make_follower,
    UpdateBrokerEpochs: Partition._on_update_broker_epochs,
    StopReplica: Partition._on_stop_replica,
    ProduceRequest: Partition._on_produce,
    ConsumerFetch: Partition._on_consumer_fetch,
    ListOffsets: Partition._on_list_offsets,
    OffsetsForLeaderEpoch: Partition._on_offsets_for_leader_epoch,
    DeleteRecords: Partition._on_delete_records,
    FollowerFetch: Partition._on_follower_fetch,
    FetchResponseFromLeader: Partition._on_fetch_response,
    AlterPartitionResponse: Partition._on_alter_partition_response,
    RunRetention: Partition._on_run_retention,
    Tick: Partition._on_tick,
}
