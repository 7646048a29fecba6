"""LogTasks: the broker's periodic log work, one named task per job (Kafka's LogManager scheduler).

- `kafka-log-retention` every `log.retention.check.interval.ms`: the broker core's retention pass
  (it runs on the partitions this broker leads only: followers follow the leader's logStartOffset,
  DESIGN §4), then removal of `.deleted` files past `file.delete.delay.ms` on every log.
  `LogManager.cleanup_logs` is not used: it would run retention on followers too.
- `kafka-log-flusher` every `log.flush.scheduler.interval.ms`: flush logs past their `flush.ms`.
- `kafka-checkpoint` every `replica.high.watermark.checkpoint.interval.ms`: HW, recovery-point and
  log-start-offset checkpoints.
- `kafka-log-cleaner` every `log.cleaner.backoff.ms`: compaction, on every replica (as Kafka:
  compaction keeps offsets, so replicas need not agree on which records it has dropped yet).
- `PeriodicProducerExpirationCheck` every `producer.id.expiration.check.interval.ms`: idempotent
  producers idle for `producer.id.expiration.ms` are forgotten, on every replica.

A pass does bounded work (one pass over the hosted logs). An exception is logged with the job and
the job runs again at its next interval. Times given to storage are wall-clock (`wall_clock`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from node.broker_settings import BrokerSettings
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

    def start(self) -> None:
        assert not self._tasks, "log tasks already started"
        settings = self.settings
        jobs: list[tuple[str, int, Callable[[], None]]] = [
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
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _every(self, name: str, interval_ms: int, job: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                job()
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

    def cleaner_pass(self) -> None:
        for topic_partition, result in self.log_manager.clean_logs(self._clock()):
            log.info("broker %s: cleaned %s: %s", self.settings.node_id, topic_partition, result)
