"""Run the replication simulation: one seed (with an optional trace) or many, on several processes.

    .venv/bin/python -m tests.sim.replication.run --seed 12345 [--trace]   # replay one seed
    .venv/bin/python -m tests.sim.replication.run --seeds 100000 --jobs 2  # seeds 0..99999
    .venv/bin/python -m tests.sim.replication.run --regressions            # every seed that ever failed

A run prints `seed=` and its options first; a failure prints the invariant, the message and the
one-line command that replays it, and (many seeds) is appended to regressions.txt.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.sim.replication.options import ReplicationSimOptions
from tests.sim.replication.simulator import Simulation

REGRESSIONS = Path(__file__).with_name("regressions.txt")


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    failure: str | None
    steps: int
    acked_all: int
    crashes: int
    truncations: int
    excused: int
    liveness_ms: int | None


def replay_command(seed: int) -> str:
    return f".venv/bin/python -m tests.sim.replication.run --seed {seed}"


def run_seed(seed: int) -> SeedOutcome:
    """One seed, in this process; failures come back as text (a worker must not die)."""
    simulation = Simulation(seed)
    try:
        result = simulation.run()
    except Exception:  # every failure of a seed is reported, none hidden
        result = simulation.result
        return SeedOutcome(seed, traceback.format_exc(limit=-6), result.steps, result.acked_all, result.crashes,
                           result.truncations, result.excused, None)
    return SeedOutcome(seed, None, result.steps, result.acked_all, result.crashes, result.truncations,
                       result.excused, result.liveness_ms)


def run_seeds(seeds: Iterable[int], jobs: int) -> Iterator[SeedOutcome]:
    seed_list = list(seeds)
    if jobs <= 1:
        yield from map(run_seed, seed_list)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap_unordered(run_seed, seed_list, chunksize=8)


def regression_seeds() -> list[int]:
    if not REGRESSIONS.exists():
        return []
    seeds = []
    for line in REGRESSIONS.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            seeds.append(int(text))
    return seeds


def record_regression(seed: int, failure: str) -> None:
    if seed in regression_seeds():
        return
    reason = failure.strip().splitlines()[-1][:100] if failure.strip() else "failure"
    with open(REGRESSIONS, "a", encoding="utf-8") as file:
        file.write(f"{seed}  # {reason}\n")


@dataclass(slots=True)
class Summary:
    seeds: int = 0
    failures: list[SeedOutcome] = field(default_factory=list)
    steps: int = 0
    acked_all: int = 0
    crashes: int = 0
    truncations: int = 0
    excused: int = 0
    liveness: list[int] = field(default_factory=list)

    def add(self, outcome: SeedOutcome) -> None:
        self.seeds += 1
        self.steps += outcome.steps
        self.acked_all += outcome.acked_all
        self.crashes += outcome.crashes
        self.truncations += outcome.truncations
        self.excused += outcome.excused
        if outcome.failure is not None:
            self.failures.append(outcome)
        if outcome.liveness_ms is not None:
            self.liveness.append(outcome.liveness_ms)

    def report(self, elapsed_s: float) -> str:
        liveness = sorted(self.liveness)
        p99 = liveness[min(len(liveness) - 1, int(0.99 * len(liveness)))] if liveness else None
        return (
            f"seeds={self.seeds} failures={len(self.failures)} elapsed={elapsed_s:.1f}s "
            f"seeds/s={self.seeds / max(elapsed_s, 1e-9):.1f} steps/seed={self.steps // max(self.seeds, 1)} "
            f"acks=all={self.acked_all} crashes={self.crashes} truncations={self.truncations} "
            f"excused-by-lost-disks={self.excused} heal-to-converged p99={p99} max={max(liveness, default=None)} ms"
        )


def run_many(seeds: list[int], jobs: int, record: bool, progress_every: int) -> Summary:
    summary = Summary()
    started = time.monotonic()
    for outcome in run_seeds(seeds, jobs):
        summary.add(outcome)
        if outcome.failure is not None:
            print(f"FAIL seed={outcome.seed}\n{outcome.failure}\nreplay: {replay_command(outcome.seed)}", flush=True)
            if record:
                record_regression(outcome.seed, outcome.failure)
        if progress_every and summary.seeds % progress_every == 0:
            print(f"... {summary.report(time.monotonic() - started)}", flush=True)
    print(summary.report(time.monotonic() - started), flush=True)
    return summary


def run_one(seed: int, trace: bool) -> int:
    print(ReplicationSimOptions.from_seed(seed).describe(), flush=True)
    simulation = Simulation(seed, trace=print if trace else None)
    try:
        result = simulation.run()
    except AssertionError:
        traceback.print_exc()
        print(f"FAILED at simulated {simulation.now_ms} ms after {simulation.result.steps} steps\n"
              f"replay: {replay_command(seed)} --trace", flush=True)
        return 1
    print(f"ok steps={result.steps} simulated_ms={result.simulated_ms} produced={result.produced} "
          f"acked_all={result.acked_all} consumed_batches={result.consumed_batches} crashes={result.crashes} "
          f"leader_changes={result.leader_changes} truncations={result.truncations} excused={result.excused} "
          f"liveness_ms={result.liveness_ms}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.replication.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="with --seed: one line per event and Ready")
    parser.add_argument("--seeds", type=int, help="run this many seeds, from --start")
    parser.add_argument("--start", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--regressions", action="store_true", help="run the seeds in regressions.txt")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--no-record", action="store_true", help="do not append failing seeds to regressions.txt")
    parser.add_argument("--progress", type=int, default=1000, help="print progress every N seeds (0: never)")
    args = parser.parse_args(argv)
    if args.seed is not None:
        return run_one(args.seed, args.trace)
    seeds = regression_seeds() if args.regressions else list(range(args.start, args.start + (args.seeds or 1000)))
    summary = run_many(seeds, args.jobs, record=not args.no_record, progress_every=args.progress)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
