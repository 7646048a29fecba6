"""LoopLagProbe: how long the event loop is kept from running ready callbacks (issue 15).

A task asks to wake every `interval_s` and records how late it woke: the overshoot is the time the
loop spent in callbacks that did not yield (a blocking fsync, a compaction pass, a large decode).
The figures go to `/metrics` as `tributary_event_loop_lag_seconds` (a histogram) and its p99 over
the last `LOOP_LAG_WINDOW` samples (`tributary_event_loop_lag_p99_seconds`), so a benchmark can
print the loop's worst stalls next to its latencies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

LOOP_LAG_INTERVAL_S = 0.01


class LoopLagProbe:
    """One named task sleeping `interval_s` at a time; `observe(overshoot_s)` after each wake-up."""

    def __init__(self, observe: Callable[[float], None], interval_s: float = LOOP_LAG_INTERVAL_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        assert interval_s > 0, f"interval_s={interval_s}"
        self._observe = observe
        self._interval_s = interval_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self, name: str) -> None:
        assert self._task is None, "loop lag probe already started"
        self._task = asyncio.create_task(self._run(), name=name)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    async def _run(self) -> None:
        while True:
            asked = self._clock()
            await asyncio.sleep(self._interval_s)
            self._observe(max(self._clock() - asked - self._interval_s, 0.0))
