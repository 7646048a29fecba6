"""LogManager: log dirs, Kafka's checkpoint files, the clean-shutdown marker and recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from storage.config import LogConfig
from storage.errors import CorruptPartitionMetadataError, InconsistentTopicIdError
from storage.log_manager import CLEAN_SHUTDOWN_FILE, NO_BROKER_EPOCH, LogManager
from storage.partition_metadata import PARTITION_METADATA_FILE, PartitionMetadata, PartitionMetadataFile
from storage.records import build_batch
from wire.topic_partition import TopicPartition

CONFIG = LogConfig.from_properties({"segment.bytes": 600, "index.interval.bytes": 64})
ORDERS = TopicPartition("orders", 0)
EVENTS = TopicPartition("page-views", 3)
OLD_TOPIC_ID = "kGlA7dc5S_SJMIt-HYP3ig"
NEW_TOPIC_ID = "x3Ojb4p1TXK5vsK2Ae1E-w"


def manager_for(*dirs: Path) -> LogManager:
    return LogManager(list(dirs), lambda topic: CONFIG, now_ms=0)


def fill(manager: LogManager, topic_partition: TopicPartition, count: int) -> None:
    log = manager.get_or_create_log(topic_partition, now_ms=0)
    for n in range(count):
        log.append_as_leader(build_batch([(b"k", b"value-%03d" % n)], timestamps=[n]), 0, n)


def test_clean_shutdown_writes_checkpoints_and_marker_and_reopen_keeps_offsets(tmp_path: Path) -> None:
    manager = manager_for(tmp_path)
    fill(manager, ORDERS, 20)
    log = manager.get_log(ORDERS)
    assert log is not None
    log.update_high_watermark(15)
    log.delete_records(4)
    manager.shutdown(now_ms=100)

    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {ORDERS: 20}
    assert OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT).read() == {ORDERS: 15}
    assert OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT).read() == {ORDERS: 4}

    synced: list[Path] = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr("storage.log_manager.fsync_directory", synced.append)
        reopened = manager_for(tmp_path)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists(), "the marker must go before anything is written"
    # durably: brought back by a power loss, it would skip the next recovery (leader_epoch_cache.py)
    assert synced == [tmp_path]
    assert reopened.recovered == []
    log = reopened.get_log(ORDERS)
    assert log is not None
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (4, 15, 20)


def test_the_marker_carries_the_broker_epoch_to_the_next_start(tmp_path: Path) -> None:
    """KAFKA-15586: Kafka's `{"version":0,"broker_epoch":N}`, read before the marker is removed."""
    manager = manager_for(tmp_path)
    assert manager.previous_broker_epoch == NO_BROKER_EPOCH, "a fresh dir has no marker"
    manager.shutdown(now_ms=0, broker_epoch=42)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_text() == '{"version":0,"broker_epoch":42}'
    reopened = manager_for(tmp_path)
    assert reopened.previous_broker_epoch == 42
    assert manager_for(tmp_path).previous_broker_epoch == NO_BROKER_EPOCH, "crashed: the marker was removed"


@pytest.mark.parametrize("text", ["", "garbage", '{"version":1,"broker_epoch":4}', '{"version":0}',
                                  '{"version":0,"broker_epoch":-7}', '{"version":0,"broker_epoch":"4"}', "[0]"])
def test_a_marker_naming_no_epoch_is_a_clean_shutdown_of_unknown_epoch(tmp_path: Path, text: str) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text(text)
    fill(manager_for(tmp_path), ORDERS, 1)  # an unclean stop: no shutdown, no marker
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text(text)
    reopened = manager_for(tmp_path)
    assert (reopened.previous_broker_epoch, reopened.recovered) == (NO_BROKER_EPOCH, [])


def test_every_log_dir_must_name_the_same_epoch(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    manager_for(one, two).shutdown(now_ms=0, broker_epoch=9)
    assert manager_for(one, two).previous_broker_epoch == 9
    manager_for(one, two).shutdown(now_ms=0, broker_epoch=9)
    (two / CLEAN_SHUTDOWN_FILE).unlink()  # that dir's process died before its marker was written
    assert manager_for(one, two).previous_broker_epoch == NO_BROKER_EPOCH
    manager_for(one).shutdown(now_ms=0, broker_epoch=9)
    manager_for(two).shutdown(now_ms=0, broker_epoch=10)
    assert manager_for(one, two).previous_broker_epoch == NO_BROKER_EPOCH


def test_missing_marker_recovers_every_log_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    manager = manager_for(tmp_path)
    fill(manager, ORDERS, 12)
    fill(manager, EVENTS, 3)
    manager.checkpoint()
    for _, log in manager:
        for segment in log.segments:
            segment.close_handlers()  # kill -9
    active = max((tmp_path / str(ORDERS)).glob("*.log"))
    whole_batches_size = active.stat().st_size
    with open(active, "ab") as file:
        file.write(b"\x00\x00\x00\x00\x00\x00\x00\x0c\x00\x00")  # a torn half-written batch

    reopened = manager_for(tmp_path)
    assert sorted(reopened.recovered) == sorted([ORDERS, EVENTS])
    orders = reopened.get_log(ORDERS)
    events = reopened.get_log(EVENTS)
    assert orders is not None and events is not None
    assert orders.log_end_offset == 12
    assert events.log_end_offset == 3
    assert active.stat().st_size == whole_batches_size, "the torn tail is cut off"


def test_new_logs_spread_over_log_dirs_and_are_found_again(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    manager = manager_for(first, second)
    fill(manager, ORDERS, 2)
    fill(manager, EVENTS, 2)
    assert {p.name for p in first.iterdir() if p.is_dir()} | {p.name for p in second.iterdir() if p.is_dir()} == {
        "orders-0",
        "page-views-3",
    }
    assert len([p for p in first.iterdir() if p.is_dir()]) == 1
    manager.shutdown(now_ms=0)
    reopened = manager_for(first, second)
    assert sorted(tp for tp, _ in reopened) == sorted([ORDERS, EVENTS])


def test_delete_log_removes_the_directory_and_its_checkpoint_lines(tmp_path: Path) -> None:
    manager = manager_for(tmp_path)
    fill(manager, ORDERS, 3)
    fill(manager, EVENTS, 3)
    manager.delete_log(ORDERS)
    assert not (tmp_path / "orders-0").exists()
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read().keys() == {EVENTS}


def test_cleanup_logs_applies_retention_and_removes_deleted_files_after_the_delay(tmp_path: Path) -> None:
    config = LogConfig.from_properties({"segment.bytes": 600, "retention.ms": 1000, "file.delete.delay.ms": 500})
    manager = LogManager([tmp_path], lambda topic: config, now_ms=0)
    fill(manager, ORDERS, 20)
    log = manager.get_log(ORDERS)
    assert log is not None
    log.update_high_watermark(log.log_end_offset)
    segments_before = len(log.segments)
    deleted = manager.cleanup_logs(now_ms=5000)
    assert deleted == segments_before, "every segment expired; the log rolled to keep an empty active one"
    assert log.log_start_offset == log.log_end_offset == 20
    assert list((tmp_path / "orders-0").glob("*.deleted")), "deleted segments wait for file.delete.delay.ms"
    manager.delete_expired_files(now_ms=5499)
    assert list((tmp_path / "orders-0").glob("*.deleted"))
    manager.delete_expired_files(now_ms=5500)
    assert not list((tmp_path / "orders-0").glob("*.deleted"))


def test_directories_that_are_not_partitions_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "lost+found").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    manager = manager_for(tmp_path)
    assert list(manager) == []


def test_compacted_log_reopened_under_delete_policy_keeps_its_gaps(tmp_path: Path) -> None:
    """A log compacted once has offset gaps for good; recovery must not read them as damage
    when the topic's policy later changes to delete (the cleaner checkpoint remembers)."""
    compact = LogConfig.from_properties({"segment.bytes": 600, "cleanup.policy": "compact"})
    manager = LogManager([tmp_path], lambda topic: compact, now_ms=0)
    log = manager.get_or_create_log(ORDERS, now_ms=0)
    for n in range(30):
        log.append_as_leader(build_batch([(b"key-%d" % (n % 3), b"value-%03d" % n)], timestamps=[n]), 0, n)
    log.roll(now_ms=30)
    log.update_high_watermark(log.log_end_offset)
    cleaned = manager.clean_logs(now_ms=30)
    assert [tp for tp, _ in cleaned] == [ORDERS]
    survivors = [h.base_offset for _, _, h in log.iter_batches() if h.records_count]
    assert survivors == [27, 28, 29], f"only the last value per key is left: {survivors}"
    for segment in log.segments:
        segment.close_handlers()  # kill -9 before any recovery-point checkpoint: everything is re-validated

    delete = LogConfig.from_properties({"segment.bytes": 600, "cleanup.policy": "delete"})
    reopened = LogManager([tmp_path], lambda topic: delete, now_ms=100)
    log = reopened.get_log(ORDERS)
    assert log is not None
    assert [h.base_offset for _, _, h in log.iter_batches() if h.records_count] == survivors
    assert log.log_end_offset == 30


def test_truncating_a_follower_lowers_its_cleaner_checkpoint(tmp_path: Path) -> None:
    compact = LogConfig.from_properties({"segment.bytes": 600, "cleanup.policy": "compact"})
    manager = LogManager([tmp_path], lambda topic: compact, now_ms=0)
    log = manager.get_or_create_log(ORDERS, now_ms=0)
    for n in range(30):
        log.append_as_leader(build_batch([(b"key-%d" % (n % 3), b"value-%03d" % n)], timestamps=[n]), 0, n)
    log.roll(now_ms=30)
    log.update_high_watermark(log.log_end_offset)
    manager.clean_logs(now_ms=30)
    assert OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read() == {ORDERS: 30}
    assert manager.truncate_to(ORDERS, 28, now_ms=40)
    assert OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read() == {ORDERS: 28}
    manager.delete_log(ORDERS)
    assert OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read() == {}


def test_skipped_topics_are_left_to_their_owner(tmp_path: Path) -> None:
    manager = manager_for(tmp_path)
    fill(manager, ORDERS, 2)
    fill(manager, TopicPartition("__cluster_metadata", 0), 2)
    manager.shutdown(now_ms=0)
    reopened = LogManager([tmp_path], lambda topic: CONFIG, now_ms=0, skip_topics=frozenset({"__cluster_metadata"}))
    assert [tp for tp, _ in reopened] == [ORDERS]
    assert (tmp_path / "__cluster_metadata-0").is_dir()


# --- partition.metadata (KIP-516 topic ids) ----------------------------------------------------


def stored_metadata(tmp_path: Path, topic_partition: TopicPartition) -> PartitionMetadata | None:
    return PartitionMetadataFile(tmp_path / str(topic_partition)).read()


def test_a_log_created_with_a_topic_id_records_it_and_a_reopen_reads_it_back(tmp_path: Path) -> None:
    manager = manager_for(tmp_path)
    manager.get_or_create_log(ORDERS, now_ms=0, topic_id=OLD_TOPIC_ID)
    fill(manager, EVENTS, 1)
    assert stored_metadata(tmp_path, ORDERS) == PartitionMetadata(0, OLD_TOPIC_ID)
    assert (manager.topic_id(ORDERS), manager.topic_id(EVENTS)) == (OLD_TOPIC_ID, None)
    assert not (tmp_path / str(EVENTS) / PARTITION_METADATA_FILE).exists(), "no id given, no file"
    manager.shutdown(now_ms=0)
    reopened = manager_for(tmp_path)
    assert (reopened.topic_id(ORDERS), reopened.topic_id(EVENTS)) == (OLD_TOPIC_ID, None)


def test_a_log_without_partition_metadata_adopts_the_topic_id_and_keeps_its_records(tmp_path: Path) -> None:
    # A log written before topic ids cannot be told apart from the current topic's: like Kafka,
    # it is kept and labelled with the id it is opened for.
    manager = manager_for(tmp_path)
    fill(manager, ORDERS, 5)
    manager.shutdown(now_ms=0)
    reopened = manager_for(tmp_path)
    log = reopened.get_or_create_log(ORDERS, now_ms=0, topic_id=NEW_TOPIC_ID)
    assert log.log_end_offset == 5
    assert reopened.topic_id(ORDERS) == NEW_TOPIC_ID
    assert stored_metadata(tmp_path, ORDERS) == PartitionMetadata(0, NEW_TOPIC_ID)


def test_a_log_of_the_same_topic_id_keeps_its_records(tmp_path: Path) -> None:
    manager = manager_for(tmp_path)
    manager.get_or_create_log(ORDERS, now_ms=0, topic_id=OLD_TOPIC_ID)
    fill(manager, ORDERS, 5)
    manager.shutdown(now_ms=0)
    reopened = manager_for(tmp_path)
    assert reopened.get_or_create_log(ORDERS, now_ms=0, topic_id=OLD_TOPIC_ID).log_end_offset == 5


def test_a_log_of_another_topic_id_is_refused_untouched_and_replaced_after_delete_log(tmp_path: Path) -> None:
    manager = manager_for(tmp_path)
    manager.get_or_create_log(ORDERS, now_ms=0, topic_id=OLD_TOPIC_ID)
    fill(manager, ORDERS, 5)
    manager.shutdown(now_ms=0)
    reopened = manager_for(tmp_path)
    with pytest.raises(InconsistentTopicIdError, match=f"belongs to topic id {OLD_TOPIC_ID}") as raised:
        reopened.get_or_create_log(ORDERS, now_ms=0, topic_id=NEW_TOPIC_ID)
    assert raised.value.error_name == "INCONSISTENT_TOPIC_ID"
    old_log = reopened.get_log(ORDERS)
    assert old_log is not None
    assert old_log.log_end_offset == 5
    assert stored_metadata(tmp_path, ORDERS) == PartitionMetadata(0, OLD_TOPIC_ID)
    reopened.delete_log(ORDERS)
    assert reopened.topic_id(ORDERS) is None
    fresh = reopened.get_or_create_log(ORDERS, now_ms=0, topic_id=NEW_TOPIC_ID)
    assert (fresh.log_start_offset, fresh.log_end_offset) == (0, 0)
    assert stored_metadata(tmp_path, ORDERS) == PartitionMetadata(0, NEW_TOPIC_ID)


def test_a_corrupt_partition_metadata_stops_the_load_with_the_way_out(tmp_path: Path) -> None:
    manager = manager_for(tmp_path)
    manager.get_or_create_log(ORDERS, now_ms=0, topic_id=OLD_TOPIC_ID)
    manager.shutdown(now_ms=0)
    (tmp_path / str(ORDERS) / PARTITION_METADATA_FILE).write_text("version: 0\ntopic_id: ")
    with pytest.raises(CorruptPartitionMetadataError, match="delete it"):
        manager_for(tmp_path)
