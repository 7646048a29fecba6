"""PartitionWatchers: wake long-poll requests when a partition's log, HW or role changes.

Kafka's DelayedOperationPurgatory keyed by partition, without the operations: a waiter registers
on the partitions it reads and sleeps until any of them is `notify`-ed (by the partition's driver
after a step that changed its log, HW, role or epoch) or its time is up; it then re-reads and
decides itself whether it is done. Nothing polls. Register-then-wait happens with no `await` in
between, so a change made after the waiter's last read always wakes it.

Drivers call `notify_soon` for log and HW changes: the wake-ups of one loop iteration run in one
callback after the completions of the same step, so a produce answer (acks=1, or acks=all when a
follower's fetch moved the HW) leaves before the fetches it woke are read and answered, and a
step that moves both the log and the HW wakes each waiter once. A change still precedes its
wake-up, so none is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from storage.checkpoint import TopicPartition


class PartitionWatchers:
    """Futures waiting on partitions; `notify(tp)` resolves every future watching `tp`.

    Bound: one future per waiting request, at most the requests in flight (aiohttp bounds those);
    a finished wait always removes its future from every key.
    """

    def __init__(self) -> None:
        self._watchers: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._pending: set[TopicPartition] = set()  # notified by `notify_soon`, not yet woken

    async def wait(self, topic_partitions: Iterable[TopicPartition], timeout_ms: int) -> bool:
        """Sleep until one of `topic_partitions` changes (True) or `timeout_ms` passes (False)."""
        keys = set(topic_partitions)
        if not keys or timeout_ms <= 0:
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._watchers.setdefault(key, set()).add(future)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await future
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                futures = self._watchers.get(key)
                if futures is not None:
                    futures.discard(future)
                    if not futures:
                        del self._watchers[key]

    def notify(self, topic_partition: TopicPartition) -> None:
        for future in self._watchers.pop(topic_partition, ()):
            if not future.done():
                future.set_result(None)

    def notify_soon(self, topic_partition: TopicPartition) -> None:
        """`notify` from the event loop's next round of callbacks, once per partition."""
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._notify_pending)
        self._pending.add(topic_partition)

    def _notify_pending(self) -> None:
        pending, self._pending = self._pending, set()
        for topic_partition in pending:
            self.notify(topic_partition)

    def notify_all(self) -> None:
        for topic_partition in list(self._watchers):
            self.notify(topic_partition)
