"""The quorum simulation as a test: every seed that ever failed (under both state machines), then
TRIBUTARY_SIM_SEEDS seeds of the default cluster-metadata simulation (1,000 by default; set
TRIBUTARY_SIM_SEEDS=100000 for a long run) and TRIBUTARY_SIM_HASH_LIST_SEEDS seeds (200) of the
hash-list state machine, whose client proposes many more (smaller) entries, each from a random start
drawn for each run (TRIBUTARY_SIM_START and TRIBUTARY_SIM_HASH_LIST_START replay one), on up to
TRIBUTARY_SIM_JOBS processes (default: 2, or fewer cores). The start is printed first, with the
commands that replay the campaign; a failure names the seed and the command that replays it."""

from __future__ import annotations

import os
import time

import pytest

from tests.sim.run import Summary, regression_seeds, replay_command, run_seed, run_seeds
from tests.sim.seed_runner import campaign_start

SEEDS = int(os.environ.get("TRIBUTARY_SIM_SEEDS", "1000"))
HASH_LIST_SEEDS = int(os.environ.get("TRIBUTARY_SIM_HASH_LIST_SEEDS", "200"))
JOBS = int(os.environ.get("TRIBUTARY_SIM_JOBS", str(min(2, os.cpu_count() or 1))))
HASH_LIST = "tests.sim.state_machines:HASH_LIST"


@pytest.mark.parametrize("spec_path", ["", HASH_LIST])
@pytest.mark.parametrize("seed", regression_seeds() or [0])
def test_regression_seed(seed: int, spec_path: str) -> None:
    outcome = run_seed(seed, spec_path)
    assert outcome.failure is None, (
        f"seed {seed} fails again; replay: {replay_command(seed, spec_path)}\n{outcome.failure}"
    )


def _run(seeds: int, spec_path: str, start_variable: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`seeds` seeds from a random start: none may fail, and at least 80 % must have had a write
    acknowledged during a fault (else the checks had too little to check)."""
    name = spec_path or "metadata"
    start = campaign_start(start_variable)
    spec = f" --spec {spec_path}" if spec_path else ""
    campaign = (f"seeds {start}..{start + seeds - 1}; replay this campaign with {start_variable}={start} "
                f".venv/bin/python -m pytest {os.path.relpath(__file__)} or "
                f".venv/bin/python -m tests.sim.run --seeds {seeds} --start {start} --jobs {JOBS}{spec}")
    with capsys.disabled():
        print(f"\n{name}: {campaign}")
    summary = Summary()
    started = time.monotonic()
    for outcome in run_seeds(range(start, start + seeds), JOBS, spec_path):
        summary.add(outcome)
    report = summary.report(time.monotonic() - started)
    with capsys.disabled():
        print(f"{name}: {report}")
    assert not summary.failures, f"{campaign}\n" + "\n".join(
        f"seed {outcome.seed}: replay with {replay_command(outcome.seed, spec_path)}\n{outcome.failure}"
        for outcome in summary.failures
    )
    shortfall = summary.coverage_shortfall()
    assert shortfall is None, f"{campaign}\n{shortfall}"


def test_simulation_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    """Goal: no safety violation (Raft, atomic requests, metadata invariants) and convergence after
    healing, for every seed. Method: SEEDS seeds from a random start, each a whole run of the
    simulator (tests/sim/simulator.py) with ClusterMetadata and the active QuorumController."""
    _run(SEEDS, "", "TRIBUTARY_SIM_START", capsys)


def test_simulation_hash_list_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    """Goal: Raft's safety under a dense stream of small proposals (many more entries, elections
    with longer uncommitted tails). Method: HASH_LIST_SEEDS seeds from a random start with the
    hash-list state machine, whose digest is compared after every apply."""
    _run(HASH_LIST_SEEDS, HASH_LIST, "TRIBUTARY_SIM_HASH_LIST_START", capsys)
