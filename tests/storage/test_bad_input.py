"""Bad produce and replication input: the right StorageError with Kafka's error name, and the log
exactly as it was — same offsets, same bytes and file sizes on disk, same index entries.

Method: a log with several segments and dense index entries; each bad request (damaged CRC or
magic, truncated, wrong record count, too large, empty, one bad batch among good ones, follower
offsets going back) is applied, the exception checked, and a full snapshot compared with the one
taken before. A good append afterwards must still land at the old log end offset. Also: a write
that fails part-way through a request (an injected ENOSPC, before or after a roll) appends nothing:
the epoch entries are exactly as before and the leader-epoch-checkpoint holds a prefix of them at
least as long as before (a roll writes the deferred ones), the undo fsyncs what a roll had
fsynced, and an undo that fails itself reports the write's error as its cause.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from storage import log_segment
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCheckpointFile
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    RecordTooLargeError,
    StorageError,
)
from storage.log import Log, LogAppendInfo
from storage.log_segment import RollReason
from storage.records import Compression, build_batch, decode_records
from tests.storage.conftest import NOW_MS, OpenLog, open_log, records_of, snapshot

PROPERTIES = {"segment.bytes": 600, "index.interval.bytes": 0, "max.message.bytes": 400,
              "max.decompressed.batch.bytes": 4096}


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


def decompression_bomb() -> bytes:
    """Small on the wire (zeros compress well), larger than max.decompressed.batch.bytes unpacked."""
    batch = build_batch([(None, bytes(2000))] * 3, timestamps=[NOW_MS] * 3, compression=Compression.ZSTD)
    assert len(batch) <= PROPERTIES["max.message.bytes"]
    return batch


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
    ("decompression bomb", decompression_bomb, InvalidRecordError, "INVALID_RECORD"),
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


# --- a write that fails part-way through a request ---------------------------------------------
# Method: make the Nth os.pwritev of storage.log_segment raise ENOSPC (the earlier batches of the
# request are then on disk and in the indexes), check the append raises it, compare a full
# snapshot and each segment's append state with those taken before, then append again without
# the fault: the same request lands at the old log end offset.


def fail_write(monkeypatch: pytest.MonkeyPatch, failing_call: int) -> list[int]:
    """Make the `failing_call`-th pwritev raise OSError(ENOSPC); returns the calls made so far."""
    real_pwritev = log_segment.os.pwritev
    calls: list[int] = []

    def pwritev(fd: int, buffers: Sequence[bytes | memoryview], position: int) -> int:
        calls.append(position)
        if len(calls) == failing_call:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return real_pwritev(fd, buffers, position)

    monkeypatch.setattr(log_segment.os, "pwritev", pwritev)
    return calls


def append_state(log: Log) -> list[tuple[object, ...]]:
    """What each segment keeps in memory to append and roll: not on disk, so not in the snapshot."""
    return [
        (s.base_offset, s.bytes_since_last_index_entry, s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far,
         s.rolling_based_timestamp, s.created_ms, s.offset_index.max_entries, s.time_index.max_entries)
        for s in log.segments
    ]


def checkpoint_entries(log: Log) -> list[EpochEntry]:
    """The leader-epoch-checkpoint file's entries, as a reload would read them."""
    return LeaderEpochCheckpointFile(log.directory / LEADER_EPOCH_CHECKPOINT).read()


def assert_failed_write_appends_nothing(log: Log, failing_call: int, append_request: Callable[[], LogAppendInfo],
                                        first_offset: int | None = None) -> LogAppendInfo:
    """Fail the request's `failing_call`-th write; the log must be as before. Then the request again,
    unfailed: it must land at `first_offset` (default: the old log end offset), every record
    readable. Returns what the second attempt did."""
    first = log.log_end_offset if first_offset is None else first_offset
    before, before_state, epochs_on_disk = snapshot(log), append_state(log), checkpoint_entries(log)
    epochs = log.leader_epoch_cache.entries()
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = fail_write(monkeypatch, failing_call)
        with pytest.raises(KafkaStorageError, match=r"injected.*nothing was appended") as raised:
            append_request()
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == errno.ENOSPC
    assert len(calls) == failing_call, "the request stopped at the failed write"
    after = snapshot(log)
    # The file is checked below: a roll within the request writes the entries whose write was
    # deferred (leader_epoch_cache.py), then the undo writes the entries before the request.
    before.files.pop(LEADER_EPOCH_CHECKPOINT, None)
    after.files.pop(LEADER_EPOCH_CHECKPOINT, None)
    assert after == before
    assert append_state(log) == before_state
    assert log.leader_epoch_cache.entries() == epochs
    on_disk = checkpoint_entries(log)
    assert len(epochs_on_disk) <= len(on_disk) and on_disk == epochs[:len(on_disk)]
    info = append_request()
    assert info.first_offset == first
    offsets = [record.offset for segment, position, header in log.iter_batches(first)
               for record in decode_records(segment.read_bytes(position, header.size_in_bytes))]
    assert offsets == list(range(first, info.last_offset + 1))
    return info


@pytest.mark.parametrize("epoch", [1, 2], ids=["same epoch", "new epoch"])
@pytest.mark.parametrize("failing_call", [2, 3])
def test_failed_write_of_a_later_batch_appends_nothing(log: Log, epoch: int, failing_call: int) -> None:
    # Epoch 2 is new: the request's first batch adds a leader-epoch entry, which must go too.
    request = good(2, b"a") + good(2, b"b") + good(2, b"c")
    assert log.segments.active_segment.size + len(request) <= PROPERTIES["segment.bytes"], "no roll wanted here"
    info = assert_failed_write_appends_nothing(log, failing_call, lambda: log.append_as_leader(request, epoch, NOW_MS))
    assert info.rolled is None
    expected = EpochEntry(1, 0) if epoch == 1 else EpochEntry(2, info.first_offset)
    assert log.leader_epoch_cache.latest_entry() == expected


@pytest.mark.parametrize("failing_call", [2, 3])
def test_failed_write_after_a_roll_within_the_request_appends_nothing(make_log: OpenLog, failing_call: int) -> None:
    # The default index.interval.bytes leaves the segment without index entries, so the roll's
    # final time-index entry (the largest timestamp, of an old batch) is new and must go too;
    # with failing call 3 the rolled-to segment holds the request's second batch.
    log = make_log({"segment.bytes": 400})
    for step in range(2):
        log.append_as_leader(good(2, b"old%d" % step), 1, NOW_MS)
    active = log.segments.active_segment
    first, second, third = good(1, b"a" * 40), good(1, b"b" * 150), good(1, b"c")
    assert active.size + len(first) <= 400 < active.size + len(first) + len(second), "the second batch rolls"
    request = first + second + third
    info = assert_failed_write_appends_nothing(log, failing_call, lambda: log.append_as_leader(request, 2, NOW_MS))
    assert info.rolled is RollReason.SEGMENT_BYTES
    assert [segment.base_offset for segment in log.segments] == [0, 5]


def test_failed_follower_write_after_rolling_away_an_empty_segment_restores_it(make_log: OpenLog) -> None:
    # A follower batch past the relative-offset range of an empty active segment replaces that
    # segment by one at the batch's base offset before the write.
    log = make_log()
    far = 3 * 2**31
    info = assert_failed_write_appends_nothing(
        log, 1, lambda: log.append_as_follower(good(2, base_offset=far, epoch=4), NOW_MS), far)
    assert info.rolled is RollReason.OFFSET_OVERFLOW
    assert [segment.base_offset for segment in log.segments] == [far]


def test_failed_write_keeps_an_epoch_entry_starting_at_the_log_end(log: Log) -> None:
    # delete_records(-1) with HW = LEO moves the epoch entry to the log end: (1, LEO). A request
    # in epoch 1 then assigns nothing; its failed write must leave that entry, in memory and in
    # the checkpoint file (it is not the request's, though it starts at the request's offset).
    leo = log.log_end_offset
    log.delete_records(-1)
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, leo)]
    assert checkpoint_entries(log) == [EpochEntry(1, leo)]
    assert_failed_write_appends_nothing(log, 2, lambda: log.append_as_leader(good(2, b"a") + good(2, b"b"), 1, NOW_MS))
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, leo)]


def test_failed_follower_write_restores_the_epoch_entries_a_lower_epoch_removed(log: Log) -> None:
    # A follower batch whose epoch is below the latest cached one makes assign remove the later
    # entry (a removal is written at once, leader_epoch_cache.py); the failed write of the
    # request's next batch must bring that entry back, in memory and in the checkpoint file.
    leo = log.log_end_offset
    log.append_as_follower(good(2, base_offset=leo, epoch=3), NOW_MS)
    before = [EpochEntry(1, 0), EpochEntry(3, leo)]
    assert log.leader_epoch_cache.entries() == before
    request = good(2, base_offset=leo + 2, epoch=2) + good(2, base_offset=leo + 4, epoch=2)
    with pytest.MonkeyPatch.context() as monkeypatch:
        fail_write(monkeypatch, 2)
        with pytest.raises(KafkaStorageError, match="injected"):
            log.append_as_follower(request, NOW_MS)
    assert log.leader_epoch_cache.entries() == checkpoint_entries(log) == before
    assert_failed_write_appends_nothing(log, 2, lambda: log.append_as_follower(request, NOW_MS))
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(2, leo + 2)]


def rolling_request(make_log: OpenLog) -> tuple[Log, bytes]:
    """A log whose active segment holds two batches, and a request whose second batch rolls."""
    log = make_log({"segment.bytes": 400})
    for step in range(2):
        log.append_as_leader(good(2, b"old%d" % step), 1, NOW_MS)
    active = log.segments.active_segment
    first, second = good(1, b"a" * 40), good(1, b"b" * 150)
    assert active.size + len(first) <= 400 < active.size + len(first) + len(second), "the second batch rolls"
    return log, first + second


def test_failed_undo_step_is_chained_to_the_failed_write_and_leaves_the_offsets_as_before(
        make_log: OpenLog) -> None:
    # The request (a new epoch) rolls, so the recovery point passes its first batch; then the
    # rolled-to segment's write fails, and so does the undo's leader-epoch-checkpoint write. The
    # undo's error must name the write's as its cause, and the offsets be as before the request
    # (the recovery point not above the log end). The epoch cache keeps what its file holds (the
    # new epoch starting at the log end: what the next append in it would assign).
    log, request = rolling_request(make_log)
    leo, recovery_point = log.log_end_offset, log.recovery_point
    real_replace = os.replace
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = fail_write(monkeypatch, 2)

        def replace(source: str, target: str) -> None:
            if len(calls) == 2:
                raise OSError(errno.EIO, "undo failed (injected)")
            real_replace(source, target)

        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(OSError, match="undo failed") as raised:
            log.append_as_leader(request, 2, NOW_MS)
    assert raised.value.errno == errno.EIO
    assert isinstance(raised.value.__cause__, OSError)
    assert raised.value.__cause__.errno == errno.ENOSPC
    assert (log.log_end_offset, log.recovery_point) == (leo, recovery_point)
    assert [segment.base_offset for segment in log.segments] == [0]
    assert log.leader_epoch_cache.entries() == checkpoint_entries(log) == [EpochEntry(1, 0), EpochEntry(2, leo)]


def test_failed_write_after_a_roll_fsyncs_the_cut_segment_and_the_directory(make_log: OpenLog) -> None:
    # The roll fsynced the first segment with the request's first batch: after the undo cuts it
    # and deletes the rolled-to segment, the segment file (at its old size) and the directory
    # (without the rolled-to files) must be fsynced, or a power loss could bring the batch back.
    # The request stays in epoch 1, so no leader-epoch-checkpoint write fsyncs the directory once
    # the entries whose write was deferred are written (a roll would write them first).
    log, request = rolling_request(make_log)
    log.leader_epoch_cache.write_pending()
    size, files = log.segments.active_segment.size, sorted(os.listdir(log.directory))
    log_path = str(log.segments.active_segment.log_path)
    synced: list[tuple[str, object]] = []
    real_fsync = os.fsync
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = fail_write(monkeypatch, 2)

        def fsync(fd: int) -> None:
            if len(calls) == 2:  # after the failed write: the undo's fsyncs
                path = os.readlink(f"/proc/self/fd/{fd}")
                synced.append((path, sorted(os.listdir(path)) if os.path.isdir(path) else os.fstat(fd).st_size))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(KafkaStorageError, match="injected"):
            log.append_as_leader(request, 1, NOW_MS)
    assert (log_path, size) in synced
    assert (str(log.directory), files) in synced


batch_strategy = st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 60)), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    properties=st.fixed_dictionaries({
        "segment.bytes": st.sampled_from([300, 700, 100_000]),
        "index.interval.bytes": st.sampled_from([0, 100, 4096]),
        "segment.index.bytes": st.sampled_from([24, 120, 4096]),
    }),
    earlier=st.lists(batch_strategy, max_size=8),
    request=st.lists(batch_strategy, min_size=1, max_size=4),
    epoch=st.sampled_from([0, 1, 2]),
    follower=st.booleans(),
    data=st.data(),
)
def test_any_failed_write_leaves_the_log_as_before(tmp_path: Path, properties: dict[str, int],
                                                  earlier: list[list[tuple[int, int]]],
                                                  request: list[list[tuple[int, int]]], epoch: int, follower: bool,
                                                  data: st.DataObject) -> None:
    # Any segment and index sizes (rolls by bytes and by full indexes), timestamps that do and do
    # not raise a segment's largest one, the same, a new or a lower epoch (whose assign removes
    # the earlier entry), leader or follower: whichever write of the request fails, the log is as
    # before and the request then appends as it would have.
    directory = tmp_path / "t-0"
    shutil.rmtree(directory, ignore_errors=True)
    log = open_log(directory, properties)
    for batch in earlier:
        log.append_as_leader(build_batch([(b"k", b"v" * size) for _, size in batch],
                                         timestamps=[ts for ts, _ in batch]), 1, NOW_MS)
    records, base_offset = b"", log.log_end_offset
    for batch in request:
        records += build_batch([(b"k", b"r" * size) for _, size in batch], timestamps=[ts for ts, _ in batch],
                               base_offset=base_offset, partition_leader_epoch=epoch)
        base_offset += len(batch)
    failing_call = data.draw(st.integers(1, len(request)), label="failing_call")

    def append_request() -> LogAppendInfo:
        return log.append_as_follower(records, NOW_MS) if follower else log.append_as_leader(records, epoch, NOW_MS)

    info = assert_failed_write_appends_nothing(log, failing_call, append_request)
    event(f"rolled: {info.rolled}")
    log.close()


def test_failed_leader_epoch_checkpoint_write_appends_nothing(log: Log, monkeypatch: pytest.MonkeyPatch) -> None:
    # A follower batch of an epoch below the latest entry (a new leader's, no batch yet) removes
    # that entry, which is written at once (only a new latest entry's write waits); if the write
    # fails (its rename here), the batch is taken back and the entry stays.
    leo = log.log_end_offset
    log.assign_epoch(3, leo)
    before = snapshot(log)
    real_replace = os.replace

    def replace_once(source: str, target: str) -> None:
        monkeypatch.setattr(os, "replace", real_replace)
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "replace", replace_once)
    with pytest.raises(KafkaStorageError, match="injected"):
        log.append_as_follower(good(2, base_offset=leo, epoch=2), NOW_MS)
    assert os.replace is real_replace, "the checkpoint write was attempted"
    assert snapshot(log) == before
    assert log.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(3, leo)]
    assert checkpoint_entries(log) == [EpochEntry(1, 0)]
    info = log.append_as_follower(good(2, base_offset=leo, epoch=2), NOW_MS)
    assert info.first_offset == leo
    assert log.leader_epoch_cache.entries() == checkpoint_entries(log) == [EpochEntry(1, 0), EpochEntry(2, leo)]
