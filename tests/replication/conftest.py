from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage.config import LogConfig
from tests.replication.harness import Broker, log_config


@pytest.fixture
def brokers() -> Iterator[Callable[..., list[Broker]]]:
    """`brokers(**log properties)` -> brokers 1, 2, 3 on their own directories (in /dev/shm when
    present: the cores fsync their epoch checkpoints, and a disk makes the tests slow)."""
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="tributary-replication-test-", dir=shm if shm.is_dir() else None))
    made: list[Broker] = []

    def make(**properties: str) -> list[Broker]:
        config: LogConfig = log_config(**properties)
        made.extend(Broker(root, broker_id, config) for broker_id in (1, 2, 3))
        return made[-3:]

    yield make
    for broker in made:
        broker.close()
    shutil.rmtree(root, ignore_errors=True)
