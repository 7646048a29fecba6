"""ReplicaLog: the one door through which replication changes a partition's `storage.Log`.

Every change the core makes (append, truncate, raise logStartOffset, delete segments, move the HW)
goes through here and is recorded as a `LogChange` in the call's outbox, so the `Ready` lists what
happened to the log, in order. Truncation goes through `LogManager.truncate_to`, which also lowers
the cleaner checkpoint (Kafka's Partition.truncateTo does the same through its LogManager).
"""

from __future__ import annotations

import dataclasses

from replication.outbox import Outbox
from replication.ready import (
    Appended,
    LogStartOffsetRaised,
    SegmentsDeleted,
    Truncated,
    TruncatedDamaged,
    TruncatedFully,
)
from storage.config import CleanupPolicy
from storage.log import Log, LogAppendInfo, LogStartOffsetIncrementReason
from storage.log_manager import LogManager
from wire.topic_partition import TopicPartition


class ReplicaLog:
    """A partition's log on this broker, opened (or created) through the node's `LogManager`."""

    def __init__(self, log_manager: LogManager, topic_partition: TopicPartition, now_ms: int) -> None:
        self.log_manager = log_manager
        self.topic_partition = topic_partition
        self.log: Log = log_manager.get_or_create_log(topic_partition, now_ms)
        # Records from here to the LEO were appended by this replica as leader and never served to
        # a follower: no other broker holds them. At start, what an earlier process served is not
        # known, so the whole log counts as replicated.
        self.replicated_end = self.log.log_end_offset

    @property
    def name(self) -> str:
        return str(self.topic_partition)

    def latest_epoch(self) -> int:
        """The epoch of the latest leader-epoch entry, -1 (NO_EPOCH) for none."""
        latest = self.log.leader_epoch_cache.latest_epoch()
        return -1 if latest is None else latest

    def may_be_committed_end(self) -> int:
        """The end of the records that may be committed: those beyond both the HW and
        `replicated_end` exist on this broker only, which never counted them committed, so no
        leader ever did (the recovery election reports this end, `ReplicaManager.offline_log_ends`)."""
        log = self.log
        return min(log.log_end_offset, max(self.replicated_end, log.high_watermark, log.log_start_offset))

    def served(self, end_offset: int) -> None:
        """Records below `end_offset` went to a follower."""
        self.replicated_end = max(self.replicated_end, min(end_offset, self.log.log_end_offset))

    def append_as_leader(self, records: bytes, leader_epoch: int, now_ms: int, out: Outbox) -> LogAppendInfo:
        """Validate, assign offsets, stamp `leader_epoch`; raises StorageError with the log unchanged.
        An idempotent producer's retry of a batch in the log appends nothing (`info.duplicate`)."""
        info = self.log.append_as_leader(records, leader_epoch, now_ms)
        if not info.duplicate:
            out.log_changes.append(Appended(info.first_offset, info.last_offset, leader_epoch))
        return info

    def append_as_follower(self, records: bytes, now_ms: int, out: Outbox) -> LogAppendInfo:
        """Append the leader's batches unchanged; raises StorageError with the log unchanged."""
        info = self.log.append_as_follower(records, now_ms)
        self.replicated_end = self.log.log_end_offset  # the leader holds all of it
        out.log_changes.append(Appended(info.first_offset, info.last_offset, None))
        return info

    def truncate_to(self, offset: int, now_ms: int, out: Outbox) -> bool:
        """Cut the log to `offset` if it is longer. Leader-epoch entries starting at or above the new
        LEO go too, even when nothing else does: an epoch this replica led without appending (its
        entry sits at the LEO) would otherwise stay its latest epoch and repeat the same diverging
        answer forever."""
        high_watermark_before = self.log.high_watermark
        if not self.log_manager.truncate_to(self.topic_partition, offset, now_ms):
            self.log.leader_epoch_cache.truncate_from_end(self.log.log_end_offset)
            return False
        self.replicated_end = min(self.replicated_end, self.log.log_end_offset)
        out.log_changes.append(Truncated(self.log.log_end_offset, high_watermark_before))
        return True

    def truncate_damaged(self, offset: int, reason: str, now_ms: int, out: Outbox) -> None:
        """Cut the log at the damaged batch starting at `offset` (`Log.truncate_to` makes the cut
        durable), so that no later process of this broker serves or counts what lay from there."""
        high_watermark_before = self.log.high_watermark
        self.log_manager.truncate_to(self.topic_partition, offset, now_ms)
        self.replicated_end = min(self.replicated_end, self.log.log_end_offset)
        out.log_changes.append(TruncatedDamaged(self.log.log_end_offset, high_watermark_before, reason))

    def truncate_fully_and_start_at(self, offset: int, now_ms: int, out: Outbox,
                                    producer_snapshot: bytes = b"") -> None:
        """`Log.truncate_fully_and_start_at`; raises CorruptSnapshotError, changing nothing."""
        self.log.truncate_fully_and_start_at(offset, now_ms, producer_snapshot)
        self.replicated_end = offset
        out.log_changes.append(TruncatedFully(offset))

    def maybe_increment_log_start_offset(self, offset: int, reason: LogStartOffsetIncrementReason,
                                         out: Outbox) -> bool:
        old = self.log.maybe_increment_log_start_offset(offset, reason)
        if old is None:
            return False
        out.log_changes.append(LogStartOffsetRaised(old, self.log.log_start_offset, reason))
        return True

    def delete_old_segments(self, now_ms: int, out: Outbox) -> None:
        """Retention by all three rules (the leader's pass)."""
        old_start = self.log.log_start_offset
        for reason, count in self.log.delete_old_segments(now_ms):
            out.log_changes.append(SegmentsDeleted(reason, count))
        if self.log.log_start_offset > old_start:
            out.log_changes.append(LogStartOffsetRaised(old_start, self.log.log_start_offset,
                                                        LogStartOffsetIncrementReason.SEGMENT_DELETION))

    def delete_segments_below_log_start_offset(self, now_ms: int, out: Outbox) -> None:
        """Delete the whole segments below logStartOffset, and nothing by time or size.

        `Log.delete_old_segments` applies every rule of the log's cleanup policy; without `delete`
        in the policy only the logStartOffset rule applies, so the pass runs under a copy of the
        config without it. A follower must not apply retention.ms / retention.bytes itself (DESIGN
        §4: its logStartOffset follows the leader's). One owner, no locks: the swap is invisible."""
        config = self.log.config
        self.log.config = dataclasses.replace(config, cleanup_policy=frozenset({CleanupPolicy.COMPACT}))
        try:
            deleted = self.log.delete_old_segments(now_ms)
        finally:
            self.log.config = config
        for reason, count in deleted:
            out.log_changes.append(SegmentsDeleted(reason, count))

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Raise the HW to `offset` (never lower it, never past the LEO); True if it moved."""
        if offset <= self.log.high_watermark:
            return False
        assert offset <= self.log.log_end_offset, f"hw {offset} > leo {self.log.log_end_offset} of {self.name}"
        return self.log.maybe_increment_high_watermark(offset) is not None
