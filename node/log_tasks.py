"""LogTasks: the broker's periodic log work, one named task per job (Kafka's LogManager scheduler).

- `kafka-log-retention` every `log.retention.check.interval.ms`: the broker core's retention pass
  (it runs on the partitions this broker leads only: followers follow the leader's logStartOffset,
  DESIGN §4), then removal of `.deleted` files past `file.delete.delay.ms` on every log.
  `LogManager.cleanup_logs` is not used: it would run retention on followers too.
- `kafka-log-flusher` every `log.flush.scheduler.interval.ms`: flush logs past their `flush.ms`.
- `kafka-checkpoint` every `replica.high.watermark.checkpoint.interval.ms`: HW, recovery-point and
  log-start-offset checkpoints.
- `kafka-log-cleaner` every `log.cleaner.backoff.ms`: compaction, on every replica (as Kafka:
  compaction keeps offsets, so replicas need not agree on which records it has dropped yet). Per
  due log, the plan and the swap run here, on the loop, and the build (reading every record,
  writing the cleaned segments) in the cleaner thread, as Kafka's CleanerThread builds while the
  log keeps serving: a pass over a few MB held the loop for 0.4-0.8 s before (issue 15).
- `PeriodicProducerExpirationCheck` every `producer.id.expiration.check.interval.ms`: idempotent
  producers idle for `producer.id.expiration.ms` are forgotten, on every replica.

A pass does bounded work (one pass over the hosted logs). An exception is logged with the job and
the job runs again at its next interval. Times given to storage are wall-clock (`wall_clock`).
`stop` aborts a clean in progress and waits for the cleaner thread, so that no build outlives
the logs it reads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable

from node.broker_settings import BrokerSettings
from storage.cleaner import CleanBuild, CleanPlan, CleanResult, LogCleaningAbortedError, build_cleaned_segments
from storage.log_manager import LogManager

log = logging.getLogger(__name__)


class LogTasks:
    """The periodic jobs over one broker's logs; `start` launches them, `stop` cancels and awaits."""

    def __init__(self, settings: BrokerSettings, log_manager: LogManager, run_retention: Callable[[], None],
                 wall_clock: Callable[[], int]) -> None:
        self.settings = settings
        self.log_manager = log_manager
        self._run_retention = run_retention
        self._clock = wall_clock
        self._tasks: list[asyncio.Task[None]] = []
        # Kafka's log.cleaner.threads defaults to 1: one build at a time.
        self._cleaner_thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._building: CleanPlan | None = None

    def start(self) -> None:
        assert not self._tasks, "log tasks already started"
        settings = self.settings
        self._cleaner_thread = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"kafka-log-cleaner-thread-{settings.node_id}")
        jobs: list[tuple[str, int, Callable[[], Awaitable[None] | None]]] = [
            ("kafka-log-retention", settings.log_retention_check_interval_ms, self.retention_pass),
            ("kafka-log-flusher", settings.log_flush_scheduler_interval_ms, self.flush_pass),
            ("kafka-checkpoint", settings.replica_high_watermark_checkpoint_interval_ms, self.log_manager.checkpoint),
            ("kafka-log-cleaner", settings.log_cleaner_backoff_ms, self.cleaner_pass),
            ("PeriodicProducerExpirationCheck", settings.producer_id_expiration_check_interval_ms,
             self.producer_expiration_pass),
        ]
        for name, interval_ms, job in jobs:
            self._tasks.append(asyncio.create_task(self._every(name, interval_ms, job),
                                                   name=f"{name}-{settings.node_id}"))

    async def stop(self) -> None:
        if self._building is not None:
            self._building.abort()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._cleaner_thread is not None:
            # The aborted build stops at its next batch; `_build` deletes what it wrote.
            await asyncio.to_thread(self._cleaner_thread.shutdown)
            self._cleaner_thread = None

    async def _every(self, name: str, interval_ms: int, job: Callable[[], Awaitable[None] | None]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                pending = job()
                if pending is not None:
                    await pending
            except Exception:
                log.exception("broker %s: %s failed; it runs again in %d ms", self.settings.node_id, name,
                              interval_ms)

    def retention_pass(self) -> None:
        """Retention on led partitions, then expired `.deleted` files everywhere."""
        try:
            self._run_retention()
        finally:
            self.log_manager.delete_expired_files(self._clock())

    def flush_pass(self) -> None:
        self.log_manager.flush_dirty_logs(self._clock())

    def producer_expiration_pass(self) -> None:
        self.log_manager.remove_expired_producers(self._clock(), self.settings.producer_id_expiration_ms)

    async def cleaner_pass(self) -> None:
        """Each due compacted log in turn: plan, build in the cleaner thread, swap."""
        for topic_partition in [topic_partition for topic_partition, _ in self.log_manager]:
            plan = self.log_manager.plan_cleaning(topic_partition, self._clock())
            if plan is None:
                continue
            try:
                build = await self._build(plan)
            except LogCleaningAbortedError as aborted:
                log.info("broker %s: cleaning %s stopped: %s", self.settings.node_id, topic_partition, aborted)
                continue
            outcome = self.log_manager.swap_cleaned(build, self._clock())
            if isinstance(outcome, CleanResult):
                log.info("broker %s: cleaned %s: %s", self.settings.node_id, topic_partition, outcome)
            else:
                log.info("broker %s: cleaning %s discarded: %s", self.settings.node_id, topic_partition,
                         outcome.value)

    async def _build(self, plan: CleanPlan) -> CleanBuild:
        """`build_cleaned_segments(plan)` in the cleaner thread. Cancelled (by `stop`), it leaves the
        build to finish there (`stop` has aborted it) and to delete its files if it completed."""
        assert self._cleaner_thread is not None, "log tasks not started"
        future = self._cleaner_thread.submit(build_cleaned_segments, plan)
        self._building = plan
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.add_done_callback(_discard_abandoned)
            raise
        finally:
            self._building = None


def _discard_abandoned(future: concurrent.futures.Future[CleanBuild]) -> None:
    """Delete the files of a build nobody will swap (in the cleaner thread: they are its own)."""
    if not future.cancelled() and future.exception() is None:
        future.result().discard()
