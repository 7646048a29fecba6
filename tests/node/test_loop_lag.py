"""The loop-lag probe and its `/metrics` figures (issue 15).

Method: the probe reads a fake clock that the test moves forward while the probe sleeps, as a
blocking call would; the probe must report the overshoot past its interval. The p99 gauge is
checked against a known set of samples."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from node.loop_lag import LoopLagProbe
from node.metrics import LOOP_LAG_WINDOW, NodeMetrics, QuorumMetrics


async def test_the_probe_reports_how_late_it_woke() -> None:
    # The clock's readings, two per wake-up (before the sleep, after it): first the loop was held
    # 0.25 s (0.24 s past the 10 ms asked for), then the fake clock says it woke early.
    readings = iter([100.0, 100.25, 100.25, 100.255, 100.255])
    observed: asyncio.Queue[float] = asyncio.Queue()
    probe = LoopLagProbe(observed.put_nowait, interval_s=0.01, clock=lambda: next(readings))
    probe.start("loop-lag-test")
    assert abs(await asyncio.wait_for(observed.get(), 5) - 0.24) < 1e-9
    assert await asyncio.wait_for(observed.get(), 5) == 0.0, "never a negative lag"
    await probe.stop()


def scrape(metrics: NodeMetrics) -> dict[str, float]:
    text = metrics.render()[0].decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if not sample.labels}


def test_metrics_give_the_p99_and_max_of_the_recent_window() -> None:
    metrics = NodeMetrics(None, lambda: QuorumMetrics(1, 1, 1, 0, True))
    assert scrape(metrics)["tributary_event_loop_lag_p99_seconds"] == 0.0
    metrics.observe_loop_lag(9.0)  # an old stall, pushed out of the window below
    for millis in range(LOOP_LAG_WINDOW):
        metrics.observe_loop_lag((millis % 100) / 1000)
    figures = scrape(metrics)
    assert figures["tributary_event_loop_lag_p99_seconds"] == 0.099
    assert figures["tributary_event_loop_lag_max_seconds"] == 0.099
    assert figures["tributary_event_loop_lag_seconds_count"] == LOOP_LAG_WINDOW + 1
