"""RecordBatch v2 codec: interoperability with kafka-python, validation, rewriting, varints.

Interoperability is checked against kafka-python's independent implementation in both
directions (DESIGN §3: an independent decoder must read our bytes). Validation tests damage
one field at a time, recomputing the CRC where the damage should be caught by a later check.
"""

from __future__ import annotations

import contextlib
import mmap
import struct
import tracemalloc

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import decode_varint as kafka_decode_varint
from kafka.record.util import encode_varint as kafka_encode_varint

import storage.compression as compression_module
from storage.compression import XERIAL_HEADER, compress, decompress
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    StorageError,
    UnsupportedCompressionTypeError,
)
from storage.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    Compression,
    Record,
    TimestampKind,
    assign_offsets,
    build_batch,
    build_batch_from_values,
    decode_records,
    decode_varint,
    encode_varint,
    iter_headers,
    iter_records,
    read_header,
    validate_batch,
    with_log_append_time,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
CRC_POSITION = 17
ATTRIBUTES_POSITION = 21
LAST_OFFSET_DELTA_POSITION = 23
RECORDS_COUNT_POSITION = 57


def recrc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed, so that only the deliberate damage remains."""
    rewritten = bytearray(batch)
    struct.pack_into(">I", rewritten, CRC_POSITION, crc32c(bytes(rewritten[ATTRIBUTES_POSITION:])))
    return bytes(rewritten)


def patched(batch: bytes, position: int, fmt: str, value: int, fix_crc: bool = True) -> bytes:
    rewritten = bytearray(batch)
    struct.pack_into(fmt, rewritten, position, value)
    return recrc(rewritten) if fix_crc else bytes(rewritten)


def sample_batch(compression: Compression = Compression.NONE, count: int = 5) -> bytes:
    records = [(f"k{i}".encode(), f"value-{i}".encode() * 3, [("h", b"x")]) for i in range(count)]
    return build_batch(
        records,
        base_offset=1000,
        timestamps=[1_700_000_000_000 + i for i in range(count)],
        compression=compression,
    )


# --- strategies -------------------------------------------------------------------------------

nullable_bytes = st.none() | st.binary(max_size=300)
headers_strategy = st.lists(st.tuples(st.text(max_size=10), nullable_bytes), max_size=3)
record_strategy = st.tuples(nullable_bytes, nullable_bytes, headers_strategy)
records_strategy = st.lists(record_strategy, min_size=1, max_size=25)
timestamp_strategy = st.integers(min_value=-1, max_value=2**45)


@st.composite
def records_with_timestamps(draw):
    records = draw(records_strategy)
    timestamps = draw(st.lists(timestamp_strategy, min_size=len(records), max_size=len(records)))
    return records, timestamps


def kafka_python_records(batch: bytes) -> tuple[DefaultRecordBatch, list[tuple]]:
    """Decode one batch with kafka-python, checking its CRC, as plain tuples."""
    memory_records = MemoryRecords(batch)
    kafka_batch = memory_records.next_batch()
    assert kafka_batch.validate_crc()
    assert memory_records.next_batch() is None
    decoded = [
        (record.offset, record.timestamp, record.key, record.value, [tuple(h) for h in record.headers])
        for record in kafka_batch
    ]
    return kafka_batch, decoded


def as_tuples(records: list[Record]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


# --- varints ----------------------------------------------------------------------------------

VARINT_EDGES = [
    0,
    1,
    -1,
    2,
    -2,
    63,
    -64,
    64,
    -65,
    127,
    128,
    8191,
    8192,
    16383,
    16384,
    -16384,
    2**31 - 1,
    -(2**31),
    2**35,
    2**62,
    INT64_MAX,
    INT64_MIN,
    INT64_MIN + 1,
]


@pytest.mark.parametrize("value", VARINT_EDGES)
def test_varint_round_trips_edge_values_and_matches_kafka_python(value):
    encoded = encode_varint(value)
    assert decode_varint(encoded + b"\xff", 0) == (value, len(encoded))
    kafka_encoded = bytearray()
    kafka_encode_varint(value, kafka_encoded.append)
    assert encoded == bytes(kafka_encoded)
    assert len(encoded) <= 10


def test_varint_known_encodings():
    # Zigzag maps 0, -1, 1, -2, ... to 0, 1, 2, 3, ...; 300 -> 600 -> d8 04.
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(300) == b"\xd8\x04"
    assert encode_varint(INT64_MIN) == b"\xff" * 9 + b"\x01"


@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX), st.binary(max_size=3))
def test_varint_round_trips_any_int64(value, prefix):
    encoded = encode_varint(value)
    assert decode_varint(prefix + encoded, len(prefix)) == (value, len(prefix) + len(encoded))
    assert kafka_decode_varint(bytearray(encoded), 0) == (value, len(encoded))


def test_varint_rejects_out_of_range_and_damaged_input():
    with pytest.raises(ValueError):
        encode_varint(INT64_MAX + 1)
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_varint(b"\x80" * 11, 0)


# --- interoperability with kafka-python -------------------------------------------------------

INTEROP_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("compression", list(Compression))
@INTEROP_SETTINGS
@given(
    data=records_with_timestamps(),
    base_offset=st.integers(min_value=0, max_value=2**62),
    epoch=st.integers(min_value=-1, max_value=INT32_MAX),
    timestamp_type=st.sampled_from(TimestampKind),
)
def test_kafka_python_decodes_our_batches(compression, data, base_offset, epoch, timestamp_type):
    records, timestamps = data
    batch = build_batch(
        records,
        base_offset=base_offset,
        timestamps=timestamps,
        compression=compression,
        partition_leader_epoch=epoch,
        timestamp_type=timestamp_type,
    )
    kafka_batch, decoded = kafka_python_records(batch)

    assert kafka_batch.compression_type == compression
    assert kafka_batch.base_offset == base_offset
    assert kafka_batch.leader_epoch == epoch
    assert kafka_batch.timestamp_type == timestamp_type
    assert kafka_batch.max_timestamp == max(timestamps)
    assert kafka_batch.first_timestamp == timestamps[0]  # Kafka: baseTimestamp = first record's
    if timestamp_type == TimestampKind.LOG_APPEND_TIME:
        timestamps = [max(timestamps)] * len(records)
    expected = [
        (base_offset + i, timestamps[i], key, value, list(headers)) for i, (key, value, headers) in enumerate(records)
    ]
    assert decoded == expected
    assert as_tuples(decode_records(batch)) == expected
    header = validate_batch(batch)
    assert header.last_offset == base_offset + len(records) - 1
    assert header.size_in_bytes == len(batch)


@pytest.mark.parametrize("compression", list(Compression))
@INTEROP_SETTINGS
@given(data=records_with_timestamps())
def test_we_decode_kafka_python_batches(compression, data):
    records, timestamps = data
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**30,
    )
    for offset, ((key, value, headers), timestamp) in enumerate(zip(records, timestamps, strict=True)):
        assert builder.append(offset, timestamp, key, value, headers) is not None
    batch = bytes(builder.build())

    header = validate_batch(batch)
    # kafka-python falls back to no compression when the codec does not shrink the records.
    assert header.compression in (compression, Compression.NONE)
    assert header.records_count == len(records)
    assert header.base_timestamp == timestamps[0]
    expected = [(i, timestamps[i], key, value, list(headers)) for i, (key, value, headers) in enumerate(records)]
    assert as_tuples(decode_records(batch)) == expected


def test_kafka_python_reads_our_producer_fields_and_flags():
    batch = build_batch(
        [(b"k", b"v")],
        base_timestamp=42,
        producer_id=9001,
        producer_epoch=3,
        base_sequence=17,
        is_transactional=True,
    )
    kafka_batch, decoded = kafka_python_records(batch)
    assert (kafka_batch.producer_id, kafka_batch.producer_epoch) == (9001, 3)
    assert kafka_batch.base_sequence == 17
    assert kafka_batch.is_transactional
    assert not kafka_batch.is_control_batch
    assert decoded == [(0, 42, b"k", b"v", [])]
    header = read_header(batch)
    assert header.is_transactional
    assert not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9001, 3, 17)


@pytest.mark.parametrize("compression", list(Compression))
def test_values_fast_path_equals_general_builder(compression):
    values = [bytes([i]) * (i * 37 % 300) for i in range(200)] + [None]
    keys = [None if i % 3 else str(i).encode() for i in range(201)]
    fast = build_batch_from_values(values, keys=keys, timestamp_ms=123, base_offset=7, compression=compression)
    general = build_batch(
        list(zip(keys, values, strict=True)), base_timestamp=123, base_offset=7, compression=compression
    )
    assert fast == general
    _, decoded = kafka_python_records(fast)
    assert decoded == [(7 + i, 123, keys[i], values[i], []) for i in range(201)]


@pytest.mark.parametrize("with_keys", [False, True])
def test_values_fast_path_with_timestamps_equals_general_builder(with_keys):
    """Runs of equal timestamps (a producer's `send_many` calls), one earlier than the first."""
    values = [bytes([i % 256]) * (i * 53 % 400) for i in range(300)]
    keys = [None if i % 4 else str(i).encode() for i in range(300)] if with_keys else None
    timestamps = [1_000 + i // 70 for i in range(300)]
    timestamps[250:260] = [990] * 10
    fast = build_batch_from_values(values, keys=keys, timestamps=timestamps, base_offset=3)
    general = build_batch(list(zip(keys or [None] * 300, values, strict=True)), timestamps=timestamps, base_offset=3)
    assert fast == general
    assert [record.timestamp for record in decode_records(fast)] == timestamps


@pytest.mark.parametrize("count", [1, 64, 65, 8192, 9000])
def test_values_of_one_length_equal_the_general_builder_across_offset_varint_sizes(count):
    """Equal-length values take the columnar encoder; offsetDelta varints grow at 64 and 8192."""
    values = [b"v" * 100] * count
    timestamps = [7] * (count // 2) + [9] * (count - count // 2)
    for fast, general in [
        (build_batch_from_values(values, timestamp_ms=7), build_batch([(None, v) for v in values], base_timestamp=7)),
        (build_batch_from_values(values, timestamps=timestamps),
         build_batch([(None, v) for v in values], timestamps=timestamps)),
    ]:
        assert fast == general


def test_large_lengths_and_offset_deltas_beyond_the_varint_table():
    values = [b"x" * 20_000, b"y" * 70_000] + [b""] * 17_000
    batch = build_batch_from_values(values, timestamp_ms=5)
    validate_batch(batch)
    records = decode_records(batch)
    assert [len(r.value) for r in records[:3]] == [20_000, 70_000, 0]
    assert records[-1].offset == 17_001
    _, decoded = kafka_python_records(batch)
    assert decoded[-1][0] == 17_001


def test_null_key_and_value_use_length_minus_one():
    batch = build_batch([(None, None)], base_timestamp=0)
    # Record: length 6, attributes 0, timestampDelta 0, offsetDelta 0, key -1, value -1, 0 headers.
    assert batch[BATCH_HEADER_SIZE:] == b"\x0c\x00\x00\x00\x01\x01\x00"
    assert decode_records(batch) == [Record(0, 0, None, None, ())]


# --- codecs -----------------------------------------------------------------------------------


def test_snappy_uses_xerial_framing_and_decodes_raw_snappy_too():
    data = bytes(range(256)) * 300  # more than one 32 KiB xerial block
    encoded = compress(Compression.SNAPPY, data)
    assert encoded.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert encoded.startswith(XERIAL_HEADER)
    assert decompress(Compression.SNAPPY, encoded) == data
    import snappy

    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data


def test_lz4_frame_has_kafkas_flags():
    # More than one 64 KiB block: python-lz4 marks a single-block frame independent anyway.
    encoded = compress(Compression.LZ4, bytes(range(256)) * 1000)
    assert encoded[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    # FLG: version 01, independent blocks, no block checksum, no content size or checksum.
    assert encoded[4] == 0x60
    assert encoded[5] == 0x40  # BD: 64 KiB maximum block size


def test_gzip_and_zstd_accept_concatenated_members_and_frames():
    import gzip

    import zstandard

    assert decompress(Compression.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    frames = zstandard.ZstdCompressor(write_content_size=False).compress(b"ef") * 2
    assert decompress(Compression.ZSTD, frames) == b"efef"


@pytest.mark.parametrize("compression", [c for c in Compression if c != Compression.NONE])
def test_truncated_compressed_data_is_corrupt_not_a_crash(compression):
    encoded = compress(compression, bytes(range(256)) * 100)
    with pytest.raises(CorruptRecordError):
        decompress(compression, encoded[: len(encoded) // 2])


@pytest.mark.parametrize("compression", [c for c in Compression if c != Compression.NONE])
def test_decompression_stops_past_its_limit_having_held_little_more(compression):
    """A decompression bomb: 64 MiB of zeros compress to a few KiB (snappy: 3 MiB). Past the limit
    the codec stops and raises InvalidRecordError (INVALID_RECORD) having allocated about the limit,
    not the expansion (it allocated all 64 MiB before); at the limit it decodes."""
    data = bytes(64 * 1024 * 1024)
    encoded = compress(compression, data)
    assert decompress(compression, encoded, max_size=len(data)) == data
    del data
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecordError, match=r"max\.decompressed\.batch\.bytes"):
            decompress(compression, encoded, max_size=1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(encoded) + 6 * 1024 * 1024


@given(
    frames=st.lists(st.tuples(st.binary(max_size=3000), st.integers(0, 3000), st.booleans(), st.booleans()),
                    min_size=1, max_size=3),
)
@settings(max_examples=200, deadline=None)
def test_zstd_header_bound_is_never_below_the_output(frames):
    """The zstd headers' bound decides whether a limited decode goes in whole: it must never be less
    than what the frames decompress to (with and without content size and checksum, several frames,
    runs of zeros that make run-length blocks)."""
    import zstandard

    encoded = b"".join(
        zstandard.ZstdCompressor(write_content_size=content_size, write_checksum=checksum).compress(data + bytes(zeros))
        for data, zeros, content_size, checksum in frames
    )
    output = decompress(Compression.ZSTD, encoded)
    assert compression_module._zstd_output_bound(encoded, 1 << 40) >= len(output)
    assert decompress(Compression.ZSTD, encoded, max_size=len(output)) == output


def test_missing_codec_package_names_the_package(monkeypatch):
    monkeypatch.setattr(compression_module, "zstandard", None)
    with pytest.raises(UnsupportedCompressionTypeError, match="pip install zstandard"):
        build_batch([(None, b"v")], compression=Compression.ZSTD)
    monkeypatch.setattr(compression_module, "snappy", None)
    with pytest.raises(UnsupportedCompressionTypeError, match="pip install python-snappy"):
        decompress(Compression.SNAPPY, b"\x00")


# --- validate_batch ---------------------------------------------------------------------------


@pytest.mark.parametrize("compression", list(Compression))
def test_validate_accepts_a_good_batch_and_returns_its_header(compression):
    batch = sample_batch(compression)
    header = validate_batch(batch, max_message_bytes=len(batch))
    assert header == read_header(batch)
    assert header.base_offset == 1000
    assert header.next_offset == 1005
    assert header.compression == compression
    assert header.timestamp_type == TimestampKind.CREATE_TIME
    assert header.max_timestamp == 1_700_000_000_004


@pytest.mark.parametrize("compression", list(Compression))
def test_validate_rejects_any_flipped_byte_under_the_crc(compression):
    batch = sample_batch(compression)
    for position in range(CRC_POSITION, len(batch)):
        damaged = bytearray(batch)
        damaged[position] ^= 0x01
        with pytest.raises(CorruptRecordError, match="CRC"):
            validate_batch(bytes(damaged))


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_validate_rejects_wrong_magic(magic):
    damaged = patched(sample_batch(), 16, ">b", magic)
    with pytest.raises(CorruptRecordError, match=f"magic {magic}"):
        validate_batch(damaged)
    with pytest.raises(CorruptRecordError):
        read_header(damaged)


@pytest.mark.parametrize("compression", list(Compression))
def test_validate_rejects_truncation_at_every_cut_point(compression):
    batch = sample_batch(compression)
    for cut in range(len(batch)):
        with pytest.raises(CorruptRecordError):
            validate_batch(batch[:cut])
    for cut in range(BATCH_HEADER_SIZE, len(batch)):
        with pytest.raises(CorruptRecordError, match="truncated"):
            validate_batch(batch[:cut])


def test_validate_rejects_batch_length_below_an_empty_header():
    damaged = patched(sample_batch(), 8, ">i", BATCH_HEADER_SIZE - LOG_OVERHEAD - 1)
    with pytest.raises(CorruptRecordError, match="batchLength 48"):
        validate_batch(damaged)


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("wrong_count", [4, 6, 1, 1000, INT32_MAX])
def test_validate_rejects_record_count_mismatch(compression, wrong_count):
    # Only the count is wrong: the CRC is recomputed after editing it.
    damaged = patched(sample_batch(compression), RECORDS_COUNT_POSITION, ">i", wrong_count)
    with pytest.raises(InvalidRecordError, match="record count mismatch"):
        validate_batch(damaged)
    assert validate_batch(damaged, check_records=False).records_count == wrong_count


def test_validate_rejects_extra_bytes_after_the_last_record():
    batch = sample_batch()
    grown = bytearray(batch + b"\x00\x00\x00")
    struct.pack_into(">i", grown, 8, len(grown) - LOG_OVERHEAD)
    with pytest.raises(InvalidRecordError, match="record count mismatch"):
        validate_batch(recrc(grown))


def record_bytes(offset_delta: int, fields: bytes, extra: bytes = b"") -> bytes:
    """A record: attributes 0, timestampDelta 0, `offset_delta`, then `fields` (key, value,
    headers) and `extra`, its length varint counting both."""
    body = b"\x00\x00" + encode_varint(offset_delta) + fields + extra
    return encode_varint(len(body)) + body


def batch_of(records: list[bytes]) -> bytes:
    """`records` under a sound header (count, lastOffsetDelta, length and CRC to match)."""
    section = b"".join(records)
    batch = bytearray(sample_batch(count=1)[:BATCH_HEADER_SIZE] + section)
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">i", batch, LAST_OFFSET_DELTA_POSITION, len(records) - 1)
    struct.pack_into(">i", batch, RECORDS_COUNT_POSITION, len(records))
    return recrc(batch)


KEY_A_EMPTY_VALUE = b"\x02a\x00"  # key "a", value b"" (no headers follow)


@pytest.mark.parametrize("records", [1, 8], ids=["record by record", "a run of equal records"])
@pytest.mark.parametrize(
    ("fields", "extra"),
    [
        (KEY_A_EMPTY_VALUE + b"\x00", b"\x02"),  # a byte after the headers, inside the record
        (KEY_A_EMPTY_VALUE + b"\x01", b""),  # header count -1
        (KEY_A_EMPTY_VALUE + b"\x02\x01\x00", b""),  # one header whose key length is -1
        (KEY_A_EMPTY_VALUE + b"\x02\x02k\x7e", b""),  # a header value longer than the record
    ],
    ids=["trailing byte", "negative header count", "null header key", "header past the record"],
)
def test_validate_refuses_records_whose_fields_do_not_fill_them_as_a_consumer_reads_them(fields, extra, records):
    """Found by fuzzing (tests/fuzz): the walk read only each record's length and offsetDelta, so a
    produced batch was accepted and stored that every consumer then failed to decode."""
    batch = batch_of([record_bytes(index, fields, extra) for index in range(records)])
    with pytest.raises(StorageError):
        decode_records(batch)
    with pytest.raises(InvalidRecordError):
        validate_batch(batch)
    sound = batch_of([record_bytes(index, KEY_A_EMPTY_VALUE + b"\x00") for index in range(records)])
    validate_batch(sound)
    assert [record.key for record in decode_records(sound)] == [b"a"] * records


@pytest.mark.parametrize("records", [1, 8], ids=["record by record", "a run of equal records"])
def test_validate_refuses_a_timestamp_delta_longer_than_a_varlong(records):
    """Found in review: the walk skipped timestampDelta by its continuation bits however long it
    was; a consumer refuses a varint over 10 bytes."""
    def record(index: int) -> bytes:
        body = b"\x00" + b"\x80" * 11 + b"\x00" + encode_varint(index) + KEY_A_EMPTY_VALUE + b"\x00"
        return encode_varint(len(body)) + body

    batch = batch_of([record(index) for index in range(records)])
    with pytest.raises(StorageError):
        decode_records(batch)
    with pytest.raises(InvalidRecordError):
        validate_batch(batch)


def test_a_header_key_that_is_not_utf8_decodes_with_replacement_characters():
    """As Java's String(bytes, UTF_8) in Kafka's reader; it raised UnicodeDecodeError (a consumer
    crash) before."""
    batch = batch_of([record_bytes(0, KEY_A_EMPTY_VALUE[:-1] + b"\x00\x02\x02\xff\x00")])
    validate_batch(batch)
    (record,) = decode_records(batch)
    assert record.headers == (("\ufffd", b""),)


def test_validate_rejects_wrong_last_offset_delta_and_offset_gaps():
    damaged = patched(sample_batch(), LAST_OFFSET_DELTA_POSITION, ">i", 7)
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta 7"):
        validate_batch(damaged)
    contiguous = build_batch([Record(10, 1, None, b"a"), Record(11, 1, None, b"b")], base_offset=10, keep_offsets=True)
    validate_batch(contiguous)
    compacted = build_batch([Record(10, 1, None, b"a"), Record(12, 1, None, b"c")], base_offset=10, keep_offsets=True)
    with pytest.raises(InvalidRecordError, match="offsetDelta 2"):
        validate_batch(compacted)


def test_validate_rejects_empty_batch_on_produce_but_not_for_compacted_logs():
    empty = patched(sample_batch(count=1)[:BATCH_HEADER_SIZE], 8, ">i", 49, fix_crc=False)
    empty = patched(empty, RECORDS_COUNT_POSITION, ">i", 0)
    with pytest.raises(InvalidRecordError, match="recordsCount 0"):
        validate_batch(empty)
    assert validate_batch(empty, check_records=False).records_count == 0


def test_validate_rejects_batches_over_max_message_bytes():
    batch = sample_batch()
    validate_batch(batch, max_message_bytes=len(batch))
    with pytest.raises(RecordTooLargeError, match=f"{len(batch)} bytes, over max.message.bytes"):
        validate_batch(batch, max_message_bytes=len(batch) - 1)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_validate_rejects_unknown_compression_ids(codec_id):
    damaged = patched(sample_batch(), ATTRIBUTES_POSITION, ">h", codec_id)
    with pytest.raises(UnsupportedCompressionTypeError, match=f"compression id {codec_id}"):
        validate_batch(damaged)


def test_validate_rejects_compressed_garbage_with_a_valid_crc():
    batch = sample_batch(Compression.ZSTD)
    damaged = bytearray(batch)
    damaged[BATCH_HEADER_SIZE + 8 :] = b"\x00" * (len(batch) - BATCH_HEADER_SIZE - 8)
    with pytest.raises(CorruptRecordError, match="zstd"):
        validate_batch(recrc(damaged))


DAMAGE_TARGET = sample_batch(count=4)


@settings(max_examples=300, deadline=None)
@given(
    position=st.integers(min_value=BATCH_HEADER_SIZE, max_value=len(DAMAGE_TARGET) - 1),
    value=st.integers(min_value=0, max_value=255),
)
def test_damaged_records_raise_storage_errors_never_crash(position, value):
    # The CRC is recomputed, so the damage reaches the record walk and the decoder, which
    # must answer with a named storage error (or accept bytes that still parse), never crash.
    damaged = bytearray(DAMAGE_TARGET)
    damaged[position] = value
    damaged = recrc(damaged)
    for check in (validate_batch, decode_records):
        with contextlib.suppress(StorageError):
            check(damaged)


def test_validate_reads_memoryview_and_mmap_at_a_position(tmp_path):
    first, second = sample_batch(), sample_batch(Compression.GZIP)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(first + second)
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert validate_batch(mapped, len(first)).compression == Compression.GZIP
        assert [position for position, _ in iter_headers(mapped)] == [0, len(first)]
        assert decode_records(mapped, len(first)) == decode_records(second)
    view = memoryview(first + second)
    assert validate_batch(view, len(first)) == read_header(second)
    assert decode_records(view) == decode_records(first)


# --- iteration --------------------------------------------------------------------------------


def test_iter_headers_stops_quietly_at_a_partial_trailing_batch():
    batches = [sample_batch(c) for c in Compression]
    log = b"".join(batches)
    starts = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    assert [position for position, _ in iter_headers(log)] == starts
    for cut in range(len(log) + 1):
        complete = [s for s, b in zip(starts, batches, strict=True) if s + len(b) <= cut]
        assert [position for position, _ in iter_headers(log, 0, cut)] == complete
        assert [position for position, _ in iter_headers(log[:cut])] == complete
    assert [position for position, _ in iter_headers(log, starts[2])] == starts[2:]


def test_iter_headers_raises_on_a_header_that_is_not_a_batch():
    log = sample_batch() + patched(sample_batch(), 16, ">b", 1)
    iterator = iter_headers(log)
    assert next(iterator)[0] == 0
    with pytest.raises(CorruptRecordError, match="magic 1"):
        next(iterator)


def test_iter_records_decodes_every_batch():
    log = sample_batch() + build_batch([(None, b"z")], base_offset=1005, base_timestamp=9)
    result = [(header.base_offset, records) for header, records in iter_records(log)]
    assert [offset for offset, _ in result] == [1000, 1005]
    assert [r.offset for r in result[0][1]] == [1000, 1001, 1002, 1003, 1004]
    assert result[1][1] == [Record(1005, 9, None, b"z")]


# --- rewriting --------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", list(Compression))
def test_assign_offsets_rewrites_offset_and_epoch_without_copying_and_keeps_the_crc_valid(compression):
    batch = sample_batch(compression)
    padded = b"junk" + batch + b"more"
    pieces, assigned = assign_offsets(padded, 4, read_header(padded, 4), 2**40, 12)
    assert isinstance(pieces[1], memoryview), "the records are passed on as a view, not copied"
    rewritten = b"".join(pieces)
    header = validate_batch(rewritten)
    assert header == assigned
    assert (header.base_offset, header.partition_leader_epoch) == (2**40, 12)
    assert header.crc == read_header(batch).crc
    assert rewritten[16:] == batch[16:]
    kafka_batch, decoded = kafka_python_records(rewritten)
    assert kafka_batch.leader_epoch == 12
    assert [offset for offset, *_ in decoded] == [2**40 + i for i in range(5)]


@pytest.mark.parametrize("compression", list(Compression))
def test_with_log_append_time_stamps_every_record(compression):
    batch = sample_batch(compression)
    stamped = with_log_append_time(batch, 1_800_000_000_000)
    header = validate_batch(stamped)
    assert header.timestamp_type == TimestampKind.LOG_APPEND_TIME
    assert header.max_timestamp == 1_800_000_000_000
    assert header.base_timestamp == read_header(batch).base_timestamp
    assert header.compression == compression
    assert {r.timestamp for r in decode_records(stamped)} == {1_800_000_000_000}
    _, decoded = kafka_python_records(stamped)
    assert {timestamp for _, timestamp, *_ in decoded} == {1_800_000_000_000}


# --- building ---------------------------------------------------------------------------------


def test_cleaner_style_rebuild_keeps_offsets_timestamps_and_last_offset_delta():
    original = decode_records(sample_batch())
    kept = [original[1], original[3]]
    rebuilt = build_batch(kept, base_offset=1000, keep_offsets=True, last_offset_delta=4)
    header = validate_batch(rebuilt, check_records=False)
    assert (header.records_count, header.last_offset) == (2, 1004)
    assert header.base_timestamp == kept[0].timestamp
    assert decode_records(rebuilt) == kept
    _, decoded = kafka_python_records(rebuilt)
    assert decoded == as_tuples(kept)


def test_record_items_keep_timestamps_and_get_fresh_offsets_by_default():
    records = [Record(500, 70, b"a", b"1"), Record(900, 60, None, b"2", (("h", None),))]
    decoded = decode_records(build_batch(records, base_offset=5))
    assert decoded == [Record(5, 70, b"a", b"1"), Record(6, 60, None, b"2", (("h", None),))]


def test_build_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(ValueError, match="2 timestamps given for 1 records"):
        build_batch([(None, b"a")], timestamps=[1, 2])
    with pytest.raises(ValueError, match="keep_offsets"):
        build_batch([(None, b"a")], keep_offsets=True)
    with pytest.raises(ValueError, match="must exceed the previous"):
        build_batch([Record(5, 0, None, b"a"), Record(5, 0, None, b"b")], keep_offsets=True)
    with pytest.raises(ValueError, match="out of range"):
        build_batch([(None, b"a")], base_offset=2**63)
