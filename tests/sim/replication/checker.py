"""ReplicationChecker: DESIGN §6 invariants 1-4 and 6 against one canonical history, after every step.

The canonical history of a partition maps each batch's base offset to its bytes, as first seen
below some replica's HW. After every `Ready` the checker reads the replica's log from where it last
verified up to its HW and requires:
- (2) every batch below a replica's HW equals the canonical batch at that offset (a new one joins
  the history; one overlapping a canonical batch differently is a violation);
- (3) a replica's HW never falls during one incarnation, except by a truncation the excuse below
  covers; every batch served to a consumer lies below the serving replica's HW and is canonical;
- (6) batches in a log are contiguous (offsets unique and increasing) with non-decreasing epochs;
- (4) one leader per (partition, leader epoch), and each core's epochs only grow (the core asserts);
- (1) every acks=all success matches the canonical batch at its offset when the leader answers,
  and at the end, after healing, is still in the leader's log unless retention or DeleteRecords
  removed it (it lies below logStartOffset).
- retention only on leaders: a replica's logStartOffset never exceeds the highest one any leader had.

The excuse (DESIGN §6.1, "short of losing every ISR member's disk"): a crash may cut a broker's log
back to its recovery point (`disk.crash`). When every member of the controller's ISR has lost an
offset that way (down, or up without having fetched it again), records from there on are excused:
acked ones leave the must-keep set, and batches there from leader epochs up to the current one are
no longer held to the history (the new leader may overwrite them). Later epochs are checked as usual.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from replication.ready import FetchResult, Ready, Role, Truncated, TruncatedFully
from storage.checkpoint import TopicPartition
from storage.log import Log
from storage.records import iter_headers

ReplicaKey = tuple[int, int, TopicPartition]  # broker id, incarnation, partition
TAIL = 16  # bytes from magic on: what a leader does not rewrite (baseOffset, length, epoch come first)


class InvariantViolation(AssertionError):
    """A DESIGN §6 invariant does not hold."""


@dataclass(slots=True)
class History:
    """One partition's canonical batches: base offset -> (next offset, bytes)."""

    batches: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    bases: list[int] = field(default_factory=list)
    acked: dict[int, bytes] = field(default_factory=dict)  # acks=all successes: base offset -> tail
    excuses: list[tuple[int, int]] = field(default_factory=list)  # (offset, epoch): lost on every ISR member
    excused_count: int = 0
    max_leader_log_start: int = 0
    lost: dict[int, list[LostRange]] = field(default_factory=dict)  # broker -> ranges a crash may have cut
    last_excuse_point: int = -1


@dataclass(slots=True)
class LostRange:
    """Offsets [low, high) a crash may have cut from a broker's log, written in leader epochs up to
    `epoch` (the partition's epoch at the crash); `used` once an excuse counted it."""

    low: int
    high: int
    epoch: int
    used: bool = False


@dataclass(slots=True)
class ReplicaProgress:
    verified_offset: int  # every batch below it was checked against the history
    high_watermark: int
    next_offset: int = -1  # where the next verified batch must start (-1: anywhere)
    last_epoch: int = -1


class ReplicationChecker:
    def __init__(self, partitions: list[TopicPartition], isr_of: Callable[[TopicPartition], tuple[int, ...]],
                 max_epoch_of: Callable[[TopicPartition], int]) -> None:
        self.histories = {tp: History() for tp in partitions}
        self.progress: dict[ReplicaKey, ReplicaProgress] = {}
        self.leaders: dict[tuple[TopicPartition, int], int] = {}
        self.isr_of = isr_of
        self.max_epoch_of = max_epoch_of
        self.checked_batches = 0
        self.consumed_batches = 0

    def fail(self, message: str) -> None:
        raise InvariantViolation(message)

    # -- every Ready -------------------------------------------------------------------------------

    def observe(self, key: ReplicaKey, log: Log, ready: Ready, consumer_requests: set[int],
                acked: list[tuple[int, bytes]]) -> None:
        """Check one replica after one `Ready`: `consumer_requests` are the ids of consumer fetches
        among its completions, `acked` the (base offset, produced batch tail) of its acks=all successes."""
        broker_id, _, topic_partition = key
        history = self.histories[topic_partition]
        if ready.role == Role.LEADER:
            owner = self.leaders.setdefault((topic_partition, ready.leader_epoch), broker_id)
            if owner != broker_id:
                self.fail(f"{topic_partition} epoch {ready.leader_epoch} has two leaders: {owner} and {broker_id}")
            history.max_leader_log_start = max(history.max_leader_log_start, log.log_start_offset)
        elif log.log_start_offset > history.max_leader_log_start:
            self.fail(f"{topic_partition} replica {broker_id} has logStartOffset {log.log_start_offset} above any "
                      f"leader's ({history.max_leader_log_start}): it ran retention itself")
        progress = self.progress.get(key)
        if progress is None:
            progress = self.progress[key] = ReplicaProgress(log.log_start_offset, log.high_watermark)
        self._apply_truncations(key, ready, progress)
        if log.high_watermark < progress.high_watermark:
            self.fail(f"{topic_partition} HW fell on {broker_id}: {progress.high_watermark} -> {log.high_watermark}")
        progress.high_watermark = log.high_watermark
        self.verify(key, log, progress)
        for completion in ready.completions:
            if isinstance(completion, FetchResult) and completion.request_id in consumer_requests:
                self._check_served(topic_partition, broker_id, completion)
        for base_offset, tail in acked:
            self.check_acked(topic_partition, base_offset, tail)

    def _apply_truncations(self, key: ReplicaKey, ready: Ready, progress: ReplicaProgress) -> None:
        """Move the replica's verified point back, and forget what a crash cut from it: after a
        truncation its log is what the protocol left, not what the crash did."""
        broker_id, _, topic_partition = key
        if any(isinstance(change, Truncated | TruncatedFully) for change in ready.log_changes):
            self.histories[topic_partition].lost.pop(broker_id, None)
        for change in ready.log_changes:
            if isinstance(change, Truncated):
                if change.end_offset < change.high_watermark_before and not self.is_excused(
                    topic_partition, change.end_offset
                ):
                    self.fail(f"{topic_partition} replica {broker_id} truncated to {change.end_offset}, below its HW "
                              f"{change.high_watermark_before}, with the ISR's copies intact")
                if change.end_offset < progress.verified_offset:
                    progress.verified_offset = change.end_offset
                    progress.next_offset = -1
                progress.high_watermark = min(progress.high_watermark, change.end_offset)
            elif isinstance(change, TruncatedFully):
                progress.verified_offset = change.start_offset
                progress.high_watermark = change.start_offset
                progress.next_offset = -1

    def verify(self, key: ReplicaKey, log: Log, progress: ReplicaProgress) -> None:
        """Check the batches between the last verified offset and the HW against the history."""
        topic_partition = key[2]
        start = max(progress.verified_offset, log.log_start_offset)
        if start > progress.verified_offset:
            progress.next_offset = -1
        offset = start
        for _ in range(100_000):
            if offset >= log.high_watermark:
                break
            data = log.read(offset, 1 << 20, max_offset=log.high_watermark).records
            if not data:
                self.fail(f"{topic_partition} replica {key[0]}: nothing readable at {offset} below HW "
                          f"{log.high_watermark}")
            for position, header in iter_headers(data):
                if progress.next_offset not in (-1, header.base_offset):
                    self.fail(f"{topic_partition} replica {key[0]}: batch at {header.base_offset} follows one ending "
                              f"at {progress.next_offset}: offsets not contiguous")
                if header.partition_leader_epoch < progress.last_epoch:
                    self.fail(f"{topic_partition} replica {key[0]}: epoch {header.partition_leader_epoch} at "
                              f"{header.base_offset} after epoch {progress.last_epoch}")
                batch = bytes(data[position : position + header.size_in_bytes])
                self.check_batch(topic_partition, header.base_offset, header.next_offset,
                                 header.partition_leader_epoch, batch, f"replica {key[0]}")
                progress.next_offset = header.next_offset
                progress.last_epoch = header.partition_leader_epoch
                offset = header.next_offset
        progress.verified_offset = max(offset, progress.verified_offset)

    def check_batch(self, topic_partition: TopicPartition, base_offset: int, next_offset: int, epoch: int,
                    batch: bytes, where: str) -> None:
        history = self.histories[topic_partition]
        self.checked_batches += 1
        if any(next_offset > offset and epoch <= excused_epoch for offset, excused_epoch in history.excuses):
            return
        known = history.batches.get(base_offset)
        if known is not None:
            if known != (next_offset, batch):
                self.fail(f"{topic_partition} {where}: batch at {base_offset} (epoch {epoch}) differs from the "
                          f"one committed there before")
            return
        slot = bisect.bisect_left(history.bases, base_offset)
        if slot > 0 and history.batches[history.bases[slot - 1]][0] > base_offset:
            self.fail(f"{topic_partition} {where}: batch at {base_offset} overlaps the committed batch at "
                      f"{history.bases[slot - 1]}")
        if slot < len(history.bases) and history.bases[slot] < next_offset:
            self.fail(f"{topic_partition} {where}: batch [{base_offset}, {next_offset}) overlaps the committed "
                      f"batch at {history.bases[slot]}")
        history.bases.insert(slot, base_offset)
        history.batches[base_offset] = (next_offset, batch)

    def _check_served(self, topic_partition: TopicPartition, broker_id: int, result: FetchResult) -> None:
        for position, header in iter_headers(result.records):
            if header.last_offset >= result.high_watermark:
                self.fail(f"{topic_partition} replica {broker_id} served offset {header.last_offset} to a consumer "
                          f"at or above its HW {result.high_watermark}")
            batch = bytes(result.records[position : position + header.size_in_bytes])
            self.check_batch(topic_partition, header.base_offset, header.next_offset,
                             header.partition_leader_epoch, batch, f"consumer of {broker_id}")
            self.consumed_batches += 1

    def check_acked(self, topic_partition: TopicPartition, base_offset: int, tail: bytes) -> None:
        history = self.histories[topic_partition]
        known = history.batches.get(base_offset)
        if known is None and self.is_excused(topic_partition, base_offset):
            return
        if known is None or known[1][TAIL:] != tail:
            self.fail(f"{topic_partition}: acks=all success at {base_offset} is not the committed batch there")
        history.acked[base_offset] = tail

    # -- crashes and the excuse ----------------------------------------------------------------------

    def crashed(self, broker_id: int, lost: dict[TopicPartition, tuple[int, int]]) -> None:
        """A crash may have cut these offset ranges of the broker's logs."""
        for topic_partition, lost_range in lost.items():
            lost_range_of = LostRange(*lost_range, epoch=self.max_epoch_of(topic_partition))
            self.histories[topic_partition].lost.setdefault(broker_id, []).append(lost_range_of)

    def update_excuses(self, log_end_offset_of: Callable[[int, TopicPartition], int | None]) -> None:
        """Excuse offsets that every ISR member lost in a crash; `log_end_offset_of(broker, tp)` is
        the broker's LEO, None while it is down. Forget lost ranges a broker has fetched again."""
        if not any(history.lost for history in self.histories.values()):
            return
        for topic_partition, history in self.histories.items():
            if not history.lost:
                continue
            for broker_id, ranges in list(history.lost.items()):
                log_end_offset = log_end_offset_of(broker_id, topic_partition)
                kept = [lost for lost in ranges if log_end_offset is None or log_end_offset < lost.high]
                if kept:
                    history.lost[broker_id] = kept
                else:
                    del history.lost[broker_id]
            isr = self.isr_of(topic_partition)
            point = self._loss_point(isr, history, topic_partition, log_end_offset_of)
            if point is None:
                continue
            fresh = any(not lost.used for broker_id in isr for lost in history.lost[broker_id])
            if fresh or point < history.last_excuse_point:
                self._excuse(topic_partition, history, isr, point)

    def _loss_point(self, isr: tuple[int, ...], history: History, topic_partition: TopicPartition,
                    log_end_offset_of: Callable[[int, TopicPartition], int | None]) -> int | None:
        """The lowest offset every ISR member has lost in a crash, or None."""
        point = 0
        for broker_id in isr:
            ranges = history.lost.get(broker_id)
            if not ranges:
                return None
            log_end_offset = log_end_offset_of(broker_id, topic_partition)
            low = min(lost.low for lost in ranges)
            point = max(point, low if log_end_offset is None else max(low, log_end_offset))
        return point

    def _excuse(self, topic_partition: TopicPartition, history: History, isr: tuple[int, ...], point: int) -> None:
        """Offsets from `point` were lost on every ISR member: forget them. A lost range excuses
        once (unless the ISR narrows to members that lost more), so records a new leader writes
        there later are held to the history."""
        epoch = max(lost.epoch for broker_id in isr for lost in history.lost[broker_id])
        history.excuses.append((point, epoch))
        history.last_excuse_point = point
        for broker_id in isr:
            for lost in history.lost[broker_id]:
                lost.used = True
        for base_offset in [base for base in history.acked if base >= point]:
            del history.acked[base_offset]
            history.excused_count += 1
        slot = bisect.bisect_left(history.bases, point)
        if slot > 0 and history.batches[history.bases[slot - 1]][0] > point:
            slot -= 1
        for base_offset in history.bases[slot:]:
            del history.batches[base_offset]
        del history.bases[slot:]

    def is_excused(self, topic_partition: TopicPartition, offset: int) -> bool:
        return any(offset >= point for point, _ in self.histories[topic_partition].excuses)

    def forget_incarnation(self, broker_id: int, incarnation: int) -> None:
        for key in [key for key in self.progress if key[:2] == (broker_id, incarnation)]:
            del self.progress[key]
