"""Reads by offset and by timestamp agree with a brute-force reference, and the seed's walks.

Method: hypothesis appends random batches (1-4 records, non-monotonic CreateTime timestamps with
repeats) to a log with a small segment.bytes and index.interval.bytes, so there are many segments
and sparse index entries; the reference is the list of batches with their records, cut into
segments by Kafka's size rule. It then raises the high watermark and log start offset, maybe
applies retention, and for many targets checks `read` (whole batches from the one holding the
offset, within the HW and max_bytes but at least one batch, out of range outside [start, LEO])
and `offset_for_timestamp` (the first record in offset order, at or after the log start, whose
timestamp is >= the target), before and after a reopen. Fixed tests replay seed 000's examples:
offset 268 in the segment based at 251, and the timestamp walk [1526384718283, 28] -> [26, 838].
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import OffsetOutOfRangeError
from storage.log import Log
from storage.log_segment import TimestampAndOffset
from storage.records import build_batch, decode_records, iter_headers
from tests.storage.conftest import NOW_MS, OpenLog, index_entries, open_log, records_of, sized_batch

RecordTuple = tuple[int, int, bytes | None, bytes | None]  # offset, timestamp, key, value


@dataclass
class RefBatch:
    base_offset: int
    size: int
    records: list[RecordTuple]

    @property
    def last_offset(self) -> int:
        return self.records[-1][0]


record_strategy = st.tuples(
    st.integers(1000, 1040),  # timestamp: repeats and disorder
    st.one_of(st.none(), st.binary(max_size=4)),  # key
    st.binary(max_size=24),  # value
)
batches_strategy = st.lists(st.lists(record_strategy, min_size=1, max_size=4), min_size=1, max_size=30)


def reference_segments(batches: list[RefBatch], segment_bytes: int) -> list[list[RefBatch]]:
    """Kafka's size rule: roll when the segment's size would exceed segment.bytes."""
    segments: list[list[RefBatch]] = [[]]
    size = 0
    for batch in batches:
        if size > segment_bytes - batch.size:
            segments.append([])
            size = 0
        segments[-1].append(batch)
        size += batch.size
    return segments


def expected_read(segments: list[list[RefBatch]], offset: int, max_bytes: int, bound: int,
                  min_one: bool) -> list[RefBatch]:
    """Batches one read returns: from the batch holding `offset`, within its segment."""
    for segment in segments:
        for slot, batch in enumerate(segment):
            if batch.last_offset < offset:
                continue
            chosen: list[RefBatch] = []
            total = 0
            for candidate in segment[slot:]:
                if candidate.last_offset >= bound:
                    break
                if total + candidate.size > max_bytes and not (min_one and not chosen):
                    break
                chosen.append(candidate)
                total += candidate.size
            return chosen
    return []


def expected_for_timestamp(records: list[RecordTuple], start: int, target: int) -> TimestampAndOffset | None:
    for offset, timestamp, _, _ in records:
        if offset >= start and timestamp >= target:
            return TimestampAndOffset(timestamp, offset)
    return None


def decoded(data: bytes) -> tuple[list[tuple[int, int]], list[RecordTuple]]:
    bounds = [(header.base_offset, header.last_offset) for _, header in iter_headers(data)]
    records = [(r.offset, r.timestamp, r.key, r.value) for r in records_of(data)]
    return bounds, records


def check_reads(log: Log, segments: list[list[RefBatch]], data: st.DataObject) -> None:
    kept = [batch for segment in segments for batch in segment]
    records = [record for batch in kept for record in batch.records]
    start, hw, leo = log.log_start_offset, log.high_watermark, log.log_end_offset
    assert [log_segment.base_offset for log_segment in log.segments] == [segment[0].base_offset for segment in segments]

    first = kept[0].base_offset if kept else leo
    offsets = sorted({first - 1, start - 1, start, hw, leo, leo + 1} | {b.base_offset for b in kept}
                     | {b.last_offset for b in kept} | set(data.draw(st.lists(st.integers(first, leo), max_size=8))))
    for offset in offsets:
        max_bytes = data.draw(st.integers(1, 700), label="max_bytes")
        max_offset = data.draw(st.sampled_from([hw, None]), label="max_offset")
        min_one = True  # Kafka's first-partition fetch; min_one_message=False has its own test below
        if offset < start or offset > leo:
            with pytest.raises(OffsetOutOfRangeError) as raised:
                log.read(offset, max_bytes, max_offset, min_one)
            assert raised.value.error_name == "OFFSET_OUT_OF_RANGE"
            continue
        fetched = log.read(offset, max_bytes, max_offset, min_one)
        assert (fetched.high_watermark, fetched.log_start_offset, fetched.log_end_offset) == (hw, start, leo)
        bound = leo if max_offset is None else max_offset
        expected = expected_read(segments, offset, max_bytes, bound, min_one)
        bounds, got = decoded(fetched.records)
        assert bounds == [(b.base_offset, b.last_offset) for b in expected], f"offset={offset} max_bytes={max_bytes}"
        assert got == [record for batch in expected for record in batch.records]
        assert len(fetched.records) == sum(b.size for b in expected)
        if expected:
            assert bounds[0][0] <= offset <= bounds[0][1]

    stamps = sorted({ts for _, ts, _, _ in records} | {999, 1041} | {ts + 1 for _, ts, _, _ in records})
    for target in stamps:
        assert log.offset_for_timestamp(target) == expected_for_timestamp(records, start, target), f"ts={target}"
    assert log.offset_for_timestamp(-2) == TimestampAndOffset(-1, start)
    assert log.offset_for_timestamp(-1) == TimestampAndOffset(-1, leo)
    visible = [(ts, offset) for offset, ts, _, _ in records if offset >= start]
    largest = max((ts for ts, _ in visible), default=None)
    expected_max = None if largest is None else TimestampAndOffset(
        largest, min(offset for ts, offset in visible if ts == largest))
    assert log.offset_for_max_timestamp() == expected_max


@settings(max_examples=50, deadline=None)
@given(
    batches=batches_strategy,
    segment_bytes=st.integers(260, 1200),
    interval=st.integers(0, 400),
    retention=st.booleans(),
    data=st.data(),
)
def test_reads_match_a_brute_force_reference(batches: list[list[tuple[int, bytes | None, bytes]]],
                                             segment_bytes: int, interval: int, retention: bool,
                                             data: st.DataObject) -> None:
    properties = {"segment.bytes": segment_bytes, "index.interval.bytes": interval}
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "t-0"
        log = open_log(path, properties)
        try:
            reference: list[RefBatch] = []
            for batch in batches:
                raw = build_batch([(key, value) for _, key, value in batch], timestamps=[ts for ts, _, _ in batch])
                info = log.append_as_leader(raw, 3, NOW_MS)
                reference.append(RefBatch(
                    info.first_offset, len(raw),
                    [(info.first_offset + i, ts, key, value) for i, (ts, key, value) in enumerate(batch)],
                ))
            segments = reference_segments(reference, segment_bytes)
            leo = log.log_end_offset
            assert leo == reference[-1].last_offset + 1

            hw = log.update_high_watermark(data.draw(st.integers(0, leo), label="hw"))
            start = log.delete_records(data.draw(st.integers(0, hw), label="log start"))
            if retention:
                log.delete_old_segments(NOW_MS)
                # Only the log-start rule applies (timestamps are recent enough): whole segments below it go.
                while len(segments) > 1 and segments[1][0].base_offset <= start:
                    segments.pop(0)
                assert log.log_start_offset == start
            check_reads(log, segments, data)
            log.flush(NOW_MS)
        finally:
            log.close()
        reopened = open_log(path, properties, log_start_offset=start, recovery_point=leo, high_watermark=hw)
        try:
            check_reads(reopened, segments, data)
        finally:
            reopened.close()


def test_read_out_of_range_names_the_range(make_log: OpenLog) -> None:
    log = make_log()
    log.append_as_leader(build_batch([(b"k", b"v")] * 5, timestamps=[1] * 5), 0, NOW_MS)
    log.update_high_watermark(5)
    log.delete_records(2)
    for offset in (0, 1, 6, 100):
        with pytest.raises(OffsetOutOfRangeError) as raised:
            log.read(offset, 1000)
        assert raised.value.error_name == "OFFSET_OUT_OF_RANGE"
        assert "[2, 5]" in str(raised.value)
    assert log.read(5, 1000).records == b""  # the LEO itself is in range, and empty
    assert [r.offset for r in records_of(log.read(2, 1000).records)] == [0, 1, 2, 3, 4]  # the whole batch


def test_max_bytes_is_inclusive_and_at_least_one_batch_is_returned(make_log: OpenLog) -> None:
    log = make_log()
    sizes = []
    for step in range(3):
        batch = build_batch([(b"k", b"v" * (10 * step + 1))] * 2, timestamps=[step] * 2)
        log.append_as_leader(batch, 0, NOW_MS)
        sizes.append(len(batch))

    def batch_bases(max_bytes: int, offset: int = 0, min_one: bool = True) -> list[int]:
        return [header.base_offset for _, header in iter_headers(log.read(offset, max_bytes, None, min_one).records)]

    assert batch_bases(sizes[0] + sizes[1]) == [0, 2]  # exactly fits two batches
    assert batch_bases(sizes[0] + sizes[1] - 1) == [0]
    assert batch_bases(sum(sizes)) == [0, 2, 4]
    assert batch_bases(1) == [0]  # KIP-74: one batch even if larger than max_bytes
    assert batch_bases(1, offset=3) == [2]  # the batch holding offset 3 starts at 2
    assert batch_bases(1, min_one=False) == []
    assert batch_bases(sizes[0], min_one=False) == [0]


def test_read_that_fits_nothing_does_not_skip_to_the_next_segment(make_log: OpenLog) -> None:
    # Without min_one_message, a first batch larger than max_bytes gives an empty read (Kafka's
    # LogSegment.read returns empty records, and LocalLog.read stops there); it must not return a
    # later segment's batch, which would skip offsets 0-2.
    log = make_log()
    log.append_as_leader(build_batch([(b"k", b"v" * 50)] * 3, timestamps=[1] * 3), 0, NOW_MS)
    log.roll(NOW_MS)
    small = build_batch([(b"k", b"w")], timestamps=[2])
    log.append_as_leader(small, 0, NOW_MS)
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.segments.first_segment.size > 100 >= len(small)
    fetched = log.read(1, 100, min_one_message=False)
    assert records_of(fetched.records) == []
    assert fetched.records == b""


# --- seed 000 ---------------------------------------------------------------------------------


def test_seed_offset_268_is_found_in_the_segment_based_at_251(make_log: OpenLog) -> None:
    # Seed 000: to find offset 268, the skip list gives the segment based at 251; relative offset
    # 17; the offset index gives the largest entry not above it; the scan starts at its position.
    log = make_log({"index.interval.bytes": 0})
    for base in range(0, 251, 25):
        count = min(25, 251 - base)
        log.append_as_follower(build_batch([(b"k", b"v")] * count, base_offset=base, timestamps=[base] * count), NOW_MS)
    log.roll(NOW_MS)
    for base in range(251, 351, 5):
        log.append_as_follower(build_batch([(b"k", b"%d" % (base + i)) for i in range(5)], base_offset=base,
                                           timestamps=[base] * 5), NOW_MS)
    log.roll(NOW_MS)
    log.append_as_follower(build_batch([(b"k", b"z")], base_offset=351, timestamps=[351]), NOW_MS)
    assert [s.base_offset for s in log.segments] == [0, 251, 351]

    segment = log.segments.floor_segment(268)
    assert segment is not None
    assert segment.base_offset == 251
    assert 268 - segment.base_offset == 17
    # Entries are (last offset of a batch, its position), one per batch after the first.
    indexed_offset, position = segment.offset_index.lookup(268)
    assert indexed_offset == 265
    assert indexed_offset - segment.base_offset <= 17
    header = next(iter_headers(segment.read_bytes(position, 1000)))[1]
    assert (header.base_offset, header.last_offset) == (261, 265)

    fetched = log.read(268, 1)  # at least one batch: the one holding 268
    records = records_of(fetched.records)
    assert [r.offset for r in records] == [266, 267, 268, 269, 270]
    assert records[2].value == b"268"


def test_seed_timestamp_walk(make_log: OpenLog) -> None:
    """Seed 000, target 1526384718288: the first segment whose largest timestamp is >= the target;
    in its time index the largest entry not above the target is [1526384718283, 28]; in its offset
    index the largest entry not above relative offset 28 is [26, 838]; the scan from position 838
    finds the first batch whose maxTimestamp >= the target."""
    t = 1526384718000
    target = t + 288
    log = make_log({"index.interval.bytes": 500})
    # Segment 1 (offsets 0-9): every timestamp below the target.
    log.append_as_leader(build_batch([(b"k", b"old")] * 10, timestamps=[t + 100 + i for i in range(10)]), 1, NOW_MS)
    log.roll(NOW_MS)
    base = log.log_end_offset
    assert base == 10

    def put(count: int, size: int, stamps: list[int]) -> None:
        log.append_as_leader(sized_batch(count, size, [t + s for s in stamps]), 1, NOW_MS)

    # Segment 2: relative offsets 0-25 in 838 bytes (no index entry: 419 is not > 500 bytes) ...
    put(13, 419, list(range(200, 213)))
    put(13, 419, list(range(213, 226)))
    put(1, 200, [270])  # relative 26 at position 838: 838 > 500 bytes since the last entry -> [26, 838]
    put(1, 200, [280])  # relative 27
    put(1, 200, [283])  # relative 28: the largest timestamp so far
    put(1, 100, [281])  # relative 29 at 1438: 600 > 500 -> offset entry [29, 1438], time entry [283, 28]
    put(1, 100, [290])  # relative 30: the first record at or after the target
    put(1, 100, [286])  # relative 31: below the target, after the answer
    log.roll(NOW_MS)
    # Segment 3: later records, also past the target, must not be chosen.
    log.append_as_leader(build_batch([(b"k", b"new")], timestamps=[t + 400]), 1, NOW_MS)

    walk = log.segments.get(base)
    assert walk is not None
    offsets, times = index_entries(walk)
    relative = [(offset - base, position) for offset, position in offsets]
    assert relative == [(26, 838), (29, 1438)]
    # Entries while active, then the segment's largest timestamp, written on roll.
    assert [(ts - t, offset - base) for ts, offset in times] == [(270, 26), (283, 28), (290, 30)]

    # Step 1: segments by largestTimestamp.
    assert [s.largest_timestamp >= target for s in log.segments] == [False, True, True]
    # Step 2: time index -> relative offset 28.
    timestamp, offset = walk.time_index.lookup(target)
    assert (timestamp, offset - base) == (t + 283, 28)
    # Step 3: offset index -> [26, 838].
    indexed, position = walk.offset_index.lookup(offset)
    assert (indexed - base, position) == (26, 838)
    # Step 4: scan from 838 for the first batch with maxTimestamp >= target, then its records.
    batches = list(iter_headers(walk.read_bytes(position, walk.size - position)))
    first = next((p, h) for p, h in batches if h.max_timestamp >= target)
    assert first[1].base_offset - base == 30
    found = next(r for r in decode_records(walk.read_bytes(position + first[0], first[1].size_in_bytes))
                 if r.timestamp >= target)

    assert log.offset_for_timestamp(target) == TimestampAndOffset(found.timestamp, found.offset)
    assert log.offset_for_timestamp(target) == TimestampAndOffset(t + 290, base + 30)
    # Around the walk: an exact hit on the indexed timestamp, and a target past segment 2.
    assert log.offset_for_timestamp(t + 283) == TimestampAndOffset(t + 283, base + 28)
    assert log.offset_for_timestamp(t + 284) == TimestampAndOffset(t + 290, base + 30)
    assert log.offset_for_timestamp(t + 291) == TimestampAndOffset(t + 400, base + 32)
    assert log.offset_for_timestamp(t + 401) is None
