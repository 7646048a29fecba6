"""The quorum simulation as a test: every seed that ever failed (under both state machines), then
TRIBUTARY_SIM_SEEDS seeds of the default cluster-metadata simulation (1,000 by default; set
TRIBUTARY_SIM_SEEDS=100000 for a long run) and TRIBUTARY_SIM_HASH_LIST_SEEDS seeds (200) of the
hash-list state machine, whose client proposes many more (smaller) entries, on up to
TRIBUTARY_SIM_JOBS processes (default: 2, or fewer cores). A failure names the seed and the
command that replays it."""

from __future__ import annotations

import os
import time

import pytest

from tests.sim.run import Summary, regression_seeds, replay_command, run_seed, run_seeds

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


def _run(seeds: int, spec_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    summary = Summary()
    started = time.monotonic()
    for outcome in run_seeds(range(seeds), JOBS, spec_path):
        summary.add(outcome)
    report = summary.report(time.monotonic() - started)
    with capsys.disabled():
        print(f"\n{spec_path or 'metadata'}: {report}")
    failures = summary.failures or []
    assert not failures, "\n".join(
        f"seed {outcome.seed}: replay with {replay_command(outcome.seed, spec_path)}\n{outcome.failure}"
        for outcome in failures
    )


def test_simulation_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    """Goal: no safety violation (Raft, atomic requests, metadata invariants) and convergence after
    healing, for every seed. Method: seeds 0..SEEDS-1, each a whole run of the simulator
    (tests/sim/simulator.py) with ClusterMetadata and the active QuorumController."""
    _run(SEEDS, "", capsys)


def test_simulation_hash_list_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    """Goal: Raft's safety under a dense stream of small proposals (many more entries, elections
    with longer uncommitted tails). Method: seeds 0..HASH_LIST_SEEDS-1 with the hash-list state
    machine, whose digest is compared after every apply."""
    _run(HASH_LIST_SEEDS, HASH_LIST, capsys)
