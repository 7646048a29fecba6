"""Leader: what a partition leader keeps for one leadership — followers, ISR, HW target.

Kafka's Partition.scala, leader half. Owned by `Partition` while it leads; built anew for each
new leader epoch (`MakeLeader` with a higher epoch), updated in place for newer metadata of the same
epoch. It decides; `Partition` reads and writes the log and answers requests.

- Followers: one immutable `ReplicaState` per follower, replaced on each accepted fetch. A fetch is
  accepted only if the follower's log matches the leader's up to its fetch offset: KIP-320's check
  of (fetch_offset, last_fetched_epoch) against the leader-epoch cache, else the answer is a
  diverging epoch and the follower's state is left alone (its LEO would mean nothing).
- ISR: `isr_state` is committed or has one change in flight (`isr_state.py`). A follower joins when
  its LEO reaches the HW and the start of this leader epoch (Kafka's isFollowerInSync: it then holds
  every record this leader may commit), and leaves when not caught up for
  `replica.lag.time.max.ms`; both are AlterPartition proposals, and the controller's answer (or
  newer metadata) decides.
- Broker epochs (KIP-903): `broker_epochs` holds each replica's registered broker epoch from the
  metadata (`UpdateBrokerEpochs`). A fetch from an older epoch than the registered one or the last
  fetch's is refused; a follower whose broker registered again, or fetched with a newer epoch, starts
  from a fresh `ReplicaState` (what its older process held may have died with it); it may join the
  ISR only when its fetch state comes from the registered process (Kafka's isReplicaIsrEligible).
  So no LEO reported by an older process of a follower ever counts towards the HW or the ISR once
  the leader knows of a newer one.
- HW target: the lowest LEO over the *maximal* ISR (the leader's own included). The HW only moves up
  (`Partition` applies it with `Log.maybe_increment_high_watermark`, and holds it while the committed
  ISR is below `min.insync.replicas`, as Kafka does since KIP-966). acks=all also checks the ISR size
  itself (NOT_ENOUGH_REPLICAS before the append, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the HW passes
  but the maximal ISR is too small).
- Lineage (ours): the HW does not move until the controller has recorded this epoch's lineage
  (`EpochLineage`: the LEO and latest epoch when this epoch began), asked for by the first proposal
  of the leadership (`PendingLineage`, the ISR unchanged) unless the metadata records it already. So
  every record ever committed lies on the history of the newest recorded epoch, and the recovery
  election can tell a deposed leader's records, which no leader committed, from committed ones that
  carry an older epoch (replication sim seed 2026113664).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import replace

from replication.config import ReplicationConfig
from replication.events import AlterPartitionResponse, FollowerFetch
from replication.isr_state import CommittedIsr, IsrState, PendingExpandIsr, PendingLineage, PendingShrinkIsr
from replication.ready import AlterPartitionProposal, EpochEndOffset, FetchResult
from replication.replica_state import NO_BROKER_EPOCH, UNKNOWN_OFFSET, ReplicaState
from storage.errors import StorageError
from storage.log import Log
from wire.alter_partition import EpochLineage
from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

# Kafka's handleAlterPartitionError: these answers say the proposal was not applied. The leader goes
# back to its last committed ISR only when the answer also proves that no copy of the proposal can
# be applied later: INELIGIBLE_REPLICA comes with a partition epoch the controller bumped for that
# purpose (controller/quorum_controller.py, "Stale AlterPartition"), which the leader adopts. Without
# it (OPERATION_NOT_ATTEMPTED, or an answer without a newer epoch) the change stays pending: the HW
# keeps counting the proposed member until newer metadata settles the ISR.
_REVERT_ERRORS = frozenset({ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED})
# These say the leader's view is stale: keep the change pending (HW on the maximal ISR) until new
# metadata arrives, and do not resend.
_GIVE_UP_ERRORS = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NEW_LEADER_ELECTED,
        ErrorCode.STALE_BROKER_EPOCH,
    }
)


class Leader:
    """The leader-only state of one partition in one leader epoch.

    State: `leader_epoch` (fixed), `partition_epoch`, `replicas`, `isr_state`, `remote` (a
    `ReplicaState` per follower), `leader_epoch_start_offset` (the LEO when this epoch began: every
    record from here on was appended by this leader), the time an in-flight proposal is resent,
    and per-replica backoffs after INELIGIBLE_REPLICA.

    Invariants: the leader is in every ISR view; `remote` holds exactly the other replicas; the
    maximal ISR contains the committed ISR; no follower's state comes from a process older than its
    registered broker epoch; while `lineage_recorded` is False the ISR state is `PendingLineage`.
    """

    def __init__(self, broker_id: int, log: Log, config: ReplicationConfig, leader_epoch: int,
                 partition_epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...], now_ms: int,
                 broker_epochs: Iterable[tuple[int, int]] = (), lineage_recorded: bool = True) -> None:
        assert broker_id in isr, f"leader {broker_id} not in ISR {isr} of {log.name}"
        latest_epoch = log.leader_epoch_cache.latest_epoch()
        assert latest_epoch is None or latest_epoch <= leader_epoch, (
            f"log {log.name} holds epoch {latest_epoch} > new leader epoch {leader_epoch}"
        )
        self.broker_id = broker_id
        self.log = log
        self.config = config
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr_state: IsrState = CommittedIsr(isr)
        # Kafka's makeLeader: the new epoch starts at the LEO, in the cache at once, so that a
        # follower's epoch check finds where this leader's records begin before any is appended.
        self.leader_epoch_start_offset = log.log_end_offset
        # The epochs below the LEO are at most the cache's latest. An empty cache says nothing about
        # them (a follower truncated fully to a leader's log start holds no record, but the offsets
        # below were used), nor does one ending in this epoch: any earlier epoch may be below.
        known = latest_epoch is not None and latest_epoch < leader_epoch
        previous_epoch = latest_epoch if known else leader_epoch - 1
        self.epoch_lineage = EpochLineage(leader_epoch, previous_epoch, log.log_end_offset)
        log.assign_epoch(leader_epoch, log.log_end_offset)
        self.remote = {
            replica: ReplicaState.for_new_leadership(now_ms, replica in isr)
            for replica in replicas
            if replica != broker_id
        }
        self.resend_ms: int | None = None
        self.ineligible_until_ms: dict[int, int] = {}
        self.broker_epochs: dict[int, int] = {}
        self.update_broker_epochs(broker_epochs)
        self.lineage_recorded = lineage_recorded
        self._maybe_propose_lineage(now_ms)

    # -- metadata -----------------------------------------------------------------------------

    def update(self, partition_epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...], now_ms: int,
               lineage_recorded: bool = True) -> None:
        """Newer metadata in this epoch (an ISR change, ours or the controller's): it replaces the
        ISR view, including any change in flight (Kafka's makeLeader without a new epoch)."""
        assert partition_epoch > self.partition_epoch, f"partition_epoch={partition_epoch} <= {self.partition_epoch}"
        assert self.broker_id in isr, f"leader {self.broker_id} not in ISR {isr} of {self.log.name}"
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr_state = CommittedIsr(isr)
        self.resend_ms = None
        self.remote = {
            replica: self.remote[replica].for_leader_update(now_ms, replica in isr)
            if replica in self.remote
            else ReplicaState.for_new_leadership(now_ms, replica in isr)
            for replica in replicas
            if replica != self.broker_id
        }
        self.lineage_recorded = self.lineage_recorded or lineage_recorded
        self._maybe_propose_lineage(now_ms)

    def _maybe_propose_lineage(self, now_ms: int) -> None:
        """Until the lineage is recorded, the committed ISR is proposed again with it (sent by the
        next `maybe_resend`, at once)."""
        if self.lineage_recorded or self.isr_state.is_inflight:
            return
        proposal = self._proposal(self.isr_state.isr)
        self.isr_state = PendingLineage(replace(proposal, epoch_lineage=self.epoch_lineage),
                                        CommittedIsr(self.isr_state.isr))
        self.resend_ms = now_ms

    def update_broker_epochs(self, broker_epochs: Iterable[tuple[int, int]]) -> None:
        """The replicas' registered broker epochs from the metadata (KIP-903). A follower whose broker
        registered again since its last fetch starts afresh: its LEO is unknown (an ISR member's holds
        the HW until the new process fetches) and it is no longer caught up."""
        self.broker_epochs = {replica: epoch for replica, epoch in broker_epochs if replica != self.broker_id}
        for replica, state in self.remote.items():
            if state.is_older_broker_epoch(self.broker_epochs.get(replica, NO_BROKER_EPOCH)):
                self.remote[replica] = ReplicaState.for_new_broker_epoch()

    def _is_broker_epoch_isr_eligible(self, replica_id: int) -> bool:
        """The follower's fetch state comes from its registered process, when the metadata names one
        (Kafka's isBrokerEpochIsrEligible)."""
        registered = self.broker_epochs.get(replica_id, NO_BROKER_EPOCH)
        return registered == NO_BROKER_EPOCH or self.remote[replica_id].broker_epoch == registered

    def _check_replica(self, replica: int) -> None:
        """A follower's state never comes from an older process than the registered one (only a fetch
        moves it; `UpdateBrokerEpochs` resets the older ones)."""
        state = self.remote[replica]
        assert not state.is_older_broker_epoch(self.broker_epochs.get(replica, NO_BROKER_EPOCH)), (
            f"{self.log.name}: follower {replica} state from broker epoch {state.broker_epoch} < registered "
            f"{self.broker_epochs[replica]}"
        )

    # -- follower fetches ---------------------------------------------------------------------

    def check_follower_fetch(self, request: FollowerFetch) -> FetchResult | None:
        """None if the fetch is accepted (the caller records it and reads), else the answer: an
        error, or a diverging epoch (Kafka's Partition.fetchRecords for a follower)."""
        log = self.log
        state = self.remote.get(request.replica_id)
        registered = self.broker_epochs.get(request.replica_id, NO_BROKER_EPOCH)
        if state is None:
            return self._fetch_error(request, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                     f"broker {request.replica_id} is not a replica of {log.name} "
                                     f"(replicas {self.replicas})")
        if state.is_stale_broker_epoch(request.broker_epoch) or (
            registered != NO_BROKER_EPOCH and request.broker_epoch != registered
        ):
            # KIP-380's check: only the replica's registered process may fetch as it (a fetch with
            # no epoch or another one would move its LEO, hence the HW). Its own process fetches
            # again once this leader has its registration. One answer for an epoch above or below
            # it, and none says it, so the answers do not lead a forger to it.
            return self._fetch_error(request, ErrorCode.STALE_BROKER_EPOCH,
                                     f"a fetch as broker {request.replica_id} must carry that broker's registered "
                                     f"broker epoch; {request.broker_epoch} is not it")
        if request.last_fetched_epoch != NO_EPOCH:
            epoch, end_offset = log.leader_epoch_cache.end_offset_for(request.last_fetched_epoch, log.log_end_offset)
            if epoch == UNDEFINED_EPOCH or end_offset == UNDEFINED_EPOCH_OFFSET:
                return self._fetch_error(request, ErrorCode.OFFSET_OUT_OF_RANGE,
                                         f"{log.name} has no end offset for epoch {request.last_fetched_epoch}")
            if request.fetch_offset >= log.log_start_offset and (
                epoch < request.last_fetched_epoch or end_offset < request.fetch_offset
            ):
                return FetchResult(request.request_id, ErrorCode.NONE, b"", log.high_watermark,
                                   log.log_start_offset, log.log_end_offset, EpochEndOffset(epoch, end_offset))
        if not log.log_start_offset <= request.fetch_offset <= log.log_end_offset:
            return self._fetch_error(request, ErrorCode.OFFSET_OUT_OF_RANGE,
                                     f"offset {request.fetch_offset} is outside [{log.log_start_offset}, "
                                     f"{log.log_end_offset}] of {log.name}")
        return None

    def _fetch_error(self, request: FollowerFetch, error: ErrorCode, message: str) -> FetchResult:
        """A refusal; a follower behind logStartOffset, which starts empty there, also gets the
        producers' state there (replication/follower.py)."""
        log = self.log
        snapshot = b""
        if error == ErrorCode.OFFSET_OUT_OF_RANGE and request.fetch_offset < log.log_start_offset:
            # A damaged batch below logStartOffset: the follower starts with no producers, as in Kafka.
            with contextlib.suppress(StorageError):
                snapshot = log.producer_state_at_start()
        return FetchResult(request.request_id, error, b"", log.high_watermark, log.log_start_offset,
                           log.log_end_offset, None, message, snapshot)

    def record_follower_fetch(self, request: FollowerFetch, now_ms: int) -> None:
        """Note an accepted fetch: the follower's LEO, logStartOffset, caught-up time, broker epoch."""
        state = self.remote[request.replica_id]
        self.remote[request.replica_id] = state.after_fetch(
            request.fetch_offset, request.log_start_offset, now_ms, self.log.log_end_offset, request.broker_epoch
        )
        self._check_replica(request.replica_id)

    # -- ISR ----------------------------------------------------------------------------------

    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> AlterPartitionProposal | None:
        """Propose `replica_id` for the ISR if it is out and in sync now (Kafka's maybeExpandIsr)."""
        state = self.isr_state
        if state.is_inflight or replica_id in state.isr or self.ineligible_until_ms.get(replica_id, -1) > now_ms:
            return None
        if not self._is_broker_epoch_isr_eligible(replica_id):
            return None
        log_end_offset = self.remote[replica_id].log_end_offset
        if log_end_offset < self.log.high_watermark or log_end_offset < self.leader_epoch_start_offset:
            return None
        new_isr = tuple(replica for replica in self.replicas if replica in state.isr or replica == replica_id)
        proposal = self._proposal(new_isr)
        self.isr_state = PendingExpandIsr(replica_id, proposal, now_ms, CommittedIsr(state.isr))
        self.resend_ms = now_ms + self.config.alter_partition_timeout_ms
        return proposal

    def out_of_sync_replicas(self, now_ms: int) -> tuple[int, ...]:
        """ISR followers not caught up within `replica.lag.time.max.ms` (Kafka's getOutOfSyncReplicas)."""
        log_end_offset = self.log.log_end_offset
        lag_ms = self.config.replica_lag_time_max_ms
        out_of_sync: list[int] = []  # a plain loop: this runs after every event a leader handles
        for replica in self.isr_state.isr:
            if replica == self.broker_id:
                continue
            state = self.remote.get(replica)
            if state is None or not state.is_caught_up(log_end_offset, now_ms, lag_ms):
                out_of_sync.append(replica)
        return tuple(out_of_sync)

    def maybe_shrink_isr(self, now_ms: int) -> AlterPartitionProposal | None:
        """Propose the ISR without its out-of-sync followers (Kafka's maybeShrinkIsr)."""
        state = self.isr_state
        if state.is_inflight:
            return None
        out_of_sync = self.out_of_sync_replicas(now_ms)
        if not out_of_sync:
            return None
        proposal = self._proposal(tuple(replica for replica in state.isr if replica not in out_of_sync))
        self.isr_state = PendingShrinkIsr(out_of_sync, proposal, now_ms, CommittedIsr(state.isr))
        self.resend_ms = now_ms + self.config.alter_partition_timeout_ms
        return proposal

    def _proposal(self, new_isr: tuple[int, ...]) -> AlterPartitionProposal:
        assert self.broker_id in new_isr, f"proposed ISR {new_isr} lacks the leader {self.broker_id}"
        broker_epochs = tuple(
            NO_BROKER_EPOCH if replica == self.broker_id else self.remote[replica].broker_epoch for replica in new_isr
        )
        return AlterPartitionProposal(self.leader_epoch, self.partition_epoch, new_isr, broker_epochs)

    def maybe_resend(self, now_ms: int) -> AlterPartitionProposal | None:
        """The in-flight proposal again, if its answer is overdue (or a retriable error came)."""
        state = self.isr_state
        if not state.is_inflight or self.resend_ms is None or self.resend_ms > now_ms:
            return None
        assert isinstance(state, PendingExpandIsr | PendingShrinkIsr | PendingLineage), state
        self.resend_ms = now_ms + self.config.alter_partition_timeout_ms
        return state.proposal

    def on_alter_partition_response(self, response: AlterPartitionResponse, now_ms: int) -> bool:
        """Apply the controller's answer to the in-flight proposal; True if the ISR view changed.
        Answers to other proposals (duplicates, late replies) are ignored (Kafka's
        handleAlterPartitionUpdate / handleAlterPartitionError)."""
        state = self.isr_state
        if isinstance(state, CommittedIsr) or state.proposal != response.proposal:
            return False
        if response.error == ErrorCode.NONE:
            if response.leader_epoch != self.leader_epoch or response.partition_epoch < self.partition_epoch:
                return False  # stale: newer metadata will settle the ISR
            assert self.broker_id in response.isr, f"controller ISR {response.isr} lacks leader {self.broker_id}"
            self.isr_state = CommittedIsr(response.isr)
            self.partition_epoch = response.partition_epoch
            self.resend_ms = None
            self.lineage_recorded = self.lineage_recorded or isinstance(state, PendingLineage)
            return True
        if response.error in _REVERT_ERRORS:
            if isinstance(state, PendingExpandIsr) and response.error == ErrorCode.INELIGIBLE_REPLICA:
                backoff_ms = self.config.ineligible_replica_backoff_ms
                self.ineligible_until_ms[state.new_in_sync_replica_id] = now_ms + backoff_ms
            self.resend_ms = None
            if response.leader_epoch != self.leader_epoch or response.partition_epoch <= self.partition_epoch:
                return False  # copies of the proposal may still be applied: keep it pending
            assert self.broker_id in response.isr, f"controller ISR {response.isr} lacks leader {self.broker_id}"
            self.isr_state = CommittedIsr(response.isr)
            self.partition_epoch = response.partition_epoch
            self._maybe_propose_lineage(now_ms)
            return True
        self.resend_ms = None if response.error in _GIVE_UP_ERRORS else now_ms
        return False

    # -- offsets and timers -------------------------------------------------------------------

    def high_watermark_target(self) -> int:
        """The lowest LEO over the maximal ISR (UNKNOWN_OFFSET while a member has not fetched)."""
        target = self.log.log_end_offset
        for replica in self.isr_state.maximal_isr:
            if replica != self.broker_id:
                state = self.remote.get(replica)
                target = min(target, UNKNOWN_OFFSET if state is None else state.log_end_offset)
        return target

    def low_watermark(self) -> int:
        """The lowest logStartOffset over the ISR (Kafka's lowWatermarkIfLeader, over the ISR)."""
        low = self.log.log_start_offset
        for replica in self.isr_state.isr:
            if replica != self.broker_id:
                state = self.remote.get(replica)
                low = min(low, UNKNOWN_OFFSET if state is None else state.log_start_offset)
        return low

    def next_timer_ms(self) -> int | None:
        """When an ISR follower would fall out of sync (if the leader's LEO stays where it is), or an
        in-flight proposal is resent: the core's next tick, so the ISR check needs no polling."""
        if self.isr_state.is_inflight:
            return self.resend_ms
        log_end_offset = self.log.log_end_offset
        lag_ms = self.config.replica_lag_time_max_ms
        times = [
            self.remote[replica].last_caught_up_time_ms + lag_ms + 1
            for replica in self.isr_state.isr
            if replica in self.remote and self.remote[replica].log_end_offset != log_end_offset
        ]
        return min(times, default=None)
