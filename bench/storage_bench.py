"""Storage benchmark: the leader's append path against a raw file write, reads, lookups,
recovery and compaction, measured on this machine in one run.

Run `python -m bench.storage_bench [--log-mib 1024] [--dir DIR] [--profile]` (or `make bench`).
Every number comes from the real `storage` API: `Log.append_as_leader` (validation, offset
assignment, index bookkeeping, pwrite), `Log.read`, `Log.offset_for_timestamp`, `LogLoader.load`
after an unclean shutdown and `Cleaner.clean`. Producers send ready batch bytes, so batches are
built before each timed loop. Data lives in a fresh directory under `--dir` (default: the
system temp dir), which is removed at the end, also on failure.

Caveats printed with the tables: the page cache is warm (nothing is fsynced on the append path,
as in Kafka with default flush settings), MB is 10**6 bytes, and on a shared machine the load
average at start and end says how much other work competed for the cores.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import os
import platform
import pstats
import random
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.config import LogConfig
from storage.log import Log
from storage.log_loader import LogLoader
from storage.records import build_batch_from_values, read_header, validate_batch

MIB = 1024 * 1024
MB = 1_000_000
NOW_MS = 1_700_000_000_000
LEADER_EPOCH = 0
VALUE_BYTES = 1000  # ~1 KiB values: 1024 of them still fit max.message.bytes (1 MiB + 12)
APPEND_TARGET_RATIO = 0.70  # appends >= 70% of a raw write, for batches >= 16 KiB
APPEND_BYTES_MAX = 256 * MIB
READ_BYTES_MAX = 1 * MIB
LOOKUP_SECONDS_MAX = 3.0
LOOKUP_COUNT_MAX = 200_000
COMPACT_LOG_BYTES = 100 * MIB
COMPACT_KEYS_COUNT = 10_000
COMPACT_SEGMENT_BYTES = 16 * MIB
PROFILE_BYTES = 32 * MIB
PROFILE_LINES = 14
SEED = 20240601
_BATCH_LENGTH = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class AppendCase:
    """One batch shape: `records_count` records of `value_bytes` each, no keys, no headers."""

    name: str
    records_count: int
    value_bytes: int


APPEND_CASES = (
    AppendCase("1 KiB", 1, VALUE_BYTES),
    AppendCase("16 KiB", 16, VALUE_BYTES),
    AppendCase("1 MiB", 1024, VALUE_BYTES),
)
LOOKUP_CASE = APPEND_CASES[1]  # the ~1 GiB log of read, lookup and recovery is built of 16 KiB batches


@dataclass(frozen=True, slots=True)
class AppendResult:
    batch_bytes: int
    batches_count: int
    raw_seconds: float
    append_seconds: float
    pwritev_seconds: float  # the append's own write call alone: os.pwritev(16-byte prefix, view of the rest)
    validate_seconds: float  # validate_batch alone: header, CRC-32C, record walk


# -- output -------------------------------------------------------------------------------


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str] = ()) -> None:
    """Plain aligned text: the first column left-aligned, the others right-aligned."""
    widths = [max(len(str(row[slot])) for row in [columns, *rows]) for slot in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        parts = [str(cell).ljust(widths[0]) if slot == 0 else str(cell).rjust(widths[slot])
                 for slot, cell in enumerate(cells)]
        return "  ".join(parts).rstrip()

    print(f"\n{title}")
    print(line(columns))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print(line(row))
    for note in notes:
        print(f"  * {note}")
    sys.stdout.flush()


def megabytes_per_second(size_bytes: int, seconds: float) -> str:
    return f"{size_bytes / MB / seconds:,.1f}"


def per_second(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}"


def format_size(size_bytes: int) -> str:
    return f"{size_bytes / MIB:,.1f} MiB" if size_bytes >= MIB else f"{size_bytes:,} B"


# -- machine facts -------------------------------------------------------------------------


def filesystem_of(path: Path) -> str:
    """`fstype (device on mount point)` of the longest mount point that holds `path`."""
    target = os.path.realpath(path)
    best = ("", "unknown", "unknown")
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    for line in mounts:
        device, mount_point, fstype = line.split()[:3]
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best[0]):
            best = (mount_point, fstype, device)
    return f"{best[1]} ({best[2]} on {best[0]})"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def print_machine_facts(directory: Path, log_mib: int) -> None:
    import crc32c

    usage = shutil.disk_usage(directory)
    facts = [
        ("python", f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})"),
        ("platform", platform.platform()),
        ("cpu", f"{os.cpu_count()} x {cpu_model()}"),
        ("crc32c", "hardware (SSE4.2/ARMv8)" if getattr(crc32c, "hardware_based", False) else "software"),
        ("bench dir", str(directory)),
        ("filesystem", filesystem_of(directory)),
        ("disk free", f"{usage.free / 2**30:,.1f} GiB of {usage.total / 2**30:,.1f} GiB"),
        ("load average", f"{load_average()} (1, 5, 15 min) at start"),
        ("log size", f"--log-mib {log_mib}"),
    ]
    print_table("Machine", ("fact", "value"), facts)


# -- batches and logs -----------------------------------------------------------------------


def value_pool(rng: random.Random, count: int, value_bytes: int) -> list[bytes]:
    return [rng.randbytes(value_bytes) for _ in range(count)]


def build_case_batch(case: AppendCase, rng: random.Random, timestamp_ms: int = NOW_MS) -> bytes:
    return build_batch_from_values(value_pool(rng, case.records_count, case.value_bytes), timestamp_ms=timestamp_ms)


def open_log(directory: Path, config: LogConfig, **load: Any) -> Log:
    return LogLoader(directory, config, NOW_MS).load(**load)


def next_offset_after(data: bytes) -> int:
    """One past the last offset of the whole batches in `data` (walks batchLength fields only)."""
    position, last = 0, -1
    while position + 12 <= len(data):
        last = position
        position += _BATCH_LENGTH.unpack_from(data, position + 8)[0] + 12
    assert last >= 0, "a read returned no batch"
    return read_header(data, last).next_offset


def timed_rate(operation: Callable[[Any], object], arguments: Sequence[Any]) -> tuple[int, float]:
    """Apply `operation` to `arguments` in order until LOOKUP_SECONDS_MAX; return (count, seconds)."""
    start = time.perf_counter()
    count = 0
    for count, argument in enumerate(arguments, start=1):
        operation(argument)
        if count % 256 == 0 and time.perf_counter() - start > LOOKUP_SECONDS_MAX:
            break
    return count, time.perf_counter() - start


# -- 1. append ------------------------------------------------------------------------------


def time_raw_writes(path: Path, batch: bytes, count: int) -> float:
    """Seconds to os.write `batch` `count` times to a new plain file (then removed)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(count):
            written = os.write(descriptor, batch)
            assert written == len(batch), f"short write {written} of {len(batch)}"
        return time.perf_counter() - start
    finally:
        os.close(descriptor)
        path.unlink()


def time_appends(directory: Path, batch: bytes, count: int) -> float:
    """Seconds for `count` Log.append_as_leader calls of `batch` into a new log (then removed),
    after one untimed append: a new log's first append also writes its leader-epoch checkpoint
    (with an fsync), a once-per-log cost that is not append throughput."""
    log = open_log(directory, LogConfig())
    try:
        log.append_as_leader(batch, LEADER_EPOCH, NOW_MS)
        start = time.perf_counter()
        for _ in range(count):
            log.append_as_leader(batch, LEADER_EPOCH, NOW_MS)
        elapsed = time.perf_counter() - start
        assert log.log_end_offset == (count + 1) * read_header(batch).records_count, log
        return elapsed
    finally:
        log.close()
        shutil.rmtree(directory)


def time_pwritevs(path: Path, batch: bytes, count: int) -> float:
    """Seconds for `count` os.pwritev calls shaped like the leader's (a 16-byte prefix and a view of
    the rest of the batch) at consecutive positions of a new plain file (then removed)."""
    pieces = (batch[:16], memoryview(batch)[16:])
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        position = 0
        start = time.perf_counter()
        for _ in range(count):
            position += os.pwritev(descriptor, pieces, position)
        return time.perf_counter() - start
    finally:
        os.close(descriptor)
        path.unlink()


def time_validations(batch: bytes, count: int) -> float:
    """Seconds for `count` validate_batch calls as the leader makes them (records checked)."""
    start = time.perf_counter()
    for _ in range(count):
        validate_batch(batch, 0, len(batch), check_records=True)
    return time.perf_counter() - start


def measure_append_case(root: Path, case: AppendCase, total_bytes: int, repeats: int) -> AppendResult:
    """Best of `repeats` runs of each timing over the same pre-built batch bytes."""
    batch = build_case_batch(case, random.Random(SEED))
    count = max(1, total_bytes // len(batch))
    best = [float("inf")] * 4
    for _ in range(repeats):
        timings = (time_raw_writes(root / "raw.bin", batch, count),
                   time_appends(root / "append-0", batch, count),
                   time_pwritevs(root / "pwritev.bin", batch, count),
                   time_validations(batch, count))
        best = [min(old, new) for old, new in zip(best, timings, strict=True)]
    return AppendResult(len(batch), count, *best)


def run_append_section(root: Path, log_mib: int, repeats: int) -> None:
    total_bytes = min(APPEND_BYTES_MAX, log_mib * MIB)
    rows = []
    results = [(case, measure_append_case(root, case, total_bytes, repeats)) for case in APPEND_CASES]
    for case, result in results:
        size = result.batch_bytes * result.batches_count
        ratio = result.raw_seconds / result.append_seconds
        target = "-" if case.records_count == 1 else ("met" if ratio >= APPEND_TARGET_RATIO else "MISSED")
        rows.append((
            case.name,
            f"{case.records_count} x {case.value_bytes} B",
            f"{result.batch_bytes:,}",
            f"{size / MIB:,.0f}",
            megabytes_per_second(size, result.raw_seconds),
            megabytes_per_second(size, result.append_seconds),
            per_second(result.batches_count, result.append_seconds),
            per_second(result.batches_count * case.records_count, result.append_seconds),
            f"{ratio:.0%}",
            target,
        ))
    print_table(
        "1. Append: Log.append_as_leader vs raw os.write of the same bytes",
        ("batch", "records x value", "batch B", "total MiB", "raw MB/s", "append MB/s", "batches/s",
         "records/s", "append/raw", f">= {APPEND_TARGET_RATIO:.0%}"),
        rows,
        (f"best of {repeats} runs each; default LogConfig (segment.bytes 1 GiB, index.interval.bytes 4096)",
         "append = validate (header, CRC-32C, record walk) + offsets/epoch rewrite + roll check + pwrite + indexes",
         "raw = os.write of the same batch bytes in a loop to a plain file in the same directory"),
    )
    print_append_breakdown(results)


def print_append_breakdown(results: Sequence[tuple[AppendCase, AppendResult]]) -> None:
    """Table 1b: microseconds per batch of each part of an append, and the best append/raw ratio
    the write and the validation alone leave (what the append could reach if all else were free)."""
    rows = []
    for case, result in results:
        def micros(seconds: float, count: int = result.batches_count) -> float:
            return seconds / count * 1e6

        raw, append = micros(result.raw_seconds), micros(result.append_seconds)
        pwritev, validate = micros(result.pwritev_seconds), micros(result.validate_seconds)
        rows.append((case.name, f"{raw:,.1f}", f"{pwritev:,.1f}", f"{validate:,.1f}",
                     f"{append - pwritev - validate:,.1f}", f"{append:,.1f}", f"{raw / (pwritev + validate):.0%}"))
    print_table(
        "1b. One append, part by part (microseconds per batch)",
        ("batch", "raw write", "pwritev", "validate", "the rest", "append", "ceiling"),
        rows,
        ("pwritev = the append's write alone (16-byte prefix + view of the batch) to a plain file",
         "validate = validate_batch alone: header, CRC-32C over attributes..end, walk of every record",
         "the rest = append - pwritev - validate: offset/epoch prefix, roll check, indexes, epoch cache, accounting",
         "ceiling = raw write / (pwritev + validate): the best append/raw with the rest free"),
    )


# -- 2.-4. the ~1 GiB log: read, lookups, recovery ------------------------------------------


@dataclass(frozen=True, slots=True)
class BuiltLog:
    log: Log
    first_timestamp_ms: int
    last_timestamp_ms: int
    build_seconds: float


def build_timestamped_log(directory: Path, log_mib: int) -> BuiltLog:
    """Append ~log_mib MiB of 16 KiB batches, each 1 ms after the previous one."""
    rng = random.Random(SEED)
    values = value_pool(rng, LOOKUP_CASE.records_count * 4, LOOKUP_CASE.value_bytes)
    log = open_log(directory, LogConfig())
    batch_count = 0
    start = time.perf_counter()
    while log.size_in_bytes() < log_mib * MIB:
        first = (batch_count % 4) * LOOKUP_CASE.records_count
        batch = build_batch_from_values(values[first : first + LOOKUP_CASE.records_count],
                                        timestamp_ms=NOW_MS + batch_count)
        log.append_as_leader(batch, LEADER_EPOCH, NOW_MS + batch_count)
        batch_count += 1
    elapsed = time.perf_counter() - start
    log.update_high_watermark(log.log_end_offset)
    return BuiltLog(log, NOW_MS, NOW_MS + batch_count - 1, elapsed)


def run_read_section(built: BuiltLog) -> None:
    log = built.log
    offset, end = log.log_start_offset, log.log_end_offset
    size_bytes, fetches = 0, 0
    start = time.perf_counter()
    while offset < end:
        data = log.read(offset, READ_BYTES_MAX).records
        size_bytes += len(data)
        fetches += 1
        offset = next_offset_after(data)
    elapsed = time.perf_counter() - start
    assert size_bytes == log.size_in_bytes(), f"read {size_bytes} of {log.size_in_bytes()} bytes"
    rows = [("Log.read(offset, 1 MiB), start to end", f"{size_bytes / MIB:,.0f}", f"{fetches:,}",
             f"{elapsed:.2f}", megabytes_per_second(size_bytes, elapsed), per_second(fetches, elapsed))]
    print_table(
        f"2. Sequential read ({len(log.segments)} segments, {end:,} records of {LOOKUP_CASE.value_bytes} B "
        f"in {LOOKUP_CASE.name} batches)",
        ("operation", "MiB", "fetches", "seconds", "MB/s", "fetches/s"),
        rows,
        ("page cache warm (the log was just written); the next fetch offset comes from the last batch header",
         f"the log was built in {built.build_seconds:.1f} s by append_as_leader, batch building included"),
    )


def run_lookup_section(built: BuiltLog) -> None:
    log = built.log
    rng = random.Random(SEED + 1)
    offsets = [rng.randrange(log.log_start_offset, log.log_end_offset) for _ in range(LOOKUP_COUNT_MAX)]
    timestamps = [rng.randint(built.first_timestamp_ms, built.last_timestamp_ms) for _ in range(LOOKUP_COUNT_MAX)]

    def translate(offset: int) -> object:
        segment = log.segments.floor_segment(offset)
        assert segment is not None, offset
        return segment.translate_offset(offset)

    def by_timestamp(timestamp: int) -> object:
        found = log.offset_for_timestamp(timestamp)
        assert found is not None and found.timestamp == timestamp, (timestamp, found)
        return found

    operations = (
        ("Log.read(random offset, max_bytes=1)", lambda offset: log.read(offset, 1), offsets),
        ("floor segment .translate_offset(random offset)", translate, offsets),
        ("Log.offset_for_timestamp(random timestamp)", by_timestamp, timestamps),
    )
    rows = []
    for name, operation, arguments in operations:
        count, elapsed = timed_rate(operation, arguments)
        rows.append((name, f"{count:,}", f"{elapsed:.2f}", per_second(count, elapsed), f"{elapsed / count * 1e6:,.1f}"))
    print_table(
        f"3. Random lookups on a {log.size_in_bytes() / MIB:,.0f} MiB log ({len(log.segments)} segments, "
        f"timestamps 1 ms apart per batch)",
        ("operation", "lookups", "seconds", "lookups/s", "us/lookup"),
        rows,
        ("uniform random targets over the whole log; each operation runs up to "
         f"{LOOKUP_SECONDS_MAX:.0f} s", "a read returns the one whole batch holding the offset (KIP-74)"),
    )


def unclean_shutdown(log: Log) -> None:
    """Close file handles as a crash would: no flush, no index trim, no clean-shutdown marker."""
    for segment in log.segments:
        segment.close_handlers()


def time_load(directory: Path, **load: Any) -> tuple[Log, float]:
    start = time.perf_counter()
    log = open_log(directory, LogConfig(), **load)
    return log, time.perf_counter() - start


def run_recovery_section(built: BuiltLog, directory: Path) -> None:
    log = built.log
    recovery_point, log_end_offset = log.recovery_point, log.log_end_offset
    suffix_bytes = sum(segment.size for segment in log.segments.values_from(recovery_point))
    total_bytes = log.size_in_bytes()
    rows = []
    loads = (
        ("unclean, recovery_point=0 (every segment)", total_bytes,
         {"recovery_point": 0, "had_clean_shutdown": False}),
        (f"unclean, recovery_point={recovery_point:,} (from its segment)", suffix_bytes,
         {"recovery_point": recovery_point, "had_clean_shutdown": False}),
        ("clean shutdown (no re-validation)", 0, {"recovery_point": log_end_offset, "had_clean_shutdown": True}),
    )
    for name, recovered_bytes, arguments in loads:
        if arguments["had_clean_shutdown"]:
            log.flush(NOW_MS)
            log.close()
        else:
            unclean_shutdown(log)
        log, elapsed = time_load(directory, **arguments)
        assert log.log_end_offset == log_end_offset, f"{name}: LEO {log.log_end_offset} != {log_end_offset}"
        rate = megabytes_per_second(recovered_bytes, elapsed) if recovered_bytes else "-"
        rows.append((name, format_size(recovered_bytes), f"{elapsed:.3f}", rate))
    log.close()
    print_table(
        f"4. Recovery: LogLoader.load of the {total_bytes / MIB:,.0f} MiB log ({len(log.segments)} segments)",
        ("load", "re-validated", "seconds", "MB/s"),
        rows,
        ("re-validation: every batch's size, magic and CRC-32C, offset contiguity, both indexes rebuilt",
         "the recovery point is where the last roll flushed: only the active segment lies above it",
         "every load also opens each segment and checks its indexes (the fixed cost of the last two rows)",
         "page cache warm: this is CPU cost, not disk reads"),
    )


# -- 5. compaction --------------------------------------------------------------------------


def build_keyed_log(directory: Path, config: LogConfig, log_bytes: int) -> Log:
    """~log_bytes of 16-record batches, keys drawn from COMPACT_KEYS_COUNT, HW at the LEO."""
    rng = random.Random(SEED + 2)
    values = value_pool(rng, 64, VALUE_BYTES)
    log = open_log(directory, config)
    batch_index = 0
    while log.size_in_bytes() < log_bytes:
        keys = [b"key-%05d" % rng.randrange(COMPACT_KEYS_COUNT) for _ in range(16)]
        batch = build_batch_from_values([values[rng.randrange(64)] for _ in range(16)], keys=keys,
                                        timestamp_ms=NOW_MS + batch_index)
        log.append_as_leader(batch, LEADER_EPOCH, NOW_MS + batch_index)
        batch_index += 1
    log.update_high_watermark(log.log_end_offset)
    return log


def load_cleaner() -> tuple[Any, str]:
    """(the storage.cleaner module, "") or (None, why it cannot be used)."""
    try:
        module = importlib.import_module("storage.cleaner")
    except ModuleNotFoundError:
        return None, "n/a (cleaner not present)"
    except Exception as error:  # another engineer's work in progress may not import yet
        return None, f"n/a (storage.cleaner does not import: {type(error).__name__}: {error})"
    if not hasattr(module, "Cleaner"):
        return None, "n/a (storage.cleaner has no Cleaner)"
    return module, ""


def run_compaction_section(root: Path) -> None:
    title = "5. Compaction: Cleaner.clean of a keyed log"
    cleaner_module, reason = load_cleaner()
    if cleaner_module is None:
        print_table(title, ("result",), [(reason,)])
        return
    from storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile

    config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": COMPACT_SEGMENT_BYTES})
    directory = root / "compact-0"
    log = build_keyed_log(directory, config, COMPACT_LOG_BYTES)
    size_before, segments_before = log.size_in_bytes(), len(log.segments)
    cleaner = cleaner_module.Cleaner(OffsetCheckpointFile(root / CLEANER_OFFSET_CHECKPOINT))
    start = time.perf_counter()
    result = cleaner.clean(log, NOW_MS + 10**7)
    elapsed = time.perf_counter() - start
    rows = [(
        f"{size_before / MIB:,.0f} MiB, {segments_before} segments",
        f"{log.size_in_bytes() / MIB:,.1f} MiB, {len(log.segments)} segments",
        f"{result.records_read:,} / {result.records_removed:,}",
        f"{result.bytes_read / MIB:,.1f} / {result.bytes_written / MIB:,.1f}",
        f"{elapsed:.2f}",
        megabytes_per_second(result.bytes_read, elapsed),
        per_second(result.records_read, elapsed),
    )]
    log.close()
    print_table(
        title,
        ("before", "after", "records read / removed", "MiB read / written", "seconds", "MB/s read", "records/s"),
        rows,
        (f"{COMPACT_KEYS_COUNT:,} keys, {VALUE_BYTES} B values, 16 records a batch, segment.bytes "
         f"{COMPACT_SEGMENT_BYTES // MIB} MiB, cleanup.policy=compact, high watermark at the log end offset",
         "one clean of everything below the active segment, fsyncs of the cleaned segments included"),
    )


# -- profiling ------------------------------------------------------------------------------


def profile_append(root: Path, case: AppendCase) -> None:
    """cProfile of PROFILE_BYTES of appends of one case: the top functions by own time."""
    batch = build_case_batch(case, random.Random(SEED))
    count = max(1, PROFILE_BYTES // len(batch))
    log = open_log(root / "profile-0", LogConfig())
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        for _ in range(count):
            log.append_as_leader(batch, LEADER_EPOCH, NOW_MS)
        profiler.disable()
    finally:
        log.close()
        shutil.rmtree(root / "profile-0")
    print(f"\nProfile: {count:,} appends of {case.name} batches ({case.records_count} x {case.value_bytes} B), "
          "by own time (cProfile inflates call-heavy code)")
    pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(PROFILE_LINES)


# -- main -----------------------------------------------------------------------------------


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.storage_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--log-mib", type=int, default=1024,
                        help="size of the log for reads, lookups and recovery (default 1024); appends use "
                             "min(256, this) MiB per case")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="parent of the bench's temporary directory (default: the system temp dir)")
    parser.add_argument("--repeats", type=int, default=2, help="append runs per case; the best is shown")
    parser.add_argument("--profile", action="store_true", help="also print cProfile tables of the append path")
    arguments = parser.parse_args(argv)
    if arguments.log_mib < 1 or arguments.repeats < 1:
        parser.error("--log-mib and --repeats must be >= 1")
    return arguments


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    run: Callable[[], None]


def sections(root: Path, arguments: argparse.Namespace) -> Iterator[Section]:
    yield Section("append", lambda: run_append_section(root, arguments.log_mib, arguments.repeats))
    if arguments.profile:
        for case in APPEND_CASES[:2]:
            yield Section(f"profile {case.name}", lambda case=case: profile_append(root, case))
    directory = root / "lookup-0"
    built: list[BuiltLog] = []
    yield Section("build", lambda: built.append(build_timestamped_log(directory, arguments.log_mib)))
    yield Section("read", lambda: run_read_section(built[0]))
    yield Section("lookups", lambda: run_lookup_section(built[0]))
    yield Section("recovery", lambda: run_recovery_section(built[0], directory))
    yield Section("cleanup", lambda: shutil.rmtree(directory))
    yield Section("compaction", lambda: run_compaction_section(root))


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    arguments.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="tributary-bench-", dir=arguments.dir))
    started = time.perf_counter()
    try:
        print_machine_facts(root, arguments.log_mib)
        for section in sections(root, arguments):
            section.run()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nload average {load_average()} at end; total {time.perf_counter() - started:,.0f} s; "
          f"removed {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
