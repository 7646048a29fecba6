"""The replication simulation as a test: every seed that ever failed, then TRIBUTARY_REPLICATION_SIM_SEEDS
seeds (1,000 by default; set TRIBUTARY_REPLICATION_SIM_SEEDS=100000 for a long run) on up to
TRIBUTARY_REPLICATION_SIM_JOBS processes (default: 2, or fewer cores). A failure names the seed and the
command that replays it."""

from __future__ import annotations

import os
import time

import pytest

from tests.sim.replication.run import Summary, regression_seeds, replay_command, run_seed, run_seeds

SEEDS = int(os.environ.get("TRIBUTARY_REPLICATION_SIM_SEEDS", "1000"))
JOBS = int(os.environ.get("TRIBUTARY_REPLICATION_SIM_JOBS", str(min(2, os.cpu_count() or 1))))


@pytest.mark.parametrize("seed", regression_seeds() or [0])
def test_regression_seed(seed: int) -> None:
    outcome = run_seed(seed)
    assert outcome.failure is None, f"seed {seed} fails again; replay: {replay_command(seed)}\n{outcome.failure}"


def test_simulation_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    """Goal: no violation of DESIGN §6 (1-4, 6) and convergence after healing, for every seed. Method:
    seeds 0..SEEDS-1, each a whole run of the simulator (tests/sim/replication/simulator.py)."""
    summary = Summary()
    started = time.monotonic()
    for outcome in run_seeds(range(SEEDS), JOBS):
        summary.add(outcome)
    report = summary.report(time.monotonic() - started)
    with capsys.disabled():
        print(f"\nreplication simulation: {report}")
    assert not summary.failures, "\n".join(
        f"seed {outcome.seed}: replay with {replay_command(outcome.seed)}\n{outcome.failure}"
        for outcome in summary.failures
    )
