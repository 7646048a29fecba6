"""One 3-node dev cluster (real processes) for the Kafka-protocol tests of this package, with
`cluster.kafka_bootstrap` for Kafka clients and `cluster.bootstrap` for our own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node.dev import DevCluster
from tests.node.cluster_harness import start_cluster, stopped


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(Path(tmp_path_factory.mktemp("kafka"))))
