"""Bad produce and replication input: the right StorageError with Kafka's error name, and the log
exactly as it was — same offsets, same bytes and file sizes on disk, same index entries.

Method: a log with several segments and dense index entries; each bad request (damaged CRC or
magic, truncated, wrong record count, too large, empty, one bad batch among good ones, follower
offsets going back) is applied, the exception checked, and a full snapshot compared with the one
taken before. A good append afterwards must still land at the old log end offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from crc32c import crc32c

from storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, StorageError
from storage.log import Log
from storage.records import build_batch
from tests.storage.conftest import NOW_MS, OpenLog, records_of, snapshot

PROPERTIES = {"segment.bytes": 600, "index.interval.bytes": 0, "max.message.bytes": 400}


def good(count: int = 3, value: bytes = b"value", base_offset: int = 0, epoch: int = -1) -> bytes:
    return build_batch([(b"key", value)] * count, timestamps=[NOW_MS + i for i in range(count)],
                       base_offset=base_offset, partition_leader_epoch=epoch)


def with_crc(batch: bytearray) -> bytes:
    """Recompute the CRC-32C over bytes 21..end, so only the intended damage remains."""
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def damaged_crc() -> bytes:
    batch = bytearray(good())
    batch[-1] ^= 0x01
    return bytes(batch)


def wrong_magic() -> bytes:
    batch = bytearray(good())
    batch[16] = 1
    return with_crc(batch)


def truncated() -> bytes:
    return good()[:-3]


def header_only_part() -> bytes:
    return good()[:40]


def count_too_high() -> bytes:
    batch = bytearray(good(3))
    struct.pack_into(">i", batch, 57, 4)
    struct.pack_into(">i", batch, 23, 3)  # lastOffsetDelta consistent with the claimed count
    return with_crc(batch)


def count_too_low() -> bytes:
    batch = bytearray(good(3))
    struct.pack_into(">i", batch, 57, 2)
    struct.pack_into(">i", batch, 23, 1)
    return with_crc(batch)


def last_offset_delta_wrong() -> bytes:
    batch = bytearray(good(3))
    struct.pack_into(">i", batch, 23, 5)
    return with_crc(batch)


def over_max_message_bytes() -> bytes:
    batch = good(1, b"x" * 400)
    assert len(batch) > PROPERTIES["max.message.bytes"]
    return batch


BAD_BATCHES: list[tuple[str, Callable[[], bytes], type[StorageError], str]] = [
    ("crc", damaged_crc, CorruptRecordError, "CORRUPT_MESSAGE"),
    ("magic", wrong_magic, CorruptRecordError, "CORRUPT_MESSAGE"),
    ("truncated", truncated, CorruptRecordError, "CORRUPT_MESSAGE"),
    ("partial header", header_only_part, CorruptRecordError, "CORRUPT_MESSAGE"),
    ("count too high", count_too_high, InvalidRecordError, "INVALID_RECORD"),
    ("count too low", count_too_low, InvalidRecordError, "INVALID_RECORD"),
    ("last offset delta", last_offset_delta_wrong, InvalidRecordError, "INVALID_RECORD"),
    ("max.message.bytes", over_max_message_bytes, RecordTooLargeError, "MESSAGE_TOO_LARGE"),
    ("empty", lambda: b"", InvalidRecordError, "INVALID_RECORD"),
]
IDS = [name for name, *_ in BAD_BATCHES]


@pytest.fixture
def log(make_log: OpenLog) -> Log:
    """Three segments with an offset and time index entry for every batch after a segment's first."""
    log = make_log(PROPERTIES)
    for step in range(14):
        log.append_as_leader(good(3, b"v%d" % step), 1, NOW_MS)
    log.update_high_watermark(log.log_end_offset)
    assert len(log.segments) >= 3
    assert all(segment.offset_index.entries > 0 for segment in log.segments)
    return log


def assert_still_appends(log: Log) -> None:
    leo = log.log_end_offset
    info = log.append_as_leader(good(2, b"after"), 1, NOW_MS)
    assert info.first_offset == leo
    assert [r.offset for r in records_of(log.read(leo, 10_000).records)] == [leo, leo + 1]


@pytest.mark.parametrize(("name", "make", "error", "error_name"), BAD_BATCHES, ids=IDS)
def test_bad_batch_is_rejected_and_the_log_is_unchanged(log: Log, name: str, make: Callable[[], bytes],
                                                        error: type[StorageError], error_name: str) -> None:
    before = snapshot(log)
    with pytest.raises(error) as raised:
        log.append_as_leader(make(), 1, NOW_MS)
    assert type(raised.value) is error
    assert raised.value.error_name == error_name
    assert snapshot(log) == before
    assert_still_appends(log)


@pytest.mark.parametrize(("name", "make", "error", "error_name"), BAD_BATCHES[:-1], ids=IDS[:-1])  # not "empty"
def test_one_bad_batch_in_a_request_appends_nothing(log: Log, name: str, make: Callable[[], bytes],
                                                    error: type[StorageError], error_name: str) -> None:
    # The good batches before it would roll the active segment if they were appended.
    request = good(3, b"a" * 60) + good(3, b"b" * 60) + make() + good(1)
    before = snapshot(log)
    with pytest.raises(error) as raised:
        log.append_as_leader(request, 1, NOW_MS)
    assert raised.value.error_name == error_name
    assert snapshot(log) == before
    assert_still_appends(log)


def test_batch_larger_than_segment_bytes_is_record_too_large(make_log: OpenLog) -> None:
    log = make_log({"segment.bytes": 200})
    log.append_as_leader(good(1), 0, NOW_MS)
    batch = good(1, b"x" * 200)
    assert len(batch) > 200
    before = snapshot(log)
    with pytest.raises(RecordTooLargeError) as raised:
        log.append_as_leader(batch, 0, NOW_MS)
    assert raised.value.error_name == "MESSAGE_TOO_LARGE"
    assert snapshot(log) == before


def test_bad_follower_batch_is_rejected_and_the_log_is_unchanged(log: Log) -> None:
    leo = log.log_end_offset
    before = snapshot(log)
    with pytest.raises(CorruptRecordError):
        batch = bytearray(good(base_offset=leo, epoch=1))
        batch[-1] ^= 0x01
        log.append_as_follower(bytes(batch), NOW_MS)
    assert snapshot(log) == before


@pytest.mark.parametrize("base_offset", [0, 5, -1, -3])
def test_follower_batch_below_the_log_end_is_invalid(log: Log, base_offset: int) -> None:
    leo = log.log_end_offset
    before = snapshot(log)
    start = base_offset if base_offset >= 0 else leo + base_offset  # -1: overlaps the last record
    with pytest.raises(InvalidRecordError) as raised:
        log.append_as_follower(good(3, base_offset=start, epoch=1), NOW_MS)
    assert raised.value.error_name == "INVALID_RECORD"
    assert snapshot(log) == before


def test_follower_request_going_back_inside_itself_appends_nothing(log: Log) -> None:
    leo = log.log_end_offset
    before = snapshot(log)
    request = good(3, base_offset=leo, epoch=1) + good(3, base_offset=leo + 2, epoch=1)
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(request, NOW_MS)
    assert snapshot(log) == before
    info = log.append_as_follower(good(3, base_offset=leo, epoch=1), NOW_MS)
    assert (info.first_offset, info.last_offset) == (leo, leo + 2)
