"""Run the quorum simulation: one seed (with an optional trace) or many, on several processes.

    .venv/bin/python -m tests.sim.run --seed 12345 [--trace]      # replay one seed
    .venv/bin/python -m tests.sim.run --seeds 100000 --jobs 2     # seeds 0..99999
    .venv/bin/python -m tests.sim.run --regressions               # every seed that ever failed
    .venv/bin/python -m tests.sim.run --seeds 1000 --spec tests.sim.state_machines:HASH_LIST  # opaque payloads

The default state machine is the cluster metadata (`ClusterMetadata` applied on every node, a
`QuorumController` on the active one: tests/sim/metadata_workload.py).

A run prints `seed=` and its options first; a failure prints the property, the message and the
one-line command that replays it, and (many seeds) is appended to tests/sim/regressions.txt. The
summary gives seeds/s and the distribution of election time after a leader crash.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.sim import seed_runner
from tests.sim.options import SimOptions
from tests.sim.seed_runner import percentile
from tests.sim.simulator import SimResult, Simulation
from tests.sim.state_machines import METADATA, StateMachineSpec

REGRESSIONS = Path(__file__).with_name("regressions.txt")


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    failure: str | None
    election_after_crash_ms: int | None
    liveness_ms: int | None
    steps: int
    simulated_ms: int
    committed: int
    fetch_timeout_ms: int = 0
    wipes: int = 0
    acked_during_fault: int = 0
    refused_leader_fetches: int = 0


def replay_command(seed: int, spec_path: str = "") -> str:
    spec = f" --spec {spec_path}" if spec_path else ""
    return f".venv/bin/python -m tests.sim.run --seed {seed}{spec}"


def load_spec(path: str) -> StateMachineSpec:
    """`module:attribute` naming a StateMachineSpec (default: the cluster metadata, `METADATA`)."""
    if not path:
        return METADATA
    module_name, _, attribute = path.partition(":")
    spec = getattr(importlib.import_module(module_name), attribute)
    assert isinstance(spec, StateMachineSpec), f"{path} is a {type(spec).__name__}, not a StateMachineSpec"
    return spec


def run_seed(seed: int, spec_path: str = "") -> SeedOutcome:
    """One seed, in this process; failures come back as text (a worker must not die)."""
    simulation = Simulation(seed, spec=load_spec(spec_path))
    try:
        result = simulation.run()
    except Exception:  # every failure of a seed is reported, none hidden
        return SeedOutcome(seed, traceback.format_exc(limit=-6), None, None, simulation.result.steps,
                           simulation.now_ms, len(simulation.checker.canonical),
                           acked_during_fault=simulation.result.acked_during_fault)
    return SeedOutcome(seed, None, result.election_after_crash_ms, result.liveness_ms, result.steps,
                       result.simulated_ms, result.committed, simulation.options.fetch_timeout_ms, result.wipes,
                       result.acked_during_fault, result.refused_leader_fetches)


def run_seeds(seeds: Iterable[int], jobs: int, spec_path: str = "") -> Iterator[SeedOutcome]:
    return seed_runner.run_seeds(functools.partial(run_seed, spec_path=spec_path), seeds, jobs, chunksize=4)


def regression_seeds() -> list[int]:
    return seed_runner.regression_seeds(REGRESSIONS)


def record_regression(seed: int, failure: str, spec_path: str = "") -> None:
    exceptions = [line for line in failure.splitlines() if re.match(r"^[\w.]+(Error|Violation|Failure): ", line)]
    reason = exceptions[-1][:110] if exceptions else "failure"
    if spec_path:
        reason = f"--spec {spec_path}: {reason}"
    seed_runner.record_regression(REGRESSIONS, seed, reason)


def _fixed(value: float | None) -> str:
    return "None" if value is None else f"{value:.2f}"


@dataclass(slots=True)
class Summary(seed_runner.Tally):
    elections: list[int] = field(default_factory=list)
    election_ratios: list[float] = field(default_factory=list)
    liveness: list[int] = field(default_factory=list)
    wipes: int = 0
    seeds_with_wipes: int = 0
    refused_leader_fetches: int = 0
    seeds_with_refused_leaders: int = 0

    def add(self, outcome: SeedOutcome) -> None:
        self.count(outcome)
        self.wipes += outcome.wipes
        self.seeds_with_wipes += 1 if outcome.wipes else 0
        self.refused_leader_fetches += outcome.refused_leader_fetches
        self.seeds_with_refused_leaders += 1 if outcome.refused_leader_fetches else 0
        if outcome.election_after_crash_ms is not None:
            self.elections.append(outcome.election_after_crash_ms)
            self.election_ratios.append(outcome.election_after_crash_ms / max(outcome.fetch_timeout_ms, 1))
        if outcome.liveness_ms is not None:
            self.liveness.append(outcome.liveness_ms)

    def report(self, elapsed_s: float) -> str:
        elections, liveness = self.elections, self.liveness
        return (
            f"{self.head(elapsed_s)}\n"
            f"election after leader crash (simulated ms): n={len(elections)} p50={percentile(elections, 0.5)} "
            f"p99={percentile(elections, 0.99)} max={max(elections, default=None)}; in fetch timeouts: "
            f"p50={_fixed(percentile(self.election_ratios, 0.5))} "
            f"p99={_fixed(percentile(self.election_ratios, 0.99))}\n"
            f"heal to converged (simulated ms): p50={percentile(liveness, 0.5)} p99={percentile(liveness, 0.99)} "
            f"max={max(liveness, default=None)}\n"
            f"wiped disks: {self.wipes} in {self.seeds_with_wipes} seeds\n"
            f"fetches refused by the follower's own leader (an election without the fetch timeout): "
            f"{self.refused_leader_fetches} in {self.seeds_with_refused_leaders} seeds"
        )


def run_many(seeds: list[int], jobs: int, record: bool, progress_every: int, spec_path: str = "") -> Summary:
    return seed_runner.run_many(run_seeds(seeds, jobs, spec_path), Summary(),
                                functools.partial(replay_command, spec_path=spec_path),
                                functools.partial(record_regression, spec_path=spec_path) if record else None,
                                progress_every)


def _ok_line(result: SimResult) -> str:
    return (f"steps={result.steps} simulated_ms={result.simulated_ms} committed={result.committed} "
            f"elections={result.elections} crashes={result.crashes} wipes={result.wipes} "
            f"acked_during_fault={result.acked_during_fault} messages={result.messages} "
            f"refused_leader_fetches={result.refused_leader_fetches} "
            f"election_after_crash_ms={result.election_after_crash_ms} liveness_ms={result.liveness_ms}")


def run_one(seed: int, trace: bool, spec_path: str = "") -> int:
    return seed_runner.run_one(SimOptions.from_seed(seed).describe(),
                               lambda: Simulation(seed, spec=load_spec(spec_path), trace=print if trace else None),
                               replay_command(seed, spec_path), _ok_line)


def main(argv: list[str] | None = None) -> int:
    parser = seed_runner.argument_parser("python -m tests.sim.run", __doc__, REGRESSIONS)
    parser.add_argument("--spec", default="", help="module:attribute of a StateMachineSpec (default: cluster "
                        "metadata; tests.sim.state_machines:HASH_LIST for opaque payloads)")
    args = parser.parse_args(argv)
    if args.seed is not None:
        return run_one(args.seed, args.trace, args.spec)
    summary = run_many(seed_runner.chosen_seeds(args, REGRESSIONS), args.jobs, record=not args.no_record,
                       progress_every=args.progress, spec_path=args.spec)
    return seed_runner.exit_status(args, summary)


if __name__ == "__main__":
    sys.exit(main())
