"""Crash recovery: whatever a crash or a bad disk does to any file at any byte, reopening gives
a log that is a prefix of what was appended, and whose indexes answer like a brute-force
reference. Method: append random batches over many small segments, stop without a clean
shutdown (indexes left preallocated, as after kill -9), damage one file, reopen, compare. Also:
index files deleted after a clean shutdown are rebuilt, and an unclean open re-validates only
the segments from the one holding the recovery point on."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.config import LogConfig
from storage.log import Log
from storage.log_loader import LogLoader
from storage.log_segment import LogSegment
from storage.offset_index import OffsetIndex
from storage.records import build_batch, decode_records, iter_headers
from storage.time_index import TimeIndex
from tests.storage.conftest import index_entries

CONFIG = LogConfig.from_properties({"segment.bytes": 1500, "index.interval.bytes": 120, "segment.index.bytes": 800})
Entry = tuple[int, int, bytes]  # offset, timestamp, value


def write_log(directory: Path, batches: list[list[tuple[int, bytes]]]) -> list[Entry]:
    """Append `batches` (lists of (timestamp, value)), leave the files as a crash would."""
    log = LogLoader(directory, CONFIG, 0).load()
    reference: list[Entry] = []
    for number, batch in enumerate(batches):
        info = log.append_as_leader(
            build_batch([(b"k", value) for _, value in batch], timestamps=[ts for ts, _ in batch]), 1, number
        )
        reference += [(info.first_offset + i, ts, value) for i, (ts, value) in enumerate(batch)]
    for segment in log.segments:
        segment.close_handlers()
    return reference


def contents(log: Log) -> list[Entry]:
    """Every record, read as a consumer would: one fetch per segment until the log end."""
    entries: list[Entry] = []
    offset = log.log_start_offset
    for _ in range(len(log.segments) + 1):
        data = log.read(offset, 1 << 30).records
        for position, header in iter_headers(data):
            entries += [(r.offset, r.timestamp, r.value or b"") for r in decode_records(data, position)]
            offset = header.next_offset
    return entries


def assert_lookups_match(log: Log, reference: list[Entry]) -> None:
    for offset, _, value in reference:
        data = log.read(offset, 1).records
        records = [r for p, _ in iter_headers(data) for r in decode_records(data, p)]
        assert any(r.offset == offset and r.value == value for r in records), f"offset {offset} not found"
    for target in sorted({ts for _, ts, _ in reference} | {0, 10**6}):
        expected = next((offset for offset, ts, _ in reference if ts >= target), None)
        found = log.offset_for_timestamp(target)
        assert (found.offset if found else None) == expected, f"timestamp {target}: {found} != {expected}"


batches_strategy = st.lists(
    st.lists(st.tuples(st.integers(0, 5000), st.binary(min_size=1, max_size=90)), min_size=1, max_size=6),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches_strategy, data=st.data())
def test_damaged_file_after_crash_recovers_to_a_prefix(tmp_path: Path, batches, data) -> None:
    directory = tmp_path / "t-0"
    shutil.rmtree(directory, ignore_errors=True)
    reference = write_log(directory, batches)
    files = sorted(p for p in directory.iterdir() if p.stat().st_size > 0)
    victim = data.draw(st.sampled_from(files), label="file")
    size = victim.stat().st_size
    at = data.draw(st.integers(0, size - 1), label="byte")
    if data.draw(st.booleans(), label="truncate"):
        with open(victim, "r+b") as file:
            file.truncate(at)
    else:
        with open(victim, "r+b") as file:
            file.seek(at)
            original = file.read(1)[0]
            file.seek(at)
            file.write(bytes([original ^ data.draw(st.integers(1, 255), label="flip")]))

    log = LogLoader(directory, CONFIG, 10**6).load(had_clean_shutdown=False)
    try:
        recovered = contents(log)
        assert recovered == reference[: len(recovered)], "recovered log is not a prefix of what was appended"
        assert log.log_end_offset == len(recovered), f"leo={log.log_end_offset} records={len(recovered)}"
        assert_lookups_match(log, recovered)
        if not victim.name.endswith(".log"):
            assert recovered == reference, f"damage to {victim.name} must not lose records"
        info = log.append_as_leader(build_batch([(b"k", b"after")], timestamps=[7]), 2, 10**6)
        assert info.first_offset == len(recovered), "appends continue at the recovered end"
    finally:
        log.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches_strategy, data=st.data())
def test_damaged_index_after_clean_shutdown_is_detected_and_rebuilt(tmp_path: Path, batches, data) -> None:
    directory = tmp_path / "t-0"
    shutil.rmtree(directory, ignore_errors=True)
    reference = write_log(directory, batches)
    log = LogLoader(directory, CONFIG, 0).load(had_clean_shutdown=False)
    log.close()
    indexes = sorted(p for p in directory.iterdir() if p.suffix in (".index", ".timeindex") and p.stat().st_size)
    if not indexes:
        return
    victim = data.draw(st.sampled_from(indexes), label="index")
    at = data.draw(st.integers(0, victim.stat().st_size - 1), label="byte")
    with open(victim, "r+b") as file:
        file.seek(at)
        original = file.read(1)[0]
        file.seek(at)
        file.write(bytes([original ^ data.draw(st.integers(1, 255), label="flip")]))

    log = LogLoader(directory, CONFIG, 10**6).load(had_clean_shutdown=True)
    try:
        assert contents(log) == reference
        assert_lookups_match(log, reference)
    finally:
        log.close()


def test_recovery_rebuilds_the_time_index_a_roll_left_its_final_entry_included(tmp_path: Path) -> None:
    # A roll ends a segment's time index with its largest timestamp (Kafka's onBecomeInactiveSegment);
    # recovery must leave the same entries (Kafka's recover appends that entry too). Batches are
    # about half of index.interval.bytes, so a segment's last batch (its largest timestamp) often
    # follows its last sparse entry: then only the final entry records it.
    directory = tmp_path / "t-0"
    log = LogLoader(directory, CONFIG, 0).load()
    for number in range(80):
        log.append_as_leader(build_batch([(b"k", b"v" * 10)], timestamps=[1000 + number]), 1, number)
    segments = list(log.segments)
    rolled = [index_entries(segment) for segment in segments[:-1]]
    assert len(rolled) >= 3
    assert [times[-1][0] for _, times in rolled] == [segment.max_timestamp_so_far for segment in segments[:-1]]
    assert any(times[-1][1] not in {offset for offset, _ in offsets} for offsets, times in rolled), "none final-only"
    for segment in log.segments:
        segment.close_handlers()
    recovered = LogLoader(directory, CONFIG, 0).load(recovery_point=0, had_clean_shutdown=False)
    try:
        *recovered_rolled, active = recovered.segments
        assert [index_entries(segment) for segment in recovered_rolled] == rolled
        assert index_entries(active)[1][-1] == (active.max_timestamp_so_far, active.offset_of_max_timestamp_so_far)
    finally:
        recovered.close()


def test_unflushed_tail_torn_mid_batch_is_cut_at_the_last_whole_batch(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    reference = write_log(directory, [[(i, b"v" * 40)] for i in range(10)])
    active = max(directory.glob("*.log"))
    with open(active, "r+b") as file:
        file.truncate(active.stat().st_size - 5)
    log = LogLoader(directory, CONFIG, 0).load(had_clean_shutdown=False)
    assert contents(log) == reference[:-1]
    log.close()


def clean_shutdown(directory: Path) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
    """Recover a crashed log, flush and close it cleanly; return each segment's index entries."""
    log = LogLoader(directory, CONFIG, 0).load(had_clean_shutdown=False)
    entries = [index_entries(segment) for segment in log.segments]
    log.flush(0)
    log.close()
    return entries


def index_entries_on_disk(directory: Path, base_offset: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """A closed segment's offset- and time-index entries, read from its files."""
    indexes = (OffsetIndex(directory / f"{base_offset:020d}.index", base_offset, CONFIG.segment_index_bytes, False),
               TimeIndex(directory / f"{base_offset:020d}.timeindex", base_offset, CONFIG.segment_index_bytes, False))
    try:
        offset_entries, time_entries = ([index.entry(slot) for slot in range(index.entries)] for index in indexes)
        return offset_entries, time_entries
    finally:
        for index in indexes:
            index.close_handler()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches_strategy, data=st.data())
def test_missing_index_files_after_clean_shutdown_are_rebuilt(tmp_path: Path, batches, data) -> None:
    # Delete the offset index, the time index or both of some segments of a cleanly closed log;
    # a clean open must notice, rebuild the files with the entries they had, and answer reads
    # and lookups by time as the reference does.
    directory = tmp_path / "t-0"
    shutil.rmtree(directory, ignore_errors=True)
    reference = write_log(directory, batches)
    entries = clean_shutdown(directory)
    bases = sorted(int(path.name[:20]) for path in directory.glob("*.log"))
    victims = data.draw(st.lists(st.sampled_from(bases), min_size=1, unique=True), label="segments")
    suffixes = data.draw(st.sampled_from([(".index",), (".timeindex",), (".index", ".timeindex")]), label="files")
    for base in victims:
        for suffix in suffixes:
            (directory / f"{base:020d}{suffix}").unlink()

    log = LogLoader(directory, CONFIG, 10**6).load(had_clean_shutdown=True)
    try:
        assert [segment.base_offset for segment in log.segments] == bases
        assert [index_entries(segment) for segment in log.segments] == entries
        assert contents(log) == reference
        assert_lookups_match(log, reference)
    finally:
        log.close()
    # The rebuilt entries reached the files: read them back without the loader, which would
    # rebuild again whatever it found missing or wrong.
    assert [index_entries_on_disk(directory, base) for base in bases] == entries


def test_unclean_open_recovers_only_from_the_segment_holding_the_recovery_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Everything below the recovery point was fsynced: an unclean open must re-validate the segment
    # holding it and every later one, and trust the earlier ones. Recover is wrapped to record
    # which segments it sees; the recovery point is put at each segment's base and inside it.
    directory = tmp_path / "t-0"
    reference = write_log(directory, [[(number, b"v" * 60)] * 3 for number in range(30)])
    clean_shutdown(directory)
    bases = sorted(int(path.name[:20]) for path in directory.glob("*.log"))
    assert len(bases) >= 4
    recovered: list[int] = []
    original_recover = LogSegment.recover

    def recording_recover(segment: LogSegment, *args: Any, **kwargs: Any) -> int:
        recovered.append(segment.base_offset)
        return original_recover(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", recording_recover)
    for slot, base in enumerate(bases):
        for recovery_point in (base, base + 1):
            recovered.clear()
            log = LogLoader(directory, CONFIG, 10**6).load(recovery_point=recovery_point, had_clean_shutdown=False)
            try:
                assert recovered == bases[slot:], f"recovery point {recovery_point}"
                assert contents(log) == reference
            finally:
                log.close()


@pytest.mark.parametrize(("raised_to", "stale_start", "expected"), [
    (8, 0, [(0, 0), (4, 5)]),  # DeleteRecords up to the LEO: the cache kept only (4, 8), which is at the LEO
    (6, 3, [(0, 3), (4, 5)]),  # mid-log: the cache kept (4, 6), above the reopened start 3
])
def test_epoch_cache_covers_the_log_start_that_a_crash_brought_back(
    tmp_path: Path, raised_to: int, stale_start: int, expected: list[tuple[int, int]]
) -> None:
    """A raised logStartOffset truncates the leader-epoch checkpoint from the start at once, but the
    log-start-offset checkpoint is written later and the segment stays until retention deletes it.
    After a crash in between the log reopens from the older start, and the cache must again say
    which epoch wrote the records from there: else a leader answers a follower's (offset, last
    epoch) for those offsets from no entry and misses the diverging epoch (replication seed
    435093956: the follower looped on records it could not append, never rejoining the ISR)."""
    directory = tmp_path / "t-0"
    log = LogLoader(directory, CONFIG, 0).load()
    log.append_as_leader(build_batch([(b"k", b"v")] * 5, timestamps=[0] * 5), 0, 0)  # 0..4 in epoch 0
    log.append_as_leader(build_batch([(b"k", b"v")] * 3, timestamps=[0] * 3), 4, 0)  # 5..7 in epoch 4
    log.maybe_increment_high_watermark(8)
    log.delete_records(raised_to)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()] == [(4, raised_to)]
    for segment in log.segments:
        segment.close_handlers()

    reopened = LogLoader(directory, CONFIG, 0).load(log_start_offset=stale_start, had_clean_shutdown=False)

    assert reopened.log_start_offset == stale_start
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries()] == expected
    assert reopened.leader_epoch_cache.end_offset_for(1, reopened.log_end_offset) == (0, 5)
