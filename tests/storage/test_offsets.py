"""Key offsets: logStartOffset (delete_records), the high watermark, follower truncation, full
truncation, the recovery point, the leader epoch cache fed by leader appends, and the timestamps
a LogAppendTime topic stores and looks up.

Method: small logs with several segments; after every operation the test checks the four
offsets, what a read returns, and (where files are involved) what a reopen sees, so an operation
that changes memory but not the files, or the reverse, is caught.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.checkpoint import LeaderEpochCheckpointFile
from storage.errors import OffsetOutOfRangeError
from storage.log import Log, LogStartOffsetIncrementReason
from storage.log_loader import LogLoader
from storage.log_segment import TimestampAndOffset
from storage.records import Compression, TimestampKind, build_batch, iter_headers, read_header, validate_batch
from tests.storage.conftest import NOW_MS, OpenLog, append, index_entries, records_of, snapshot


def offsets(log: Log) -> tuple[int, int, int]:
    return log.log_start_offset, log.high_watermark, log.log_end_offset


def epochs(log: Log) -> list[tuple[int, int]]:
    return [(entry.epoch, entry.start_offset) for entry in log.leader_epoch_cache.entries()]


def filled(make_log: OpenLog, batches: int = 6, per_batch: int = 3, epoch: int = 0, **properties) -> Log:
    log = make_log({"segment.bytes": 250, "index.interval.bytes": 0, **properties})
    for step in range(batches):
        append(log, [b"v%d-%d" % (step, i) for i in range(per_batch)], epoch=epoch)
    return log


def all_offsets(log: Log) -> list[int]:
    return [r.offset for r in records_of(log.read(log.log_start_offset, 1 << 20).records)] if log.log_end_offset > (
        log.log_start_offset) else []


def reopen(log: Log, **load) -> Log:
    log.flush(NOW_MS)
    log.close()
    return LogLoader(log.directory, log.config, NOW_MS).load(
        log_start_offset=log.log_start_offset, recovery_point=log.recovery_point,
        high_watermark=log.high_watermark, **load,
    )


# --- logStartOffset ---------------------------------------------------------------------------


def test_delete_records_raises_the_log_start_offset(make_log: OpenLog) -> None:
    log = filled(make_log)
    log.update_high_watermark(15)
    assert log.delete_records(4) == 4
    assert offsets(log) == (4, 15, 18)
    assert log.delete_records(2) == 4, "logStartOffset never falls"
    assert log.delete_records(15) == 15  # up to the HW itself
    assert offsets(log) == (15, 15, 18)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(14, 1000)


def test_delete_records_above_the_high_watermark_is_out_of_range(make_log: OpenLog) -> None:
    log = filled(make_log)
    log.update_high_watermark(9)
    before = snapshot(log)
    for offset in (10, 18, 1000):
        with pytest.raises(OffsetOutOfRangeError) as raised:
            log.delete_records(offset)
        assert raised.value.error_name == "OFFSET_OUT_OF_RANGE"
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(-2)
    assert snapshot(log) == before


def test_delete_records_minus_one_means_the_high_watermark(make_log: OpenLog) -> None:
    log = filled(make_log)
    log.update_high_watermark(7)
    assert log.delete_records(-1) == 7
    assert offsets(log) == (7, 7, 18)


def test_log_start_offset_truncates_the_leader_epoch_cache_from_the_start(make_log: OpenLog) -> None:
    log = make_log()
    append(log, [b"a", b"b"], epoch=1)
    append(log, [b"c", b"d"], epoch=2)
    append(log, [b"e"], epoch=4)
    log.update_high_watermark(5)
    assert epochs(log) == [(1, 0), (2, 2), (4, 4)]
    log.maybe_increment_log_start_offset(3, LogStartOffsetIncrementReason.CLIENT_RECORD_DELETION)
    assert epochs(log) == [(2, 3), (4, 4)]


def test_log_start_offset_survives_a_reopen(make_log: OpenLog) -> None:
    log = filled(make_log)
    log.update_high_watermark(18)
    log.delete_records(10)
    again = reopen(log)
    assert offsets(again) == (10, 18, 18)
    assert all_offsets(again)[0] <= 10


# --- high watermark ---------------------------------------------------------------------------


def test_update_high_watermark_clamps_to_the_log(make_log: OpenLog) -> None:
    log = filled(make_log)
    assert log.update_high_watermark(100) == 18
    assert log.update_high_watermark(5) == 5  # replication may lower it (a follower)
    log.delete_records(5)
    assert log.update_high_watermark(2) == 5  # never below logStartOffset
    assert offsets(log) == (5, 5, 18)


def test_maybe_increment_high_watermark_only_moves_up_inside_the_log(make_log: OpenLog) -> None:
    log = filled(make_log)
    assert log.maybe_increment_high_watermark(6) == 0
    assert log.maybe_increment_high_watermark(6) is None
    assert log.maybe_increment_high_watermark(3) is None
    assert log.high_watermark == 6
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_high_watermark(19)
    assert log.high_watermark == 6


def test_reads_stop_at_the_high_watermark_given_as_max_offset(make_log: OpenLog) -> None:
    log = filled(make_log)
    log.update_high_watermark(9)
    assert all(r.offset < 9 for r in records_of(log.read(0, 1 << 20, max_offset=log.high_watermark).records))
    assert log.read(9, 1 << 20, max_offset=log.high_watermark).records == b""


# --- truncation -------------------------------------------------------------------------------


def test_truncate_to_drops_batches_at_and_after_the_offset(make_log: OpenLog) -> None:
    log = filled(make_log)
    assert len(log.segments) >= 3
    log.update_high_watermark(18)
    assert log.truncate_to(7, NOW_MS)  # inside the batch 6-8: the whole batch goes
    assert offsets(log) == (0, 6, 6)
    assert all_offsets(log) == list(range(6))
    assert [s.base_offset for s in log.segments][-1] <= 6
    # Appends continue at the new end; the truncated files are gone from the map.
    info = append(log, [b"new"])
    assert info.first_offset == 6
    assert records_of(log.read(6, 1000).records)[0].value == b"new"
    again = reopen(log)
    assert offsets(again) == (0, 6, 7)
    assert [r.value for r in records_of(again.read(6, 1000).records)] == [b"new"]


def test_truncate_to_a_segment_base_removes_later_segments(make_log: OpenLog) -> None:
    log = filled(make_log)
    bases = [s.base_offset for s in log.segments]
    cut = bases[1]
    log.update_high_watermark(18)
    assert log.truncate_to(cut, NOW_MS)
    assert log.log_end_offset == cut
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert log.segments.active_segment.size == 0
    assert all(s.base_offset <= cut for s in log.segments)
    assert sorted(p.name for p in log.directory.glob("*.log")) == [f"{b:020d}.log" for b in bases[:2]]
    info = append(log, [b"x"])
    assert info.first_offset == cut


def test_truncate_to_at_or_past_the_end_changes_nothing(make_log: OpenLog) -> None:
    log = filled(make_log)
    before = snapshot(log)
    assert not log.truncate_to(18, NOW_MS)
    assert not log.truncate_to(50, NOW_MS)
    assert snapshot(log) == before


def test_truncate_to_lowers_the_high_watermark_and_recovery_point(make_log: OpenLog) -> None:
    log = filled(make_log)
    log.update_high_watermark(15)
    log.flush(NOW_MS)
    assert log.recovery_point == 18
    log.truncate_to(12, NOW_MS)
    assert offsets(log) == (0, 12, 12)
    assert log.recovery_point == 12


def test_truncate_to_truncates_the_leader_epoch_cache(make_log: OpenLog) -> None:
    log = make_log()
    append(log, [b"a", b"b"], epoch=1)
    append(log, [b"c", b"d"], epoch=2)
    append(log, [b"e", b"f"], epoch=3)
    assert epochs(log) == [(1, 0), (2, 2), (3, 4)]
    log.truncate_to(4, NOW_MS)
    assert epochs(log) == [(1, 0), (2, 2)]
    log.truncate_to(2, NOW_MS)
    assert log.log_end_offset == 2
    assert epochs(log) == [(1, 0)]
    again = reopen(log)
    assert epochs(again) == [(1, 0)]


@pytest.mark.parametrize("cut", [4, 2, 0])
def test_truncation_is_fsynced_before_the_leader_epoch_cache_forgets(make_log: OpenLog,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      cut: int) -> None:
    """A power loss between the epoch checkpoint and the cut reaching the disk would bring back
    batches of epochs the cache no longer lists. Method: record every fsync (by path) and every
    leader-epoch checkpoint write in order; the cut segment (and, when segments went, the
    directory holding their `.deleted` renames) must be fsynced first."""
    log = make_log({"segment.bytes": 120, "index.interval.bytes": 0})
    for epoch in (1, 2, 3):
        append(log, [b"a%d" % epoch, b"b%d" % epoch], epoch=epoch)
    assert len(log.segments) > 2, "some cuts must remove segments too"
    log.leader_epoch_cache.write_pending()  # on disk, so the cut must rewrite the file (an unwritten one: no write)
    events: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        events.append(f"fsync {Path(os.readlink(f'/proc/self/fd/{fd}')).name}")
        real_fsync(fd)

    real_write = LeaderEpochCheckpointFile.write

    def write(self: LeaderEpochCheckpointFile, entries: object) -> None:
        events.append("epoch checkpoint")
        real_write(self, entries)  # type: ignore[arg-type]

    removes_segments = any(segment.base_offset > cut for segment in log.segments)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(LeaderEpochCheckpointFile, "write", write)
    if cut == 0:
        log.truncate_fully_and_start_at(0, NOW_MS)
    else:
        assert log.truncate_to(cut, NOW_MS)
    first_checkpoint = events.index("epoch checkpoint")
    before = events[:first_checkpoint]
    if removes_segments or cut == 0:
        assert f"fsync {log.directory.name}" in before, events
    if cut:
        assert f"fsync {log.segments.active_segment.log_path.name}" in before, events


def test_truncate_fully_and_start_at(make_log: OpenLog) -> None:
    log = filled(make_log)
    append(log, [b"z"], epoch=3)
    log.update_high_watermark(10)
    old = [s.base_offset for s in log.segments]
    log.truncate_fully_and_start_at(100, NOW_MS)
    assert offsets(log) == (100, 100, 100)
    assert log.recovery_point == 100
    assert [s.base_offset for s in log.segments] == [100]
    assert log.segments.active_segment.size == 0
    assert epochs(log) == []
    names = {p.name for p in log.directory.iterdir()}
    assert all(f"{b:020d}.log" not in names for b in old)
    assert f"{100:020d}.log" in names
    info = log.append_as_follower(build_batch([(b"k", b"v")], base_offset=100, partition_leader_epoch=5,
                                              timestamps=[1]), NOW_MS)
    assert info.first_offset == 100
    assert epochs(log) == [(5, 100)]
    again = reopen(log)
    assert offsets(again) == (100, 100, 101)


def test_truncate_to_below_the_first_segment_starts_over(make_log: OpenLog) -> None:
    log = make_log()
    log.roll(NOW_MS, expected_next_offset=50)  # the empty segment at 0 is replaced by one at 50
    log.append_as_follower(build_batch([(b"k", b"v")], base_offset=50, timestamps=[1]), NOW_MS)
    assert [s.base_offset for s in log.segments] == [50]
    assert not (log.directory / f"{0:020d}.log").exists()
    log.truncate_to(10, NOW_MS)
    assert offsets(log) == (10, 10, 10)
    assert [s.base_offset for s in log.segments] == [10]


def test_truncate_to_inside_an_offset_gap_keeps_the_segment_appendable(make_log: OpenLog) -> None:
    # A compacted log's follower: segment 0 ends at offset 1, the next starts at 10. Cutting at 5
    # leaves segment 0 active with nothing to cut; its indexes, trimmed when it rolled, must be
    # writable again, so the next append does not roll for a full index.
    log = make_log({"cleanup.policy": "compact", "index.interval.bytes": 0})
    for offset in (0, 1):
        log.append_as_follower(build_batch([(b"k", b"a")], base_offset=offset, timestamps=[1]), NOW_MS)
    log.roll(NOW_MS, expected_next_offset=10)
    log.append_as_follower(build_batch([(b"k", b"b")], base_offset=10, timestamps=[2]), NOW_MS)
    assert [s.base_offset for s in log.segments] == [0, 10]
    assert log.truncate_to(5, NOW_MS)
    assert offsets(log) == (0, 0, 2)
    active = log.segments.active_segment
    assert active.base_offset == 0
    assert not active.offset_index.is_full()
    assert not active.time_index.is_full()
    info = log.append_as_follower(build_batch([(b"k", b"c")], base_offset=2, timestamps=[3]), NOW_MS)
    assert info.rolled is None
    assert [s.base_offset for s in log.segments] == [0]
    assert active.offset_index.entries == 2, "the append after the cut is indexed in the same segment"


# --- recovery point ---------------------------------------------------------------------------


def test_flush_moves_the_recovery_point_to_the_log_end(make_log: OpenLog) -> None:
    log = make_log({"segment.bytes": 10**6})
    append(log, [b"a", b"b"])
    assert log.recovery_point == 0
    log.flush(NOW_MS)
    assert log.recovery_point == 2
    append(log, [b"c"])
    assert log.recovery_point == 2
    log.flush(NOW_MS + 1)
    assert log.recovery_point == 3
    assert log.last_flush_ms == NOW_MS + 1


def test_roll_flushes_the_old_segment_and_moves_the_recovery_point(make_log: OpenLog) -> None:
    log = make_log()
    append(log, [b"a", b"b"])
    log.roll(NOW_MS)
    assert log.recovery_point == 2
    append(log, [b"c"])
    assert log.recovery_point == 2


def test_flush_messages_flushes_on_append(make_log: OpenLog) -> None:
    log = make_log({"flush.messages": 3})
    append(log, [b"a", b"b"])
    assert log.recovery_point == 0
    append(log, [b"c"])
    assert log.recovery_point == 3


def test_maybe_flush_after_flush_ms(make_log: OpenLog) -> None:
    log = make_log({"flush.ms": 1000}, now_ms=NOW_MS)
    append(log, [b"a"])
    assert not log.maybe_flush(NOW_MS + 999)
    assert log.recovery_point == 0
    assert log.maybe_flush(NOW_MS + 1000)
    assert log.recovery_point == 1
    assert not log.maybe_flush(NOW_MS + 5000), "nothing new to flush"


# --- leader epoch cache -----------------------------------------------------------------------


def test_leader_appends_record_each_new_epoch_at_its_first_offset(make_log: OpenLog) -> None:
    log = make_log()
    append(log, [b"a", b"b"], epoch=0)
    append(log, [b"c"], epoch=0)
    assert epochs(log) == [(0, 0)]
    append(log, [b"d", b"e"], epoch=3)
    append(log, [b"f"], epoch=3)
    assert epochs(log) == [(0, 0), (3, 3)]
    # The epoch is stamped into each batch's partitionLeaderEpoch.
    data = log.read(3, 1 << 20).records
    assert read_header(data).partition_leader_epoch == 3
    # Several batches in one request: one entry, at the first batch.
    request = build_batch([(b"k", b"g")], timestamps=[1]) + build_batch([(b"k", b"h")], timestamps=[1])
    log.append_as_leader(request, 4, NOW_MS)
    assert epochs(log) == [(0, 0), (3, 3), (4, 6)]
    again = reopen(log)
    assert epochs(again) == [(0, 0), (3, 3), (4, 6)]


def test_follower_appends_take_the_epoch_from_the_batches(make_log: OpenLog) -> None:
    log = make_log()
    request = (build_batch([(b"k", b"a")] * 2, base_offset=0, partition_leader_epoch=2, timestamps=[1, 1])
               + build_batch([(b"k", b"b")], base_offset=2, partition_leader_epoch=5, timestamps=[1]))
    log.append_as_follower(request, NOW_MS)
    assert epochs(log) == [(2, 0), (5, 2)]


# --- message.timestamp.type=LogAppendTime -----------------------------------------------------


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_log_append_time_replaces_create_times_with_now_ms(make_log: OpenLog, compression: Compression) -> None:
    # Kafka's LogValidator on a LogAppendTime topic: the leader stamps each batch with the broker
    # time (attribute bit 3, maxTimestamp = now, CRC recomputed); records report that time.
    # Lookups by time and the time index then see now_ms, never the producer's CreateTime.
    log = make_log({"message.timestamp.type": "LogAppendTime", "index.interval.bytes": 0})

    def create_time_batch(values: list[bytes], timestamps: list[int]) -> bytes:
        return build_batch([(b"k", value) for value in values], timestamps=timestamps, compression=compression)

    now = [NOW_MS, NOW_MS + 10, NOW_MS + 20]
    first = log.append_as_leader(create_time_batch([b"a", b"b"], [5_000, 9_000_000]), 0, now[0])
    # Two batches in one request: both get the request's time.
    second = log.append_as_leader(
        create_time_batch([b"c"], [7_000]) + create_time_batch([b"d", b"e"], [8_000, 6_000]), 0, now[1])
    third = log.append_as_leader(create_time_batch([b"f"], [NOW_MS + 10**6]), 0, now[2])
    assert [(info.max_timestamp, info.log_append_time_ms) for info in (first, second, third)] == [
        (now[0], now[0]), (now[1], now[1]), (now[2], now[2])]

    data = log.read(0, 1 << 20).records
    headers = [validate_batch(data, position) for position, _ in iter_headers(data)]  # CRCs are valid
    assert [header.timestamp_type for header in headers] == [TimestampKind.LOG_APPEND_TIME] * 4
    assert [header.max_timestamp for header in headers] == [now[0], now[1], now[1], now[2]]
    assert [(r.offset, r.timestamp) for r in records_of(data)] == [
        (0, now[0]), (1, now[0]), (2, now[1]), (3, now[1]), (4, now[1]), (5, now[2])]

    segment = log.segments.active_segment
    assert segment.max_timestamp_so_far == now[2]
    assert index_entries(segment)[1] == [(now[1], 2), (now[2], 5)]  # the first batch is not indexed
    expected = {0: 0, now[0]: 0, now[0] + 1: 2, now[1]: 2, now[2]: 5, now[2] + 1: None, 9_000_000: None}
    for target, offset in expected.items():
        found = log.offset_for_timestamp(target)
        assert (found.offset if found else None) == offset, f"timestamp {target}"
        assert found is None or found.timestamp in now
    assert log.offset_for_max_timestamp() == TimestampAndOffset(now[2], 5)
