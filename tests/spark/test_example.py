"""The page-views example end to end on a small generated day, checked against the generator."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from node.dev import DevCluster
from pipeline.examples import page_views

pytestmark = pytest.mark.spark


def test_page_view_counts_reach_parquet_and_the_compacted_topic(
    spark: SparkSession, cluster: DevCluster, tmp_path: Path
) -> None:
    views = page_views.generate(600, 5, seed=3, now_ms=int(time.time() * 1000))
    table = page_views.run(spark, cluster.bootstrap, tmp_path, views)

    # Closed windows: those ending at or before the watermark (latest event time - 1 minute).
    watermark = max(v.ts for v in views) - 60_000
    starts = [(v.page, v.ts // 60_000 * 60_000) for v in views]
    expected = Counter((page, start) for page, start in starts if start + 60_000 <= watermark)
    parquet = spark.read.parquet(str(tmp_path / "page_view_counts")).selectExpr(
        "page", "unix_millis(window_start) AS start", "views").collect()
    found = {(r.page, r.start): r.views for r in parquet}
    assert found == dict(expected)

    latest = {}
    for (page, start), count in sorted(expected.items(), key=lambda item: item[0][1]):
        latest[page] = (datetime.fromtimestamp(start / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), count)
    assert {r.page: (r.window_start, r.views) for r in table.collect()} == latest
