"""Kafka RecordBatch v2 (magic 2): parse, validate, rewrite and build batches.

This is the only module that knows the record format. The broker's hot path uses
`read_header`, `validate_batch`, `assign_offsets` and `with_log_append_time`, which never
decode records (DESIGN §2); clients, compaction and tools use `build_batch` and
`decode_records`.

Zigzag varints (`encode_varint` / `decode_varint`) are protobuf's: the value is mapped to
(n << 1) ^ (n >> 63), then written 7 bits at a time, low group first, with the high bit set
on every byte but the last. Lengths of -1 mean null.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import groupby
from typing import Any

from crc32c import crc32c

from storage.compression import Compression, codec_of, compress, decompress
from storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, StorageError

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "BatchHeader",
    "Compression",
    "Record",
    "TimestampKind",
    "assign_offsets",
    "build_batch",
    "build_batch_from_values",
    "decode_records",
    "decode_varint",
    "encode_varint",
    "iter_headers",
    "iter_records",
    "read_header",
    "validate_batch",
    "with_log_append_time",
]

LOG_OVERHEAD = 12  # baseOffset i64 + batchLength i32: the bytes batchLength does not count
BATCH_HEADER_SIZE = 61  # everything from baseOffset through the records count
MAGIC = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
# The header splits at the CRC: the CRC covers attributes through the last record.
_HEADER_HEAD = struct.Struct(">qiibI")
_ASSIGNED_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_HEADER_TAIL = struct.Struct(">hiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_PARTITION_LEADER_EPOCH_POSITION = 12
_CRC_POSITION = 17
_ATTRIBUTES_POSITION = 21
_MAX_TIMESTAMP_POSITION = 35
_BATCH_LENGTH_MIN = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49: an empty batch
assert _HEADER.size == BATCH_HEADER_SIZE, _HEADER.size
assert _HEADER_HEAD.size == _ATTRIBUTES_POSITION, _HEADER_HEAD.size

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20

# A record's body is at least 6 one-byte fields: attributes, timestampDelta, offsetDelta,
# keyLength, valueLength, header count.
_RECORD_BODY_SIZE_MIN = 6
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class TimestampKind(IntEnum):
    """Attribute bit 3: who set the records' timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# ---------------------------------------------------------------------------------------------
# Varints


def _encode_varint_slow(value: int) -> bytes:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varint value {value} does not fit a signed 64-bit integer")
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


# Encoded varints for -1 (null) through _VARINT_TABLE_LIMIT - 1, indexed by value + 1: lengths,
# offset deltas and small timestamp deltas are looked up instead of computed.
_VARINT_TABLE_LIMIT = 1 << 14
_VARINTS = tuple(_encode_varint_slow(value) for value in range(-1, _VARINT_TABLE_LIMIT))


def encode_varint(value: int) -> bytes:
    """Zigzag varint bytes of a signed 64-bit `value`."""
    if -1 <= value < _VARINT_TABLE_LIMIT:
        return _VARINTS[value + 1]
    return _encode_varint_slow(value)


def decode_varint(buffer: Any, position: int = 0) -> tuple[int, int]:
    """Decode the zigzag varint at `position`; return (value, position after it)."""
    try:
        byte = buffer[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
        zigzag = byte & 0x7F
        shift = 7
        cursor = position + 1
        while True:
            byte = buffer[cursor]
            cursor += 1
            zigzag |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (zigzag >> 1) ^ -(zigzag & 1), cursor
            shift += 7
            if shift >= 70:
                raise CorruptRecordError(f"varint at position {position} is longer than 10 bytes; the data is damaged")
    except IndexError:
        raise CorruptRecordError(
            f"varint at position {position} runs past the end of {len(buffer)} bytes; the data is truncated"
        ) from None


# ---------------------------------------------------------------------------------------------
# Header


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of a Kafka RecordBatch v2; all integers big-endian.

    | position | size | field                 | meaning                                          |
    |----------|------|-----------------------|--------------------------------------------------|
    | 0        | 8    | baseOffset            | offset of the first record (set by the leader)   |
    | 8        | 4    | batchLength           | bytes after this field: size_in_bytes - 12       |
    | 12       | 4    | partitionLeaderEpoch  | leader epoch that appended it (set by leader)    |
    | 16       | 1    | magic                 | 2                                                |
    | 17       | 4    | crc                   | CRC-32C (Castagnoli) of bytes 21..end, unsigned  |
    | 21       | 2    | attributes            | bits 0-2 compression, 3 timestamp type,          |
    |          |      |                       | 4 transactional, 5 control, 6 delete horizon     |
    | 23       | 4    | lastOffsetDelta       | last record's offset - baseOffset                |
    | 27       | 8    | baseTimestamp         | first record's timestamp (ms)                    |
    | 35       | 8    | maxTimestamp          | largest timestamp, or the LogAppendTime          |
    | 43       | 8    | producerId            | -1 without an idempotent producer                |
    | 51       | 2    | producerEpoch         | -1 without an idempotent producer                |
    | 53       | 4    | baseSequence          | -1 without an idempotent producer                |
    | 57       | 4    | recordsCount          | number of records that follow                    |

    Then the records, compressed as one stream if bits 0-2 say so. Each record is: length
    varint (bytes after it), attributes i8 (unused, 0), timestampDelta varlong,
    offsetDelta varint, keyLength varint (-1 null), key, valueLength varint (-1 null), value,
    header count varint, then per header: keyLength varint, key (UTF-8), valueLength varint
    (-1 null), value. baseOffset and partitionLeaderEpoch lie outside the CRC so a leader
    can assign offsets without recomputing it.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        """Codec of the records; ids 5-7 raise UnsupportedCompressionTypeError."""
        return codec_of(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampKind:
        return TimestampKind((self.attributes & _TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_MASK)


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: absolute offset and timestamp (ms), nullable key and value, and
    headers as (UTF-8 key, nullable value) pairs in wire order."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def read_header(buffer: Any, position: int = 0) -> BatchHeader:
    """Parse the batch header at `position` of bytes, a memoryview or an mmap.

    Checks only what is needed to find the next batch (length and magic), not the CRC.
    """
    _check_available(buffer, position)
    fields = _HEADER.unpack_from(buffer, position)
    _check_length_and_magic(position, fields[1], fields[3])
    return _header_of(fields)


def _check_available(buffer: Any, position: int) -> None:
    available = len(buffer) - position
    if available < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at position {position} needs a {BATCH_HEADER_SIZE}-byte header but only "
            f"{available} bytes remain; the data ends mid-batch (truncate the log at {position} "
            "or resend the batch)"
        )


def _check_length_and_magic(position: int, batch_length: int, magic: int) -> None:
    if batch_length < _BATCH_LENGTH_MIN:
        raise CorruptRecordError(
            f"batch at position {position} has batchLength {batch_length}, below the "
            f"minimum {_BATCH_LENGTH_MIN} of a v2 header; the bytes are not a batch (truncate "
            f"the log at {position} or resend)"
        )
    if magic != MAGIC:
        raise CorruptRecordError(
            f"batch at position {position} has magic {magic}; only RecordBatch v2 "
            "(magic 2) is supported, so upgrade the producer (Kafka >= 0.11 clients write v2)"
        )


# A frozen dataclass's generated __init__ sets each of the 13 fields through
# object.__setattr__; calling the slots' own setters is about twice as fast, and every
# append, read and recovery scan builds headers (same object, same fields, same order).
_NEW_OBJECT = object.__new__
(
    _SET_BASE_OFFSET, _SET_BATCH_LENGTH, _SET_PARTITION_LEADER_EPOCH, _SET_MAGIC, _SET_CRC, _SET_ATTRIBUTES,
    _SET_LAST_OFFSET_DELTA, _SET_BASE_TIMESTAMP, _SET_MAX_TIMESTAMP, _SET_PRODUCER_ID, _SET_PRODUCER_EPOCH,
    _SET_BASE_SEQUENCE, _SET_RECORDS_COUNT,
) = (getattr(BatchHeader, name).__set__ for name in BatchHeader.__slots__)
assert BatchHeader.__slots__ == tuple(f for f in BatchHeader.__dataclass_fields__), BatchHeader.__slots__


def _header_of(fields: tuple) -> BatchHeader:
    """BatchHeader(*fields), built without the dataclass __init__ (see above)."""
    header = _NEW_OBJECT(BatchHeader)
    _SET_BASE_OFFSET(header, fields[0])
    _SET_BATCH_LENGTH(header, fields[1])
    _SET_PARTITION_LEADER_EPOCH(header, fields[2])
    _SET_MAGIC(header, fields[3])
    _SET_CRC(header, fields[4])
    _SET_ATTRIBUTES(header, fields[5])
    _SET_LAST_OFFSET_DELTA(header, fields[6])
    _SET_BASE_TIMESTAMP(header, fields[7])
    _SET_MAX_TIMESTAMP(header, fields[8])
    _SET_PRODUCER_ID(header, fields[9])
    _SET_PRODUCER_EPOCH(header, fields[10])
    _SET_BASE_SEQUENCE(header, fields[11])
    _SET_RECORDS_COUNT(header, fields[12])
    return header


# ---------------------------------------------------------------------------------------------
# Validation


def validate_batch(
    buffer: Any,
    position: int = 0,
    max_message_bytes: int | None = None,
    check_records: bool = True,
    max_decompressed_bytes: int | None = None,
) -> BatchHeader:
    """Check the one batch at `position` and return its header.

    Always: header sane, size <= `max_message_bytes`, batch wholly present, codec known,
    CRC-32C matches. With `check_records` (the produce path): at least one record,
    recordsCount equals the records present, which exactly fill the batch, and offset deltas
    run 0..n-1 with lastOffsetDelta n-1. Uncompressed records are walked by their length and
    offsetDelta varints only. Pass `check_records=False` for compacted batches, whose retained
    records keep their original offsets and so may have gaps (or be empty). Compressed records
    that expand past `max_decompressed_bytes` raise InvalidRecordError (`decompress`).
    """
    header = read_header(buffer, position)
    size = header.size_in_bytes
    if max_message_bytes is not None and size > max_message_bytes:
        raise RecordTooLargeError(
            f"batch at position {position} is {size} bytes, over max.message.bytes "
            f"{max_message_bytes}; send smaller batches (lower batch.size) or raise "
            "max.message.bytes on the topic"
        )
    end = position + size
    available = len(buffer) - position
    if size > available:
        raise CorruptRecordError(
            f"batch at position {position} is truncated: it declares {size} bytes but only "
            f"{available} remain; truncate the log at {position} or resend the batch"
        )
    with memoryview(buffer) as view:
        computed = crc32c(view[position + _ATTRIBUTES_POSITION : end])
    if computed != header.crc:
        raise CorruptRecordError(
            f"batch at position {position} (base offset {header.base_offset}) has CRC "
            f"{header.crc:#010x} but its bytes hash to {computed:#010x}; the batch was damaged "
            f"in transit or on disk: resend it, or truncate the log at {position}"
        )
    # The codec is read after the CRC check, so a flipped attribute bit reports as damage.
    codec = Compression.NONE if not header.attributes & _COMPRESSION_MASK else header.compression
    if check_records:
        _check_records(buffer, position, header, codec, max_decompressed_bytes)
    return header


@dataclass(frozen=True, slots=True)
class DamagedBatch:
    """A batch read back from a log that fails its checks: the offset where the sound part of the
    log ends (the batch's start, as far as it can be known), and why."""

    base_offset: int
    reason: str


def check_batches(data: Any, fetch_offset: int) -> tuple[int, DamagedBatch | None]:
    """Where the sound batches of `data` (whole batches read from a log from the one holding
    `fetch_offset`) end (`fetch_offset` for none), and the first that is not sound, or None: its
    header must parse, its CRC match, its offsets follow the batch before it (the CRC covers neither
    baseOffset nor partitionLeaderEpoch, so damage there shows only as offsets that go back) and its
    leader epoch must not fall. The damaged batch's offset is that end."""
    position, expected, epoch = 0, fetch_offset, -1
    while position < len(data):
        try:
            header = validate_batch(data, position, check_records=False)
        except StorageError as error:
            return expected, DamagedBatch(expected, str(error))
        if header.base_offset < expected and position > 0:
            return expected, DamagedBatch(expected, f"batch at position {position} starts at offset "
                                                    f"{header.base_offset}, below the end {expected} of the "
                                                    "batch before it")
        if header.partition_leader_epoch < epoch:
            return expected, DamagedBatch(expected, f"batch at position {position} has leader epoch "
                                                    f"{header.partition_leader_epoch} after epoch {epoch}")
        position += header.size_in_bytes
        expected, epoch = header.next_offset, header.partition_leader_epoch
    return expected, None


def _check_records(buffer: Any, position: int, header: BatchHeader, codec: Compression,
                   max_decompressed_bytes: int | None) -> None:
    count = header.records_count
    if count < 1:
        raise InvalidRecordError(
            f"batch at position {position} has recordsCount {count}; a produced batch must hold at least one record"
        )
    start = position + BATCH_HEADER_SIZE
    end = position + header.size_in_bytes
    if codec == Compression.NONE:
        _walk_records(buffer, start, end, count, position)
    else:
        payload = decompress(codec, buffer[start:end], max_decompressed_bytes)
        _walk_records(payload, 0, len(payload), count, position)
    if header.last_offset_delta != count - 1:
        raise InvalidRecordError(
            f"batch at position {position} has lastOffsetDelta {header.last_offset_delta} for "
            f"{count} records (expected {count - 1}); the producer must number records 0..n-1"
        )


def _walk_records(data: Any, position: int, end: int, count: int, batch_position: int) -> None:
    """Check that data[position:end] holds exactly `count` records with offset deltas 0..n-1.

    Reads each record's length varint, its offsetDelta (past the attributes byte and the
    timestampDelta varint) and the lengths of its key, value and headers, which must fill it
    exactly as a consumer reads them (`_fields_end`): a batch accepted here always decodes. This
    runs for every produced batch. Batches of records of equal size and layout are proved by
    `_walk_runs` without a Python step per record; any other batch, and any batch that fails,
    takes the record-by-record walk, which names the fault.
    """
    if type(data) is bytes and _RUN_RECORDS_MIN <= count <= _RUN_RECORDS_MAX and _walk_runs(data, position, end, count):
        return
    start = position
    found = 0
    try:
        while position < end and found < count:
            # The length varint, inlined for the one- and two-byte cases (records < 8 KiB).
            byte = data[position]
            if byte < 0x80:
                length, body = (byte >> 1) ^ -(byte & 1), position + 1
            elif data[position + 1] < 0x80:
                zigzag = (byte & 0x7F) | (data[position + 1] << 7)
                length, body = (zigzag >> 1) ^ -(zigzag & 1), position + 2
            else:
                length, body = decode_varint(data, position)
            if length < _RECORD_BODY_SIZE_MIN or body + length > end:
                break
            record_end = body + length
            cursor = body + 1
            while cursor < record_end and data[cursor] & 0x80:
                cursor += 1
            if cursor - body > _VARLONG_BYTES_MAX:  # timestampDelta, a varlong a consumer reads
                break
            byte = data[cursor + 1]
            if byte < 0x80:
                offset_delta, fields = (byte >> 1) ^ -(byte & 1), cursor + 2
            else:
                offset_delta, fields = decode_varint(data, cursor + 1)
            if offset_delta != found:
                raise InvalidRecordError(
                    f"batch at position {batch_position}: record {found} has offsetDelta "
                    f"{offset_delta}; deltas must run 0..{count - 1} without gaps, so the "
                    "producer must renumber its records"
                )
            if _fields_end(data, fields, record_end) != record_end:
                raise InvalidRecordError(
                    f"batch at position {batch_position}: record {found} declares {length} bytes, but its key, "
                    "value and headers do not fill them (or a header count or header key length is negative); "
                    "the producer built it wrongly"
                )
            found += 1
            position = record_end
    except (IndexError, CorruptRecordError):
        pass  # an unreadable varint ends the walk; the mismatch below reports it
    if found != count or position != end:
        raise InvalidRecordError(
            f"record count mismatch: batch at position {batch_position} declares {count} "
            f"records, but its {end - start} record bytes hold {found} whole records followed "
            f"by {end - position} bytes that are not one; the producer built it wrongly"
        )


def _fields_end(data: Any, position: int, record_end: int) -> int:
    """Where the key, value and headers of a record end, read from `position` (just past its
    offsetDelta) as a consumer reads them (`_decode_payload`, Kafka's DefaultRecord.readFrom): a
    negative key or value length is null; -1 for a negative header count or header key length, or
    headers that run past `record_end`. Key and value lengths below 8 KiB are read inline, as
    `_walk_records` reads each record's length: a shared helper costs 15 % of the walk of a batch
    of varied records (one more call per varint on the produce path)."""
    for _ in (0, 1):  # key, value
        byte = data[position]
        if byte < 0x80:
            length, position = (byte >> 1) ^ -(byte & 1), position + 1
        elif data[position + 1] < 0x80:
            zigzag = (byte & 0x7F) | (data[position + 1] << 7)
            length, position = (zigzag >> 1) ^ -(zigzag & 1), position + 2
        else:
            length, position = decode_varint(data, position)
        if length > 0:
            position += length
    if data[position] == 0:  # no headers
        return position + 1
    count, position = decode_varint(data, position)
    if count < 0:
        return -1
    for _ in range(count):
        if position >= record_end:
            return -1
        key_length, position = decode_varint(data, position)
        if key_length < 0:
            return -1
        value_length, position = decode_varint(data, position + key_length)
        if value_length > 0:
            position += value_length
    return position


def _varint_end(data: bytes, position: int, end: int) -> int:
    """Where the varint at `position` ends (-1 past `end`)."""
    while position < end and data[position] & 0x80:
        position += 1
    return position + 1 if position < end else -1


_VARLONG_BYTES_MAX = 10  # a longer varint is refused by `decode_varint`, so by every consumer


# Runs: offsetDelta i is the canonical varint of i, one byte for i < 64 and two below 8192,
# so records whose keys and values have equal lengths have equal sizes within each range.
# Column j of a range is byte j of the varints of every index in it, for strided comparison.
_RUN_RECORDS_MAX = 8192
_RUN_RECORDS_MIN = 6  # below this the record-by-record walk is as fast (~1 us a record)
_RUN_RANGES = ((0, 64, 1), (64, _RUN_RECORDS_MAX, 2))  # first index, end index, varint width
_RUN_DELTA_COLUMNS = {
    first: tuple(bytes(_VARINTS[index + 1][j] for index in range(first, stop)) for j in range(width))
    for first, stop, width in _RUN_RANGES
}
_HIGH_BIT = bytes(byte >> 7 for byte in range(256))  # bytes.translate table: byte -> its bit 7


def _walk_runs(data: bytes, position: int, end: int, count: int) -> bool:
    """True if data[position:end] is `count` records that `_walk_records` would accept.

    Within each index range of `_RUN_RANGES`, the first record gives the stride; the others
    must then repeat its length varint bytes and its timestampDelta continuation bits, and
    hold the canonical offsetDelta of their index, all checked by strided slices (C loops).
    False means "not proved" (unequal sizes, a fault): the caller walks record by record.
    """
    for first, stop, width in _RUN_RANGES:
        if first >= count:
            break
        position = _check_run(data, position, end, min(count, stop) - first, width, _RUN_DELTA_COLUMNS[first])
        if position < 0:
            return False
    return position == end


def _check_run(data: bytes, position: int, end: int, run: int, width: int, columns: tuple[bytes, ...]) -> int:
    """Where `run` equal-sized records from `position` end (whose offsetDelta varints,
    `width` bytes, are columns[j][:run]); -1 if they are not such records."""
    if position >= end:
        return -1
    try:
        length, body = decode_varint(data, position)
    except CorruptRecordError:
        return -1
    record_end = body + length
    if length < _RECORD_BODY_SIZE_MIN or record_end > end:
        return -1
    cursor = body + 1
    while cursor < record_end and data[cursor] & 0x80:
        cursor += 1
    if cursor - body > _VARLONG_BYTES_MAX:
        return -1
    size = record_end - position
    run_end = position + run * size
    if cursor + 1 + width > record_end or run_end > end:
        return -1
    # The length varint, repeated byte for byte.
    for at in range(position, body):
        if data[at:run_end:size].count(data[at]) != run:
            return -1
    # timestampDelta: the same continuation bits, so the walk finds offsetDelta at the same place.
    for at in range(body + 1, cursor):
        if data[at:run_end:size].translate(_HIGH_BIT).count(1) != run:
            return -1
    if data[cursor:run_end:size].translate(_HIGH_BIT).count(0) != run:
        return -1
    # offsetDelta: the index of each record.
    if data[cursor + 1 : run_end : size] != columns[0][:run]:
        return -1
    if width == 2 and data[cursor + 2 : run_end : size] != columns[1][:run]:
        return -1
    try:
        return run_end if _same_layout(data, cursor + 1 + width, record_end, run_end, size, run) else -1
    except (IndexError, CorruptRecordError):
        return -1


def _same_layout(data: bytes, fields: int, record_end: int, run_end: int, size: int, run: int) -> bool:
    """The first record's key, value and no headers fill it (`_fields_end`), and every record of
    the run repeats its key-length and value-length varints and its header count byte for byte, so
    each has the same layout and fills itself too. A record with headers is not proved here."""
    key_length_end = _varint_end(data, fields, record_end)
    if key_length_end < 0 or _fields_end(data, fields, record_end) != record_end or data[record_end - 1] != 0:
        return False
    key_length, _ = decode_varint(data, fields)
    value_length_at = key_length_end + max(key_length, 0)
    value_length_end = _varint_end(data, value_length_at, record_end)
    if value_length_end < 0:
        return False
    value_length, _ = decode_varint(data, value_length_at)
    if value_length_end + max(value_length, 0) != record_end - 1:  # a header count, 0, ends it
        return False
    for at in (*range(fields, key_length_end), *range(value_length_at, value_length_end), record_end - 1):
        if data[at:run_end:size].count(data[at]) != run:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Iteration and decoding


def iter_headers(buffer: Any, position: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in buffer[position:end].

    Stops quietly at a partial trailing batch (a fetch or a torn write may cut the last one);
    a header that is not a batch raises CorruptRecordError.
    """
    limit = len(buffer) if end is None else min(end, len(buffer))
    while limit - position >= BATCH_HEADER_SIZE:
        header = read_header(buffer, position)
        if position + header.size_in_bytes > limit:
            return
        yield position, header
        position += header.size_in_bytes


def iter_records(buffer: Any, position: int = 0, end: int | None = None) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Yield (header, records) for each complete batch in buffer[position:end]."""
    for batch_position, header in iter_headers(buffer, position, end):
        yield header, decode_records(buffer, batch_position)


def decode_records(batch: Any, position: int = 0) -> list[Record]:
    """Decode every record of the batch at `position`, decompressing as needed.

    Offsets and timestamps are absolute; under LogAppendTime every record takes the batch's
    maxTimestamp, as Kafka's consumers do. The CRC is not checked: call `validate_batch`
    first on untrusted bytes.
    """
    header = read_header(batch, position)
    start = position + BATCH_HEADER_SIZE
    end = position + header.size_in_bytes
    if end > len(batch):
        raise CorruptRecordError(
            f"batch at position {position} is truncated: it declares {header.size_in_bytes} "
            f"bytes but only {len(batch) - position} remain; read the whole batch"
        )
    payload = decompress(header.compression, batch[start:end])
    try:
        return _decode_payload(payload, header)
    except (IndexError, UnicodeDecodeError) as error:
        raise CorruptRecordError(
            f"records of batch at position {position} (base offset {header.base_offset}) do "
            f"not parse ({type(error).__name__}: {error}); the batch is damaged"
        ) from None


def _read_bytes(data: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = decode_varint(data, position)
    if length < 0:
        return None, position
    return data[position : position + length], position + length


def _decode_headers(data: bytes, position: int, count: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    if count < 0:
        raise CorruptRecordError(f"record header count {count} is negative; the batch is damaged")
    headers = []
    for _ in range(count):
        key, position = _read_bytes(data, position)
        if key is None:
            raise CorruptRecordError("record header key is null; Kafka header keys are strings")
        value, position = _read_bytes(data, position)
        # As Java's String(bytes, UTF_8), which Kafka's reader uses: bad bytes become U+FFFD.
        headers.append((key.decode("utf-8", errors="replace"), value))
    return tuple(headers), position


def _decode_payload(data: bytes, header: BatchHeader) -> list[Record]:
    records = []
    append = records.append
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.timestamp_type == TimestampKind.LOG_APPEND_TIME else None
    position = 0
    for _ in range(header.records_count):
        length, position = decode_varint(data, position)
        record_end = position + length
        timestamp_delta, position = decode_varint(data, position + 1)  # skip attributes
        offset_delta, position = decode_varint(data, position)
        key, position = _read_bytes(data, position)
        value, position = _read_bytes(data, position)
        header_count, position = decode_varint(data, position)
        headers = ()
        if header_count:
            headers, position = _decode_headers(data, position, header_count)
        if position != record_end:
            raise CorruptRecordError(
                f"record at offset {base_offset + offset_delta} declares {length} bytes but its "
                f"fields take {length + position - record_end}; the batch is damaged"
            )
        timestamp = base_timestamp + timestamp_delta if append_time is None else append_time
        append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    if position != len(data):
        raise CorruptRecordError(
            f"batch at base offset {base_offset} has {len(data) - position} bytes after its "
            f"{header.records_count} records; the batch is damaged"
        )
    return records


# ---------------------------------------------------------------------------------------------
# Rewriting (the leader's append path)


def assign_offsets(
    records: bytes | memoryview, position: int, header: BatchHeader, base_offset: int, partition_leader_epoch: int
) -> tuple[tuple[bytes, memoryview], BatchHeader]:
    """The batch at `position` of `records` with baseOffset and partitionLeaderEpoch set, as two
    pieces for one `os.pwritev` (the records are not copied), and the header that now describes
    it. The leader's hot path: both fields lie outside the CRC, so nothing is recomputed."""
    assert 0 <= base_offset <= _INT64_MAX, f"base_offset={base_offset}"
    assert -1 <= partition_leader_epoch <= _INT32_MAX, f"epoch={partition_leader_epoch}"
    prefix = _ASSIGNED_PREFIX.pack(base_offset, header.batch_length, partition_leader_epoch)
    rest = memoryview(records)[position + _ASSIGNED_PREFIX.size : position + header.size_in_bytes]
    assigned = _header_of(
        (base_offset, header.batch_length, partition_leader_epoch, header.magic, header.crc, header.attributes,
         header.last_offset_delta, header.base_timestamp, header.max_timestamp, header.producer_id,
         header.producer_epoch, header.base_sequence, header.records_count)
    )
    return (prefix, rest), assigned


def with_log_append_time(batch: bytes, timestamp_ms: int) -> bytes:
    """Copy of the batch stamped with LogAppendTime `timestamp_ms`: attribute bit 3 set,
    maxTimestamp replaced, CRC recomputed (Kafka's LogValidator does this for topics with
    message.timestamp.type=LogAppendTime; record timestamp deltas are left alone)."""
    header = read_header(batch)
    assert _INT64_MIN <= timestamp_ms <= _INT64_MAX, f"timestamp_ms={timestamp_ms}"
    size = header.size_in_bytes
    rewritten = bytearray(batch)
    _INT16.pack_into(rewritten, _ATTRIBUTES_POSITION, header.attributes | _TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(rewritten, _MAX_TIMESTAMP_POSITION, timestamp_ms)
    with memoryview(rewritten) as view:
        crc = crc32c(view[_ATTRIBUTES_POSITION:size])
    _UINT32.pack_into(rewritten, _CRC_POSITION, crc)
    return bytes(rewritten)


# ---------------------------------------------------------------------------------------------
# Building

RecordInput = (
    tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]] | Record
)


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    timestamps: Sequence[int] | None = None,
    base_timestamp: int | None = None,
    compression: Compression = Compression.NONE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_type: TimestampKind = TimestampKind.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    keep_offsets: bool = False,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode `records` as one RecordBatch v2.

    Each record is (key, value), (key, value, headers) or a `Record`. Timestamps come from
    `timestamps` (one per record), else from `Record` items, else `base_timestamp` for all
    (default -1, Kafka's NO_TIMESTAMP: storage reads no clock). baseTimestamp is the first
    record's timestamp unless `base_timestamp` is given. Offset deltas are 0..n-1; with
    `keep_offsets` they are each `Record.offset - base_offset` (the cleaner keeps offsets), and
    `last_offset_delta` may keep the original batch's last delta.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    keys, values, headers, record_timestamps, offset_deltas = _split_records(records, base_offset, keep_offsets)
    if timestamps is not None:
        if len(timestamps) != len(records):
            raise ValueError(f"{len(timestamps)} timestamps given for {len(records)} records")
        record_timestamps = list(timestamps)
    elif record_timestamps is not None and len(record_timestamps) != len(records):
        raise ValueError("Record items (with timestamps) mixed with tuples; pass `timestamps`")
    if record_timestamps is None:
        first_timestamp = NO_TIMESTAMP if base_timestamp is None else base_timestamp
        timestamp_deltas, max_timestamp = None, first_timestamp
    else:
        first_timestamp = record_timestamps[0] if base_timestamp is None else base_timestamp
        timestamp_deltas = [timestamp - first_timestamp for timestamp in record_timestamps]
        max_timestamp = max(record_timestamps)
    last_delta = len(records) - 1 if offset_deltas is None else offset_deltas[-1]
    if last_offset_delta is not None:
        if last_offset_delta < last_delta:
            raise ValueError(f"last_offset_delta {last_offset_delta} < last record's {last_delta}")
        last_delta = last_offset_delta
    if headers is None and timestamp_deltas is None and offset_deltas is None:
        pieces = _encode_plain_records(values, keys)
    else:
        pieces = _encode_records(values, keys, headers, timestamp_deltas, offset_deltas)
    attributes = _attributes(compression, timestamp_type, is_transactional, is_control)
    return _finish_batch(
        pieces,
        len(records),
        attributes=attributes,
        base_offset=base_offset,
        last_offset_delta=last_delta,
        base_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        producer=(producer_id, producer_epoch, base_sequence),
        partition_leader_epoch=partition_leader_epoch,
    )


def build_batch_from_values(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp_ms: int = NO_TIMESTAMP,
    timestamps: Sequence[int] | None = None,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_type: TimestampKind = TimestampKind.CREATE_TIME,
    is_transactional: bool = False,
) -> bytes:
    """Fast path of `build_batch`: values (and optional keys) without headers, offset deltas
    0..n-1, and `timestamp_ms` for all or, when given, `timestamps` (one per value; baseTimestamp
    is the first, as in `build_batch`). A producer's batch holds few distinct timestamps: records
    are encoded a run of equal timestamps at a time."""
    if not values:
        raise ValueError("a batch needs at least one record")
    if keys is not None and len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys given for {len(values)} values")
    attributes = _attributes(compression, timestamp_type, is_transactional, False)
    if timestamps is None:
        pieces = _encode_plain_records(values, keys)
        base_timestamp = max_timestamp = timestamp_ms
    else:
        if len(timestamps) != len(values):
            raise ValueError(f"{len(timestamps)} timestamps given for {len(values)} values")
        base_timestamp = timestamps[0]
        max_timestamp = max(timestamps)
        pieces = []
        start = 0
        for timestamp, run in groupby(timestamps):
            end = start + len(list(run))
            pieces += _encode_plain_records(values[start:end], None if keys is None else keys[start:end],
                                            start, timestamp - base_timestamp)
            start = end
    return _finish_batch(
        pieces,
        len(values),
        attributes=attributes,
        base_offset=base_offset,
        last_offset_delta=len(values) - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer=(producer_id, producer_epoch, base_sequence),
        partition_leader_epoch=partition_leader_epoch,
    )


def _attributes(compression: Compression, timestamp_type: TimestampKind, transactional: bool, control: bool) -> int:
    attributes = int(Compression(compression)) | (int(TimestampKind(timestamp_type)) << 3)
    if transactional:
        attributes |= _TRANSACTIONAL_MASK
    if control:
        attributes |= _CONTROL_MASK
    return attributes


def _split_records(
    records: Sequence[RecordInput], base_offset: int, keep_offsets: bool
) -> tuple[list, list, list | None, list[int] | None, list[int] | None]:
    """Columns of `records`: keys, values, headers (None if none has any), timestamps of the
    `Record` items (None if none) and offset deltas (None unless `keep_offsets`)."""
    keys, values, headers, timestamps, offset_deltas = [], [], [], [], []
    any_headers = False
    for item in records:
        if isinstance(item, Record):
            keys.append(item.key)
            values.append(item.value)
            headers.append(item.headers)
            timestamps.append(item.timestamp)
            offset_deltas.append(item.offset - base_offset)
        elif len(item) == 2:
            keys.append(item[0])
            values.append(item[1])
            headers.append(())
        else:
            keys.append(item[0])
            values.append(item[1])
            headers.append(item[2])
        any_headers = any_headers or bool(headers[-1])
    if keep_offsets:
        if len(offset_deltas) != len(records):
            raise ValueError("keep_offsets needs every item to be a Record (with its offset)")
        _check_offset_deltas(offset_deltas, base_offset)
    return (
        keys,
        values,
        headers if any_headers else None,
        timestamps or None,
        offset_deltas if keep_offsets else None,
    )


def _check_offset_deltas(offset_deltas: list[int], base_offset: int) -> None:
    previous = -1
    for delta in offset_deltas:
        if not previous < delta <= _INT32_MAX:
            raise ValueError(
                f"record offset {base_offset + delta} must exceed the previous one "
                f"({base_offset + previous}) and be within 2**31-1 of base_offset {base_offset}"
            )
        previous = delta


def _encode_plain_records(
    values: Sequence[bytes | None], keys: Sequence[bytes | None] | None, first_offset_delta: int = 0,
    timestamp_delta: int = 0,
) -> list[bytes]:
    """Record pieces for the common case: no headers, one timestampDelta, offsetDelta counting
    up from `first_offset_delta`.

    Per record: length, attributes 0 + timestampDelta, offsetDelta, key, value, header count 0.
    Lengths are computed, not measured, so nothing is encoded twice.
    """
    prefix = b"\x00" + encode_varint(timestamp_delta)  # attributes, timestampDelta
    count = len(values)
    if keys is None and first_offset_delta + count < _VARINT_TABLE_LIMIT and None not in values:
        lengths = list(map(len, values))
        if max(lengths) < _PLAIN_VALUE_LENGTH_MAX:
            return _encode_plain_values(values, lengths, first_offset_delta, prefix)
    varints = _VARINTS
    limit = _VARINT_TABLE_LIMIT
    pieces: list[bytes] = []
    append = pieces.append
    for index, value in enumerate(values, first_offset_delta):
        offset_piece = varints[index + 1] if index < limit else _encode_varint_slow(index)
        key = None if keys is None else keys[index - first_offset_delta]
        if key is None:
            key_piece = b"\x01"  # length -1: null
            key = b""
        else:
            length = len(key)
            key_piece = varints[length + 1] if length < limit else _encode_varint_slow(length)
        if value is None:
            value_piece = b"\x01"
            value = b""
        else:
            length = len(value)
            value_piece = varints[length + 1] if length < limit else _encode_varint_slow(length)
        body_size = len(prefix) + 1 + len(offset_piece) + len(key_piece) + len(key) + len(value_piece) + len(value)
        append(varints[body_size + 1] if body_size < limit else _encode_varint_slow(body_size))
        append(prefix + offset_piece + key_piece)
        append(key)
        append(value_piece)
        append(value)
        append(b"\x00")
    return pieces


# Values shorter than this, at offset deltas under the varint table's limit, keep every length
# in the table: the body adds at most 11 bytes of prefix, 3 of offsetDelta, 1 of null key, 2 of
# value length and 1 of header count.
_PLAIN_VALUE_LENGTH_MAX = _VARINT_TABLE_LIMIT - 32
# attributes 0, timestampDelta 0 and offsetDelta i, for the first records of a batch.
_UNTIMED_HEADS = tuple(b"\x00\x00" + _VARINTS[offset_delta + 1] for offset_delta in range(4096))


def _encode_plain_values(
    values: Sequence[bytes], lengths: list[int], first_offset_delta: int, prefix: bytes
) -> list[bytes]:
    """`_encode_plain_records` without keys or nulls, every varint from the table.

    Five pieces per record: length; prefix and offsetDelta (the head); null key and value length
    (the tail, one object when all values are as long); value; header count 0. Each column is
    built by a comprehension and laid out by slice assignment, not appended piece by piece.
    """
    varints = _VARINTS
    count = len(values)
    end = first_offset_delta + count
    if prefix == b"\x00\x00" and end <= len(_UNTIMED_HEADS):
        heads: Sequence[bytes] = _UNTIMED_HEADS[first_offset_delta:end]
    else:
        heads = [prefix + offset_piece for offset_piece in varints[first_offset_delta + 1:end + 1]]
    pieces = [b"\x00"] * (5 * count)  # every fifth piece stays a header count of 0
    if min(lengths) == max(lengths):
        tail = b"\x01" + varints[lengths[0] + 1]
        tails: Sequence[bytes] = [tail] * count
        pieces[0::5] = _uniform_record_lengths(first_offset_delta, end, len(prefix) + len(tail) + lengths[0] + 1)
    else:
        tails = [b"\x01" + varints[length + 1] for length in lengths]
        # The body: head, tail, value and the header count's byte; the table is indexed by value + 1.
        pieces[0::5] = [
            varints[len(head) + len(tail) + length + 2]
            for head, tail, length in zip(heads, tails, lengths, strict=True)
        ]
    pieces[1::5] = heads
    pieces[2::5] = tails
    pieces[3::5] = values
    return pieces


def _uniform_record_lengths(first_offset_delta: int, end: int, body_size_without_offset: int) -> list[bytes]:
    """The length varints of records at offset deltas [first_offset_delta, end) whose bodies differ
    only in their offsetDelta: a zigzag varint of 1 byte below 64, 2 below 8192, 3 below 2**20."""
    assert end <= _VARINT_TABLE_LIMIT, f"offset delta {end} beyond the varint table"
    lengths: list[bytes] = []
    start = first_offset_delta
    for offset_size, offset_limit in ((1, 64), (2, 8192), (3, _VARINT_TABLE_LIMIT)):
        stop = min(end, offset_limit)
        if start < stop:
            lengths += [_VARINTS[body_size_without_offset + offset_size + 1]] * (stop - start)
            start = stop
    return lengths


def _nullable_pieces(data: bytes | None) -> tuple[bytes, bytes]:
    if data is None:
        return b"\x01", b""
    return encode_varint(len(data)), data


def _encode_records(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None],
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None,
    timestamp_deltas: Sequence[int] | None,
    offset_deltas: Sequence[int] | None,
) -> list[bytes]:
    """Record pieces in general: any headers, timestamp deltas and offset deltas."""
    pieces: list[bytes] = []
    extend = pieces.extend
    for index, value in enumerate(values):
        timestamp_delta = 0 if timestamp_deltas is None else timestamp_deltas[index]
        offset_delta = index if offset_deltas is None else offset_deltas[index]
        body = [
            b"\x00",
            encode_varint(timestamp_delta),
            encode_varint(offset_delta),
            *_nullable_pieces(keys[index]),
            *_nullable_pieces(value),
        ]
        record_headers = () if headers is None else headers[index]
        body.append(encode_varint(len(record_headers)))
        for header_key, header_value in record_headers:
            encoded_key = header_key.encode("utf-8")
            body.append(encode_varint(len(encoded_key)))
            body.append(encoded_key)
            body.extend(_nullable_pieces(header_value))
        extend((encode_varint(sum(map(len, body))), *body))
    return pieces


def _finish_batch(
    pieces: list[bytes],
    count: int,
    *,
    attributes: int,
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer: tuple[int, int, int],
    partition_leader_epoch: int,
) -> bytes:
    """Join record pieces, compress them, and put the header and CRC in front."""
    payload = b"".join(pieces)
    codec = Compression(attributes & _COMPRESSION_MASK)
    if codec != Compression.NONE:
        payload = compress(codec, payload)
    batch_length = _BATCH_LENGTH_MIN + len(payload)
    if batch_length > _INT32_MAX:
        raise RecordTooLargeError(
            f"batch of {count} records would be {batch_length + LOG_OVERHEAD} bytes, over the "
            "format's 2 GiB limit; split the records into several batches"
        )
    try:
        tail = _HEADER_TAIL.pack(attributes, last_offset_delta, base_timestamp, max_timestamp, *producer, count)
        head = _HEADER_HEAD.pack(
            base_offset, batch_length, partition_leader_epoch, MAGIC, crc32c(payload, crc32c(tail))
        )
    except struct.error as error:
        raise ValueError(
            f"a batch header field is out of range ({error}): base_offset={base_offset} "
            f"last_offset_delta={last_offset_delta} base_timestamp={base_timestamp} "
            f"max_timestamp={max_timestamp} producer={producer} "
            f"partition_leader_epoch={partition_leader_epoch}"
        ) from None
    return b"".join((head, tail, payload))
