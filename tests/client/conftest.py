from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.client.fake_node import FakeCluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[FakeCluster]:
    """Three fake nodes; topic `t` with 3 partitions led by nodes 0, 1, 2 (replicas 0,1,2 rotated)."""
    async with FakeCluster(tmp_path) as fake:
        fake.create_topic("t", partitions=3)
        yield fake
