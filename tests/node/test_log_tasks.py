"""LogTasks' kafka-log-cleaner job: the build of a clean runs in the cleaner thread, the plan and the
swap on the event loop, and `stop` aborts a build in progress and removes its files (issue 15: a
clean on the loop held every request of the node for as long as it ran).

Method: a real LogManager on a temp dir with one compacted log; `build_cleaned_segments` is wrapped
to record the thread it runs on, or to hold it at a step until the test has called `stop`."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from node import log_tasks
from node.broker_settings import BrokerSettings
from node.log_tasks import LogTasks
from storage.cleaner import CleanBuild, CleanerStep, CleanPlan, build_cleaned_segments
from storage.config import LogConfig
from storage.log_manager import LogManager
from storage.records import build_batch, decode_records
from wire.topic_partition import TopicPartition

NOW_MS = 1_000_000
TP = TopicPartition("t", 0)
COMPACT = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": 1000,
                                     "min.cleanable.dirty.ratio": 0.0})
HOUR_MS = 3_600_000


def compacted_log_manager(root: Path) -> LogManager:
    """One log of 40 records over three keys, in inactive segments below the HW."""
    manager = LogManager([root], lambda topic: COMPACT, now_ms=NOW_MS)
    log = manager.get_or_create_log(TP, NOW_MS)
    for value in range(40):
        log.append_as_leader(build_batch([(b"k%d" % (value % 3), b"v%d" % value)], timestamps=[NOW_MS]), 1, NOW_MS)
    log.roll(NOW_MS)
    log.update_high_watermark(log.log_end_offset)
    return manager


def offsets(manager: LogManager) -> list[int]:
    """The offsets of every record in the log's segments, in file order."""
    log = manager.get_log(TP)
    assert log is not None
    found: list[int] = []
    for segment in log.segments:
        for position, header in segment.iter_headers():
            found += [record.offset for record in decode_records(segment.read_bytes(position, header.size_in_bytes))]
    return found


def log_tasks_for(manager: LogManager, cleaner_backoff_ms: int) -> LogTasks:
    settings = BrokerSettings(node_id=7, advertised_endpoints={"HTTP": "127.0.0.1:1"},
                              inter_broker_listener_name="HTTP", cluster_id="c",
                              log_retention_check_interval_ms=HOUR_MS, log_flush_scheduler_interval_ms=HOUR_MS,
                              replica_high_watermark_checkpoint_interval_ms=HOUR_MS,
                              log_cleaner_backoff_ms=cleaner_backoff_ms,
                              producer_id_expiration_check_interval_ms=HOUR_MS)
    return LogTasks(settings, manager, lambda: None, lambda: NOW_MS)


async def test_the_build_runs_in_the_cleaner_thread_and_the_swap_on_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = compacted_log_manager(tmp_path)
    threads: dict[str, str] = {}

    def recording_build(plan: CleanPlan) -> CleanBuild:
        threads["build"] = threading.current_thread().name
        return build_cleaned_segments(plan)

    swap_cleaned = manager.swap_cleaned

    def recording_swap(build: CleanBuild, now_ms: int) -> object:
        threads["swap"] = threading.current_thread().name
        return swap_cleaned(build, now_ms)

    monkeypatch.setattr(log_tasks, "build_cleaned_segments", recording_build)
    monkeypatch.setattr(manager, "swap_cleaned", recording_swap)
    tasks = log_tasks_for(manager, HOUR_MS)
    tasks.start()
    try:
        await tasks.cleaner_pass()
    finally:
        await tasks.stop()
    assert threads["build"].startswith("kafka-log-cleaner-thread-7"), threads
    assert threads["swap"] == threading.current_thread().name, threads
    assert offsets(manager) == [37, 38, 39]


async def test_stop_aborts_a_build_in_progress_and_removes_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = compacted_log_manager(tmp_path)
    before = offsets(manager)
    held = threading.Event()
    aborted = threading.Event()
    outcomes: list[BaseException | CleanBuild] = []

    def held_build(plan: CleanPlan) -> CleanBuild:
        def fault(step: CleanerStep) -> None:
            if step is CleanerStep.CLEANED_APPENDED and not held.is_set():
                held.set()
                assert aborted.wait(30), "stop never aborted the build"

        try:
            outcomes.append(build_cleaned_segments(plan, fault))
        except Exception as failure:
            outcomes.append(failure)
            raise
        return outcomes[-1]  # type: ignore[return-value]

    abort = CleanPlan.abort

    def signalling_abort(plan: CleanPlan) -> None:
        abort(plan)
        aborted.set()

    monkeypatch.setattr(log_tasks, "build_cleaned_segments", held_build)
    monkeypatch.setattr(CleanPlan, "abort", signalling_abort)
    tasks = log_tasks_for(manager, 1)
    tasks.start()
    assert await asyncio.to_thread(held.wait, 30), "the cleaner job never started a build"
    log = manager.get_log(TP)
    assert log is not None
    assert any(path.name.endswith(".cleaned") for path in log.directory.iterdir())
    await tasks.stop()
    assert [type(outcome).__name__ for outcome in outcomes] == ["LogCleaningAbortedError"]
    assert not [path.name for path in log.directory.iterdir() if path.name.endswith(".cleaned")]
    assert offsets(manager) == before
