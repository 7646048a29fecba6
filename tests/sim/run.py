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

import argparse
import functools
import importlib
import multiprocessing
import re
import sys
import time
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.sim.options import SimOptions
from tests.sim.simulator import Simulation
from tests.sim.state_machines import METADATA, StateMachineSpec

REGRESSIONS = Path(__file__).with_name("regressions.txt")
Number = TypeVar("Number", int, float)


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
                           simulation.now_ms, len(simulation.checker.canonical))
    return SeedOutcome(seed, None, result.election_after_crash_ms, result.liveness_ms, result.steps,
                       result.simulated_ms, result.committed, simulation.options.fetch_timeout_ms)


def run_seeds(seeds: Iterable[int], jobs: int, spec_path: str = "") -> Iterator[SeedOutcome]:
    seed_list = list(seeds)
    run = functools.partial(run_seed, spec_path=spec_path)
    if jobs <= 1:
        yield from map(run, seed_list)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap_unordered(run, seed_list, chunksize=4)


def regression_seeds() -> list[int]:
    if not REGRESSIONS.exists():
        return []
    seeds = []
    for line in REGRESSIONS.read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            seeds.append(int(text))
    return seeds


def record_regression(seed: int, failure: str, spec_path: str = "") -> None:
    if seed in regression_seeds():
        return
    exceptions = [line for line in failure.splitlines() if re.match(r"^[\w.]+(Error|Violation|Failure): ", line)]
    reason = exceptions[-1][:110] if exceptions else "failure"
    if spec_path:
        reason = f"--spec {spec_path}: {reason}"
    with open(REGRESSIONS, "a", encoding="utf-8") as file:
        file.write(f"{seed}  # {reason}\n")


def _fixed(value: float | None) -> str:
    return "None" if value is None else f"{value:.2f}"


def percentile(values: Sequence[Number], fraction: float) -> Number | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass(slots=True)
class Summary:
    seeds: int = 0
    failures: list[SeedOutcome] | None = None
    elections: list[int] | None = None
    election_ratios: list[float] | None = None
    liveness: list[int] | None = None
    steps: int = 0

    def add(self, outcome: SeedOutcome) -> None:
        self.seeds += 1
        self.steps += outcome.steps
        if outcome.failure is not None:
            self.failures = [*(self.failures or []), outcome]
        if outcome.election_after_crash_ms is not None:
            self.elections = [*(self.elections or []), outcome.election_after_crash_ms]
            ratio = outcome.election_after_crash_ms / max(outcome.fetch_timeout_ms, 1)
            self.election_ratios = [*(self.election_ratios or []), ratio]
        if outcome.liveness_ms is not None:
            self.liveness = [*(self.liveness or []), outcome.liveness_ms]

    def report(self, elapsed_s: float) -> str:
        elections = self.elections or []
        liveness = self.liveness or []
        failures = self.failures or []
        return (
            f"seeds={self.seeds} failures={len(failures)} elapsed={elapsed_s:.1f}s "
            f"seeds/s={self.seeds / max(elapsed_s, 1e-9):.1f} steps/seed={self.steps // max(self.seeds, 1)}\n"
            f"election after leader crash (simulated ms): n={len(elections)} p50={percentile(elections, 0.5)} "
            f"p99={percentile(elections, 0.99)} max={max(elections, default=None)}; in fetch timeouts: "
            f"p50={_fixed(percentile(self.election_ratios or [], 0.5))} "
            f"p99={_fixed(percentile(self.election_ratios or [], 0.99))}\n"
            f"heal to converged (simulated ms): p50={percentile(liveness, 0.5)} p99={percentile(liveness, 0.99)} "
            f"max={max(liveness, default=None)}"
        )


def run_many(seeds: list[int], jobs: int, record: bool, progress_every: int, spec_path: str = "") -> Summary:
    summary = Summary()
    started = time.monotonic()
    for outcome in run_seeds(seeds, jobs, spec_path):
        summary.add(outcome)
        if outcome.failure is not None:
            print(f"FAIL seed={outcome.seed}\n{outcome.failure}\nreplay: {replay_command(outcome.seed, spec_path)}",
                  flush=True)
            if record:
                record_regression(outcome.seed, outcome.failure, spec_path)
        if progress_every and summary.seeds % progress_every == 0:
            print("... " + summary.report(time.monotonic() - started).replace("\n", "\n... "), flush=True)
    print(summary.report(time.monotonic() - started), flush=True)
    return summary


def run_one(seed: int, trace: bool, spec_path: str = "") -> int:
    print(SimOptions.from_seed(seed).describe(), flush=True)
    simulation = Simulation(seed, spec=load_spec(spec_path), trace=print if trace else None)
    try:
        result = simulation.run()
    except AssertionError:
        traceback.print_exc()
        print(f"FAILED at simulated {simulation.now_ms} ms after {simulation.result.steps} steps\n"
              f"replay: {replay_command(seed, spec_path)} --trace", flush=True)
        return 1
    print(f"ok steps={result.steps} simulated_ms={result.simulated_ms} committed={result.committed} "
          f"elections={result.elections} crashes={result.crashes} messages={result.messages} "
          f"election_after_crash_ms={result.election_after_crash_ms} liveness_ms={result.liveness_ms}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="run this one seed")
    parser.add_argument("--trace", action="store_true", help="with --seed: one line per event and Ready")
    parser.add_argument("--seeds", type=int, help="run this many seeds, from --start")
    parser.add_argument("--start", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--regressions", action="store_true", help="run the seeds in tests/sim/regressions.txt")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--no-record", action="store_true", help="do not append failing seeds to regressions.txt")
    parser.add_argument("--progress", type=int, default=1000, help="print progress every N seeds (0: never)")
    parser.add_argument("--spec", default="", help="module:attribute of a StateMachineSpec (default: cluster "
                        "metadata; tests.sim.state_machines:HASH_LIST for opaque payloads)")
    args = parser.parse_args(argv)
    if args.seed is not None:
        return run_one(args.seed, args.trace, args.spec)
    seeds = regression_seeds() if args.regressions else list(range(args.start, args.start + (args.seeds or 1000)))
    summary = run_many(seeds, args.jobs, record=not args.no_record, progress_every=args.progress,
                       spec_path=args.spec)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
