"""Follower: what a partition follower keeps, and how it applies its leader's fetch answers.

Kafka's ReplicaFetcherThread / AbstractFetcherThread, per partition, without the thread: the core
says where to fetch (`position`), the owner's fetcher sends the fetch and hands the answer back.

- Position: the follower fetches at its LEO with `last_fetched_epoch` = its latest leader epoch
  (KIP-320, Kafka 2.7+: truncation is found by the fetch itself, no OffsetsForLeaderEpoch round).
- Diverging epoch: the leader found that the follower's last epoch ends earlier in its own log (or
  is unknown to it). The follower truncates to the end offset of the largest common epoch
  (KIP-101/279, Kafka's getOffsetTruncationState): if its own cache has the leader's epoch, to the
  smaller of both end offsets; otherwise to the end of its largest epoch below the leader's (an
  intermediate step: the next fetch, with an older last epoch, narrows it further).
- Records: appended unchanged (offsets and epochs are the leader's). Then HW = min(leader HW, own
  LEO), but never lower than before: Kafka takes the leader's value even when a new leader's HW
  lags; ours stays, since everything below it was committed under an earlier leader and a cleanly
  elected leader holds it, so consumers of this follower never see the HW fall (DESIGN §6.3).
- logStartOffset follows the leader's (raised, never lowered), and whole segments below it are
  deleted at once; a follower runs no retention of its own (DESIGN §4).
- OFFSET_OUT_OF_RANGE (Kafka's fetchOffsetAndTruncate): behind the leader's logStartOffset, start
  empty there, with the leader's producers' state there (Kafka's follower starts with none, and as
  leader would write an idempotent producer's retry a second time); ahead of the leader's LEO
  (possible only after an unclean election), cut to it. A state that does not parse is refused
  like records that do not append: the same fetch again after the backoff.
- FENCED_LEADER_EPOCH: the leader is in a newer epoch than this follower knows: stop fetching until
  newer metadata arrives. Other errors leave the state alone; the Ready asks the fetcher to back
  off (`fetch_backoff`) and retry, as it does when the records could not be appended here.
"""

from __future__ import annotations

from replication.events import FetchResponseFromLeader
from replication.outbox import Outbox
from replication.ready import EpochEndOffset, FollowerFetchPosition
from replication.replica_log import ReplicaLog
from storage.errors import StorageError
from storage.log import LogStartOffsetIncrementReason
from storage.producer_state import CorruptSnapshotError
from storage.records import BATCH_HEADER_SIZE, read_header
from wire.error_codes import ErrorCode
from wire.sentinels import NO_LEADER, UNDEFINED_EPOCH_OFFSET


class Follower:
    """The follower-only state of one partition in one leader epoch.

    State: `leader_id` (NO_LEADER: offline, nothing to fetch), `leader_epoch`, `partition_epoch`,
    `isr` and `replicas` as the metadata says, and `fenced` (the leader answered FENCED_LEADER_EPOCH).
    """

    def __init__(self, leader_id: int, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...],
                 replicas: tuple[int, ...]) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.isr = isr
        self.replicas = replicas
        self.fenced = False

    def update(self, partition_epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...]) -> None:
        """Newer metadata in the same leader epoch (an ISR change)."""
        assert partition_epoch > self.partition_epoch, f"partition_epoch={partition_epoch} <= {self.partition_epoch}"
        self.partition_epoch = partition_epoch
        self.isr = isr
        self.replicas = replicas

    def position(self, broker_id: int, log: ReplicaLog, max_bytes: int) -> FollowerFetchPosition | None:
        if self.leader_id == NO_LEADER or self.fenced:
            return None
        return FollowerFetchPosition(
            replica_id=broker_id,
            leader_id=self.leader_id,
            leader_epoch=self.leader_epoch,
            fetch_offset=log.log.log_end_offset,
            last_fetched_epoch=log.latest_epoch(),
            log_start_offset=log.log.log_start_offset,
            max_bytes=max_bytes,
        )

    def is_current(self, response: FetchResponseFromLeader, log: ReplicaLog) -> bool:
        """The answer is to the fetch this follower would send now (not a late or duplicate one)."""
        return (
            not self.fenced
            and response.leader_id == self.leader_id
            and response.leader_epoch == self.leader_epoch
            and response.fetch_offset == log.log.log_end_offset
            and response.last_fetched_epoch == log.latest_epoch()
        )

    def on_fetch_response(self, response: FetchResponseFromLeader, log: ReplicaLog, now_ms: int,
                          out: Outbox) -> None:
        """Apply the leader's answer (ignored unless `is_current`). `now_ms` is wall-clock time, for
        storage; an error answer, or records this replica could not append, set `out.fetch_backoff`."""
        if not self.is_current(response, log):
            return
        out.fetch_backoff = response.error != ErrorCode.NONE
        if response.error == ErrorCode.FENCED_LEADER_EPOCH:
            self.fenced = True
        elif response.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            _on_out_of_range(response, log, now_ms, out)
        elif response.error != ErrorCode.NONE:
            return
        elif response.diverging_epoch is not None:
            _truncate_to_diverging_epoch(response.diverging_epoch, log, now_ms, out)
        else:
            self._append(response, log, now_ms, out)

    def _append(self, response: FetchResponseFromLeader, log: ReplicaLog, now_ms: int, out: Outbox) -> None:
        if response.records:
            _start_at_first_batch(response.records, log, now_ms, out)
            try:
                log.append_as_follower(response.records, now_ms, out)
            except StorageError:
                # Kafka marks the partition failed; here the answer is dropped and the same offset
                # is fetched again after the backoff (a damaged transfer heals, a full disk may get room).
                out.fetch_backoff = True
                return
        target = min(response.high_watermark, log.log.log_end_offset)
        log.maybe_increment_high_watermark(target)
        start = min(response.log_start_offset, log.log.high_watermark)
        if log.maybe_increment_log_start_offset(start, LogStartOffsetIncrementReason.LEADER_OFFSET_INCREMENTED, out):
            log.delete_segments_below_log_start_offset(now_ms, out)


def _start_at_first_batch(records: bytes, log: ReplicaLog, now_ms: int, out: Outbox) -> None:
    """An empty log whose start falls inside the leader's first batch starts at that batch instead
    (Kafka's Partition.appendRecordsToFollowerOrFutureReplica on UnexpectedAppendOffsetException):
    DeleteRecords may put the leader's logStartOffset in the middle of a batch, the follower then
    starts empty there, and the leader answers its fetch with the whole batch, which no append at
    the log end could take; the fetch would fail forever. logStartOffset follows the leader's
    again right after the append (`_append`)."""
    if len(records) < BATCH_HEADER_SIZE:
        return
    try:
        first = read_header(records)
    except StorageError:
        return  # the append refuses it and the fetch is retried
    end = log.log.log_end_offset
    if end == log.log.log_start_offset and first.base_offset < end <= first.last_offset:
        # The producers' state it started with stays: it covers the batches that end below `end`,
        # so those below this batch, which the append adds (after an unclean election it may hold
        # one of another history that ends inside this batch: cut, as a truncation would).
        log.truncate_fully_and_start_at(first.base_offset, now_ms, out,
                                        log.log.producer_state.encode(below=first.base_offset))


def _truncate_to_diverging_epoch(diverging: EpochEndOffset, log: ReplicaLog, now_ms: int, out: Outbox) -> None:
    """Kafka's getOffsetTruncationState for a diverging epoch in a fetch answer."""
    log_end_offset = log.log.log_end_offset
    epoch, end_offset = log.log.leader_epoch_cache.end_offset_for(diverging.epoch, log_end_offset)
    if end_offset == UNDEFINED_EPOCH_OFFSET:
        target = min(diverging.end_offset, log_end_offset)
    elif epoch != diverging.epoch:
        target = min(end_offset, log_end_offset)
    else:
        target = min(end_offset, diverging.end_offset, log_end_offset)
    log.truncate_to(target, now_ms, out)


def _on_out_of_range(response: FetchResponseFromLeader, log: ReplicaLog, now_ms: int, out: Outbox) -> None:
    """Kafka's fetchOffsetAndTruncate, with the leader's offsets from the answer itself."""
    log_end_offset = log.log.log_end_offset
    if 0 <= response.log_end_offset < log_end_offset:
        log.truncate_to(response.log_end_offset, now_ms, out)
    elif response.log_start_offset > log_end_offset:
        try:
            log.truncate_fully_and_start_at(response.log_start_offset, now_ms, out, response.producer_snapshot)
        except CorruptSnapshotError:
            out.fetch_backoff = True
