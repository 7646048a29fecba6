"""Checkpoint files: Kafka's small text files that remember offsets across restarts.

Every checkpoint has the same shape (Kafka's `CheckpointFile`), UTF-8, one item per line,
each line ended by `\\n`:

    0               <- version line
    2               <- count line: how many entry lines follow
    orders 0 1234   <- entry lines, fields separated by one space
    orders 1 98

Log-dir checkpoints (`OffsetCheckpointFile`, version 0) hold `topic partition offset` lines:
`recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
`log-start-offset-checkpoint` and `cleaner-offset-checkpoint` at each log dir root. The
per-partition `leader-epoch-checkpoint` (`LeaderEpochCheckpointFile`, version 0) holds
`epoch startOffset` lines.

Files are replaced atomically (`write_atomically`): the new text goes to `<file>.tmp`, which is
flushed and fsynced, renamed over the file, and the directory is fsynced, so after a crash the
file holds either the old or the new content, never a mix. A leftover `.tmp` is ignored.

Reading is stricter than Kafka where our writer never produces a shape, because such a file
was damaged or hand-edited: a version line without a count line, a last line without its
newline, a repeated topic-partition, and fields separated by anything but one space are all
`CorruptCheckpointError`, as are a wrong version, a count that disagrees with the lines and a
field that does not parse. Like Kafka, a missing or empty file reads as no entries.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from storage.errors import CorruptCheckpointError
from wire.topic_partition import TopicPartition

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

OFFSET_CHECKPOINT_VERSION = 0
LEADER_EPOCH_CHECKPOINT_VERSION = 0
TEMPORARY_SUFFIX = ".tmp"

# Python's int() also accepts "+5", " 5", "1_000" and non-ASCII digits; Kafka's parsers
# (Integer.parseInt, Long.parseLong) accept an optional '-' and ASCII digits only.
_INTEGER_PATTERN = re.compile(r"-?[0-9]+")
# Kafka's legal topic names (Topic.validate): what a checkpoint line can carry unambiguously.
_TOPIC_PATTERN = re.compile(r"[a-zA-Z0-9._-]{1,249}")

T = TypeVar("T")


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """A leader epoch and the offset of the first record appended in it."""

    epoch: int
    start_offset: int


def write_atomically(path: Path, text: str | bytes) -> None:
    """Replace `path` with `text` (UTF-8 if a str) so that a crash leaves either the old or the new file.

    Write `<path>.tmp`, fsync it, rename it over `path`, then fsync the directory so that the
    rename itself survives a crash (Kafka's `Utils.atomicMoveWithFallback`). If writing or
    renaming fails, the `.tmp` is removed (best effort) and `path` is as it was.
    """
    temporary_path = path.with_name(path.name + TEMPORARY_SUFFIX)
    try:
        with open(temporary_path, "wb") as file:
            file.write(text.encode("utf-8") if isinstance(text, str) else text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary_path.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def format_checkpoint(version: int, lines: Sequence[str]) -> str:
    """The text of a checkpoint: version line, count line, then one line per entry."""
    for line in lines:
        assert "\n" not in line, f"checkpoint line {line!r} contains a newline"
    return "".join(f"{item}\n" for item in (str(version), str(len(lines)), *lines))


def read_checkpoint(
    path: Path, version: int, field_count: int, parse: Callable[[list[str]], T]
) -> list[T]:
    """Parse the checkpoint at `path` into entries, in file order; missing or empty file -> [].

    Each entry line must have `field_count` non-empty fields separated by single spaces;
    `parse` turns them into an entry or raises ValueError. Malformed input raises
    `CorruptCheckpointError` naming the file and the line.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if not data:
        return []
    lines = _split_lines(path, data)
    if len(lines) < 2:
        raise _corrupt(path, len(lines) + 1, "missing the count line")
    read_version = _parse_line_integer(path, 1, lines[0])
    if read_version != version:
        raise _corrupt(path, 1, f"version {read_version} is not the supported version {version}")
    count = _parse_line_integer(path, 2, lines[1])
    if count < 0:
        raise _corrupt(path, 2, f"negative entry count {count}")
    entry_lines = lines[2:]
    if len(entry_lines) != count:
        raise _corrupt(
            path, 2, f"count line says {count} entries but {len(entry_lines)} lines follow"
        )
    entries = []
    for line_number, line in enumerate(entry_lines, start=3):
        fields = line.split(" ")
        if len(fields) != field_count or not all(fields):
            raise _corrupt(
                path, line_number, f"expected {field_count} fields separated by one space: {line!r}"
            )
        try:
            entries.append(parse(fields))
        except ValueError as error:
            raise _corrupt(path, line_number, f"{error}: {line!r}") from error
    return entries


def parse_integer(text: str) -> int:
    """Parse an integer the way Kafka's Long.parseLong does: optional '-', ASCII digits."""
    if not _INTEGER_PATTERN.fullmatch(text):
        raise ValueError(f"{text!r} is not an integer")
    return int(text)


def _split_lines(path: Path, data: bytes) -> list[str]:
    if not data.endswith(b"\n"):
        raise _corrupt(path, data.count(b"\n") + 1, "the last line has no newline")
    lines = []
    for line_number, raw_line in enumerate(data[:-1].split(b"\n"), start=1):
        try:
            lines.append(raw_line.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise _corrupt(path, line_number, "not valid UTF-8") from error
    return lines


def _parse_line_integer(path: Path, line_number: int, text: str) -> int:
    try:
        return parse_integer(text)
    except ValueError as error:
        raise _corrupt(path, line_number, str(error)) from error


def _corrupt(path: Path, line_number: int, reason: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"checkpoint file {path} line {line_number}: {reason}. The file is damaged or was "
        "edited: restore it from a good copy, or move it aside so the node starts without it"
    )


class OffsetCheckpointFile:
    """A log dir's `topic partition offset` checkpoint (version 0), e.g. the recovery points.

    One of `recovery-point-offset-checkpoint`, `replication-offset-checkpoint` (high
    watermarks), `log-start-offset-checkpoint`, `cleaner-offset-checkpoint`. Lines are written
    sorted by (topic, partition) so that the same offsets always give the same bytes.
    Offsets equal to those this object last wrote are not written again: the periodic checkpoints
    of an idle broker (every replica.high.watermark.checkpoint.interval.ms) would otherwise format,
    write and fsync thousands of unchanged lines each time.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written: dict[TopicPartition, int] | None = None

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Replace the file's content with `offsets`, atomically (unless it holds them already)."""
        if self._written is not None and self._written == offsets:
            return
        lines = []
        for topic_partition in sorted(offsets):
            _check_topic_partition(topic_partition)
            lines.append(
                f"{topic_partition.topic} {topic_partition.partition} {offsets[topic_partition]}"
            )
        write_atomically(self.path, format_checkpoint(OFFSET_CHECKPOINT_VERSION, lines))
        self._written = dict(offsets)

    def read(self) -> dict[TopicPartition, int]:
        """The offsets in the file; a missing file reads as {}."""
        entries = read_checkpoint(self.path, OFFSET_CHECKPOINT_VERSION, 3, _parse_offset_line)
        offsets: dict[TopicPartition, int] = {}
        for line_number, (topic_partition, offset) in enumerate(entries, start=3):
            if topic_partition in offsets:
                raise _corrupt(self.path, line_number, f"{topic_partition} appears twice")
            offsets[topic_partition] = offset
        return offsets


def _check_topic_partition(topic_partition: TopicPartition) -> None:
    if not _TOPIC_PATTERN.fullmatch(topic_partition.topic):
        raise ValueError(
            f"topic {topic_partition.topic!r} is not a legal Kafka topic name "
            "(1 to 249 characters of [a-zA-Z0-9._-])"
        )
    if topic_partition.partition < 0:
        raise ValueError(f"partition {topic_partition} has a negative partition number")


def _parse_offset_line(fields: list[str]) -> tuple[TopicPartition, int]:
    topic, partition_text, offset_text = fields
    partition = parse_integer(partition_text)
    if partition < 0:
        raise ValueError(f"negative partition {partition}")
    return TopicPartition(topic, partition), parse_integer(offset_text)


class LeaderEpochCheckpointFile:
    """A partition's `leader-epoch-checkpoint` (version 0): `epoch startOffset` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: Sequence[EpochEntry]) -> None:
        """Replace the file's content with `entries`, in the given order, atomically."""
        lines = [f"{entry.epoch} {entry.start_offset}" for entry in entries]
        write_atomically(self.path, format_checkpoint(LEADER_EPOCH_CHECKPOINT_VERSION, lines))

    def read(self) -> list[EpochEntry]:
        """The entries in file order (not checked for monotonicity); missing file -> []."""
        return read_checkpoint(self.path, LEADER_EPOCH_CHECKPOINT_VERSION, 2, _parse_epoch_line)


def _parse_epoch_line(fields: list[str]) -> EpochEntry:
    epoch_text, start_offset_text = fields
    entry = EpochEntry(parse_integer(epoch_text), parse_integer(start_offset_text))
    if entry.epoch < 0 or entry.start_offset < 0:
        raise ValueError("a leader epoch and its start offset are never negative")
    return entry
