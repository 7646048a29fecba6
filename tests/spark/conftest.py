"""One local[2] Spark session for all Spark test modules and one real 3-node dev cluster per module.
A session costs 10-35 s to start on a busy 2-core machine and its first Python data source query
another ~10 s of worker start, so the session is shared (spark-notes: module or session scope);
every module gets its own cluster, topics and temp dirs."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession

import pipeline
from node.dev import DevCluster
from tests.node.cluster_harness import start_cluster, stopped


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("cluster")))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the data source planner ignores spark.pyspark.python
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tributary-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pipeline.register(session)
    try:
        yield session
    finally:
        session.stop()
