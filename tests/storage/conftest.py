"""Shared helpers for the storage tests: open a log, append, build batches of an exact size, and
take a snapshot of everything on disk and in memory so a test can assert "the log is unchanged"."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from storage.config import LogConfig
from storage.log import Log, LogAppendInfo
from storage.log_loader import LogLoader
from storage.log_segment import LogSegment
from storage.records import Record, build_batch, decode_records, iter_headers

NOW_MS = 1_000_000

OpenLog = Callable[..., Log]


def open_log(directory: Path, properties: Mapping[str, Any] | None = None, now_ms: int = NOW_MS, **load: Any) -> Log:
    return LogLoader(directory, LogConfig.from_properties(properties or {}), now_ms).load(**load)


@pytest.fixture
def make_log(tmp_path: Path) -> OpenLog:
    """`make_log({"segment.bytes": 500})` opens a fresh log at tmp_path/t-0."""
    logs: list[Log] = []

    def make(properties: Mapping[str, Any] | None = None, now_ms: int = NOW_MS, name: str = "t-0", **load: Any) -> Log:
        log = open_log(tmp_path / name, properties, now_ms, **load)
        logs.append(log)
        return log

    return make


def append(log: Log, values: Sequence[bytes], timestamps: Sequence[int] | None = None, *, epoch: int = 0,
           now_ms: int = NOW_MS, key: bytes | None = b"k") -> LogAppendInfo:
    """One leader batch with one record per value."""
    stamps = list(timestamps) if timestamps is not None else [now_ms] * len(values)
    return log.append_as_leader(build_batch([(key, value) for value in values], timestamps=stamps), epoch, now_ms)


def sized_batch(count: int, size: int, timestamps: Sequence[int], base_offset: int = 0, epoch: int = -1) -> bytes:
    """A batch of `count` records that is exactly `size` bytes (padding goes in the first value)."""
    def build(padding: int) -> bytes:
        values = [b"x" * padding] + [b""] * (count - 1)
        return build_batch([(None, value) for value in values], timestamps=list(timestamps), base_offset=base_offset,
                           partition_leader_epoch=epoch)

    padding = 0
    for _ in range(8):
        batch = build(padding)
        if len(batch) == size:
            return batch
        padding += size - len(batch)
        assert padding >= 0, f"a batch of {count} records cannot be as small as {size} bytes"
    raise AssertionError(f"no padding gives a {size}-byte batch of {count} records")


def records_of(data: bytes) -> list[Record]:
    return [record for position, _ in iter_headers(data) for record in decode_records(data, position)]


def index_entries(segment: LogSegment) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    return (
        [segment.offset_index.entry(slot) for slot in range(segment.offset_index.entries)],
        [segment.time_index.entry(slot) for slot in range(segment.time_index.entries)],
    )


@dataclass(frozen=True)
class Snapshot:
    offsets: tuple[int, int, int, int]  # log start, HW, LEO, recovery point
    files: dict[str, int]  # every file in the log directory -> its size
    segments: list[tuple[int, int, int]]  # base offset, size, next offset
    indexes: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]
    epochs: list[tuple[int, int]]
    contents: bytes


def snapshot(log: Log) -> Snapshot:
    return Snapshot(
        offsets=(log.log_start_offset, log.high_watermark, log.log_end_offset, log.recovery_point),
        files={path.name: os.path.getsize(path) for path in sorted(log.directory.iterdir())},
        segments=[(s.base_offset, s.size, s.next_offset) for s in log.segments],
        indexes=[index_entries(s) for s in log.segments],
        epochs=[(entry.epoch, entry.start_offset) for entry in log.leader_epoch_cache.entries()],
        contents=b"".join(s.read_bytes(0, s.size) for s in log.segments),
    )
