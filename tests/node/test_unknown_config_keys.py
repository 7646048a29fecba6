"""`tributary-node` warns at start of every config key it does not know, naming the key, where it
was set and, for a likely typo, the key meant; it still starts (Kafka's AbstractConfig.logUnused).

Method: `node.main.main` runs with a real properties file, environment and `--override`, with the
node itself stubbed out (constructing and serving it is not what is tested); the WARNING records
are read from caplog."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import node.main
from node.config import NodeConfig

VOTERS = "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[NodeConfig]:
    """The configs `main` went on to serve, with no node started (and no TRIBUTARY_ variables but
    the test's own)."""
    configs: list[NodeConfig] = []
    for name in [name for name in os.environ if name.startswith("TRIBUTARY_")]:
        monkeypatch.delenv(name)

    async def serve(config: NodeConfig) -> int:
        configs.append(config)
        return 0

    monkeypatch.setattr(node.main, "Node", lambda config: config)
    monkeypatch.setattr(node.main, "_serve", serve)
    return configs


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == "node.main" and record.levelno == logging.WARNING]


def test_each_unknown_key_is_logged_at_start_with_its_source_and_the_key_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, served: list[NodeConfig]
) -> None:
    path = tmp_path / "server.properties"
    path.write_text(f"node.id=1\ncontroller.quorum.voters={VOTERS}\nlog.dirs={tmp_path}\n"
                    "foo.bar=1\nlog.retension.hours=1\noffsets.retention.minutes=5\n")
    monkeypatch.setenv("TRIBUTARY_MIN_INSYNC_REPLICA", "2")
    monkeypatch.setenv("TRIBUTARY_BOOTSTRAP", "127.0.0.1:9192")  # the CLI's, not a node key: no warning
    monkeypatch.setenv("TRIBUTARY_EVENT_LOOP", "uvloop")  # read by the entry point, not a node key: no warning
    with caplog.at_level(logging.WARNING, logger="node.main"):
        assert node.main.main(["--config", str(path), "--override", "num.network.threads=3"]) == 0
    assert len(served) == 1, "an unknown key does not stop the node"
    assert warnings_of(caplog) == [
        f"unknown config key 'foo.bar' in {path} is ignored",
        f"unknown config key 'log.retension.hours' in {path} is ignored (did you mean 'log.retention.hours'?)",
        "unknown config key 'min.insync.replica' in environment variable TRIBUTARY_MIN_INSYNC_REPLICA is ignored"
        " (did you mean 'min.insync.replicas'?)",
        "unknown config key 'num.network.threads' in --override num.network.threads is ignored",
        f"unknown config key 'offsets.retention.minutes' in {path} is ignored",
    ]


def test_a_config_of_known_keys_logs_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, served: list[NodeConfig]
) -> None:
    """The dev cluster's and the Docker image's files hold only known keys; so does this one."""
    path = tmp_path / "server.properties"
    path.write_text(f"node.id=1\ncontroller.quorum.voters={VOTERS}\nlog.dirs={tmp_path}\n"
                    "controller.quorum.election.timeout.ms=1000\nlog.retention.hours=1\n")
    with caplog.at_level(logging.WARNING, logger="node.main"):
        assert node.main.main(["--config", str(path)]) == 0
    assert (len(served), warnings_of(caplog)) == (1, [])
