"""The docker tests' cluster: one compose project for the test module, always torn down with
`down -v`; a dockerd that deploy/ensure-docker started for it is stopped at its end.
Where Docker cannot run, every docker test is skipped with one line that says why.

Measured times (failover, ISR shrink, controller election) are printed by the tests and repeated
in a "docker measurements" section of the terminal summary, so a plain `make test` shows them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest

from tests.docker.compose_harness import (
    SKIP_REASON_PREFIX,
    ComposeCluster,
    DockerUnavailable,
    build_image,
    compose_command,
    ensure_docker,
    stop_docker,
)
from tests.node.cluster_harness import free_port_block

MEASUREMENTS: list[str] = []


# Module scope: the containers go (and a dockerd started for them stops) as soon as the docker
# tests are done, not at the end of a whole `make test` whose other tests they would slow down.
@pytest.fixture(scope="module")
def compose_cluster() -> Iterator[ComposeCluster]:
    try:
        started_dockerd = ensure_docker()
        compose = compose_command()
    except DockerUnavailable as reason:
        pytest.skip(str(reason))
    try:
        started = time.monotonic()
        base = build_image()
        MEASUREMENTS.append(f"image tributary:test built on {base} in {time.monotonic() - started:.1f} s")
        base_port = free_port_block(6)  # the HTTP listeners, then the Kafka ones
        cluster = ComposeCluster(f"tributarytest{os.getpid()}", {n: base_port + n - 1 for n in (1, 2, 3)},
                                 {n: base_port + n + 2 for n in (1, 2, 3)}, compose)
        try:
            started = time.monotonic()
            cluster.up()
            MEASUREMENTS.append(f"3 containers up and healthy in {time.monotonic() - started:.1f} s "
                                f"({' '.join(compose)})")
            yield cluster
        finally:
            cluster.down()
    finally:
        if started_dockerd:
            stop_docker()


@pytest.fixture
def measured() -> Callable[[str], None]:
    """Print a measurement now and again in the terminal summary."""

    def report(line: str) -> None:
        print(line)
        MEASUREMENTS.append(line)

    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """pytest files a skip from a fixture under each test's own line, so `-ra` would list the same
    reason once per test; filed under this file, the summary folds them into one line."""
    report: pytest.TestReport = yield
    if report.skipped and isinstance(report.longrepr, tuple) and SKIP_REASON_PREFIX in report.longrepr[2]:
        report.longrepr = (__file__, None, report.longrepr[2])  # type: ignore[assignment]
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MEASUREMENTS:
        terminalreporter.section("docker measurements")
        for line in MEASUREMENTS:
            terminalreporter.write_line(line)
