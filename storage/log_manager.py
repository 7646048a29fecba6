"""LogManager: every partition log under a node's `log.dirs`, their checkpoints and shutdown.

Per log dir (Kafka's layout):
- `<topic>-<partition>/` one directory per partition log, with its `partition.metadata` (the
  topic id, KIP-516) once a broker has hosted it under a topic id;
- `recovery-point-offset-checkpoint`, `replication-offset-checkpoint` (high watermarks),
  `log-start-offset-checkpoint`, `cleaner-offset-checkpoint`: the key offsets of its logs;
- `.kafka_cleanshutdown`: written last on a clean shutdown and removed on open. Without it
  the loader recovers every log from its recovery point (Kafka's name, so tools agree). It holds
  Kafka's `{"version":0,"broker_epoch":N}` (KAFKA-15586): the broker epoch of the process that
  shut down cleanly, which the next process sends with its registration so that the controller
  can tell a clean restart from one that may have lost unflushed records (KIP-966). An empty marker
  (written before) or one that does not parse means a clean shutdown of unknown epoch.

The node calls the periodic passes (`cleanup_logs`, `flush_dirty_logs`, `checkpoint`,
`delete_expired_files`) with `now_ms`; the manager reads no clock and schedules nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from storage.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    fsync_directory,
    write_atomically,
)
from storage.cleaner import CleanBuild, Cleaner, CleanPlan, CleanResult, DiscardReason
from storage.config import LogConfig
from storage.errors import InconsistentTopicIdError
from storage.log import Log
from storage.log_loader import LogLoader
from storage.partition_metadata import PartitionMetadataFile
from wire.topic_partition import TopicPartition

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
CLEAN_SHUTDOWN_VERSION = 0
NO_BROKER_EPOCH = -1


def clean_shutdown_text(broker_epoch: int) -> str:
    """The marker's content: Kafka's CleanShutdownFileHandler format."""
    return json.dumps({"version": CLEAN_SHUTDOWN_VERSION, "broker_epoch": broker_epoch}, separators=(",", ":"))


def read_clean_shutdown_epoch(text: str) -> int:
    """The broker epoch in a marker's text, NO_BROKER_EPOCH if it names none (empty, old or damaged)."""
    try:
        content = json.loads(text)
    except ValueError:
        return NO_BROKER_EPOCH
    if not isinstance(content, dict) or content.get("version") != CLEAN_SHUTDOWN_VERSION:
        return NO_BROKER_EPOCH
    epoch = content.get("broker_epoch")
    return epoch if type(epoch) is int and epoch >= 0 else NO_BROKER_EPOCH


def _remove_directory(path: Path) -> None:
    """Remove a partition directory being deleted, and its files (it has no subdirectory)."""
    if not path.exists():
        return
    for child in sorted(path.iterdir()):
        child.unlink()
    path.rmdir()


class LogDir:
    """One entry of `log.dirs`: its checkpoint files and whether it was shut down cleanly."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.recovery_points = OffsetCheckpointFile(path / RECOVERY_POINT_CHECKPOINT)
        self.high_watermarks = OffsetCheckpointFile(path / REPLICATION_OFFSET_CHECKPOINT)
        self.log_start_offsets = OffsetCheckpointFile(path / LOG_START_OFFSET_CHECKPOINT)
        self.cleaner_offsets = OffsetCheckpointFile(path / CLEANER_OFFSET_CHECKPOINT)
        self.clean_shutdown_marker = path / CLEAN_SHUTDOWN_FILE
        self.cleaner = Cleaner(self.cleaner_offsets)


class LogManager:
    """Opens, creates, deletes and checkpoints the logs of all log dirs; one owner, no locks."""

    def __init__(self, log_dirs: Sequence[Path], config_for: Callable[[str], LogConfig], now_ms: int,
                 skip_topics: frozenset[str] = frozenset()) -> None:
        """`skip_topics`: partition directories another owner keeps in these dirs (the Raft
        quorum's `__cluster_metadata-0`, as Kafka's LogManager leaves the metadata log alone)."""
        assert log_dirs, "at least one log dir"
        self.log_dirs = [LogDir(path) for path in log_dirs]
        self.skip_topics = skip_topics
        self.config_for = config_for
        self.logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, LogDir] = {}
        # The id in each log's partition.metadata, None for a log without one (new, or written
        # before topic ids); read once at load and kept here so that no read touches the file.
        self._topic_ids: dict[TopicPartition, str | None] = {}
        # Cleans planned and not swapped yet (Kafka's LogCleaningInProgress), so that a truncation,
        # a deletion or the shutdown can abort them.
        self._cleaning: dict[TopicPartition, CleanPlan] = {}
        self.recovered: list[TopicPartition] = []
        epochs = [self._load_dir(log_dir, now_ms) for log_dir in self.log_dirs]
        # The broker epoch the last process wrote in every log dir's clean-shutdown marker, or
        # NO_BROKER_EPOCH if a dir has none (it lost what it did not flush) or they disagree.
        self.previous_broker_epoch = epochs[0] if len(set(epochs)) == 1 else NO_BROKER_EPOCH

    def _load_dir(self, log_dir: LogDir, now_ms: int) -> int:
        """Open the dir's logs; return the broker epoch of its clean-shutdown marker (or NO_BROKER_EPOCH)."""
        had_clean_shutdown = log_dir.clean_shutdown_marker.exists()
        previous_broker_epoch = NO_BROKER_EPOCH
        if had_clean_shutdown:
            previous_broker_epoch = read_clean_shutdown_epoch(
                log_dir.clean_shutdown_marker.read_text(encoding="utf-8", errors="replace")
            )
        recovery_points = log_dir.recovery_points.read()
        high_watermarks = log_dir.high_watermarks.read()
        log_start_offsets = log_dir.log_start_offsets.read()
        cleaned = log_dir.cleaner_offsets.read()
        for child in sorted(log_dir.path.iterdir()):
            if not child.is_dir():
                continue
            try:
                topic_partition = TopicPartition.from_dir_name(child.name)
            except ValueError:
                if child.name.endswith(DELETE_DIR_SUFFIX):
                    _remove_directory(child)  # a deletion that a crash interrupted (delete_log)
                continue  # not a partition directory
            if topic_partition.topic in self.skip_topics:
                continue
            # Read before the (possibly long) recovery: a corrupt file stops the start at once.
            stored = PartitionMetadataFile(child).read()
            log = LogLoader(child, self.config_for(topic_partition.topic), now_ms).load(
                log_start_offset=log_start_offsets.get(topic_partition, 0),
                recovery_point=recovery_points.get(topic_partition, 0),
                high_watermark=high_watermarks.get(topic_partition, 0),
                had_clean_shutdown=had_clean_shutdown,
                was_compacted=topic_partition in cleaned,
            )
            self.logs[topic_partition] = log
            self._dir_of[topic_partition] = log_dir
            self._topic_ids[topic_partition] = None if stored is None else stored.topic_id
            if not had_clean_shutdown:
                self.recovered.append(topic_partition)
        # The marker means "nothing since has been written": remove it before any append, durably
        # (a power loss must not bring it back: the next start would skip recovery, which finds the
        # epochs of the active segments' batches whose leader-epoch-checkpoint write was deferred).
        if log_dir.clean_shutdown_marker.exists():
            log_dir.clean_shutdown_marker.unlink()
            fsync_directory(log_dir.path)
        return previous_broker_epoch

    def get_log(self, topic_partition: TopicPartition) -> Log | None:
        return self.logs.get(topic_partition)

    def topic_id(self, topic_partition: TopicPartition) -> str | None:
        """The topic id in the log's `partition.metadata`; None if there is no such log or it has
        no file (a log created without a topic id, or written by a version before topic ids)."""
        return self._topic_ids.get(topic_partition)

    def log_dir(self, topic_partition: TopicPartition) -> Path | None:
        """The log dir holding the partition's log (None if there is none): DescribeLogDirs."""
        log_dir = self._dir_of.get(topic_partition)
        return log_dir.path if log_dir is not None else None

    def get_or_create_log(self, topic_partition: TopicPartition, now_ms: int, topic_id: str | None = None) -> Log:
        """The partition's log, created empty in the log dir holding the fewest logs.

        With `topic_id` the log must belong to that topic (Kafka's getOrCreateLog with a topic
        id): a log without `partition.metadata` adopts the id (the file is written now, once);
        a log whose file names another id is a stray of an older topic of the same name and
        raises InconsistentTopicIdError, leaving it untouched: the caller deletes it first
        (`delete_log`), as the broker's stray-log pass does, then asks again for a fresh log.
        """
        log = self.logs.get(topic_partition)
        if log is None:
            log_dir = self._least_loaded_log_dir()
            log = LogLoader(log_dir.path / str(topic_partition), self.config_for(topic_partition.topic),
                            now_ms).load()
            self.logs[topic_partition] = log
            self._dir_of[topic_partition] = log_dir
            self._topic_ids[topic_partition] = None
        if topic_id is not None:
            self._maybe_record_topic_id(topic_partition, log, topic_id)
        return log

    def _least_loaded_log_dir(self) -> LogDir:
        """The log dir holding the fewest logs (the first of equals); one pass over the logs, none
        with one log dir (creating thousands of partitions was quadratic)."""
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        counts = {id(log_dir): 0 for log_dir in self.log_dirs}
        for log_dir in self._dir_of.values():
            counts[id(log_dir)] += 1
        return min(self.log_dirs, key=lambda log_dir: counts[id(log_dir)])

    def _maybe_record_topic_id(self, topic_partition: TopicPartition, log: Log, topic_id: str) -> None:
        stored = self._topic_ids[topic_partition]
        if stored == topic_id:
            return
        if stored is not None:
            raise InconsistentTopicIdError(
                f"log {topic_partition} in {log.directory} belongs to topic id {stored}, not to "
                f"{topic_id}: it is left from an older topic of the same name; delete it "
                "(delete_log) before creating the partition's log"
            )
        PartitionMetadataFile(log.directory).write(topic_id)
        self._topic_ids[topic_partition] = topic_id

    def update_config(self, topic: str, config: LogConfig) -> None:
        for topic_partition, log in self.logs.items():
            if topic_partition.topic == topic:
                log.config = config

    def truncate_to(self, topic_partition: TopicPartition, offset: int, now_ms: int) -> bool:
        """Truncate a follower's log and lower its cleaner checkpoint with it (Kafka's
        LogManager.truncateTo): re-appended offsets are dirty again."""
        log = self.logs[topic_partition]
        if offset < log.log_end_offset:
            self.abort_cleaning(topic_partition)  # Kafka aborts before it truncates, too
        truncated = log.truncate_to(offset, now_ms)
        if truncated:
            self._dir_of[topic_partition].cleaner.maybe_truncate_checkpoint(topic_partition, log.log_end_offset)
        return truncated

    def delete_log(self, topic_partition: TopicPartition) -> None:
        """Close and remove a partition's directory (topic deletion or reassignment).

        The directory is renamed `<topic>-<partition>-delete` first (Kafka renames it too, with a
        unique id; a name ending in `-delete` is never a partition directory): a clean whose build
        still runs (aborted here) creates its next files by the old path and fails, instead of
        adding files to a directory being emptied. A leftover of a crash goes at the next load."""
        log = self.logs.pop(topic_partition, None)
        if log is None:
            return
        self.abort_cleaning(topic_partition)
        self._dir_of.pop(topic_partition).cleaner.remove_checkpoint(topic_partition)
        self._topic_ids.pop(topic_partition)
        log.close()
        doomed = log.directory.with_name(log.directory.name + DELETE_DIR_SUFFIX)
        _remove_directory(doomed)  # a leftover of an earlier deletion that crashed
        log.directory.rename(doomed)
        _remove_directory(doomed)
        self.checkpoint()

    def __iter__(self) -> Iterator[tuple[TopicPartition, Log]]:
        return iter(sorted(self.logs.items()))

    # -- periodic passes ----------------------------------------------------------------

    def cleanup_logs(self, now_ms: int) -> int:
        """Retention on every log (the node runs it on leaders only); segments deleted."""
        deleted = 0
        for _, log in self:
            deleted += sum(count for _, count in log.delete_old_segments(now_ms))
        self.delete_expired_files(now_ms)
        return deleted

    def clean_logs(self, now_ms: int) -> list[tuple[TopicPartition, CleanResult]]:
        """Compact every `cleanup.policy=compact` log whose dirty ratio is high enough, on this thread."""
        results = []
        for topic_partition, log in self:
            result = self._dir_of[topic_partition].cleaner.maybe_clean(log, now_ms)
            if result is not None:
                results.append((topic_partition, result))
        return results

    def plan_cleaning(self, topic_partition: TopicPartition, now_ms: int) -> CleanPlan | None:
        """A clean of the partition's log if it is due, for `build_cleaned_segments` (any thread)
        then `swap_cleaned` (here); None if it is not due or not hosted. Until the swap, a
        truncation, deletion or shutdown aborts it (Kafka's LogCleanerManager)."""
        log = self.logs.get(topic_partition)
        if log is None:
            return None
        plan = self._dir_of[topic_partition].cleaner.maybe_plan(log, now_ms)
        if plan is not None:
            self._cleaning[topic_partition] = plan
        return plan

    def swap_cleaned(self, build: CleanBuild, now_ms: int) -> CleanResult | DiscardReason:
        """Swap a built clean into its log (`Cleaner.swap`), or delete it if the log moved away."""
        topic_partition = build.plan.topic_partition
        if self._cleaning.get(topic_partition) is build.plan:
            del self._cleaning[topic_partition]
        log = self.logs.get(topic_partition)
        if log is None:  # deleted during the build: `delete_log` aborted it
            build.discard()
            return DiscardReason.ABORTED
        return self._dir_of[topic_partition].cleaner.swap(log, build, now_ms)

    def abort_cleaning(self, topic_partition: TopicPartition) -> bool:
        """Kafka's LogCleaner.abortCleaning: the partition's clean in progress, if any, stops at its
        build's next batch and its swap is refused. True if there was one."""
        plan = self._cleaning.pop(topic_partition, None)
        if plan is None:
            return False
        plan.abort()
        return True

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget idle idempotent producers in every log (storage/producer_state.py); how many."""
        return sum(log.producer_state.remove_expired(now_ms, expiration_ms) for _, log in self)

    def delete_expired_files(self, now_ms: int) -> int:
        return sum(log.delete_expired_files(now_ms) for _, log in self)

    def flush_dirty_logs(self, now_ms: int) -> int:
        """`flush.ms` / `flush.messages` on every log; how many flushed. Runs every second: the logs
        are taken in creation order, not sorted (a sort of 2,000 names was most of an idle pass)."""
        return sum(1 for log in self.logs.values() if log.maybe_flush(now_ms))

    def checkpoint(self) -> None:
        """Write the recovery point, HW and log start offset checkpoints of every log dir."""
        for log_dir in self.log_dirs:
            logs = {tp: log for tp, log in self.logs.items() if self._dir_of[tp] is log_dir}
            log_dir.recovery_points.write({tp: log.recovery_point for tp, log in logs.items()})
            log_dir.high_watermarks.write({tp: log.high_watermark for tp, log in logs.items()})
            log_dir.log_start_offsets.write({tp: log.log_start_offset for tp, log in logs.items()})

    def shutdown(self, now_ms: int, broker_epoch: int = NO_BROKER_EPOCH) -> None:
        """Flush, checkpoint, close every log, then write the clean-shutdown markers naming
        `broker_epoch` (the broker's current registration; NO_BROKER_EPOCH if it had none)."""
        for topic_partition in list(self._cleaning):
            self.abort_cleaning(topic_partition)
        for _, log in self:
            log.flush(now_ms)
        self.checkpoint()
        for _, log in self:
            log.close()
        for log_dir in self.log_dirs:
            write_atomically(log_dir.clean_shutdown_marker, clean_shutdown_text(broker_epoch))
        self.logs.clear()
        self._dir_of.clear()
        self._topic_ids.clear()
