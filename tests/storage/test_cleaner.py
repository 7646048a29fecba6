"""Log compaction: the cleaner keeps the last record of every key at its original offset, honours
the dirty ratio, the high watermark, the active segment, min.compaction.lag.ms and the delete
horizon of tombstones, and a crash at any of its file steps reopens to a correct log.

Method: build logs with `append_as_leader`, clean with explicit `now_ms`, and compare what the
log holds (decoded from its segments) with what was appended; crashes are a `fault` callable that
raises at one step, after which the files are reopened by `LogLoader` as after kill -9."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from kafka.record.memory_records import MemoryRecords

from storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, LEADER_EPOCH_CHECKPOINT, OffsetCheckpointFile
from storage.cleaner import (
    CleanBuild,
    Cleaner,
    CleanerStep,
    CleanPlan,
    CleanResult,
    DiscardReason,
    LogCleaningAbortedError,
    SegmentSnapshot,
    build_cleaned_segments,
    delete_horizon_ms,
    group_segments_by_size,
    log_to_clean,
    needs_cleaning,
)
from storage.config import LogConfig
from storage.log import Log
from storage.log_loader import LogLoader
from storage.log_manager import DELETE_DIR_SUFFIX, LogManager
from storage.producer_state import snapshot_file_name
from storage.records import Compression, build_batch, decode_records, read_header
from wire.topic_partition import TopicPartition

NOW_MS = 1_000_000
TP = TopicPartition("t", 0)
COMPACT: dict[str, Any] = {
    "cleanup.policy": "compact",
    "segment.bytes": 1000,
    "index.interval.bytes": 100,
    "segment.index.bytes": 1200,
    "min.cleanable.dirty.ratio": 0.0,
    "delete.retention.ms": 1000,
}

Entry = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


class Crash(BaseException):
    """Raised by a test's fault hook: the cleaner stops as if the process died. A BaseException, so
    that no `except Exception` clean-up runs, as none does after kill -9."""


# -- helpers ------------------------------------------------------------------------------


def open_log(directory: Path, properties: Mapping[str, Any] | None = None, now_ms: int = NOW_MS, **load: Any) -> Log:
    return LogLoader(directory, LogConfig.from_properties({**COMPACT, **(properties or {})}), now_ms).load(**load)


def make_cleaner(root: Path, dedupe_entries_max: int = 1000) -> Cleaner:
    return Cleaner(OffsetCheckpointFile(root / CLEANER_OFFSET_CHECKPOINT), dedupe_entries_max)


def put(log: Log, key: bytes | None, value: bytes | None, timestamp: int = NOW_MS, **batch: Any) -> int:
    """Append one record as leader (epoch 3); return its offset."""
    records = build_batch([(key, value)], timestamps=[timestamp], **batch)
    return log.append_as_leader(records, 3, NOW_MS).first_offset


def put_all(log: Log, pairs: list[tuple[bytes, bytes | None]], timestamp: int = NOW_MS) -> list[int]:
    return [put(log, key, value, timestamp) for key, value in pairs]


def publish(log: Log, now_ms: int = NOW_MS) -> None:
    """Roll so that everything is in inactive segments, and move the HW to the LEO."""
    log.roll(now_ms)
    log.update_high_watermark(log.log_end_offset)


def entries(log: Log) -> list[Entry]:
    """Every record in the log's segments, in file order."""
    found: list[Entry] = []
    for segment in log.segments:
        data = segment.read_bytes(0, segment.size)
        position = 0
        while position < len(data):
            header = read_header(data, position)
            found += [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(data, position)]
            position += header.size_in_bytes
    return found


def latest_values(records: list[Entry]) -> dict[bytes, bytes]:
    """key -> its last value; keys whose last record is a tombstone are absent."""
    latest: dict[bytes, bytes | None] = {}
    for _, key, value, _ in records:
        if key is not None:
            latest[key] = value
    return {key: value for key, value in latest.items() if value is not None}


def segment_bytes(log: Log) -> dict[int, bytes]:
    return {segment.base_offset: segment.read_bytes(0, segment.size) for segment in log.segments}


def assert_well_formed(log: Log) -> None:
    """Offsets strictly increase across the log; every record can be read by its offset."""
    offsets = [offset for offset, _, _, _ in entries(log)]
    assert offsets == sorted(set(offsets)), offsets
    for offset in offsets:
        if offset < log.log_start_offset:
            continue
        data = log.read(offset, 1).records
        found = [r.offset for p in _positions(data) for r in decode_records(data, p)]
        assert offset in found, f"read({offset}) returned offsets {found}"


def _positions(data: bytes) -> list[int]:
    positions, position = [], 0
    while position < len(data):
        positions.append(position)
        position += read_header(data, position).size_in_bytes
    return positions


def abandon(log: Log) -> None:
    """Drop a log as kill -9 would: release file handles without trimming or flushing anything."""
    for segment in log.segments:
        segment.close_handlers()


# -- dedupe ---------------------------------------------------------------------------------


def test_clean_keeps_the_last_record_of_each_key_at_its_original_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    pairs = [(b"k%d" % (i % 3), b"v%d" % i) for i in range(40)]
    offsets = put_all(log, pairs)
    publish(log)
    before = entries(log)
    result = make_cleaner(tmp_path).clean(log, NOW_MS)
    expected = [entry for entry in before if entry[0] in (offsets[-3], offsets[-2], offsets[-1])]
    assert entries(log) == expected
    assert [(o, k, v) for o, k, v, _ in expected] == [(37, b"k1", b"v37"), (38, b"k2", b"v38"), (39, b"k0", b"v39")]
    assert result.records_removed == 37
    assert result.end_offset == 40
    assert result.map_entries == 3
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 40, 40)
    assert_well_formed(log)


def test_rebuilt_batch_keeps_epoch_producer_codec_timestamps_and_offset_range(tmp_path: Path) -> None:
    """A batch that loses records keeps its base and last offset, leader epoch, producer fields,
    codec and record timestamps; kafka-python decodes it."""
    log = open_log(tmp_path / "t-0")
    batch = build_batch([(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4")], timestamps=[10, 20, 30, 40],
                        compression=Compression.GZIP, producer_id=77, producer_epoch=2, base_sequence=5)
    log.append_as_leader(batch, 9, NOW_MS)
    put(log, b"c", b"5")
    publish(log)
    make_cleaner(tmp_path).clean(log, NOW_MS)
    segment = log.segments.first_segment
    data = segment.read_bytes(0, segment.size)
    header = read_header(data)
    assert (header.base_offset, header.last_offset, header.partition_leader_epoch) == (0, 3, 9)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 5)
    assert header.compression == Compression.GZIP
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decode_records(data)] == [
        (1, b"b", b"2", 20), (2, b"a", b"3", 30)]
    kafka_batch = MemoryRecords(data[: header.size_in_bytes]).next_batch()
    assert kafka_batch.validate_crc()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in kafka_batch] == [(1, b"b", b"2", 20), (2, b"a", b"3", 30)]


def test_keyless_records_are_discarded_as_kafka_does(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    put_all(log, [(b"a", b"1")])
    put(log, None, b"no key")
    put(log, b"b", b"2")
    publish(log)
    make_cleaner(tmp_path).clean(log, NOW_MS)
    assert [(o, k, v) for o, k, v, _ in entries(log)] == [(0, b"a", b"1"), (2, b"b", b"2")]


def test_group_whose_last_batch_is_removed_keeps_an_empty_batch_at_the_group_end(tmp_path: Path) -> None:
    """The loader replaces old segments by the range of the swap segment, so the cleaned segment
    must end where its group ended even when the group's last records are all superseded."""
    log = open_log(tmp_path / "t-0", {"segment.bytes": 300})  # two of these segments fit, not three
    put_all(log, [(b"a", b"1"), (b"b", b"1")])
    log.roll(NOW_MS)
    put_all(log, [(b"a", b"2"), (b"b", b"2")])
    log.roll(NOW_MS)
    put_all(log, [(b"a", b"3"), (b"b", b"3")])
    log.roll(NOW_MS)
    log.update_high_watermark(log.log_end_offset)
    make_cleaner(tmp_path).clean(log, NOW_MS)
    first = log.segments.first_segment
    assert (first.base_offset, first.next_offset) == (0, 4)
    last_header = list(first.iter_headers())[-1][1]
    assert (last_header.base_offset, last_header.last_offset, last_header.records_count) == (3, 3, 0)
    assert [(o, v) for o, _, v, _ in entries(log)] == [(4, b"3"), (5, b"3")]


def test_an_active_producers_last_batch_stays_as_an_empty_batch_so_its_state_survives_a_reload(
        tmp_path: Path) -> None:
    """Kafka's cleaner retains the batch holding each active producer's last sequence, emptied if
    none of its records stays; a reload after an unclean shutdown, with no snapshot to start from,
    rebuilds the producer's state from it, so a retry of that batch is still a duplicate."""
    directory = tmp_path / "t-0"
    log = open_log(directory)
    first = build_batch([(b"a", b"1")], timestamps=[NOW_MS], producer_id=77, producer_epoch=0, base_sequence=0)
    last = build_batch([(b"b", b"1")], timestamps=[NOW_MS], producer_id=77, producer_epoch=0, base_sequence=1)
    log.append_as_leader(first, 3, NOW_MS)
    log.append_as_leader(last, 3, NOW_MS)
    put_all(log, [(b"a", b"2"), (b"b", b"2")])  # every record of the producer is superseded
    publish(log)
    make_cleaner(tmp_path).clean(log, NOW_MS)
    assert [(o, k, v) for o, k, v, _ in entries(log)] == [(2, b"a", b"2"), (3, b"b", b"2")]
    kept = [header for segment in log.segments for _, header in segment.iter_headers() if header.producer_id == 77]
    assert [(h.base_offset, h.last_offset, h.base_sequence, h.records_count) for h in kept] == [(1, 1, 1, 0)]
    abandon(log)
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    reloaded = open_log(directory)
    try:
        retry = reloaded.append_as_leader(last, 3, NOW_MS)
        assert (retry.duplicate, retry.first_offset) == (True, 1)
        assert reloaded.log_end_offset == 4
    finally:
        reloaded.close()


# -- tombstones -----------------------------------------------------------------------------


def test_tombstone_is_kept_for_delete_retention_ms_after_its_first_clean_then_removed(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"delete.retention.ms": 1000})
    put_all(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)], timestamp=500)
    publish(log)
    cleaner = make_cleaner(tmp_path)
    cleaner.clean(log, NOW_MS)
    assert [(o, k, v, t) for o, k, v, t in entries(log)] == [(1, b"b", b"1", 500), (2, b"a", None, 500)]
    tombstone_batch = list(log.segments.first_segment.iter_headers())[-1][1]
    assert delete_horizon_ms(tombstone_batch) == NOW_MS + 1000
    cleaner.clean(log, NOW_MS + 999)
    assert [(o, v) for o, _, v, _ in entries(log)] == [(1, b"1"), (2, None)]
    cleaner.clean(log, NOW_MS + 1000)
    assert [(o, k, v) for o, k, v, _ in entries(log)] == [(1, b"b", b"1")]
    assert_well_formed(log)


def test_tombstone_in_a_batch_with_other_records_reads_back_with_its_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(build_batch([(b"a", b"1"), (b"b", None), (b"c", b"3")], timestamps=[7, 8, 9]), 0, NOW_MS)
    publish(log)
    make_cleaner(tmp_path).clean(log, NOW_MS)
    data = log.segments.first_segment.read_bytes(0, log.segments.first_segment.size)
    assert delete_horizon_ms(read_header(data)) == NOW_MS + COMPACT["delete.retention.ms"]
    kafka_batch = MemoryRecords(data).next_batch()
    assert kafka_batch.validate_crc()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in kafka_batch] == [
        (0, b"a", b"1", 7), (1, b"b", None, 8), (2, b"c", b"3", 9)]
    assert read_header(data).max_timestamp == 9


# -- what is cleanable ----------------------------------------------------------------------


def test_dirty_ratio_below_min_cleanable_dirty_ratio_does_not_clean(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"min.cleanable.dirty.ratio": 0.5})
    put_all(log, [(b"k%d" % i, b"x" * 50) for i in range(12)])
    publish(log)
    cleaner = make_cleaner(tmp_path)
    assert cleaner.maybe_clean(log, NOW_MS) is not None
    clean_bytes = log.size_in_bytes()
    put_all(log, [(b"k0", b"y" * 50)])
    publish(log)
    to_clean = cleaner.log_to_clean(log, NOW_MS)
    dirty_bytes = log.segments.values_before(log.log_end_offset)[-1].size
    assert (to_clean.clean_bytes, to_clean.cleanable_bytes) == (clean_bytes, dirty_bytes)
    assert to_clean.cleanable_ratio == dirty_bytes / (clean_bytes + dirty_bytes) < 0.5
    before = segment_bytes(log)
    assert cleaner.maybe_clean(log, NOW_MS) is None
    assert segment_bytes(log) == before
    put_all(log, [(b"k%d" % i, b"z" * 50) for i in range(1, 12)])
    publish(log)
    assert needs_cleaning(cleaner.log_to_clean(log, NOW_MS), 0.5)
    assert cleaner.maybe_clean(log, NOW_MS) is not None
    expected = {b"k0": b"y" * 50} | {b"k%d" % i: b"z" * 50 for i in range(1, 12)}
    assert latest_values(entries(log)) == expected
    assert len(entries(log)) == 12


def test_maybe_clean_ignores_logs_without_the_compact_policy(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"cleanup.policy": "delete"})
    put_all(log, [(b"a", b"1"), (b"a", b"2")])
    publish(log)
    assert make_cleaner(tmp_path).maybe_clean(log, NOW_MS) is None
    assert len(entries(log)) == 2


def test_active_segment_and_segments_at_or_above_the_high_watermark_are_never_cleaned(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for round_number in range(4):
        put_all(log, [(b"a", b"%d" % round_number), (b"b", b"%d" % round_number)])
        log.roll(NOW_MS)
    put_all(log, [(b"a", b"active")])
    log.update_high_watermark(5)  # inside the segment [4, 6)
    protected = {base: data for base, data in segment_bytes(log).items() if base >= 4}
    result = make_cleaner(tmp_path).clean(log, NOW_MS)
    assert result.first_uncleanable_offset == 4
    assert result.end_offset == 4
    assert {base: data for base, data in segment_bytes(log).items() if base >= 4} == protected
    assert [(o, v) for o, _, v, _ in entries(log) if o < 4] == [(2, b"1"), (3, b"1")]


def test_min_compaction_lag_ms_holds_back_segments_with_recent_records(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"min.compaction.lag.ms": 1000})
    put_all(log, [(b"a", b"old"), (b"a", b"older")], timestamp=NOW_MS - 5000)
    log.roll(NOW_MS)
    put_all(log, [(b"a", b"new")], timestamp=NOW_MS - 10)
    publish(log)
    result = make_cleaner(tmp_path).clean(log, NOW_MS)
    assert (result.first_uncleanable_offset, result.end_offset) == (2, 2)
    assert [(o, v) for o, _, v, _ in entries(log)] == [(1, b"older"), (2, b"new")]


def test_delete_and_compact_policies_both_apply(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"cleanup.policy": "compact,delete", "retention.ms": 10_000,
                                                 "segment.bytes": 200})
    put_all(log, [(b"a", b"1"), (b"b", b"1")], timestamp=NOW_MS - 60_000)
    log.roll(NOW_MS)
    put_all(log, [(b"a", b"2"), (b"a", b"3")], timestamp=NOW_MS)
    publish(log)
    cleaner = make_cleaner(tmp_path)
    cleaner.maybe_clean(log, NOW_MS)
    assert [(o, k, v) for o, k, v, _ in entries(log)] == [(1, b"b", b"1"), (3, b"a", b"3")]
    log.delete_old_segments(NOW_MS)
    assert log.log_start_offset == 2
    assert [(o, k, v) for o, k, v, _ in entries(log)] == [(3, b"a", b"3")]
    assert cleaner.log_to_clean(log, NOW_MS).first_dirty_offset == 4


# -- checkpoint -----------------------------------------------------------------------------


def test_checkpoint_is_written_and_the_next_clean_maps_only_the_new_dirty_part(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    put_all(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"a", b"2")])
    publish(log)
    cleaner = make_cleaner(tmp_path)
    first = cleaner.clean(log, NOW_MS)
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {TP: 4}
    assert (first.first_dirty_offset, first.end_offset, first.map_entries) == (0, 4, 3)
    put_all(log, [(b"d", b"1"), (b"a", b"3")])
    publish(log)
    to_clean = cleaner.log_to_clean(log, NOW_MS)
    assert (to_clean.first_dirty_offset, to_clean.first_uncleanable_offset) == (4, 6)
    second = cleaner.clean(log, NOW_MS)
    assert (second.first_dirty_offset, second.end_offset, second.map_entries) == (4, 6, 2)
    assert [(o, k, v) for o, k, v, _ in entries(log)] == [(1, b"b", b"1"), (2, b"c", b"1"), (4, b"d", b"1"),
                                                          (5, b"a", b"3")]
    assert cleaner.checkpointed_offset(log) == 6


def test_checkpoint_outside_the_log_restarts_from_the_log_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    put_all(log, [(b"a", b"1"), (b"a", b"2")])
    publish(log)
    OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).write({TP: 999})
    to_clean = log_to_clean(log, 999, NOW_MS)
    assert (to_clean.first_dirty_offset, to_clean.checkpoint_reset) == (0, True)
    assert make_cleaner(tmp_path).clean(log, NOW_MS).records_removed == 1


def test_maybe_truncate_checkpoint_lowers_only(tmp_path: Path) -> None:
    cleaner = make_cleaner(tmp_path)
    cleaner.checkpoint.write({TP: 50, TopicPartition("u", 1): 7})
    assert cleaner.maybe_truncate_checkpoint(TP, 60) is None
    assert cleaner.maybe_truncate_checkpoint(TP, 20) == 50
    assert cleaner.checkpoint.read() == {TP: 20, TopicPartition("u", 1): 7}
    cleaner.remove_checkpoint(TP)
    assert cleaner.checkpoint.read() == {TopicPartition("u", 1): 7}


def test_full_offset_map_cleans_only_up_to_the_offset_it_reached(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    put_all(log, [(key, value) for key in (b"a", b"b", b"c", b"d", b"e") for value in (b"1", b"2")])
    publish(log)
    before = entries(log)
    cleaner = make_cleaner(tmp_path, dedupe_entries_max=3)
    first = cleaner.clean(log, NOW_MS)
    assert (first.end_offset, first.map_full, first.map_entries) == (6, True, 3)
    assert [(o, k, v) for o, k, v, _ in entries(log)][:3] == [(1, b"a", b"2"), (3, b"b", b"2"), (5, b"c", b"2")]
    assert [entry for entry in entries(log) if entry[0] >= 6] == [entry for entry in before if entry[0] >= 6]
    second = cleaner.clean(log, NOW_MS)
    assert (second.first_dirty_offset, second.end_offset, second.map_full) == (6, 10, False)
    assert [o for o, _, _, _ in entries(log)] == [1, 3, 5, 7, 9]


# -- grouping -------------------------------------------------------------------------------


def test_grouping_fits_segment_bytes_and_makes_fewer_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"segment.bytes": 600})
    for value in range(30):
        put_all(log, [(b"k%d" % (value % 2), b"%d" % value)])
        if value % 3 == 2:
            log.roll(NOW_MS)
    publish(log)
    segments = [SegmentSnapshot.of(segment) for segment in log.segments.values_before(log.log_end_offset)]
    groups = group_segments_by_size(segments, 600, 1200)
    assert [segment for group in groups for segment in group] == segments
    assert all(sum(s.size for s in group) <= 600 for group in groups)
    assert all(len(group) > 1 for group in groups[:-1])
    cleaner = make_cleaner(tmp_path)
    result = cleaner.clean(log, NOW_MS)
    assert (result.segments_before, result.segments_after) == (len(segments), len(groups))
    assert len(log.segments) == len(groups) + 1
    cleaner.clean(log, NOW_MS)
    assert len(log.segments) == 2  # the second pass merges the now tiny segments into one
    assert [(o, v) for o, _, v, _ in entries(log)] == [(28, b"28"), (29, b"29")]


def test_grouping_respects_index_sizes_and_relative_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"index.interval.bytes": 0})
    put_all(log, [(b"a", b"1"), (b"a", b"2")])
    log.roll(NOW_MS)
    put_all(log, [(b"a", b"3")])
    log.roll(NOW_MS, expected_next_offset=2**31 + 10)
    log.append_as_follower(build_batch([(b"a", b"4")], base_offset=2**31 + 10, timestamps=[NOW_MS]), NOW_MS)
    publish(log)
    segments = [SegmentSnapshot.of(segment) for segment in log.segments.values_before(log.log_end_offset)]
    assert [len(g) for g in group_segments_by_size(segments, 10**6, 10**6)] == [2, 1]
    assert [len(g) for g in group_segments_by_size(segments, 10**6, 8)] == [1, 1, 1]


# -- crashes --------------------------------------------------------------------------------

CRASH_PROPERTIES = {"segment.bytes": 700, "delete.retention.ms": 100}


def _build_crash_log(directory: Path) -> tuple[Log, Cleaner]:
    """Several segments per group, two groups, tombstones already cleaned once (horizon set) and
    new duplicates after them, so the crashing clean both dedupes and removes tombstones."""
    log = open_log(directory / "t-0", CRASH_PROPERTIES)
    cleaner = make_cleaner(directory)
    for value in range(24):
        key = b"k%d" % (value % 5)
        put(log, key, None if value % 7 == 6 else b"v%d" % value)
        if value % 3 == 2:
            log.roll(NOW_MS)
    publish(log)
    cleaner.clean(log, NOW_MS)
    for value in range(24, 40):  # k0's tombstone stays its last record; its horizon passes by CRASH_NOW_MS
        put(log, b"k%d" % (1 + value % 3), b"v%d" % value)
        if value % 3 == 2:
            log.roll(NOW_MS)
    publish(log)
    return log, cleaner


CRASH_NOW_MS = NOW_MS + 500


def _clean_steps(tmp_path: Path) -> tuple[list[CleanerStep], list[Entry], list[Entry], list[int]]:
    """A crash-free run: its steps, the records before and after, and each group's end offset."""
    log, cleaner = _build_crash_log(tmp_path / "reference")
    before = entries(log)
    steps: list[CleanerStep] = []
    cleaner.clean(log, CRASH_NOW_MS, steps.append)
    ends = [s.next_offset for s in log.segments.values_before(cleaner.checkpointed_offset(log) or 0)]
    return steps, before, entries(log), ends


@pytest.fixture(scope="module")
def crash_reference(tmp_path_factory: pytest.TempPathFactory):
    return _clean_steps(tmp_path_factory.mktemp("crash"))


def test_crash_reference_run_covers_every_step(crash_reference) -> None:
    steps, before, after, ends = crash_reference
    assert set(steps) == set(CleanerStep)
    assert steps.count(CleanerStep.SWAP_COMPLETED) == len(ends) >= 2
    assert steps.count(CleanerStep.OLD_SEGMENT_DELETED) > len(ends)
    assert latest_values(after) == latest_values(before)
    assert len(after) < len(before)
    assert any(value is None for _, _, value, _ in before)
    assert all(value is not None for _, _, value, _ in after)  # tombstones past their horizon went


def test_crash_at_every_step_reopens_to_before_or_after_each_group(tmp_path: Path, crash_reference) -> None:
    steps, before, after, ends = crash_reference
    # Groups are swapped in order, so after a crash the first k groups are cleaned, the rest not.
    states = [[e for e in after if e[0] < end] + [e for e in before if e[0] >= end] for end in [0, *ends]]
    for crash_at, step in enumerate(steps):
        directory = tmp_path / f"crash-{crash_at}"
        log, cleaner = _build_crash_log(directory)
        calls: list[CleanerStep] = []

        def fault(step: CleanerStep, calls: list[CleanerStep] = calls, crash_at: int = crash_at) -> None:
            calls.append(step)
            if len(calls) > crash_at:
                raise Crash(step)

        with pytest.raises(Crash):
            cleaner.clean(log, CRASH_NOW_MS, fault)
        assert calls[-1] == step
        where = f"crash after step {crash_at} ({step.name})"
        state = (log.log_start_offset, log.recovery_point, log.high_watermark, log.log_end_offset)
        abandon(log)
        reopened = open_log(directory / "t-0", CRASH_PROPERTIES, CRASH_NOW_MS, log_start_offset=state[0],
                            recovery_point=state[1], high_watermark=state[2], had_clean_shutdown=False)
        leftovers = [p.name for p in reopened.directory.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
        assert not leftovers, where
        assert entries(reopened) in states, where
        assert latest_values(entries(reopened)) == latest_values(before), where
        assert reopened.log_end_offset == state[3], where
        assert_well_formed(reopened)
        cleaner.clean(reopened, CRASH_NOW_MS)
        assert entries(reopened) == after, where
        reopened.close()


def _scratch_files(directory: Path) -> dict[str, set[str]]:
    """Names of the cleaner's scratch files, by suffix: `.cleaned` and `.swap`."""
    names = [path.name for path in directory.iterdir()]
    return {suffix: {name for name in names if name.endswith(suffix)} for suffix in (".cleaned", ".swap")}


def _segment_files(base_offset: int, suffix: str) -> set[str]:
    return {f"{base_offset:020d}{kind}{suffix}" for kind in (".log", ".index", ".timeindex")}


def test_file_names_between_cleaner_steps(tmp_path: Path) -> None:
    # The names are the crash protocol LogLoader relies on: `.cleaned` while the build writes and
    # flushes the new segments, one per group (dropped on reopen), `.swap` from a group's rename
    # until its old segments are gone (completed on reopen), final names after. The fault hook
    # looks at the directory at each step without stopping the clean.
    log, cleaner = _build_crash_log(tmp_path)
    bases_before = [segment.base_offset for segment in log.segments]
    seen: list[tuple[CleanerStep, dict[str, set[str]], list[int]]] = []

    def fault(step: CleanerStep) -> None:
        seen.append((step, _scratch_files(log.directory), [segment.base_offset for segment in log.segments]))

    cleaner.clean(log, CRASH_NOW_MS, fault)
    built: list[int] = []  # group bases with `.cleaned` files, in build order
    swapped: list[int] = []
    for step, scratch, bases in seen:
        where = f"at {step.name}: {scratch}"
        if step in (CleanerStep.CLEANED_APPENDED, CleanerStep.CLEANED_FLUSHED):
            newest = max(int(name[:20]) for name in scratch[".cleaned"])
            if newest not in built:
                built.append(newest)
            assert scratch == {".cleaned": set().union(*(_segment_files(b, ".cleaned") for b in built)),
                               ".swap": set()}, where
            assert bases == bases_before, f"the build changed the log {where}"
            continue
        waiting = built[len(swapped) + 1:]  # groups built, not yet swapped, after the one being swapped
        assert scratch[".cleaned"] == set().union(*(_segment_files(b, ".cleaned") for b in waiting)), where
        if step in (CleanerStep.SWAP_RENAMED, CleanerStep.OLD_SEGMENT_DELETED):
            group_base = built[len(swapped)]
            assert scratch[".swap"] == _segment_files(group_base, ".swap"), where
            assert (step is CleanerStep.OLD_SEGMENT_DELETED) == (group_base not in bases), where
        else:
            assert scratch[".swap"] == set(), where
            if step is CleanerStep.SWAP_COMPLETED:
                assert built[len(swapped)] in bases, where
                swapped.append(built[len(swapped)])
    assert [step for step, _, _ in seen][-1] is CleanerStep.CHECKPOINT_WRITTEN
    assert swapped == built
    assert len(swapped) >= 2, "the clean swaps in more than one group"

    # Once the old segments' delayed delete has run, only final names remain: the map's segments.
    log.delete_expired_files(CRASH_NOW_MS + log.config.file_delete_delay_ms)
    names = {p.name for p in log.directory.iterdir()} - {LEADER_EPOCH_CHECKPOINT}
    snapshots = {name for name in names if name.endswith(".snapshot")}  # producer state, at segment bases
    assert snapshots <= {snapshot_file_name(segment.base_offset) for segment in log.segments}
    assert names - snapshots == set().union(*(_segment_files(segment.base_offset, "") for segment in log.segments))
    assert set(swapped) <= {segment.base_offset for segment in log.segments}


# -- the build off the log's owner: appends, truncation, deletion, crashes in between --------


class PausedBuild:
    """`build_cleaned_segments(plan)` on its own thread, held at its first `pause_at` step until
    `finish`: the test changes the log there, as the owner does while the cleaner thread builds."""

    def __init__(self, plan: CleanPlan, pause_at: CleanerStep = CleanerStep.CLEANED_APPENDED) -> None:
        self.outcome: CleanBuild | Exception | None = None
        self._reached = threading.Event()
        self._resume = threading.Event()

        def fault(step: CleanerStep) -> None:
            if step is pause_at and not self._reached.is_set():
                self._reached.set()
                assert self._resume.wait(30), "the test never resumed the build"

        def run() -> None:
            try:
                self.outcome = build_cleaned_segments(plan, fault)
            except Exception as failure:
                self.outcome = failure

        self._thread = threading.Thread(target=run, name="test-cleaner-thread")
        self._thread.start()
        assert self._reached.wait(30), f"the build never reached {pause_at}"

    def finish(self) -> CleanBuild | Exception | None:
        self._resume.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the build did not finish"
        return self.outcome


def _keyed_log(directory: Path, properties: Mapping[str, Any] | None = None) -> Log:
    """40 records over keys k0..k2 in several inactive segments, all below the HW."""
    log = open_log(directory, properties)
    put_all(log, [(b"k%d" % (value % 3), b"v%d" % value) for value in range(40)])
    publish(log)
    assert len(log.segments) >= 4
    return log


def _manager(root: Path) -> LogManager:
    return LogManager([root], lambda topic: LogConfig.from_properties(COMPACT), now_ms=NOW_MS)


def _managed_keyed_log(root: Path) -> tuple[LogManager, Log]:
    manager = _manager(root)
    log = manager.get_or_create_log(TP, NOW_MS)
    put_all(log, [(b"k%d" % (value % 3), b"v%d" % value) for value in range(40)])
    publish(log)
    return manager, log


def test_records_appended_and_rolled_during_the_build_stay_after_the_swap(tmp_path: Path) -> None:
    # The build reads only the planned segments while the owner appends, rolls and moves the HW;
    # the swap replaces the planned segments and leaves the later ones, appended records included.
    log = _keyed_log(tmp_path / "t-0")
    before = entries(log)
    cleaner = make_cleaner(tmp_path)
    build = PausedBuild(cleaner.plan(log, NOW_MS))
    late = put_all(log, [(b"k0", b"late"), (b"k9", b"new")])
    log.roll(NOW_MS)
    later = put_all(log, [(b"k1", b"later")])
    log.update_high_watermark(log.log_end_offset)
    built = build.finish()
    assert isinstance(built, CleanBuild), built
    result = cleaner.swap(log, built, NOW_MS)
    assert isinstance(result, CleanResult), result
    assert (result.end_offset, result.records_removed) == (40, 37)
    kept = [entry for entry in before if entry[0] >= 37]
    assert [(o, k, v) for o, k, v, _ in entries(log)] == [(o, k, v) for o, k, v, _ in kept] + [
        (late[0], b"k0", b"late"), (late[1], b"k9", b"new"), (later[0], b"k1", b"later")]
    assert_well_formed(log)
    assert cleaner.checkpointed_offset(log) == 40
    assert _scratch_files(log.directory) == {".cleaned": set(), ".swap": set()}
    # The next clean takes the records appended during the build as its dirty part.
    cleaner.clean(log, NOW_MS)
    assert latest_values(entries(log)) == {b"k0": b"late", b"k1": b"later", b"k2": b"v38", b"k9": b"new"}


def test_a_truncation_during_the_build_aborts_it_and_its_files_go(tmp_path: Path) -> None:
    manager, log = _managed_keyed_log(tmp_path)
    before = entries(log)
    plan = manager.plan_cleaning(TP, NOW_MS)
    assert plan is not None
    build = PausedBuild(plan)
    assert manager.truncate_to(TP, 30, NOW_MS)
    outcome = build.finish()
    assert isinstance(outcome, LogCleaningAbortedError), outcome
    assert _scratch_files(log.directory) == {".cleaned": set(), ".swap": set()}
    assert entries(log) == before[:30]
    assert manager.log_dir(TP) is not None
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {}


def test_a_build_finished_before_a_truncation_is_discarded_at_the_swap(tmp_path: Path) -> None:
    manager, log = _managed_keyed_log(tmp_path)
    before = entries(log)
    plan = manager.plan_cleaning(TP, NOW_MS)
    assert plan is not None
    built = build_cleaned_segments(plan)
    assert _scratch_files(log.directory)[".cleaned"], "the build wrote .cleaned segments"
    assert manager.truncate_to(TP, 30, NOW_MS)
    assert manager.swap_cleaned(built, NOW_MS) is DiscardReason.ABORTED
    assert _scratch_files(log.directory) == {".cleaned": set(), ".swap": set()}
    assert entries(log) == before[:30]
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {}


def test_segments_deleted_by_retention_during_the_build_discard_it(tmp_path: Path) -> None:
    log = _keyed_log(tmp_path / "t-0")
    cleaner = make_cleaner(tmp_path)
    build = PausedBuild(cleaner.plan(log, NOW_MS))
    first = log.segments.first_segment
    log.delete_records(first.next_offset)
    assert log.delete_old_segments(NOW_MS), "the first segment goes"
    remaining = entries(log)
    built = build.finish()
    assert isinstance(built, CleanBuild), built
    assert cleaner.swap(log, built, NOW_MS) is DiscardReason.SEGMENT_CHANGED
    assert entries(log) == remaining
    assert _scratch_files(log.directory) == {".cleaned": set(), ".swap": set()}
    assert cleaner.checkpointed_offset(log) is None


def test_a_log_deleted_during_the_build_aborts_it_and_its_directory_goes(tmp_path: Path) -> None:
    # The build holds open `.cleaned` files in the directory when it is deleted: the rename to
    # `-delete` first lets the directory be emptied and removed all the same.
    manager, log = _managed_keyed_log(tmp_path)
    plan = manager.plan_cleaning(TP, NOW_MS)
    assert plan is not None
    build = PausedBuild(plan)
    manager.delete_log(TP)
    assert not log.directory.exists()
    assert isinstance(build.finish(), LogCleaningAbortedError)
    assert sorted(path.name for path in tmp_path.iterdir() if path.is_dir()) == []
    assert manager.get_log(TP) is None


def test_a_build_swapped_into_a_reopened_log_is_refused(tmp_path: Path) -> None:
    log = _keyed_log(tmp_path / "t-0")
    before = entries(log)
    cleaner = make_cleaner(tmp_path)
    built = build_cleaned_segments(cleaner.plan(log, NOW_MS))
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert cleaner.swap(reopened, built, NOW_MS) is DiscardReason.LOG_REPLACED
    assert entries(reopened) == before
    assert _scratch_files(reopened.directory) == {".cleaned": set(), ".swap": set()}
    reopened.close()


def test_load_removes_a_deletion_that_a_crash_interrupted(tmp_path: Path) -> None:
    doomed = tmp_path / f"t-0{DELETE_DIR_SUFFIX}"
    doomed.mkdir()
    (doomed / "00000000000000000000.log").write_bytes(b"x")
    manager = _manager(tmp_path)
    assert not doomed.exists()
    assert list(manager) == []


@pytest.mark.parametrize("crash_at", [None, CleanerStep.SWAP_RENAMED, CleanerStep.OLD_SEGMENT_DELETED,
                                      CleanerStep.SWAP_COMPLETED, CleanerStep.CHECKPOINT_WRITTEN])
def test_a_crash_between_build_and_swap_reopens_with_every_record_appended_since(
        tmp_path: Path, crash_at: CleanerStep | None) -> None:
    # A crash after the build (None: before the swap began) or at a step of the swap, with records
    # appended after the plan: the loader drops `.cleaned` files and completes `.swap` ones, and
    # what was appended during the build is all there.
    log, cleaner = _build_crash_log(tmp_path)
    before = entries(log)
    built = build_cleaned_segments(cleaner.plan(log, CRASH_NOW_MS))
    put_all(log, [(b"k1", b"appended"), (b"k7", b"appended")])
    log.update_high_watermark(log.log_end_offset)
    appended = entries(log)[len(before):]
    assert len(appended) == 2

    def fault(step: CleanerStep) -> None:
        if step is crash_at:
            raise Crash(step)

    if crash_at is not None:
        with pytest.raises(Crash):
            cleaner.swap(log, built, CRASH_NOW_MS, fault)
    state = (log.log_start_offset, log.recovery_point, log.high_watermark, log.log_end_offset)
    abandon(log)
    for cleaned, _ in built.groups:
        cleaned.close_handlers()
    reopened = open_log(tmp_path / "t-0", CRASH_PROPERTIES, CRASH_NOW_MS, log_start_offset=state[0],
                        recovery_point=state[1], high_watermark=state[2], had_clean_shutdown=False)
    leftovers = [p.name for p in reopened.directory.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
    assert not leftovers
    found = entries(reopened)
    assert found[-2:] == appended
    assert reopened.log_end_offset == state[3]
    assert latest_values(found) == latest_values(before + appended)
    if crash_at is None:
        assert found == before + appended
    else:
        assert len(found) < len(before) + len(appended), "the first group's swap was completed"
    assert_well_formed(reopened)
    reopened.close()


# -- property: random appends, rolls, cleans and crashes against a reference ----------------


class CompactedLogMachine(RuleBasedStateMachine):
    """Reference model: the list of every record appended (offset, key, value, timestamp). After
    each rule: the log's records are a subsequence of it with the same offsets, in increasing
    order; the latest value of every key is the reference's; nothing at or above the first dirty
    offset, and nothing in the active segment, was removed."""

    @initialize(dedupe_entries_max=st.integers(1, 8), segment_size=st.integers(250, 900))
    def open(self, dedupe_entries_max: int, segment_size: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="cleaner-"))
        self.properties = {"segment.bytes": segment_size, "delete.retention.ms": 50, "index.interval.bytes": 60}
        self.now_ms = NOW_MS
        self.log = open_log(self.root / "t-0", self.properties, self.now_ms)
        self.cleaner = make_cleaner(self.root, dedupe_entries_max)
        self.reference: list[Entry] = []
        self.clean_bound = 0  # no clean so far may have removed a record at or above this offset

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close()
            shutil.rmtree(self.root, ignore_errors=True)

    @rule(records=st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                                     st.one_of(st.none(), st.binary(max_size=20))), min_size=1, max_size=4),
          elapsed_ms=st.integers(0, 40), compression=st.sampled_from([Compression.NONE, Compression.GZIP]))
    def append(self, records: list[tuple[bytes, bytes | None]], elapsed_ms: int, compression: Compression) -> None:
        self.now_ms += elapsed_ms
        batch = build_batch(records, timestamps=[self.now_ms] * len(records), compression=compression)
        info = self.log.append_as_leader(batch, 1, self.now_ms)
        self.reference += [(info.first_offset + i, k, v, self.now_ms) for i, (k, v) in enumerate(records)]
        self.log.update_high_watermark(self.log.log_end_offset)

    @rule()
    def roll(self) -> None:
        self.log.roll(self.now_ms)

    @rule(elapsed_ms=st.integers(0, 80))
    def clean(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        self._note_clean_bound()
        result = self.cleaner.clean(self.log, self.now_ms)
        assert result.end_offset <= self.clean_bound
        event(f"clean removed records: {result.records_removed > 0}, map full: {result.map_full}")

    def _note_clean_bound(self) -> None:
        to_clean = self.cleaner.log_to_clean(self.log, self.now_ms)
        assert to_clean.first_uncleanable_offset <= self.log.high_watermark
        assert to_clean.first_uncleanable_offset <= self.log.segments.active_segment.base_offset
        self.clean_bound = max(self.clean_bound, to_clean.first_uncleanable_offset, to_clean.first_dirty_offset)

    @rule(elapsed_ms=st.integers(0, 80), crash_at=st.integers(0, 25))
    def crash_while_cleaning(self, elapsed_ms: int, crash_at: int) -> None:
        self.now_ms += elapsed_ms
        calls: list[CleanerStep] = []

        def fault(step: CleanerStep) -> None:
            calls.append(step)
            if len(calls) > crash_at:
                raise Crash(step)

        self._note_clean_bound()
        with contextlib.suppress(Crash):
            self.cleaner.clean(self.log, self.now_ms, fault)
        event(f"crash after {calls[-1].name if len(calls) > crash_at else 'no step'}")
        state = (self.log.log_start_offset, self.log.recovery_point, self.log.high_watermark)
        abandon(self.log)
        self.log = open_log(self.root / "t-0", self.properties, self.now_ms, log_start_offset=state[0],
                            recovery_point=state[1], high_watermark=state[2], had_clean_shutdown=False)

    @rule()
    def reopen(self) -> None:
        self.log.flush(self.now_ms)
        state = (self.log.log_start_offset, self.log.recovery_point, self.log.high_watermark)
        self.log.close()
        self.log = open_log(self.root / "t-0", self.properties, self.now_ms, log_start_offset=state[0],
                            recovery_point=state[1], high_watermark=state[2])

    @invariant()
    def records_are_the_reference_minus_compacted_ones(self) -> None:
        if not hasattr(self, "log"):
            return
        found = entries(self.log)
        by_offset = {entry[0]: entry for entry in self.reference}
        assert all(by_offset.get(entry[0]) == entry for entry in found), "a record changed or appeared"
        offsets = [entry[0] for entry in found]
        assert offsets == sorted(set(offsets))
        assert latest_values(found) == latest_values(self.reference)
        if {key for _, key, _, _ in self.reference} - {key for _, key, _, _ in found}:
            event("a deleted key's last tombstone was removed")
        kept = set(offsets)
        untouchable = [e[0] for e in self.reference if e[0] >= self.clean_bound]
        assert all(offset in kept for offset in untouchable), "a record no clean could reach went missing"
        assert self.log.log_end_offset == (self.reference[-1][0] + 1 if self.reference else 0)

    @invariant()
    def latest_records_are_readable(self) -> None:
        if not hasattr(self, "log"):
            return
        latest = {key: offset for offset, key, value, _ in self.reference if value is not None}
        latest_any = {key: offset for offset, key, _, _ in self.reference}
        for key, offset in latest.items():
            if latest_any[key] != offset:
                continue  # the key's last record is a tombstone
            data = self.log.read(offset, 1).records
            assert offset in [r.offset for p in _positions(data) for r in decode_records(data, p)]


CompactedLogMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_compacted_log_matches_reference = CompactedLogMachine.TestCase
