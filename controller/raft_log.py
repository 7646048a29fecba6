"""RaftLog: the quorum's replicated log — a `storage.Log` of `__cluster_metadata-0` plus snapshots.

KRaft's ReplicatedLog/KafkaMetadataLog in one class: the Raft core asks it the questions Raft
needs (where does my log end and in which epoch; is a follower's fetch position consistent with
my log; where does epoch e end) and gives it the writes Raft makes (append as leader or
follower, truncate, snapshot, install a snapshot).

Mapping onto storage:
- an entry is a record; every RecordBatch's partitionLeaderEpoch is the Raft epoch that
  appended it, so the log's LeaderEpochCache answers every term question (`end_offset_for`);
- the commit index is the log's high watermark; it lives in memory only (KRaft does not
  persist it either): after a restart it starts at the log start offset, which is the latest
  snapshot's end offset, and the leader's next fetch response raises it;
- `log_start_offset` = the latest snapshot's end offset (0 without a snapshot). A snapshot
  raises it with `delete_records`, and retention (logStartOffset rule only: `retention.ms` and
  `retention.bytes` are off) then drops the segments wholly below it.
- the uncommitted tail is also kept decoded in memory (`_tail`: a batch's base offset -> its
  entries, filled by every append, cut by every truncation, emptied by a restart), so that
  committing an entry does not read back and decode what this process has just written. It is a
  cache: an offset missing from it is read from the log, and what it holds is exactly what was
  appended (the simulator's checker compares every applied entry with the canonical history,
  read from disk after a restart).
- `read_committed` returns whole batches only: the records of one batch (one controller request,
  see `append_batch_as_leader`) are applied together, never in part.

Owner: the Raft core (writes) and its driver (`flush`). One owner, no locks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from controller.raft_messages import CommittedEntry, OffsetAndEpoch
from controller.snapshot import SnapshotStore
from storage.config import LogConfig
from storage.log import Log, LogAppendInfo
from storage.log_loader import LogLoader
from storage.records import build_batch, build_batch_from_values, decode_records, iter_headers
from wire.sentinels import UNDEFINED_EPOCH_OFFSET

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_LOG_DIR = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
# Kafka's control record key (version 0, type 2 = LEADER_CHANGE).
LEADER_CHANGE_KEY = b"\x00\x00\x00\x02"
TAIL_BATCHES_MAX = 4096  # decoded uncommitted batches kept in memory; beyond it, committing reads the log


def metadata_log_config(segment_bytes: int = 1024 * 1024 * 1024, segment_index_bytes: int = 10 * 1024 * 1024,
                        max_message_bytes: int = 8 * 1024 * 1024, index_interval_bytes: int = 4096) -> LogConfig:
    """The metadata log's storage settings: time and size retention off (snapshots bound it),
    and deleted segments removed at once — the Raft core is the log's only reader, so no read
    can still hold a deleted segment (Kafka keeps `file.delete.delay.ms` for concurrent fetches)."""
    return LogConfig(segment_bytes=segment_bytes, segment_index_bytes=segment_index_bytes, retention_ms=-1,
                     retention_bytes=-1, file_delete_delay_ms=0, max_message_bytes=max_message_bytes,
                     index_interval_bytes=index_interval_bytes)


class FetchValidation(Enum):
    """KRaft's ValidOffsetAndEpoch.Kind: what a leader tells a follower about its position."""

    VALID = "valid"  # the follower's log matches up to its fetch offset: send records
    DIVERGING = "diverging"  # truncate to the offset given, then fetch again
    SNAPSHOT = "snapshot"  # the position is below the log start: fetch the snapshot


@dataclass(frozen=True, slots=True)
class ValidatedPosition:
    kind: FetchValidation
    offset_and_epoch: OffsetAndEpoch | None = None


class RaftLog:
    """See the module docstring. State: `log` (segments, epochs, HW) and `snapshots`.

    Invariants (checked by `check`): log_start_offset equals the latest snapshot's end offset, or
    0 without one; log_start_offset <= high_watermark <= log_end_offset."""

    def __init__(self, log: Log, snapshots: SnapshotStore) -> None:
        self.log = log
        self.snapshots = snapshots
        self.truncation_count = 0  # bumped on every truncation: lets observers (the simulator) notice
        self._tail: dict[int, list[CommittedEntry]] = {}  # see the module docstring
        # The active segment, whose next offset is the log end: `Log.log_end_offset` looks it up in
        # a sorted map on every call, and Raft asks for the end many times per event. Refreshed
        # after every write (only writes roll, truncate or replace segments); `check` compares.
        self._active_segment = log.segments.active_segment

    @classmethod
    def open(cls, directory: Path, now_ms: int, config: LogConfig | None = None,
             had_clean_shutdown: bool = False) -> RaftLog:
        """Open (or create) the metadata log in `directory` and reconcile it with the latest
        snapshot. Recovery re-validates every segment unless the shutdown was clean: the
        metadata log is small, and it keeps no recovery-point checkpoint."""
        snapshots = SnapshotStore(directory)
        latest = snapshots.latest_id()
        start = latest.offset if latest is not None else 0
        log = LogLoader(directory, config or metadata_log_config(), now_ms).load(
            log_start_offset=start, recovery_point=0, high_watermark=start, had_clean_shutdown=had_clean_shutdown
        )
        raft_log = cls(log, snapshots)
        raft_log._reconcile_with_snapshot(now_ms)
        raft_log.check()
        return raft_log

    def _reconcile_with_snapshot(self, now_ms: int) -> None:
        """KRaft's truncateToLatestSnapshot, made strict: if the log ends before the latest
        snapshot (a crash between writing a downloaded snapshot and truncating), or its first
        entry at the snapshot's end has an older epoch than the snapshot (entries that lost to the
        committed ones the snapshot holds), the log is useless: start it empty at the snapshot."""
        latest = self.snapshots.latest_id()
        if latest is None:
            return
        end = self.log.log_end_offset
        start_epoch = self.log.leader_epoch_cache.epoch_for_offset(self.log.log_start_offset)
        stale = end > self.log.log_start_offset and (start_epoch is None or start_epoch < latest.epoch)
        if end < latest.offset or stale:
            self.log.truncate_fully_and_start_at(latest.offset, now_ms)
            self.truncation_count += 1
            self._tail.clear()
            self._refresh()
        self.log.update_high_watermark(max(self.log.high_watermark, latest.offset))

    def check(self) -> None:
        assert self._active_segment is self.log.segments.active_segment, f"stale active segment of {self.log}"
        latest = self.snapshots.latest_id()
        expected_start = latest.offset if latest is not None else 0
        assert self.log.log_start_offset == expected_start, (
            f"log_start_offset={self.log.log_start_offset} latest snapshot={latest}"
        )
        assert self.log.high_watermark <= self.log.log_end_offset, (
            f"high_watermark={self.log.high_watermark} log_end_offset={self.log.log_end_offset}"
        )

    # -- positions ------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._active_segment.next_offset

    def _refresh(self) -> None:
        """After a write: the active segment may have rolled or been replaced."""
        self._active_segment = self.log.segments.active_segment

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def last_fetched_epoch(self) -> int:
        """The epoch of the last entry; with an empty log, the snapshot's epoch (0 without one)."""
        if self.log_end_offset > self.log.log_start_offset:
            latest = self.log.leader_epoch_cache.latest_epoch()
            assert latest is not None, f"log {self.log} holds entries but its epoch cache is empty"
            return latest
        snapshot = self.snapshots.latest_id()
        return snapshot.epoch if snapshot is not None else 0

    def end_offset_and_epoch(self) -> OffsetAndEpoch:
        """Where the log ends: what a candidate's log is compared by."""
        return OffsetAndEpoch(self.last_fetched_epoch(), self.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """KRaft's endOffsetForEpoch: the largest epoch <= `epoch` in the log and where it ends.
        An epoch older than every entry (those went into the snapshot) answers the snapshot id."""
        found_epoch, found_offset = self.log.leader_epoch_cache.end_offset_for(epoch, self.log.log_end_offset)
        if found_offset == UNDEFINED_EPOCH_OFFSET:
            return OffsetAndEpoch(self.last_fetched_epoch(), self.log.log_end_offset)
        snapshot = self.snapshots.latest_id()
        if snapshot is not None and found_offset == snapshot.offset and found_epoch == epoch:
            return snapshot
        return OffsetAndEpoch(found_epoch, found_offset)

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidatedPosition:
        """KRaft's validateOffsetAndEpoch, on the leader, for a follower at (offset, epoch)."""
        snapshot = self.snapshots.latest_id()
        start = self.log.log_start_offset
        if offset < start or (snapshot is not None and offset == start and epoch != snapshot.epoch):
            assert snapshot is not None, f"offset {offset} is below log start {start} without a snapshot"
            return ValidatedPosition(FetchValidation.SNAPSHOT, snapshot)
        end = self.end_offset_for_epoch(epoch)
        if snapshot is not None and end == snapshot and epoch < snapshot.epoch:
            # The follower's last epoch is older than every epoch left in our log: where it stopped
            # agreeing with us went into the snapshot. Its entries around the snapshot's end cannot
            # be committed ones (those carry the snapshot's epoch or later), so it takes the snapshot.
            # Answering the snapshot id as a diverging epoch (KRaft) would not move such a follower:
            # it holds no entry of that epoch to truncate to.
            return ValidatedPosition(FetchValidation.SNAPSHOT, snapshot)
        if end.epoch != epoch or offset > end.offset:
            return ValidatedPosition(FetchValidation.DIVERGING, end)
        return ValidatedPosition(FetchValidation.VALID)

    # -- writes ---------------------------------------------------------------------------------

    def append_as_leader(self, data: bytes, epoch: int, now_ms: int) -> LogAppendInfo:
        """Append one record holding `data`, stamped with `epoch`; the caller flushes."""
        return self.append_batch_as_leader((data,), epoch, now_ms)

    def append_batch_as_leader(self, values: tuple[bytes, ...], epoch: int, now_ms: int) -> LogAppendInfo:
        """Append `values` as ONE RecordBatch (consecutive offsets, one CRC), stamped with `epoch`:
        a follower fetches, a crash keeps and a truncation drops whole batches, so the records
        become committed all together or not at all (Kafka's atomic append, KIP-868)."""
        assert values, "an empty batch"
        info = self.log.append_as_leader(build_batch_from_values(list(values), timestamp_ms=now_ms), epoch, now_ms)
        self._refresh()
        assert info.last_offset - info.first_offset + 1 == len(values), f"{info} for {len(values)} values"
        first_offset = info.first_offset
        self._remember([[CommittedEntry(first_offset + index, epoch, value) for index, value in enumerate(values)]])
        return info

    def append_leader_change(self, payload: bytes, epoch: int, now_ms: int) -> LogAppendInfo:
        """Append the control record a new leader writes first (KRaft's LeaderChangeMessage)."""
        batch = build_batch([(LEADER_CHANGE_KEY, payload)], timestamps=[now_ms], is_control=True)
        info = self.log.append_as_leader(batch, epoch, now_ms)
        self._refresh()
        self._remember([[CommittedEntry(info.first_offset, epoch, payload, True)]])
        return info

    def append_as_follower(self, records: bytes, now_ms: int) -> LogAppendInfo:
        """Append the leader's batches unchanged; they must start at the log end offset."""
        first = next(iter_headers(records), None)
        assert first is not None, f"no whole batch in {len(records)} fetched bytes"
        assert first[1].base_offset == self.log.log_end_offset, (
            f"fetched batch starts at {first[1].base_offset}, log ends at {self.log.log_end_offset}"
        )
        info = self.log.append_as_follower(records, now_ms)
        self._refresh()
        self._remember(_decode_entries(records, info.last_offset))
        return info

    def _remember(self, batches: Iterable[list[CommittedEntry]]) -> None:
        """Keep appended batches decoded until they are committed (bounded; see the docstring)."""
        tail = self._tail
        for entries in batches:
            if len(tail) >= TAIL_BATCHES_MAX:
                return
            tail[entries[0].offset] = entries

    def truncation_point(self, diverging: OffsetAndEpoch) -> int:
        """Where `truncate_to_end_offset(diverging)` would cut the log."""
        if diverging.epoch == 0:
            return min(diverging.offset, self.log.log_end_offset)
        local = self.end_offset_for_epoch(diverging.epoch)
        return min(local.offset, diverging.offset) if local.epoch == diverging.epoch else local.offset

    def truncate_to_end_offset(self, diverging: OffsetAndEpoch, now_ms: int) -> int:
        """KRaft's truncateToEndOffset: cut the log where it stops agreeing with the leader's
        (`diverging`: the leader's end of the largest epoch <= ours). Returns the new end."""
        offset = self.truncation_point(diverging)
        assert offset >= self.log.high_watermark, (
            f"truncation to {offset} would drop committed entries below the high watermark "
            f"{self.log.high_watermark} (diverging {diverging}, log {self.log})"
        )
        if self.log.truncate_to(offset, now_ms):
            self.truncation_count += 1
            self.log.delete_expired_files(now_ms)
            self._refresh()
        end = self.log.log_end_offset
        self._tail = {base: entries for base, entries in self._tail.items() if entries[-1].offset < end}
        return end

    def flush(self, now_ms: int) -> None:
        self.log.flush(now_ms)

    def close(self) -> None:
        self.log.close()

    # -- reads ----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from `offset` up to the log end (at least one batch if any)."""
        return self.log.read(offset, max_bytes).records

    def read_committed(self, offset: int, records_max: int) -> list[CommittedEntry]:
        """Committed entries from `offset`, decoded, in order: whole batches, as many as start
        before `records_max` entries are reached (so a batch is never split between two reads)."""
        assert offset >= self.log.log_start_offset, f"offset {offset} < start {self.log.log_start_offset}"
        high_watermark = self.log.high_watermark
        entries: list[CommittedEntry] = []
        tail = self._tail
        while offset < high_watermark and len(entries) < records_max:
            cached = tail.get(offset)
            if cached is not None and cached[-1].offset < high_watermark:
                del tail[offset]
                entries.extend(cached)
                offset = cached[-1].offset + 1
                continue
            data = self.log.read(offset, 64 * 1024, max_offset=high_watermark).records
            assert data, f"nothing to read at {offset} below the high watermark {high_watermark}"
            for position, header in iter_headers(data):
                for record in decode_records(data, position):
                    if offset <= record.offset < high_watermark:
                        entries.append(CommittedEntry(record.offset, header.partition_leader_epoch,
                                                      record.value or b"", header.is_control))
                offset = max(offset, header.next_offset)
        return entries

    # -- snapshots ------------------------------------------------------------------------------

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes, now_ms: int) -> None:
        """Store a snapshot of the applied state, then drop the log below it."""
        assert snapshot_id.offset <= self.log.high_watermark, f"{snapshot_id} above the HW {self.log.high_watermark}"
        assert snapshot_id.offset > self.log.log_start_offset, f"{snapshot_id} not above {self.log.log_start_offset}"
        self.snapshots.write(snapshot_id, data)
        self._tail = {base: entries for base, entries in self._tail.items() if base >= snapshot_id.offset}
        self.log.delete_records(snapshot_id.offset)
        self.log.delete_old_segments(now_ms)
        self.log.delete_expired_files(now_ms)
        self._refresh()
        self.snapshots.delete_before(snapshot_id)
        self.check()

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, file_bytes: bytes, now_ms: int) -> bytes:
        """A follower's download is complete: store it, restart the log empty at its end offset
        (every entry below is in the snapshot, everything at or above came from a log that was
        behind it). Returns the state bytes to restore."""
        assert self.log.high_watermark <= snapshot_id.offset, (
            f"installing {snapshot_id} below the high watermark {self.log.high_watermark}"
        )
        data = self.snapshots.write_file(snapshot_id, file_bytes)
        self.log.truncate_fully_and_start_at(snapshot_id.offset, now_ms)
        self._tail.clear()
        self._refresh()
        self.log.delete_expired_files(now_ms)
        self.truncation_count += 1
        self.snapshots.delete_before(snapshot_id)
        self.check()
        return data


def _decode_entries(records: bytes, last_offset: int) -> Iterator[list[CommittedEntry]]:
    """The entries of each whole batch in `records` up to `last_offset` (what an append took)."""
    for position, header in iter_headers(records):
        if header.base_offset > last_offset:
            return
        yield [CommittedEntry(record.offset, header.partition_leader_epoch, record.value or b"", header.is_control)
               for record in decode_records(records, position)]
