"""LogLoader: open a partition directory, finish interrupted file operations, recover.

Passes, in order (Kafka's LogLoader.load):
1. `*.deleted` files: a deletion was decided; finish it.
2. `*.cleaned` files: an unfinished compaction output; the originals are intact, drop it.
3. `*.swap` files: a finished compaction output that had not replaced its originals. Every
   regular segment whose offsets fall inside the swap segment's range is deleted, then the
   swap files get their final names (the swap segment holds the same offsets, compacted).
4. Index files whose `.log` is missing are stray; drop them.
5. Open every segment. A missing or inconsistent index sends its segment to `recover`.
   After an unclean shutdown, every segment from the one holding the recovery point on is
   recovered (batches re-validated, indexes rebuilt); the first invalid byte and everything
   after it, later segments included, are dropped: what remains is a prefix of what was
   appended.
6. No segment left: start an empty one at the log start offset.
7. The idempotent producers' state: the latest producer snapshot at or below the log end, then
   the batches after it (storage/producer_state.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from storage.config import LogConfig
from storage.errors import CorruptCheckpointError, CorruptIndexError, CorruptRecordError
from storage.leader_epoch_cache import LeaderEpochCache
from storage.log import Log
from storage.log_segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from storage.log_segments import LogSegments
from storage.producer_state import ProducerStateManager

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)(\.deleted|\.cleaned|\.swap)?$")


def _parse(path: Path) -> tuple[int, str, str] | None:
    match = _SEGMENT_FILE.match(path.name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3) or ""


class LogLoader:
    """Builds a `Log` from a directory; one `load` call per open."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: int) -> None:
        self.directory = directory
        self.config = config
        self.now_ms = now_ms
        self.contiguous = True

    def load(
        self,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        high_watermark: int = 0,
        had_clean_shutdown: bool = True,
        was_compacted: bool = False,
    ) -> Log:
        """Open the log. `was_compacted` says the log may hold offset gaps even if its policy no
        longer has `compact` (the owner knows from the cleaner-offset-checkpoint)."""
        self.contiguous = not (self.config.compact or was_compacted)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_temporary_files()
        self._complete_swaps()
        segments, suspect_offset = self._open_segments()
        recovered_from = min(recovery_point, suspect_offset) if not had_clean_shutdown else suspect_offset
        if recovered_from < 2**63:
            self._recover_from(segments, recovered_from)
        if not len(segments):
            segments.add(self._segment(log_start_offset, writable=True))
        log_end_offset = segments.active_segment.next_offset
        start = min(max(log_start_offset, segments.first_segment.base_offset), log_end_offset)
        epoch_cache = self._leader_epoch_cache(segments)
        epoch_cache.truncate_from_end(log_end_offset)
        if recovered_from < 2**63:
            self._assign_recovered_epochs(epoch_cache, segments, recovered_from)
        earliest = epoch_cache.earliest_entry()
        if start < log_end_offset and (earliest is None or earliest.start_offset > start):
            # The checkpoint forgot epochs of offsets the log still holds: a raised logStartOffset
            # truncated it from the start (fsynced at once) but the log-start-offset checkpoint
            # and the segment deletion had not followed before a crash, so the log comes back
            # from an older start. A leader would then answer a follower's (offset, last epoch)
            # from an epoch-less head and miss a diverging epoch (seed 435093956). The batches
            # say which epoch wrote them: rebuild the cache from them.
            self._rebuild_leader_epoch_cache(epoch_cache, segments)
        epoch_cache.truncate_from_start(start)
        log = Log(
            self.directory,
            self.config,
            segments,
            log_start_offset=start,
            recovery_point=min(recovery_point, log_end_offset) if had_clean_shutdown else min(
                recovery_point, log_end_offset, segments.active_segment.base_offset),
            high_watermark=min(max(high_watermark, start), log_end_offset),
            leader_epoch_cache=epoch_cache,
            producer_state=ProducerStateManager(self.directory, self.directory.name),
            now_ms=self.now_ms,
        )
        log.reload_producer_state()
        return log

    def _leader_epoch_cache(self, segments: LogSegments) -> LeaderEpochCache:
        """The partition's epoch cache; a damaged checkpoint is rebuilt from the batches.

        Better than Kafka, which stops the log dir: every batch carries the epoch that wrote
        it, so the cache is derived data and a header scan restores it."""
        path = self.directory / LEADER_EPOCH_CHECKPOINT
        try:
            return LeaderEpochCache(path)
        except CorruptCheckpointError:
            path.unlink()
        cache = LeaderEpochCache(path)
        self._rebuild_leader_epoch_cache(cache, segments)
        return cache

    @staticmethod
    def _assign_recovered_epochs(cache: LeaderEpochCache, segments: LogSegments, recovered_from: int) -> None:
        """The epochs of the recovered batches newer than the cache's latest, as Kafka's segment
        recovery assigns them: the entries whose checkpoint write a crash cut off (their batches are
        in the active segment, always recovered: leader_epoch_cache.py). One write, if any was missing."""
        for segment in segments.values_from(recovered_from):
            for _, header in segment.iter_headers():
                latest = cache.latest_epoch()
                if header.partition_leader_epoch > (-1 if latest is None else latest):
                    cache.assign(header.partition_leader_epoch, header.base_offset, defer_write=True)
        cache.write_pending()

    @staticmethod
    def _rebuild_leader_epoch_cache(cache: LeaderEpochCache, segments: LogSegments) -> None:
        """Make `cache` hold exactly the epochs of the batches in `segments` (one checkpoint write)."""
        rebuilt = LeaderEpochCache.of_batches(
            (header.partition_leader_epoch, header.base_offset)
            for segment in segments for _, header in segment.iter_headers()
        )
        cache.restore(rebuilt)

    def _segment(self, base_offset: int, writable: bool, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            created_ms=self.now_ms,
            writable=writable,
            suffix=suffix,
        )

    def _remove_temporary_files(self) -> None:
        """Passes 1, 2 and 4: finish deletions, drop unfinished cleaner output and stray indexes."""
        for path in sorted(self.directory.iterdir()):
            parsed = _parse(path)
            if parsed is None:
                continue
            base_offset, kind, suffix = parsed
            if suffix in (DELETED_SUFFIX, CLEANED_SUFFIX):
                path.unlink()
            elif suffix == "" and kind != LOG_SUFFIX:
                log_file = self.directory / f"{base_offset:020d}{LOG_SUFFIX}"
                swap_file = self.directory / f"{base_offset:020d}{LOG_SUFFIX}{SWAP_SUFFIX}"
                if not log_file.exists() and not swap_file.exists():
                    path.unlink()

    def _complete_swaps(self) -> None:
        """Pass 3: a `.swap` log replaces the regular segments inside its offset range."""
        for swap_log in sorted(self.directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
            parsed = _parse(swap_log)
            assert parsed is not None, swap_log
            base_offset = parsed[0]
            swap = self._segment(base_offset, writable=False, suffix=SWAP_SUFFIX)
            swap.recover(self.config.max_message_bytes)
            end_offset = swap.next_offset
            for log_file in sorted(self.directory.glob(f"*{LOG_SUFFIX}")):
                old_base = int(log_file.name[:20])
                if base_offset <= old_base < end_offset and old_base != base_offset:
                    for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                        (self.directory / f"{old_base:020d}{kind}").unlink(missing_ok=True)
            for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                (self.directory / f"{base_offset:020d}{kind}").unlink(missing_ok=True)
            swap.change_file_suffixes(SWAP_SUFFIX, "")
            swap.close()

    def _open_segments(self) -> tuple[LogSegments, int]:
        """Pass 5a: open each `.log`. Returns the segments and the base offset of the first one
        whose index is missing or disagrees with its log (2**63 if none): recovery starts
        there even after a clean shutdown, since such a segment is not to be trusted."""
        segments = LogSegments()
        suspect_offset = 2**63
        bases = sorted(int(path.name[:20]) for path in self.directory.glob(f"*{LOG_SUFFIX}"))
        for slot, base_offset in enumerate(bases):
            # Checked before the segment opens them, since opening creates missing files empty. An
            # empty time index would pass load_state and hide the segment's largest timestamp.
            missing = [kind for kind in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                       if not (self.directory / f"{base_offset:020d}{kind}").exists()]
            segment = self._segment(base_offset, writable=slot == len(bases) - 1)
            try:
                if missing:
                    raise CorruptIndexError(f"{' and '.join(missing)} of segment {base_offset} missing")
                segment.load_state()
            except (CorruptIndexError, CorruptRecordError):
                suspect_offset = min(suspect_offset, base_offset)
            segments.add(segment)
        return segments, suspect_offset

    def _recover_from(self, segments: LogSegments, recovery_point: int) -> None:
        """Pass 5b: re-validate from the recovery point; cut the log at the first bad byte."""
        unflushed = segments.values_from(recovery_point)
        for slot, segment in enumerate(unflushed):
            truncated = segment.recover(self.config.max_message_bytes, contiguous=self.contiguous)
            previous = segments.floor_segment(segment.base_offset - 1)
            # A compacted log may have gaps between segments; any other log is contiguous.
            out_of_order = previous is not None and (
                previous.next_offset > segment.base_offset
                or (previous.next_offset != segment.base_offset and self.contiguous)
            )
            if truncated or out_of_order:
                for later in unflushed[slot + 1 :]:
                    segments.remove(later.base_offset)
                    later.delete_files()
                if out_of_order or (segment.size == 0 and len(segments) > 1):
                    segments.remove(segment.base_offset)
                    segment.delete_files()
                break
        for segment in segments:
            if segment is segments.active_segment:
                segment.offset_index.resize_for_append()
                segment.time_index.resize_for_append()
            else:
                segment.offset_index.trim_to_valid_size()
                segment.time_index.trim_to_valid_size()
