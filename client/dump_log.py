"""`tributary dump-log`: print and check segment files, like Kafka's kafka-dump-log.sh.

Files are recognised by suffix: `.log` (record batches), `.index` (offset index) and
`.timeindex` (time index), optionally followed by `.deleted`, `.cleaned` or `.swap` as
retention, the cleaner and recovery leave them. Segment files are named by their base offset,
20 digits zero-padded (DESIGN §3).

- `.log`: "Dumping FILE", "Log starting offset: N", then one line per batch in Kafka's shape
  (`baseOffset: 0 lastOffset: 9 count: 10 ... isvalid: true`). `--deep-iteration` adds a
  `| offset: ...` line per record with its metadata; `--print-data-log` adds key and payload.
  The first batch that fails what `LogSegment.recover` checks (header, size, CRC, offsets
  above the previous batch's) is printed with `isvalid: false` and the error, and the scan
  stops with "Found N invalid bytes at position P": the bytes recovery would cut. A torn last
  batch is reported the same way.
- `.index` / `.timeindex`: one line per entry (`offset: 23 position: 656`,
  `timestamp: 1700000000000 offset: 23`). `--verify-index` also checks every entry against the
  segment's `.log`; `--verify-index-only` checks without printing entries. Problems go to stderr
  under Kafka's headings ("Mismatches in :FILE", "  Index offset: X, log offset: Y").
- `--json` prints one JSON object per line instead, each with a `type`: `segment`, `batch`
  (records under `records`), `invalidBytes`, `offsetIndexEntry`, `timeIndexEntry`,
  `indexProblem`, `indexVerified`. Keys and payloads are UTF-8 text with undecodable bytes
  escaped (`\\xff`); null stays null.

Exit status: 0 when everything read is valid; 1 when a batch, byte range or index entry is
not; 2 for usage errors (a missing or unrecognised file), found before anything is dumped.

Files are memory-mapped read-only and walked batch by batch, so a segment is never read whole
into memory, and nothing is ever written: index files are parsed here rather than opened
through `storage.OffsetIndex`, whose constructor opens them for writing (creating a missing
one, trimming a torn tail), which a tool for inspecting damaged segments must not do. That
also keeps `client` importing only storage's batch codec (DESIGN §1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, TextIO

from storage.errors import InvalidRecordError, RecordTooLargeError, StorageError
from storage.records import (
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    Record,
    TimestampKind,
    decode_records,
    read_header,
    validate_batch,
)

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
# kafka-dump-log.sh's --max-message-size default: a larger batch is reported as invalid.
MAX_MESSAGE_BYTES_DEFAULT = 5 * 1024 * 1024
_INT32_MAX = 2**31 - 1
# A log walk unmaps the pages behind it every this many bytes (see `_release_pages`).
_RELEASE_BYTES = 32 * 1024 * 1024
_EXTRA_SUFFIXES = (".deleted", ".cleaned", ".swap")
_BASE_OFFSET_NAME = re.compile(r"[0-9]{1,20}")
# Index entry layouts (DESIGN §3): offset index `relativeOffset i32, position i32`, time index
# `timestamp i64, relativeOffset i32`, both big-endian.
_OFFSET_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")
_TIMESTAMP_TYPE_NAMES = {TimestampKind.CREATE_TIME: "CreateTime", TimestampKind.LOG_APPEND_TIME: "LogAppendTime"}
# Control record types (key: version i16, type i16), as Kafka's ControlRecordType numbers them.
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER"}
_CONTROL_KEY = struct.Struct(">hh")
_END_TRANSACTION_MARKER_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch

Buffer = mmap.mmap | bytes


class FileKind(Enum):
    """A segment file's kind, by its suffix."""

    LOG = ".log"
    OFFSET_INDEX = ".index"
    TIME_INDEX = ".timeindex"


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A file to dump: its kind, the base offset in its name (None when the name is not one)
    and the suffix after the kind's (`.deleted`, ...), which its sibling files share."""

    path: Path
    kind: FileKind
    stem: str
    base_offset: int | None
    extra_suffix: str

    @property
    def log_path(self) -> Path:
        return self.path.with_name(f"{self.stem}{FileKind.LOG.value}{self.extra_suffix}")


@dataclass(frozen=True, slots=True)
class DumpOptions:
    deep_iteration: bool  # a line per record
    print_data: bool  # keys and payloads on those lines
    verify_index: bool
    print_index_entries: bool
    max_message_bytes: int
    max_bytes: int | None  # stop reading a log at this position


@dataclass(frozen=True, slots=True)
class BatchView:
    """A batch found at `position` of a log and the first problem found in it, if any."""

    position: int
    header: BatchHeader
    error: StorageError | None


@dataclass(frozen=True, slots=True)
class InvalidBytes:
    """`count` bytes from `position` to the end of a file that are not valid data."""

    position: int
    count: int
    reason: str


class IndexProblemKind(Enum):
    """What is wrong with an index entry; the value is Kafka's heading for such problems."""

    OFFSET_MISMATCH = "Mismatches in :{file}"
    NO_BATCH_AT_POSITION = "Positions where no batch starts in :{file}"
    OFFSET_OUT_OF_ORDER = "Found out of order offsets in :{file}"
    POSITION_OUT_OF_ORDER = "Found out of order positions in :{file}"
    TIMESTAMP_MISMATCH = "Found timestamp mismatch in :{file}"
    TIMESTAMP_OUT_OF_ORDER = "Found out of order timestamp in :{file}"
    OFFSET_NOT_FOUND = "The following indexed offsets are not found in the log of :{file}"


@dataclass(frozen=True, slots=True)
class IndexProblem:
    """One wrong index entry: `line` is the text under the kind's heading, `fields` the same
    facts for --json."""

    kind: IndexProblemKind
    slot: int
    line: str
    fields: dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Command line


def register(subcommands: Any) -> None:
    """Add `dump-log` to the `tributary` sub-parsers."""
    parser = subcommands.add_parser(
        "dump-log",
        help="print and verify segment files (.log, .index, .timeindex)",
        description="Print the batches of .log files and the entries of .index and .timeindex "
        "files, and check them, like Kafka's kafka-dump-log.sh. Exit status: 0 all valid, "
        "1 invalid data found, 2 usage error.",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="segment files to dump")
    parser.add_argument(
        "--files",
        dest="file_lists",
        action="append",
        default=[],
        metavar="FILE[,FILE...]",
        help="comma-separated files (Kafka's form)",
    )
    parser.add_argument("--print-data-log", action="store_true", help="print each record with its key and payload")
    parser.add_argument(
        "--deep-iteration", action="store_true", help="print each record's metadata (implied by --print-data-log)"
    )
    parser.add_argument(
        "--verify-index", action="store_true", help="print index entries and check each against the segment's .log"
    )
    parser.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the segment's .log without printing them",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per line")
    parser.add_argument(
        "--max-message-size",
        type=_positive_int,
        default=MAX_MESSAGE_BYTES_DEFAULT,
        metavar="BYTES",
        help="largest valid batch (default %(default)s)",
    )
    parser.add_argument(
        "--max-bytes", type=_positive_int, default=None, metavar="BYTES", help="stop reading each .log at this position"
    )
    parser.set_defaults(run=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def run(arguments: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Dump every file named in `arguments`; return the exit status."""
    names = [*arguments.files]
    for file_list in arguments.file_lists:
        names.extend(name for name in file_list.split(",") if name)
    verify_index = arguments.verify_index or arguments.verify_index_only
    options = DumpOptions(
        deep_iteration=arguments.deep_iteration or arguments.print_data_log,
        print_data=arguments.print_data_log,
        verify_index=verify_index,
        print_index_entries=not arguments.verify_index_only,
        max_message_bytes=arguments.max_message_size,
        max_bytes=arguments.max_bytes,
    )
    targets, errors = plan(names, verify_index)
    if not names:
        errors.append("no files given; name at least one .log, .index or .timeindex file")
    for error in errors:
        err.write(f"tributary dump-log: error: {error}\n")
    if errors:
        return EXIT_USAGE
    renderer: Renderer = JsonRenderer(out) if arguments.json else TextRenderer(out, err)
    status = EXIT_OK
    for target in targets:
        try:
            valid = dump(target, options, renderer)
        except BrokenPipeError:
            raise  # our reader went away, not the file: `main` ends quietly
        except OSError as error:
            err.write(f"tributary dump-log: error: {target.path}: {error.strerror or error}\n")
            status = EXIT_USAGE
            continue
        if not valid:
            status = max(status, EXIT_INVALID)
    return status


def plan(names: Sequence[str], verify_index: bool) -> tuple[list[SegmentFile], list[str]]:
    """The files to dump and the usage errors that prevent it (all found before any dump)."""
    targets: list[SegmentFile] = []
    errors: list[str] = []
    for name in names:
        checked = _check_file(Path(name), verify_index)
        if isinstance(checked, str):
            errors.append(checked)
        else:
            targets.append(checked)
    return targets, errors


def _check_file(path: Path, verify_index: bool) -> SegmentFile | str:
    if not path.exists():
        return f"{path}: no such file"
    if not path.is_file():
        return f"{path}: not a regular file"
    target = classify(path)
    if target is None:
        return f"{path}: unknown file type; expected a .log, .index or .timeindex segment file"
    if target.kind is FileKind.LOG:
        return target
    if target.base_offset is None:
        return (
            f"{path}: cannot tell the segment's base offset; index files are named by it, "
            "20 digits zero-padded (00000000000000000368.index)"
        )
    if verify_index and not target.log_path.is_file():
        return f"{path}: cannot verify: the segment's log {target.log_path} does not exist"
    return target


def classify(path: Path) -> SegmentFile | None:
    """The kind and base offset of a segment file from its name, or None if not one."""
    name = path.name
    extra_suffix = next((suffix for suffix in _EXTRA_SUFFIXES if name.endswith(suffix)), "")
    core = name[: len(name) - len(extra_suffix)]
    for kind in (FileKind.TIME_INDEX, FileKind.OFFSET_INDEX, FileKind.LOG):
        if core.endswith(kind.value):
            stem = core[: -len(kind.value)]
            base_offset = int(stem) if _BASE_OFFSET_NAME.fullmatch(stem) else None
            return SegmentFile(path, kind, stem, base_offset, extra_suffix)
    return None


def dump(target: SegmentFile, options: DumpOptions, renderer: Renderer) -> bool:
    """Dump one file; return whether everything in it (and, verifying, its log) is valid."""
    renderer.segment(target)
    if target.kind is FileKind.LOG:
        return _dump_log(target, options, renderer)
    return _dump_index(target, options, renderer)


@contextlib.contextmanager
def _mapped(path: Path) -> Iterator[Buffer]:
    """The file's bytes, mapped read-only (b"" when empty: an empty file cannot be mapped)."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            yield b""
            return
        with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            if hasattr(mmap, "MADV_SEQUENTIAL"):
                mapped.madvise(mmap.MADV_SEQUENTIAL)
            yield mapped


# ---------------------------------------------------------------------------------------------
# Logs


def _dump_log(target: SegmentFile, options: DumpOptions, renderer: Renderer) -> bool:
    valid = True
    with _mapped(target.path) as data:
        batches = scan_log(data, target.base_offset, options.max_message_bytes, options.max_bytes)
        for item in batches:
            if isinstance(item, InvalidBytes):
                renderer.invalid_bytes(item)
                valid = False
                continue
            error, records = item.error, None
            if error is None and options.deep_iteration:
                try:
                    records = decode_records(data, item.position)
                except StorageError as decode_error:
                    # The CRC held, so the framing is sound: report and go on to the next batch.
                    error = decode_error
            renderer.batch(item, error, records, options.print_data)
            valid = valid and error is None
    return valid


def scan_log(
    data: Buffer,
    segment_base_offset: int | None,
    max_message_bytes: int | None,
    max_bytes: int | None = None,
    validate: bool = True,
) -> Iterator[BatchView | InvalidBytes]:
    """Walk the batches of a log from position 0, stopping after the first bad one.

    A batch is bad if its header does not parse, it is cut off by the end of the file, it is
    over `max_message_bytes`, its offsets do not rise above the previous batch's (or start
    below the segment's base offset), or, with `validate`, its CRC fails. A bad batch whose
    header parsed is yielded with its error; then InvalidBytes covers it and all after it,
    which is what `LogSegment.recover` would truncate. `max_bytes` ends the walk early.
    """
    size = len(data)
    end = size if max_bytes is None else min(size, max_bytes)
    position = released = 0
    next_offset = segment_base_offset
    while position < end:
        if position - released >= _RELEASE_BYTES:
            released = _release_pages(data, released, position)
        remaining = size - position
        try:
            header = read_header(data, position)
        except StorageError as error:
            yield InvalidBytes(position, remaining, str(error))
            return
        if header.size_in_bytes > remaining:
            yield InvalidBytes(
                position,
                remaining,
                f"the batch there declares {header.size_in_bytes} bytes but the file ends "
                f"{remaining} bytes after its start: a torn write",
            )
            return
        error = _framing_error(header, position, next_offset, segment_base_offset, max_message_bytes)
        if error is None and validate:
            error = _validation_error(data, position)
        yield BatchView(position, header, error)
        if error is not None:
            yield InvalidBytes(position, remaining, "the invalid batch and everything after it")
            return
        position += header.size_in_bytes
        next_offset = header.next_offset


def _release_pages(data: Buffer, start: int, end: int) -> int:
    """Unmap the pages of [start, end) (rounded down to whole pages) that the walk has passed, so
    a large segment does not pile up in this process's resident memory; the kernel's page cache
    keeps them. Returns the new start of the unreleased part."""
    end -= end % mmap.PAGESIZE
    if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED") and end > start:
        data.madvise(mmap.MADV_DONTNEED, start, end - start)
    return end


def _framing_error(
    header: BatchHeader,
    position: int,
    next_offset: int | None,
    segment_base_offset: int | None,
    max_message_bytes: int | None,
) -> StorageError | None:
    """The first of the checks recovery makes on a batch's place in the segment that fails."""
    size = header.size_in_bytes
    if max_message_bytes is not None and size > max_message_bytes:
        return RecordTooLargeError(
            f"batch at position {position} is {size} bytes, over --max-message-size "
            f"{max_message_bytes}; pass a larger --max-message-size if the topic allows it"
        )
    if header.last_offset_delta < 0:
        return InvalidRecordError(
            f"batch at position {position} has a negative lastOffsetDelta {header.last_offset_delta}"
        )
    if next_offset is not None and header.base_offset < next_offset:
        return InvalidRecordError(
            f"batch at position {position} has base offset {header.base_offset}, below "
            f"{next_offset}: offsets in a segment must rise from its base offset, so recovery "
            "truncates the log here"
        )
    if segment_base_offset is not None and header.last_offset - segment_base_offset > _INT32_MAX:
        return InvalidRecordError(
            f"batch at position {position} has last offset {header.last_offset}, too far above "
            f"the segment's base offset {segment_base_offset} for an i32 relative offset"
        )
    return None


def _validation_error(data: Buffer, position: int) -> StorageError | None:
    # Compacted batches keep their records' original offsets, so gaps are allowed: only what
    # Kafka's isValid checks (size, magic, CRC) decides here.
    try:
        validate_batch(data, position, check_records=False)
    except StorageError as error:
        return error
    return None


# ---------------------------------------------------------------------------------------------
# Indexes


def _dump_index(target: SegmentFile, options: DumpOptions, renderer: Renderer) -> bool:
    entry_format = _entry_format(target.kind)
    assert target.base_offset is not None, f"{target.path}: plan() admits only named indexes"
    with contextlib.ExitStack() as stack:
        data = stack.enter_context(_mapped(target.path))
        verifier: IndexVerifier | None = None
        if options.verify_index:
            log = stack.enter_context(_mapped(target.log_path))
            # Index checks need offsets and positions only: headers, no CRCs and no size limit.
            batches = scan_log(log, target.base_offset, None, validate=False)
            verifier = _verifier(target.kind, batches)
        entries = 0
        problems: list[IndexProblem] = []
        for slot, key, value in iter_index_entries(data, target.kind, target.base_offset):
            entries += 1
            if options.print_index_entries:
                renderer.index_entry(target.kind, key, value)
            if verifier is not None:
                problems.extend(verifier.check(slot, key, value))
        torn_bytes = len(data) % entry_format.size
        if torn_bytes:
            renderer.invalid_bytes(
                InvalidBytes(
                    len(data) - torn_bytes,
                    torn_bytes,
                    f"not a whole {entry_format.size}-byte entry: a torn write (recovery rebuilds the index)",
                )
            )
        if verifier is not None:
            renderer.index_problems(target, problems)
            renderer.index_verified(target, entries, len(problems))
    return not problems and not torn_bytes


def _entry_format(kind: FileKind) -> struct.Struct:
    assert kind is not FileKind.LOG, kind
    return _OFFSET_INDEX_ENTRY if kind is FileKind.OFFSET_INDEX else _TIME_INDEX_ENTRY


def iter_index_entries(data: Buffer, kind: FileKind, base_offset: int) -> Iterator[tuple[int, int, int]]:
    """(slot, key, value) per entry, offsets made absolute: (offset, position) for an offset
    index, (timestamp, offset) for a time index.

    Stops at the first all-zero entry after slot 0: the preallocated tail of an active
    segment's index (Kafka's dump stops there too). A torn partial entry at the end is left
    to the caller."""
    entry_format = _entry_format(kind)
    for slot in range(len(data) // entry_format.size):
        first, second = entry_format.unpack_from(data, slot * entry_format.size)
        if slot > 0 and first == 0 and second == 0:
            return
        if kind is FileKind.OFFSET_INDEX:
            yield slot, base_offset + first, second
        else:
            yield slot, first, base_offset + second


class IndexVerifier(Protocol):
    def check(self, slot: int, key: int, value: int) -> list[IndexProblem]: ...


def _verifier(kind: FileKind, batches: Iterator[BatchView | InvalidBytes]) -> IndexVerifier:
    if kind is FileKind.OFFSET_INDEX:
        return OffsetIndexVerifier(batches)
    return TimeIndexVerifier(batches)


class _BatchCursor:
    """The batches of a log, consumed in order; `batch` is the current one, None at the end
    (the end of the file or the first invalid batch, which `invalid` then describes)."""

    def __init__(self, batches: Iterator[BatchView | InvalidBytes]) -> None:
        self._batches = batches
        self.batch: BatchView | None = None
        self.invalid: InvalidBytes | None = None
        self.advance()

    def advance(self) -> None:
        self.batch = None
        for item in self._batches:
            if isinstance(item, InvalidBytes):
                self.invalid = item
                return
            if item.error is None:
                self.batch = item
                return
            # A batch with an error is followed by its InvalidBytes: the walk ends there.

    def end_description(self) -> str:
        if self.invalid is None:
            return "the log ends before it"
        return f"the log is invalid from position {self.invalid.position}"


class OffsetIndexVerifier:
    """Checks offset-index entries, in slot order, against the log: offsets and positions rise,
    a batch starts at each position and its last offset is the entry's offset."""

    def __init__(self, batches: Iterator[BatchView | InvalidBytes]) -> None:
        self._cursor = _BatchCursor(batches)
        self._previous: tuple[int, int] | None = None

    def check(self, slot: int, offset: int, position: int) -> list[IndexProblem]:
        problems = []
        previous, self._previous = self._previous, (offset, position)
        if previous is not None and offset <= previous[0]:
            problems.append(
                IndexProblem(
                    IndexProblemKind.OFFSET_OUT_OF_ORDER,
                    slot,
                    f"  Index offset: {offset}, previous index offset: {previous[0]}",
                    {"indexOffset": offset, "previousIndexOffset": previous[0]},
                )
            )
        if previous is not None and position <= previous[1]:
            problems.append(
                IndexProblem(
                    IndexProblemKind.POSITION_OUT_OF_ORDER,
                    slot,
                    f"  Index position: {position}, previous index position: {previous[1]}",
                    {"indexOffset": offset, "position": position, "previousPosition": previous[1]},
                )
            )
            return problems  # the log was walked past this position already
        cursor = self._cursor
        while cursor.batch is not None and cursor.batch.position < position:
            cursor.advance()
        if cursor.batch is None or cursor.batch.position != position:
            reason = "inside a batch" if cursor.batch is not None else cursor.end_description()
            problems.append(
                IndexProblem(
                    IndexProblemKind.NO_BATCH_AT_POSITION,
                    slot,
                    f"  Index offset: {offset}, position: {position}: no batch starts there ({reason})",
                    {"indexOffset": offset, "position": position, "logOffset": None},
                )
            )
        elif cursor.batch.header.last_offset != offset:
            log_offset = cursor.batch.header.last_offset
            problems.append(
                IndexProblem(
                    IndexProblemKind.OFFSET_MISMATCH,
                    slot,
                    f"  Index offset: {offset}, log offset: {log_offset}",
                    {"indexOffset": offset, "position": position, "logOffset": log_offset},
                )
            )
        return problems


class TimeIndexVerifier:
    """Checks time-index entries, in slot order, against the log: timestamps rise, offsets do
    not fall, each offset is a batch's last offset, and the timestamp is the largest batch
    max timestamp up to and including that batch."""

    def __init__(self, batches: Iterator[BatchView | InvalidBytes]) -> None:
        self._cursor = _BatchCursor(batches)
        self._previous: tuple[int, int] | None = None
        self._max_timestamp = NO_TIMESTAMP  # over the batches passed so far
        self._passed_last_offset: int | None = None  # last offset of the last batch passed

    def check(self, slot: int, timestamp: int, offset: int) -> list[IndexProblem]:
        problems = []
        previous, self._previous = self._previous, (timestamp, offset)
        if previous is not None and timestamp <= previous[0]:
            problems.append(
                IndexProblem(
                    IndexProblemKind.TIMESTAMP_OUT_OF_ORDER,
                    slot,
                    f"  Index timestamp: {timestamp}, Previously indexed timestamp: {previous[0]}",
                    {"indexTimestamp": timestamp, "previousIndexTimestamp": previous[0]},
                )
            )
        if previous is not None and offset < previous[1]:
            problems.append(
                IndexProblem(
                    IndexProblemKind.OFFSET_OUT_OF_ORDER,
                    slot,
                    f"  Index offset: {offset}, previous index offset: {previous[1]}",
                    {"indexOffset": offset, "previousIndexOffset": previous[1]},
                )
            )
            return problems  # the log was walked past this offset already
        cursor = self._cursor
        while cursor.batch is not None and cursor.batch.header.last_offset <= offset:
            self._max_timestamp = max(self._max_timestamp, cursor.batch.header.max_timestamp)
            self._passed_last_offset = cursor.batch.header.last_offset
            cursor.advance()
        if self._passed_last_offset != offset:
            found = cursor.batch.header.last_offset if cursor.batch is not None else -1
            problems.append(
                IndexProblem(
                    IndexProblemKind.OFFSET_NOT_FOUND,
                    slot,
                    f"  Indexed offset: {offset}, found log offset: {found}",
                    {"indexOffset": offset, "logOffset": found},
                )
            )
        elif self._max_timestamp != timestamp:
            problems.append(
                IndexProblem(
                    IndexProblemKind.TIMESTAMP_MISMATCH,
                    slot,
                    f"  Index timestamp: {timestamp}, log timestamp: {self._max_timestamp}",
                    {"indexTimestamp": timestamp, "indexOffset": offset, "logTimestamp": self._max_timestamp},
                )
            )
        return problems


# ---------------------------------------------------------------------------------------------
# Field values shared by both renderers


def _increment_sequence(sequence: int, increment: int) -> int:
    # Sequences wrap from 2**31-1 to 0 (Kafka's DefaultRecordBatch.incrementSequence).
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def _last_sequence(header: BatchHeader) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return _increment_sequence(header.base_sequence, header.last_offset_delta)


def _record_sequence(header: BatchHeader, record: Record) -> int:
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return _increment_sequence(header.base_sequence, record.offset - header.base_offset)


def _codec_name(header: BatchHeader) -> str:
    try:
        return header.compression.name.lower()
    except StorageError:
        return f"unknown({header.attributes & 0x07})"


def _timestamp_type_name(header: BatchHeader) -> str:
    return _TIMESTAMP_TYPE_NAMES[header.timestamp_type]


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _describe(error: StorageError) -> str:
    return f"{error.error_name}: {error}"


def _control_fields(record: Record) -> dict[str, Any]:
    """What a control record says: a transaction marker or another control type."""
    key = record.key or b""
    if len(key) < _CONTROL_KEY.size:
        return {"controlType": f"UNKNOWN(key of {len(key)} bytes)"}
    _, type_id = _CONTROL_KEY.unpack_from(key)
    name = _CONTROL_TYPES.get(type_id, "UNKNOWN")
    value = record.value or b""
    if name in ("ABORT", "COMMIT") and len(value) >= _END_TRANSACTION_MARKER_VALUE.size:
        _, coordinator_epoch = _END_TRANSACTION_MARKER_VALUE.unpack_from(value)
        return {"endTxnMarker": name, "coordinatorEpoch": coordinator_epoch}
    return {"controlType": f"{name}({type_id})"}


def batch_fields(view: BatchView, error: StorageError | None) -> dict[str, Any]:
    """A batch's fields, camelCase, in the order kafka-dump-log.sh prints them."""
    header = view.header
    fields: dict[str, Any] = {
        "baseOffset": header.base_offset,
        "lastOffset": header.last_offset,
        "count": header.records_count,
        "baseSequence": header.base_sequence,
        "lastSequence": _last_sequence(header),
        "producerId": header.producer_id,
        "producerEpoch": header.producer_epoch,
        "partitionLeaderEpoch": header.partition_leader_epoch,
        "isTransactional": header.is_transactional,
        "isControl": header.is_control,
        "position": view.position,
        "timestampType": _timestamp_type_name(header),
        "baseTimestamp": header.base_timestamp,
        "maxTimestamp": header.max_timestamp,
        "size": header.size_in_bytes,
        "magic": header.magic,
        "compresscodec": _codec_name(header),
        "crc": header.crc,
        "isValid": error is None,
    }
    if error is not None:
        fields["error"] = _describe(error)
    return fields


def record_fields(header: BatchHeader, record: Record, print_data: bool) -> dict[str, Any]:
    """A record's fields for --json; key, payload and header values only with `print_data`."""
    fields: dict[str, Any] = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "keySize": _size(record.key),
        "valueSize": _size(record.value),
        "sequence": _record_sequence(header, record),
        "headerKeys": [key for key, _ in record.headers],
    }
    if header.is_control:
        fields.update(_control_fields(record))
    elif print_data:
        fields["key"] = _text(record.key)
        fields["payload"] = _text(record.value)
        fields["headers"] = [{"key": key, "value": _text(value)} for key, value in record.headers]
    return fields


# ---------------------------------------------------------------------------------------------
# Renderers


class Renderer(Protocol):
    def segment(self, target: SegmentFile) -> None: ...
    def batch(
        self, view: BatchView, error: StorageError | None, records: list[Record] | None, print_data: bool
    ) -> None: ...
    def invalid_bytes(self, item: InvalidBytes) -> None: ...
    def index_entry(self, kind: FileKind, key: int, value: int) -> None: ...
    def index_problems(self, target: SegmentFile, problems: list[IndexProblem]) -> None: ...
    def index_verified(self, target: SegmentFile, entries: int, problems: int) -> None: ...


class TextRenderer:
    """kafka-dump-log.sh's text: the dump on `out`, index problems on `err`."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out = out
        self._err = err

    def segment(self, target: SegmentFile) -> None:
        self._out.write(f"Dumping {target.path}\n")
        if target.kind is FileKind.LOG:
            start = "unknown" if target.base_offset is None else str(target.base_offset)
            self._out.write(f"Log starting offset: {start}\n")

    def batch(
        self, view: BatchView, error: StorageError | None, records: list[Record] | None, print_data: bool
    ) -> None:
        self._out.write(_batch_line(batch_fields(view, error)) + "\n")
        for record in records or ():
            self._out.write(self._record_line(view.header, record, print_data) + "\n")

    @staticmethod
    def _record_line(header: BatchHeader, record: Record, print_data: bool) -> str:
        keys = ",".join(key for key, _ in record.headers)
        parts = [
            f"| offset: {record.offset} {_timestamp_type_name(header)}: {record.timestamp} "
            f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
            f"sequence: {_record_sequence(header, record)} headerKeys: [{keys}]"
        ]
        if header.is_control:
            parts.extend(f"{name}: {value}" for name, value in _control_fields(record).items())
        elif print_data:
            # Like Kafka, a null key or payload is left out; keySize/valueSize -1 show it.
            if record.key is not None:
                parts.append(f"key: {_text(record.key)}")
            if record.value is not None:
                parts.append(f"payload: {_text(record.value)}")
        return " ".join(parts)

    def invalid_bytes(self, item: InvalidBytes) -> None:
        self._out.write(f"Found {item.count} invalid bytes at position {item.position}: {item.reason}\n")

    def index_entry(self, kind: FileKind, key: int, value: int) -> None:
        if kind is FileKind.OFFSET_INDEX:
            self._out.write(f"offset: {key} position: {value}\n")
        else:
            self._out.write(f"timestamp: {key} offset: {value}\n")

    def index_problems(self, target: SegmentFile, problems: list[IndexProblem]) -> None:
        for kind in IndexProblemKind:
            lines = [problem.line for problem in problems if problem.kind is kind]
            if lines:
                self._err.write(kind.value.format(file=target.path) + "\n")
                self._err.write("".join(line + "\n" for line in lines))

    def index_verified(self, target: SegmentFile, entries: int, problems: int) -> None:
        outcome = "all match" if problems == 0 else f"{problems} problems (on stderr)"
        self._out.write(f"Verified {entries} entries of {target.path} against {target.log_path}: {outcome}\n")


_BATCH_LINE_HEAD = (
    "baseOffset",
    "lastOffset",
    "count",
    "baseSequence",
    "lastSequence",
    "producerId",
    "producerEpoch",
    "partitionLeaderEpoch",
    "isTransactional",
    "isControl",
    "position",
)
_BATCH_LINE_TAIL = ("size", "magic", "compresscodec", "crc")


def _batch_line(fields: dict[str, Any]) -> str:
    """kafka-dump-log.sh's batch line; the max timestamp is labelled with the timestamp type."""
    parts = [f"{name}: {_text_value(fields[name])}" for name in _BATCH_LINE_HEAD]
    parts.append(f"{fields['timestampType']}: {fields['maxTimestamp']}")
    parts.extend(f"{name}: {_text_value(fields[name])}" for name in _BATCH_LINE_TAIL)
    parts.append(f"isvalid: {_text_value(fields['isValid'])}")
    if "error" in fields:
        parts.append(f"error: {fields['error']}")
    return " ".join(parts)


def _text_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class JsonRenderer:
    """One JSON object per line on `out`, each with a `type`."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def _write(self, kind: str, fields: dict[str, Any]) -> None:
        self._out.write(json.dumps({"type": kind, **fields}) + "\n")

    def segment(self, target: SegmentFile) -> None:
        self._write(
            "segment", {"file": str(target.path), "kind": target.kind.name.lower(), "baseOffset": target.base_offset}
        )

    def batch(
        self, view: BatchView, error: StorageError | None, records: list[Record] | None, print_data: bool
    ) -> None:
        fields = batch_fields(view, error)
        if records is not None:
            fields["records"] = [record_fields(view.header, record, print_data) for record in records]
        self._write("batch", fields)

    def invalid_bytes(self, item: InvalidBytes) -> None:
        self._write("invalidBytes", {"position": item.position, "count": item.count, "reason": item.reason})

    def index_entry(self, kind: FileKind, key: int, value: int) -> None:
        if kind is FileKind.OFFSET_INDEX:
            self._write("offsetIndexEntry", {"offset": key, "position": value})
        else:
            self._write("timeIndexEntry", {"timestamp": key, "offset": value})

    def index_problems(self, target: SegmentFile, problems: list[IndexProblem]) -> None:
        for problem in problems:
            self._write(
                "indexProblem",
                {
                    "file": str(target.path),
                    "problem": problem.kind.name.lower(),
                    "slot": problem.slot,
                    **problem.fields,
                },
            )

    def index_verified(self, target: SegmentFile, entries: int, problems: int) -> None:
        self._write(
            "indexVerified",
            {"file": str(target.path), "log": str(target.log_path), "entries": entries, "problems": problems},
        )
