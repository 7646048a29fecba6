"""`tributary dump-log`: Kafka-shaped dumps of segment files and index verification.

Method: segments are built from batches made by `storage.records.build_batch` and by
kafka-python's independent `DefaultRecordBatchBuilder`; indexes are written by the storage
engine's own `OffsetIndex`/`TimeIndex` (and `LogSegment`). Each test calls `client.cli.main`
and checks the printed lines, the JSON objects and the exit status; damage is made by editing
bytes of a good file, so each failure test differs from a passing one by one known change.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from client import dump_log
from client.cli import main
from storage.log_segment import LogSegment
from storage.offset_index import OffsetIndex
from storage.records import (
    BATCH_HEADER_SIZE,
    Compression,
    TimestampKind,
    build_batch,
    read_header,
)
from storage.time_index import TimeIndex

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
BASE_OFFSET = 100
T0 = 1_700_000_000_000


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def sample_batches(base_offset: int = BASE_OFFSET) -> list[bytes]:
    """Three batches: plain with keys, headers, a null value and invalid UTF-8; gzip; idempotent."""
    first = build_batch(
        [(b"abc", b"hello", [("a", b"1"), ("b", None)]), (None, None), (b"k", b"\xffbad")],
        base_offset=base_offset,
        timestamps=[T0, T0 + 5, T0 + 2],
        partition_leader_epoch=3,
    )
    second = build_batch(
        [(b"key%d" % index, b"value" * 20) for index in range(4)],
        base_offset=base_offset + 3,
        timestamps=[T0 + 10] * 4,
        compression=Compression.GZIP,
        partition_leader_epoch=3,
    )
    third = build_batch(
        [(None, b"x"), (None, b"y")],
        base_offset=base_offset + 7,
        timestamps=[T0 + 7, T0 + 8],
        partition_leader_epoch=4,
        producer_id=42,
        producer_epoch=1,
        base_sequence=10,
    )
    return [first, second, third]


def write_log(directory: Path, batches: list[bytes], base_offset: int = BASE_OFFSET) -> Path:
    path = directory / segment_name(base_offset, ".log")
    path.write_bytes(b"".join(batches))
    return path


def positions(batches: list[bytes]) -> list[int]:
    result, position = [], 0
    for batch in batches:
        result.append(position)
        position += len(batch)
    return result


def expected_batch_line(batch: bytes, position: int, codec: str) -> str:
    header = read_header(batch)
    last_sequence = -1 if header.base_sequence == -1 else header.base_sequence + header.last_offset_delta
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} isTransactional: false "
        f"isControl: false position: {position} CreateTime: {header.max_timestamp} "
        f"size: {len(batch)} magic: 2 compresscodec: {codec} crc: {header.crc} isvalid: true"
    )


def run_cli(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    status = main(["dump-log", *arguments])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---------------------------------------------------------------------------------------------
# Logs


def test_log_dump_prints_one_kafka_shaped_line_per_batch(tmp_path, capsys):
    batches = sample_batches()
    log = write_log(tmp_path, batches)
    status, out, err = run_cli(capsys, str(log))
    assert status == 0, err
    assert out.splitlines() == [
        f"Dumping {log}",
        f"Log starting offset: {BASE_OFFSET}",
        *(
            expected_batch_line(batch, position, codec)
            for batch, position, codec in zip(batches, positions(batches), ["none", "gzip", "none"], strict=True)
        ),
    ]
    assert err == ""


def test_print_data_log_shows_keys_headers_and_null_values(tmp_path, capsys):
    log = write_log(tmp_path, sample_batches())
    status, out, _ = run_cli(capsys, "--print-data-log", str(log))
    assert status == 0
    records = [line for line in out.splitlines() if line.startswith("|")]
    assert len(records) == 9
    assert records[0] == (
        f"| offset: 100 CreateTime: {T0} keySize: 3 valueSize: 5 sequence: -1 headerKeys: [a,b] key: abc payload: hello"
    )
    # A null key and value are left out, as Kafka does; their sizes say -1.
    assert records[1] == (f"| offset: 101 CreateTime: {T0 + 5} keySize: -1 valueSize: -1 sequence: -1 headerKeys: []")
    assert records[2].endswith("keySize: 1 valueSize: 4 sequence: -1 headerKeys: [] key: k payload: \\xffbad")
    assert records[3].endswith("key: key0 payload: " + "value" * 20)
    assert records[7] == (
        f"| offset: 107 CreateTime: {T0 + 7} keySize: -1 valueSize: 1 sequence: 10 headerKeys: [] payload: x"
    )
    assert records[8].startswith("| offset: 108 ") and "sequence: 11 " in records[8]


def test_deep_iteration_prints_record_metadata_without_data(tmp_path, capsys):
    log = write_log(tmp_path, sample_batches())
    status, out, _ = run_cli(capsys, "--deep-iteration", str(log))
    assert status == 0
    records = [line for line in out.splitlines() if line.startswith("|")]
    assert len(records) == 9
    assert records[0].endswith("headerKeys: [a,b]")
    assert not any("payload:" in line or "key:" in line for line in records)


def test_json_lines_parse_and_carry_the_same_fields(tmp_path, capsys):
    batches = sample_batches()
    log = write_log(tmp_path, batches)
    status, out, _ = run_cli(capsys, "--json", "--print-data-log", str(log))
    assert status == 0
    objects = [json.loads(line) for line in out.splitlines()]
    assert objects[0] == {"type": "segment", "file": str(log), "kind": "log", "baseOffset": 100}
    dumped = objects[1:]
    assert [item["type"] for item in dumped] == ["batch"] * 3
    for item, batch, position in zip(dumped, batches, positions(batches), strict=True):
        header = read_header(batch)
        assert item["baseOffset"] == header.base_offset
        assert item["lastOffset"] == header.last_offset
        assert item["count"] == header.records_count
        assert item["position"] == position
        assert item["size"] == len(batch)
        assert item["crc"] == header.crc
        assert item["maxTimestamp"] == header.max_timestamp
        assert item["timestampType"] == "CreateTime"
        assert item["magic"] == 2
        assert item["isValid"] is True
    assert dumped[1]["compresscodec"] == "gzip"
    assert dumped[2]["producerId"] == 42
    assert dumped[2]["lastSequence"] == 11
    first_records = dumped[0]["records"]
    assert first_records[0]["key"] == "abc"
    assert first_records[0]["payload"] == "hello"
    assert first_records[0]["headers"] == [{"key": "a", "value": "1"}, {"key": "b", "value": None}]
    assert first_records[1]["key"] is None
    assert first_records[1]["payload"] is None
    assert first_records[1]["valueSize"] == -1
    assert first_records[2]["payload"] == "\\xffbad"
    assert [record["offset"] for record in dumped[1]["records"]] == [103, 104, 105, 106]


def test_corrupt_crc_marks_the_batch_invalid_and_stops(tmp_path, capsys):
    batches = sample_batches()
    damaged = bytearray(batches[1])
    damaged[-1] ^= 0xFF  # inside the CRC's range
    log = write_log(tmp_path, [batches[0], bytes(damaged), batches[2]])
    status, out, _ = run_cli(capsys, "--print-data-log", str(log))
    assert status == 1
    lines = out.splitlines()
    assert lines[2].endswith("isvalid: true")
    bad = next(line for line in lines if line.startswith("baseOffset: 103"))
    assert "isvalid: false error: CORRUPT_MESSAGE" in bad
    assert "CRC" in bad
    invalid_from = len(batches[0])
    invalid_count = len(damaged) + len(batches[2])
    assert lines[-1].startswith(f"Found {invalid_count} invalid bytes at position {invalid_from}")
    assert not any(line.startswith("baseOffset: 107") for line in lines)
    assert not any(line.startswith("| offset: 103") for line in lines)


def test_corrupt_crc_in_json_has_is_valid_false_and_error(tmp_path, capsys):
    batches = sample_batches()
    damaged = bytearray(batches[0])
    damaged[BATCH_HEADER_SIZE + 2] ^= 0x01
    log = write_log(tmp_path, [bytes(damaged), *batches[1:]])
    status, out, _ = run_cli(capsys, "--json", str(log))
    assert status == 1
    objects = [json.loads(line) for line in out.splitlines()]
    assert objects[1]["type"] == "batch"
    assert objects[1]["isValid"] is False
    assert objects[1]["error"].startswith("CORRUPT_MESSAGE: ")
    total = sum(map(len, batches))
    assert objects[2] == {
        "type": "invalidBytes",
        "position": 0,
        "count": total,
        "reason": "the invalid batch and everything after it",
    }


@pytest.mark.parametrize("cut", [10, 60], ids=["torn-records", "torn-header"])
def test_truncated_last_batch_is_reported_as_invalid_bytes(tmp_path, capsys, cut):
    batches = sample_batches()
    torn = batches[2][: len(batches[2]) - cut] if cut < BATCH_HEADER_SIZE else batches[2][:1]
    log = write_log(tmp_path, [*batches[:2], torn])
    status, out, _ = run_cli(capsys, str(log))
    assert status == 1
    lines = out.splitlines()
    assert [line.split(" ")[1] for line in lines[2:4]] == ["100", "103"]
    position = len(batches[0]) + len(batches[1])
    assert lines[4].startswith(f"Found {len(torn)} invalid bytes at position {position}: ")
    assert len(lines) == 5


def test_overlapping_offsets_make_the_batch_invalid(tmp_path, capsys):
    batches = sample_batches()
    overlapping = build_batch([(None, b"again")], base_offset=BASE_OFFSET + 1, timestamps=[T0])
    log = write_log(tmp_path, [batches[0], overlapping])
    status, out, _ = run_cli(capsys, str(log))
    assert status == 1
    assert "isvalid: false error: INVALID_RECORD: batch at position" in out
    assert "base offset 101, below 103" in out


def test_control_batch_shows_its_transaction_marker(tmp_path, capsys):
    marker = build_batch(
        [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5))],
        base_offset=BASE_OFFSET,
        timestamps=[T0],
        producer_id=9,
        producer_epoch=0,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )
    log = write_log(tmp_path, [marker])
    status, out, _ = run_cli(capsys, "--print-data-log", str(log))
    assert status == 0
    assert "isTransactional: true isControl: true" in out
    assert out.splitlines()[-1].endswith("headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 5")


def test_log_append_time_batches_are_labelled_so(tmp_path, capsys):
    batch = build_batch(
        [(None, b"v")],
        base_offset=BASE_OFFSET,
        base_timestamp=T0,
        timestamp_type=TimestampKind.LOG_APPEND_TIME,
    )
    log = write_log(tmp_path, [batch])
    status, out, _ = run_cli(capsys, "--deep-iteration", str(log))
    assert status == 0
    assert f"LogAppendTime: {T0} size:" in out
    assert f"| offset: 100 LogAppendTime: {T0} " in out


def test_max_bytes_stops_after_the_batches_that_start_below_it(tmp_path, capsys):
    batches = sample_batches()
    log = write_log(tmp_path, batches)
    status, out, _ = run_cli(capsys, "--max-bytes", str(len(batches[0]) + 1), str(log))
    assert status == 0
    assert [line.split(" ")[1] for line in out.splitlines()[2:]] == ["100", "103"]


def test_pages_behind_the_walk_are_released_without_changing_the_dump(tmp_path, capsys, monkeypatch):
    batches = [
        build_batch([(None, b"v" * 300)] * 3, base_offset=BASE_OFFSET + 3 * index, timestamps=[T0] * 3)
        for index in range(100)
    ]
    log = write_log(tmp_path, batches)
    status, expected, _ = run_cli(capsys, "--print-data-log", str(log))
    assert status == 0
    monkeypatch.setattr(dump_log, "_RELEASE_BYTES", 1000)
    status, out, _ = run_cli(capsys, "--print-data-log", str(log))
    assert status == 0
    assert out == expected
    assert out.count("isvalid: true") == 100


def test_empty_log_and_unnumbered_name_dump_without_batches(tmp_path, capsys):
    empty = tmp_path / segment_name(0, ".log")
    empty.write_bytes(b"")
    other = tmp_path / "captured.log"
    other.write_bytes(b"".join(sample_batches()))
    status, out, _ = run_cli(capsys, str(empty), str(other))
    assert status == 0
    lines = out.splitlines()
    assert lines[:4] == [
        f"Dumping {empty}",
        "Log starting offset: 0",
        f"Dumping {other}",
        "Log starting offset: unknown",
    ]
    assert len(lines) == 7


# ---------------------------------------------------------------------------------------------
# kafka-python's batches


def kafka_python_batch(base_offset: int, compression: int, records: list[tuple]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset_delta, (timestamp, key, value, headers) in enumerate(records):
        builder.append(offset_delta, timestamp, key, value, headers)
    batch = builder.build()
    # The broker assigns baseOffset, which lies outside the CRC.
    struct.pack_into(">q", batch, 0, base_offset)
    return bytes(batch)


def test_segment_of_kafka_python_batches_dumps_correctly(tmp_path, capsys):
    batches = [
        kafka_python_batch(
            0,
            DefaultRecordBatch.CODEC_NONE,
            [
                (T0, b"k1", b"v1", [("h", b"x")]),
                (T0 + 1, None, b"v2", []),
            ],
        ),
        kafka_python_batch(
            2, DefaultRecordBatch.CODEC_GZIP, [(T0 + 2, b"k%d" % index, b"payload" * 30, []) for index in range(5)]
        ),
        kafka_python_batch(7, DefaultRecordBatch.CODEC_NONE, [(T0 + 9, b"tomb", None, [])]),
    ]
    log = write_log(tmp_path, batches, base_offset=0)
    status, out, _ = run_cli(capsys, "--json", "--print-data-log", str(log))
    assert status == 0
    dumped = [json.loads(line) for line in out.splitlines()][1:]
    assert len(dumped) == 3
    for item, batch, position in zip(dumped, batches, positions(batches), strict=True):
        reference = DefaultRecordBatch(batch)
        assert item["isValid"] is True
        assert item["position"] == position
        assert item["baseOffset"] == reference.base_offset
        assert item["lastOffset"] == reference.last_offset
        assert item["crc"] == reference.crc
        assert item["maxTimestamp"] == reference.max_timestamp
        assert item["size"] == len(batch)
        assert [(record["offset"], record["key"], record["payload"]) for record in item["records"]] == [
            (record.offset, record.key and record.key.decode(), record.value and record.value.decode())
            for record in reference
        ]
    assert dumped[1]["compresscodec"] == "gzip"
    assert dumped[0]["records"][0]["headers"] == [{"key": "h", "value": "x"}]
    assert dumped[2]["records"][0]["payload"] is None
    status, out, _ = run_cli(capsys, str(log))
    assert status == 0
    assert out.splitlines()[2:] == [
        expected_batch_line(batch, position, codec)
        for batch, position, codec in zip(batches, positions(batches), ["none", "gzip", "none"], strict=True)
    ]


# ---------------------------------------------------------------------------------------------
# Indexes


def indexed_segment(directory: Path) -> tuple[list[bytes], Path, Path, Path]:
    """A segment of eight batches and both indexes, one entry per batch, as the engine writes
    them: offset entry (last offset, position); time entry when the running max grows."""
    timestamps = [T0, T0 + 50, T0 + 20, T0 + 80, T0 + 80, T0 + 90, T0 + 10, T0 + 200]
    batches, offset = [], BASE_OFFSET
    for index, timestamp in enumerate(timestamps):
        count = 1 + index % 3
        batches.append(
            build_batch(
                [(None, b"v" * 10)] * count,
                base_offset=offset,
                timestamps=[timestamp] * count,
            )
        )
        offset += count
    log = write_log(directory, batches)
    offset_index_path = directory / segment_name(BASE_OFFSET, ".index")
    time_index_path = directory / segment_name(BASE_OFFSET, ".timeindex")
    offset_index = OffsetIndex(offset_index_path, BASE_OFFSET, 4096, writable=True)
    time_index = TimeIndex(time_index_path, BASE_OFFSET, 4096, writable=True)
    running_max = -1
    for batch, position in zip(batches, positions(batches), strict=True):
        header = read_header(batch)
        offset_index.append(header.last_offset, position)
        if header.max_timestamp > running_max:
            running_max = header.max_timestamp
            time_index.maybe_append(running_max, header.last_offset)
    offset_index.close()
    time_index.close()
    return batches, log, offset_index_path, time_index_path


def test_index_dumps_print_one_line_per_entry(tmp_path, capsys):
    batches, _, offset_index_path, time_index_path = indexed_segment(tmp_path)
    status, out, _ = run_cli(capsys, str(offset_index_path), str(time_index_path))
    assert status == 0
    headers = [read_header(batch) for batch in batches]
    offset_lines = [
        f"offset: {header.last_offset} position: {position}"
        for header, position in zip(headers, positions(batches), strict=True)
    ]
    time_lines = [
        f"timestamp: {T0 + delta} offset: {headers[slot].last_offset}"
        for slot, delta in [(0, 0), (1, 50), (3, 80), (5, 90), (7, 200)]
    ]
    assert out.splitlines() == [
        f"Dumping {offset_index_path}",
        *offset_lines,
        f"Dumping {time_index_path}",
        *time_lines,
    ]


def test_index_dumps_in_json_print_one_object_per_entry(tmp_path, capsys):
    # Every line parses on its own: a `segment` object per file, then one object per entry with
    # the entry's fields, offsets absolute, as the text dump prints them.
    batches, _, offset_index_path, time_index_path = indexed_segment(tmp_path)
    status, out, err = run_cli(capsys, "--json", str(offset_index_path), str(time_index_path))
    assert status == 0, err
    assert err == ""
    headers = [read_header(batch) for batch in batches]
    assert [json.loads(line) for line in out.splitlines()] == [
        {"type": "segment", "file": str(offset_index_path), "kind": "offset_index", "baseOffset": BASE_OFFSET},
        *(
            {"type": "offsetIndexEntry", "offset": header.last_offset, "position": position}
            for header, position in zip(headers, positions(batches), strict=True)
        ),
        {"type": "segment", "file": str(time_index_path), "kind": "time_index", "baseOffset": BASE_OFFSET},
        *(
            {"type": "timeIndexEntry", "timestamp": T0 + delta, "offset": headers[slot].last_offset}
            for slot, delta in [(0, 0), (1, 50), (3, 80), (5, 90), (7, 200)]
        ),
    ]


def test_verify_index_passes_for_a_consistent_segment(tmp_path, capsys):
    _, log, offset_index_path, time_index_path = indexed_segment(tmp_path)
    status, out, err = run_cli(capsys, "--verify-index", str(offset_index_path), str(time_index_path))
    assert status == 0, err
    assert err == ""
    assert f"Verified 8 entries of {offset_index_path} against {log}: all match" in out
    assert f"Verified 5 entries of {time_index_path} against {log}: all match" in out
    assert "offset: 100 position: 0" in out
    status, out, err = run_cli(capsys, "--verify-index-only", str(offset_index_path))
    assert status == 0
    assert out.splitlines() == [
        f"Dumping {offset_index_path}",
        f"Verified 8 entries of {offset_index_path} against {log}: all match",
    ]


def test_verify_index_reports_an_edited_offset_entry(tmp_path, capsys):
    batches, _, offset_index_path, _ = indexed_segment(tmp_path)
    data = bytearray(offset_index_path.read_bytes())
    struct.pack_into(">i", data, 2 * 8, 4)  # slot 2 now claims relative offset 4 (offset 104)
    struct.pack_into(">i", data, 5 * 8 + 4, positions(batches)[5] + 7)  # slot 5 points inside
    offset_index_path.write_bytes(bytes(data))
    status, out, err = run_cli(capsys, "--verify-index-only", str(offset_index_path))
    assert status == 1
    last_offset = read_header(batches[2]).last_offset
    assert f"Mismatches in :{offset_index_path}\n  Index offset: 104, log offset: {last_offset}\n" in err
    assert f"Positions where no batch starts in :{offset_index_path}\n" in err
    assert "no batch starts there (inside a batch)" in err
    assert "2 problems (on stderr)" in out


def test_verify_index_reports_entries_past_the_log_and_out_of_order(tmp_path, capsys):
    batches, _, offset_index_path, _ = indexed_segment(tmp_path)
    data = bytearray(offset_index_path.read_bytes())
    struct.pack_into(">i", data, 3 * 8, 1)  # slot 3's offset falls below slot 2's
    offset_index_path.write_bytes(bytes(data))
    log = tmp_path / segment_name(BASE_OFFSET, ".log")
    log.write_bytes(b"".join(batches[:6]))  # the last two entries now point past the end
    status, out, _ = run_cli(capsys, "--json", "--verify-index-only", str(offset_index_path))
    assert status == 1
    problems = [json.loads(line) for line in out.splitlines() if '"indexProblem"' in line]
    assert [(problem["problem"], problem["slot"]) for problem in problems] == [
        ("offset_out_of_order", 3),
        ("offset_mismatch", 3),
        ("no_batch_at_position", 6),
        ("no_batch_at_position", 7),
    ]
    assert json.loads(out.splitlines()[-1])["problems"] == 4


def test_verify_time_index_reports_an_edited_timestamp(tmp_path, capsys):
    _, _, _, time_index_path = indexed_segment(tmp_path)
    data = bytearray(time_index_path.read_bytes())
    struct.pack_into(">q", data, 2 * 12, T0 + 85)  # slot 2: log says T0 + 80
    struct.pack_into(">q", data, 4 * 12, T0 + 60)  # slot 4: below slot 3's timestamp
    time_index_path.write_bytes(bytes(data))
    status, _, err = run_cli(capsys, "--verify-index", str(time_index_path))
    assert status == 1
    assert f"Found timestamp mismatch in :{time_index_path}\n" in err
    assert f"  Index timestamp: {T0 + 85}, log timestamp: {T0 + 80}\n" in err
    assert f"  Index timestamp: {T0 + 60}, log timestamp: {T0 + 200}\n" in err
    assert f"Found out of order timestamp in :{time_index_path}\n" in err
    assert f"  Index timestamp: {T0 + 60}, Previously indexed timestamp: {T0 + 90}\n" in err


def test_verify_time_index_reports_an_offset_inside_a_batch(tmp_path, capsys):
    _, _, _, time_index_path = indexed_segment(tmp_path)
    data = bytearray(time_index_path.read_bytes())
    # Slot 1 points at batch 1, offsets 101-102; make it name 101, which no batch ends at.
    struct.pack_into(">i", data, 1 * 12 + 8, 1)
    time_index_path.write_bytes(bytes(data))
    status, _, err = run_cli(capsys, "--verify-index-only", str(time_index_path))
    assert status == 1
    assert "  Indexed offset: 101, found log offset: 102\n" in err


def test_preallocated_index_of_an_active_segment_dumps_only_real_entries(tmp_path, capsys):
    path = tmp_path / segment_name(BASE_OFFSET, ".index")
    index = OffsetIndex(path, BASE_OFFSET, 8 * 1024, writable=True)
    index.append(BASE_OFFSET + 3, 0)
    index.append(BASE_OFFSET + 9, 4200)
    index.flush()
    index.close_handler()  # as a running node leaves it: preallocated, not trimmed
    assert path.stat().st_size == 8 * 1024
    status, out, _ = run_cli(capsys, str(path))
    assert status == 0
    assert out.splitlines()[1:] == ["offset: 103 position: 0", "offset: 109 position: 4200"]


def test_torn_index_tail_is_reported_and_the_file_left_alone(tmp_path, capsys):
    _, _, offset_index_path, _ = indexed_segment(tmp_path)
    torn = offset_index_path.read_bytes() + b"\x00\x00\x00"
    offset_index_path.write_bytes(torn)
    status, out, _ = run_cli(capsys, str(offset_index_path))
    assert status == 1
    assert f"Found 3 invalid bytes at position {len(torn) - 3}: not a whole 8-byte entry" in out
    assert offset_index_path.read_bytes() == torn


def test_segment_written_by_log_segment_verifies_clean(tmp_path, capsys):
    segment = LogSegment(
        tmp_path, BASE_OFFSET, index_interval_bytes=200, max_index_size=4096, created_ms=T0, writable=True
    )
    offset = BASE_OFFSET
    for index in range(40):
        timestamp = T0 + (index * 37) % 101
        batch = build_batch([(b"k", b"v" * 40)] * 2, base_offset=offset, timestamps=[timestamp] * 2)
        segment.append((batch,), read_header(batch))
        offset += 2
    segment.on_become_inactive()
    segment.close()
    paths = [str(tmp_path / segment_name(BASE_OFFSET, suffix)) for suffix in (".index", ".timeindex")]
    status, out, err = run_cli(capsys, "--verify-index-only", *paths)
    assert status == 0, err
    assert out.count(": all match") == 2
    assert "Verified 0 entries" not in out


# ---------------------------------------------------------------------------------------------
# Usage


def test_missing_file_is_a_usage_error_and_nothing_is_dumped(tmp_path, capsys):
    log = write_log(tmp_path, sample_batches())
    missing = tmp_path / segment_name(5, ".log")
    status, out, err = run_cli(capsys, str(log), str(missing))
    assert status == 2
    assert out == ""
    assert f"tributary dump-log: error: {missing}: no such file" in err


def test_unknown_files_and_verification_without_a_log_are_usage_errors(tmp_path, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    lonely = tmp_path / segment_name(7, ".index")
    lonely.write_bytes(b"")
    status, _, err = run_cli(capsys, "--verify-index", str(other), str(lonely))
    assert status == 2
    assert "notes.txt: unknown file type" in err
    assert f"cannot verify: the segment's log {tmp_path / segment_name(7, '.log')} does not exist" in err
    status, _, err = run_cli(capsys)
    assert status == 2
    assert "no files given" in err


def test_bad_option_values_exit_with_status_two(tmp_path, capsys):
    log = write_log(tmp_path, sample_batches())
    with pytest.raises(SystemExit) as exit_info:
        main(["dump-log", "--max-bytes", "0", str(log)])
    assert exit_info.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_kafka_style_files_option_and_deleted_suffix(tmp_path, capsys):
    log = write_log(tmp_path, sample_batches())
    deleted = log.with_name(log.name + ".deleted")
    log.rename(deleted)
    status, out, _ = run_cli(capsys, "--files", f"{deleted}")
    assert status == 0
    assert out.splitlines()[1] == f"Log starting offset: {BASE_OFFSET}"


def test_console_entry_runs_as_a_module(tmp_path):
    log = write_log(tmp_path, sample_batches())
    result = subprocess.run(
        [sys.executable, "-m", "client.cli", "dump-log", "--print-data-log", str(log)],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"Dumping {log}"
    assert "key: abc payload: hello" in result.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "client.cli", "dump-log", str(tmp_path / "absent.log")],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2
    assert "absent.log: no such file" in missing.stderr
