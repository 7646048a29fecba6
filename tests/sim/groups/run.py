"""Run the consumer-group simulation: one seed (with an optional trace) or many, on several processes.

    .venv/bin/python -m tests.sim.groups.run --seed 12345 [--trace]   # replay one seed
    .venv/bin/python -m tests.sim.groups.run --seeds 10000 --jobs 2   # seeds 0..9999
    .venv/bin/python -m tests.sim.groups.run --regressions            # every seed that ever failed
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.sim import seed_runner
from tests.sim.groups.options import GroupSimOptions
from tests.sim.groups.simulator import GroupSimResult, GroupSimulation
from tests.sim.seed_runner import percentile

REGRESSIONS = Path(__file__).with_name("regressions.txt")


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    failure: str | None
    steps: int
    acked_during_fault: int  # stable assignments received while a fault was active
    generations: int
    commits: tuple[int, int]  # accepted, refused
    faults: tuple[int, int, int]  # crashes, pauses, coordinator failovers
    converged_ms: int | None


def replay_command(seed: int) -> str:
    return f".venv/bin/python -m tests.sim.groups.run --seed {seed}"


def run_seed(seed: int) -> SeedOutcome:
    simulation = GroupSimulation(seed)
    failure = None
    try:
        simulation.run()
    except Exception:  # every failure of a seed is reported, none hidden
        failure = traceback.format_exc(limit=-6)
    result = simulation.result
    return SeedOutcome(seed, failure, result.steps, result.generations_during_fault, result.generations,
                       (result.commits_accepted, result.commits_refused),
                       (result.crashes, result.pauses, result.failovers), result.converged_ms)


def run_seeds(seeds: list[int], jobs: int) -> Iterator[SeedOutcome]:
    return seed_runner.run_seeds(run_seed, seeds, jobs, chunksize=32)


def regression_seeds() -> list[int]:
    return seed_runner.regression_seeds(REGRESSIONS)


def record_regression(seed: int, failure: str) -> None:
    reason = failure.strip().splitlines()[-1][:100] if failure.strip() else "failure"
    seed_runner.record_regression(REGRESSIONS, seed, reason)


@dataclass(slots=True)
class Summary(seed_runner.Tally):
    generations: int = 0
    generations_during_fault: int = 0
    commits: list[int] = field(default_factory=lambda: [0, 0])
    faults: list[int] = field(default_factory=lambda: [0, 0, 0])
    converged: list[int] = field(default_factory=list)

    def add(self, outcome: SeedOutcome) -> None:
        self.count(outcome)
        self.generations += outcome.generations
        self.generations_during_fault += outcome.acked_during_fault
        self.commits = [total + part for total, part in zip(self.commits, outcome.commits, strict=True)]
        self.faults = [total + part for total, part in zip(self.faults, outcome.faults, strict=True)]
        if outcome.converged_ms is not None:
            self.converged.append(outcome.converged_ms)

    def report(self, elapsed_s: float) -> str:
        return (f"{self.head(elapsed_s)} (seeds with an assignment received during a fault) "
                f"assignments={self.generations} (during a fault: {self.generations_during_fault}) "
                f"commits accepted={self.commits[0]} refused={self.commits[1]} crashes={self.faults[0]} "
                f"pauses={self.faults[1]} coordinator failovers={self.faults[2]} "
                f"heal-to-settled p99={percentile(self.converged, 0.99)} max={max(self.converged, default=None)} ms")


def run_one(seed: int, trace: bool) -> int:
    return seed_runner.run_one(GroupSimOptions.from_seed(seed).line(),
                               lambda: GroupSimulation(seed, trace=print if trace else None), replay_command(seed),
                               _ok_line)


def _ok_line(result: GroupSimResult) -> str:
    return (f"steps={result.steps} assignments={result.generations} during_fault={result.generations_during_fault} "
            f"commits_accepted={result.commits_accepted} commits_refused={result.commits_refused} "
            f"crashes={result.crashes} pauses={result.pauses} failovers={result.failovers} "
            f"converged_ms={result.converged_ms}")


def main(argv: list[str] | None = None) -> int:
    args = seed_runner.argument_parser("python -m tests.sim.groups.run", __doc__, REGRESSIONS).parse_args(argv)
    if args.seed is not None:
        return run_one(args.seed, args.trace)
    summary = seed_runner.run_many(run_seeds(seed_runner.chosen_seeds(args, REGRESSIONS), args.jobs), Summary(),
                                   replay_command, None if args.no_record else record_regression, args.progress)
    return seed_runner.exit_status(args, summary)


if __name__ == "__main__":
    sys.exit(main())
