from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage.config import LogConfig
from tests.replication.harness import Broker, log_config


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Callable[..., list[Broker]]]:
    """`brokers(**log properties)` -> brokers 1, 2, 3 on their own directories."""
    made: list[Broker] = []

    def make(**properties: str) -> list[Broker]:
        config: LogConfig = log_config(**properties)
        made.extend(Broker(tmp_path, broker_id, config) for broker_id in (1, 2, 3))
        return made[-3:]

    yield make
    for broker in made:
        broker.close()
