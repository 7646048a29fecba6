"""LeaderEpochCache: which leader epoch wrote which offsets of a partition (Kafka KIP-101/279)."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path

from storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from wire.sentinels import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

__all__ = ["EpochEntry", "LeaderEpochCache"]


class LeaderEpochCache:
    """The (leader epoch -> start offset) map of one replica, Kafka's LeaderEpochFileCache.

    State: a list of `EpochEntry(epoch, start_offset)`, where `start_offset` is the offset of
    the first batch appended in `epoch`; the entries of an epoch end where the next entry
    starts, the latest one at the log end offset. Invariant: epochs and start offsets both
    strictly increase along the list.

    Backing file: the partition's `leader-epoch-checkpoint` (`LeaderEpochCheckpointFile`),
    rewritten atomically before a change is made in memory, so a write that fails changes
    neither. One change may wait: an `assign(..., defer_write=True)` that only appends a new
    latest entry is written with the next write (`write_pending`, which the log calls before
    its recovery point passes the entry, so at a roll or flush, and at close). So the file
    always holds a prefix of the entries, and what it lacks starts in the log's active segment,
    which a reload after a crash always recovers: `LogLoader` finds the epochs in its batches
    again (Kafka's segment recovery assigns the epochs of the batches it re-reads). Kafka fsyncs
    every assign; at 2,000 partitions a failover's new epochs cost each node ~1,300 checkpoint
    writes (two fsyncs each) on the event loop. Truncations and every other change are written
    at once, which keeps the file a prefix: Kafka flushes truncations asynchronously and
    repairs stale entries at load.

    Owner: the partition's `Log` (one owner, no locks). Followers use `end_offset_for` on the
    leader (OffsetsForLeaderEpoch) to find where their log diverges and truncate there.
    """

    def __init__(self, checkpoint_path: Path) -> None:
        self.checkpoint = LeaderEpochCheckpointFile(checkpoint_path)
        self._entries: list[EpochEntry] = []
        self.write_pending_since: int | None = None  # start offset of the first entry not yet written
        # As Kafka does, load through the assign rule: should the file hold non-monotonic
        # entries, the later ones win and the cache still satisfies its invariant.
        for entry in self.checkpoint.read():
            self._entries = _assigned(self._entries, entry) or self._entries
        self._check_invariants(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.checkpoint.path}, {self._entries})"

    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        return list(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def latest_epoch(self) -> int | None:
        """The epoch of the latest entry: the epoch that is being written to."""
        return self._entries[-1].epoch if self._entries else None

    def assign(self, epoch: int, start_offset: int, defer_write: bool = False) -> bool:
        """Record that `epoch` starts at `start_offset`; return True if the cache changed.

        Kafka's rule: a repeat of the latest epoch at the same or a later offset changes
        nothing (each batch of an epoch calls this). Otherwise every entry with an epoch >=
        `epoch` or a start offset >= `start_offset` is removed first, since it cannot be
        followed by this entry and stay monotonic: the log was truncated below it, so those
        entries describe records that no longer exist. Then the entry is appended and written,
        or, with `defer_write` and nothing removed, written later (the class docstring says when
        that is safe: `start_offset` is in the caller's active segment).
        """
        self._validate_entry(epoch, start_offset)
        assigned = _assigned(self._entries, EpochEntry(epoch, start_offset))
        if assigned is None:
            return False
        if defer_write and len(assigned) == len(self._entries) + 1:
            self._check_invariants(assigned[-2:])
            self._entries = assigned
            if self.write_pending_since is None:
                self.write_pending_since = start_offset
            return True
        self._replace(assigned)
        return True

    def write_pending(self) -> None:
        """Write the entries that deferred assigns added, if any."""
        if self.write_pending_since is not None:
            self._replace(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch, exactly as Kafka's endOffsetFor.

        - `requested_epoch` is UNDEFINED_EPOCH, or no entry has a higher epoch and it is not
          the latest epoch (including an empty cache): (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        - It is the latest epoch: (latest epoch, `log_end_offset`).
        - Otherwise: the largest cached epoch <= `requested_epoch` and the start offset of the
          first cached epoch above it. If no cached epoch is <= `requested_epoch` (those
          entries were removed with the log's start), Kafka answers (`requested_epoch`, start
          offset of the first entry) so that the follower truncates to the leader's start.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries and self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher_index = bisect.bisect_right(self._entries, requested_epoch, key=_epoch_of)
        if higher_index == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher = self._entries[higher_index]
        if higher_index == 0:
            return requested_epoch, higher.start_offset
        return self._entries[higher_index - 1].epoch, higher.start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the entry covering `offset`, None if `offset` precedes every entry."""
        index = bisect.bisect_right(self._entries, offset, key=_start_offset_of)
        return self._entries[index - 1].epoch if index > 0 else None

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Remove the entries starting at or after `end_offset`; return them, oldest first.

        Called when the log is truncated to `end_offset` (its new log end offset). A negative
        `end_offset` changes nothing (Kafka).
        """
        if end_offset < 0:
            return []
        index = bisect.bisect_left(self._entries, end_offset, key=_start_offset_of)
        removed = self._entries[index:]
        if removed and self.write_pending_since is not None and removed[0].start_offset >= self.write_pending_since:
            # Only entries the file never had (a new leader's epoch, say): it is still a prefix.
            self._entries = self._entries[:index]
            if not self._entries or self._entries[-1].start_offset < self.write_pending_since:
                self.write_pending_since = None
        elif removed:
            self._replace(self._entries[:index])
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Forget offsets below a new log start offset; return the entries removed or rewritten.

        Every entry starting at or below `start_offset` goes, and the last of them comes back
        starting at `start_offset`, since its epoch still covers the records from there on.
        So an entry starting exactly at `start_offset` stays as it is (Kafka's truncateFromStart).
        """
        index = bisect.bisect_right(self._entries, start_offset, key=_start_offset_of)
        removed = self._entries[:index]
        if removed:
            self._replace([EpochEntry(removed[-1].epoch, start_offset), *self._entries[index:]])
        return removed

    def restore(self, entries: Sequence[EpochEntry]) -> bool:
        """Make the cache hold `entries` again, a copy taken earlier by `entries()`; return True
        if the cache changed (the checkpoint is then rewritten; otherwise nothing is written).

        The undo of an append that failed part-way: `assign` may have removed entries (a
        follower batch whose epoch is below the latest one), which no truncation brings back.
        """
        restored = list(entries)
        if restored == self._entries:
            return False
        self._replace(restored)
        return True

    @staticmethod
    def of_batches(batches: Iterable[tuple[int, int]]) -> list[EpochEntry]:
        """The entries that `assign` builds from (partitionLeaderEpoch, baseOffset) of a log's
        batches, oldest first, without writing anything; batches without an epoch (-1) are skipped."""
        entries: list[EpochEntry] = []
        for epoch, base_offset in batches:
            if epoch >= 0:
                entries = _assigned(entries, EpochEntry(epoch, base_offset)) or entries
        return entries

    def clear_and_flush(self) -> None:
        """Remove every entry and write the empty checkpoint."""
        self._replace([])

    def _replace(self, entries: list[EpochEntry]) -> None:
        """Write `entries` to the checkpoint, then hold them: a failed write leaves both as they were."""
        self._check_invariants(entries)
        self.checkpoint.write(entries)
        self._entries = entries
        self.write_pending_since = None

    @staticmethod
    def _validate_entry(epoch: int, start_offset: int) -> None:
        # Kafka throws IllegalArgumentException: a negative epoch or offset is a caller's bug.
        if epoch < 0 or start_offset < 0:
            raise ValueError(
                f"invalid leader epoch entry: epoch={epoch} start_offset={start_offset}; "
                "both must be >= 0"
            )

    @staticmethod
    def _check_invariants(entries: list[EpochEntry]) -> None:
        for previous, current in itertools.pairwise(entries):
            assert previous.epoch < current.epoch, f"epochs not increasing: {entries}"
            assert previous.start_offset < current.start_offset, f"start offsets not increasing: {entries}"


def _assigned(entries: list[EpochEntry], entry: EpochEntry) -> list[EpochEntry] | None:
    """`entries` after Kafka's assign rule adds `entry` (see `assign`); None if unchanged."""
    latest = entries[-1] if entries else None
    # Every batch of the current epoch calls assign: the common case changes nothing.
    if latest is not None and latest.epoch == entry.epoch and latest.start_offset <= entry.start_offset:
        return None
    keep = len(entries)
    while keep and (entries[keep - 1].epoch >= entry.epoch or entries[keep - 1].start_offset >= entry.start_offset):
        keep -= 1
    return [*entries[:keep], entry]


def _epoch_of(entry: EpochEntry) -> int:
    return entry.epoch


def _start_offset_of(entry: EpochEntry) -> int:
    return entry.start_offset
