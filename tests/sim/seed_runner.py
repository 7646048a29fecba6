"""The seed runner both simulators' command lines share (tests/sim/run.py, tests/sim/replication/run.py).

Each simulator brings what is its own: `run_seed` (one seed in this process, its failure as text),
its `SeedOutcome` and `Summary` (a `Tally` plus its own figures), the replay command, the reason a
failing seed is recorded with, and the `ok ...` line of one seed. This module does the rest: the
seeds on worker processes, the regressions file, the campaign loop with its progress and summary
lines, one seed's run with its FAILED line, and the command-line flags.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tests.sim.fault_window import COVERAGE_MIN

Number = TypeVar("Number", int, float)
ROOT = Path(__file__).resolve().parents[2]


class Outcome(Protocol):
    """What the runner reads of a seed's outcome."""

    @property
    def seed(self) -> int: ...
    @property
    def failure(self) -> str | None: ...
    @property
    def steps(self) -> int: ...
    @property
    def acked_during_fault(self) -> int: ...


OutcomeT = TypeVar("OutcomeT", bound=Outcome)


class Runnable(Protocol):
    """What the runner reads of a simulation: `run()`, and where it stood when it failed."""

    now_ms: int
    result: Any

    def run(self) -> Any: ...


def run_seeds(run_seed: Callable[[int], OutcomeT], seeds: Iterable[int], jobs: int,
              chunksize: int) -> Iterator[OutcomeT]:
    """`run_seed` over `seeds`: in this process and in order, or on `jobs` forked workers (any order)."""
    seed_list = list(seeds)
    if jobs <= 1:
        yield from map(run_seed, seed_list)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap_unordered(run_seed, seed_list, chunksize=chunksize)


def regression_seeds(path: Path) -> list[int]:
    """The seeds in a regressions file: one a line, `#` starts a comment."""
    if not path.exists():
        return []
    seeds = []
    for line in path.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            seeds.append(int(text))
    return seeds


def record_regression(path: Path, seed: int, reason: str) -> None:
    """Append `seed  # reason` to the regressions file, unless the seed is there already."""
    if seed in regression_seeds(path):
        return
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"{seed}  # {reason}\n")


def percentile(values: Sequence[Number], fraction: float) -> Number | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass(slots=True)
class Tally:
    """What every campaign counts; a simulator's Summary adds its own figures and `report`.
    `seeds_acked_during_fault`: seeds that had a write acknowledged while a fault was active
    (`tests/sim/fault_window.py`); a campaign with fewer than COVERAGE_MIN of those fails."""

    seeds: int = 0
    steps: int = 0
    seeds_acked_during_fault: int = 0
    failures: list[Any] = field(default_factory=list)

    def count(self, outcome: Outcome) -> None:
        self.seeds += 1
        self.steps += outcome.steps
        if outcome.acked_during_fault:
            self.seeds_acked_during_fault += 1
        if outcome.failure is not None:
            self.failures.append(outcome)

    @property
    def coverage(self) -> float:
        return self.seeds_acked_during_fault / max(self.seeds, 1)

    def coverage_shortfall(self) -> str | None:
        """Why the campaign fails although no seed did: too few seeds tested a write under a fault."""
        if self.coverage >= COVERAGE_MIN:
            return None
        return (f"only {self.seeds_acked_during_fault} of {self.seeds} seeds ({self.coverage:.1%}) had a write "
                f"acknowledged during a fault; a campaign needs {COVERAGE_MIN:.0%}")

    def head(self, elapsed_s: float) -> str:
        """The first words of every summary: seeds, failures, speed, steps per seed, and the seeds
        that had a write acknowledged during a fault."""
        return (f"seeds={self.seeds} failures={len(self.failures)} elapsed={elapsed_s:.1f}s "
                f"seeds/s={self.seeds / max(elapsed_s, 1e-9):.1f} steps/seed={self.steps // max(self.seeds, 1)} "
                f"acked-during-fault={self.seeds_acked_during_fault} ({self.coverage:.1%})")


class Summary(Protocol[OutcomeT]):
    seeds: int
    failures: list[Any]

    def add(self, outcome: OutcomeT) -> None: ...
    def report(self, elapsed_s: float) -> str: ...
    def coverage_shortfall(self) -> str | None: ...


SummaryT = TypeVar("SummaryT", bound=Summary[Any])


def run_many(outcomes: Iterable[OutcomeT], summary: SummaryT, replay_command: Callable[[int], str],
             record: Callable[[int, str], None] | None, progress_every: int) -> SummaryT:
    """Add each outcome to `summary`; print each failure with its replay command (and `record` it),
    the summary every `progress_every` seeds (lines prefixed `... `) and at the end."""
    started = time.monotonic()
    for outcome in outcomes:
        summary.add(outcome)
        if outcome.failure is not None:
            print(f"FAIL seed={outcome.seed}\n{outcome.failure}\nreplay: {replay_command(outcome.seed)}",
                  flush=True)
            if record is not None:
                record(outcome.seed, outcome.failure)
        if progress_every and summary.seeds % progress_every == 0:
            print("... " + summary.report(time.monotonic() - started).replace("\n", "\n... "), flush=True)
    print(summary.report(time.monotonic() - started), flush=True)
    return summary


def run_one(options_line: str, make_simulation: Callable[[], Runnable], replay_command: str,
            ok_line: Callable[[Any], str]) -> int:
    """Print the options, then make and run the simulation: `ok ...` and 0, or the traceback, where it
    failed and the command that replays it with a trace, and 1."""
    print(options_line, flush=True)
    simulation = make_simulation()
    try:
        result = simulation.run()
    except AssertionError:
        traceback.print_exc()
        print(f"FAILED at simulated {simulation.now_ms} ms after {simulation.result.steps} steps\n"
              f"replay: {replay_command} --trace", flush=True)
        return 1
    print(f"ok {ok_line(result)}")
    return 0


def argument_parser(prog: str, description: str | None, regressions: Path) -> argparse.ArgumentParser:
    """The flags of both command lines; a simulator may add its own."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="with --seed: one line per event and Ready")
    parser.add_argument("--seeds", type=int, help="run this many seeds, from --start")
    parser.add_argument("--start", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--regressions", action="store_true",
                        help=f"run the seeds in {_shown(regressions)}")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--no-record", action="store_true", help="do not append failing seeds to regressions.txt")
    parser.add_argument("--progress", type=int, default=1000, help="print progress every N seeds (0: never)")
    return parser


def _shown(path: Path) -> str:
    """`path` from the repository's root, as the commands are typed."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def chosen_seeds(args: argparse.Namespace, regressions: Path) -> list[int]:
    """The seeds the flags ask for: the regressions file's, or --seeds (default 1000) from --start."""
    if args.regressions:
        return regression_seeds(regressions)
    return list(range(args.start, args.start + (args.seeds or 1000)))


def campaign_start(variable: str) -> int:
    """The first seed of a test campaign: the environment variable `variable` if set (to replay a
    campaign), else drawn at random for this run, so that every run tries seeds no run tried before
    (issue 11: a fixed range finds nothing new after its first run)."""
    value = os.environ.get(variable)
    return int(value) if value else random.SystemRandom().randrange(1_000_000_000)


def exit_status(args: argparse.Namespace, summary: Summary[Any]) -> int:
    """1 if a seed failed, or if a campaign (not the regressions) fell short of its coverage."""
    shortfall = None if args.regressions else summary.coverage_shortfall()
    if shortfall is not None:
        print(f"FAIL campaign: {shortfall}", flush=True)
    return 1 if summary.failures or shortfall is not None else 0
