"""Run the replication simulation: one seed (with an optional trace) or many, on several processes.

    .venv/bin/python -m tests.sim.replication.run --seed 12345 [--trace]   # replay one seed
    .venv/bin/python -m tests.sim.replication.run --seeds 100000 --jobs 2  # seeds 0..99999
    .venv/bin/python -m tests.sim.replication.run --regressions            # every seed that ever failed

A run prints `seed=` and its options first; a failure prints the invariant, the message and the
one-line command that replays it, and (many seeds) is appended to regressions.txt.
"""

from __future__ import annotations

import sys
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.sim import seed_runner
from tests.sim.replication.options import ReplicationSimOptions
from tests.sim.replication.simulator import SimResult, Simulation
from tests.sim.seed_runner import percentile

REGRESSIONS = Path(__file__).with_name("regressions.txt")


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    failure: str | None
    steps: int
    acked_all: int
    acked_during_fault: int
    crashes: int
    fast_fences: int  # brokers fenced by a refused probe (README, "Failover after kill -9")
    truncations: int
    wipes: int
    rots: int
    halts: int
    stalls: int
    excused: tuple[tuple[str, int], ...]  # acks=all batches lost and excused, by kind
    excused_unacked: int
    offsets_reused: int
    group_commits: int
    group_fetches: int
    group_excused: int
    # sends, batches acknowledged, out-of-order refusals, new epochs, batches failed for good, batches committed,
    # batches committed again after logStartOffset deleted the first copy everywhere (checker rule 11)
    idempotent: tuple[int, int, int, int, int, int, int]
    idempotent_in_flight_max: int  # the most batches of one partition in flight at once
    idempotent_splits: int  # merged backlogs refused as too large, sent again as their parts
    liveness_ms: int | None
    refused_leader_fetches: int  # controllers' fetches refused by their own leader ("A refused leader")

    @classmethod
    def of(cls, seed: int, failure: str | None, result: SimResult) -> SeedOutcome:
        figures, idempotent = result.checker, result.idempotent
        return cls(seed, failure, result.steps, result.acked_all, result.acked_all_during_fault, result.crashes,
                   result.fast_fences, result.truncations, result.wipes, result.rots, result.halts, result.stalls,
                   tuple(sorted(figures.excused.items())), figures.excused_unacked, figures.offsets_reused,
                   figures.group_commits_acked, figures.group_fetches_checked, figures.group_regressions_excused,
                   (idempotent.sends, idempotent.acknowledged, idempotent.out_of_order, idempotent.new_epochs,
                    idempotent.failed, figures.idempotent_committed, figures.idempotent_rewritten_after_deletion),
                   idempotent.in_flight_max, idempotent.splits,
                   None if failure else result.liveness_ms, result.refused_leader_fetches)


def replay_command(seed: int) -> str:
    return f".venv/bin/python -m tests.sim.replication.run --seed {seed}"


def run_seed(seed: int) -> SeedOutcome:
    """One seed, in this process; failures come back as text (a worker must not die)."""
    simulation = Simulation(seed)
    try:
        result = simulation.run()
    except Exception:  # every failure of a seed is reported, none hidden
        simulation.result.checker = simulation.checker.figures
        return SeedOutcome.of(seed, traceback.format_exc(limit=-6), simulation.result)
    return SeedOutcome.of(seed, None, result)


def run_seeds(seeds: Iterable[int], jobs: int) -> Iterator[SeedOutcome]:
    return seed_runner.run_seeds(run_seed, seeds, jobs, chunksize=8)


def regression_seeds() -> list[int]:
    return seed_runner.regression_seeds(REGRESSIONS)


def record_regression(seed: int, failure: str) -> None:
    reason = failure.strip().splitlines()[-1][:100] if failure.strip() else "failure"
    seed_runner.record_regression(REGRESSIONS, seed, reason)


@dataclass(slots=True)
class Summary(seed_runner.Tally):
    acked_all: int = 0
    acked_during_fault: int = 0
    crashes: int = 0
    fast_fences: int = 0
    truncations: int = 0
    wipes: int = 0
    rots: int = 0
    halts: int = 0
    stalls: int = 0
    excused: Counter[str] = field(default_factory=Counter)
    excused_unacked: int = 0
    offsets_reused: int = 0
    group_commits: int = 0
    group_fetches: int = 0
    group_excused: int = 0
    idempotent: list[int] = field(default_factory=lambda: [0] * 7)
    idempotent_in_flight_max: int = 0
    idempotent_splits: int = 0
    liveness: list[int] = field(default_factory=list)
    refused_leader_fetches: int = 0
    seeds_with_refused_leaders: int = 0

    def add(self, outcome: SeedOutcome) -> None:
        self.count(outcome)
        self.acked_all += outcome.acked_all
        self.acked_during_fault += outcome.acked_during_fault
        self.crashes += outcome.crashes
        self.fast_fences += outcome.fast_fences
        self.truncations += outcome.truncations
        self.wipes += outcome.wipes
        self.rots += outcome.rots
        self.halts += outcome.halts
        self.stalls += outcome.stalls
        self.excused.update(dict(outcome.excused))
        self.excused_unacked += outcome.excused_unacked
        self.offsets_reused += outcome.offsets_reused
        self.group_commits += outcome.group_commits
        self.group_fetches += outcome.group_fetches
        self.group_excused += outcome.group_excused
        self.idempotent = [total + part for total, part in zip(self.idempotent, outcome.idempotent, strict=True)]
        self.idempotent_in_flight_max = max(self.idempotent_in_flight_max, outcome.idempotent_in_flight_max)
        self.idempotent_splits += outcome.idempotent_splits
        if outcome.liveness_ms is not None:
            self.liveness.append(outcome.liveness_ms)
        self.refused_leader_fetches += outcome.refused_leader_fetches
        self.seeds_with_refused_leaders += 1 if outcome.refused_leader_fetches else 0

    def report(self, elapsed_s: float) -> str:
        excuses = ", ".join(f"{kind}: {count}" for kind, count in sorted(self.excused.items())) or "none"
        return (
            f"{self.head(elapsed_s)} acks=all={self.acked_all} (during a fault: {self.acked_during_fault}) "
            f"crashes={self.crashes} (fenced by a refused probe: {self.fast_fences}) wipes={self.wipes} "
            f"rots={self.rots} (halts on finding one: {self.halts}) "
            f"slow-disk stalls={self.stalls} truncations={self.truncations} "
            f"heal-to-converged p99={percentile(self.liveness, 0.99)} max={max(self.liveness, default=None)} ms\n"
            f"excused acks=all batches: {excuses}; excused other committed batches: {self.excused_unacked}; "
            f"offsets reused after an excused loss: {self.offsets_reused}\n"
            f"group offsets: {self.group_commits} commits acknowledged, {self.group_fetches} fetches checked, "
            f"{self.group_excused} answered before an acknowledged commit whose batch was lost (excused)\n"
            f"idempotent producer: {self.idempotent[0]} sends, {self.idempotent[1]} batches acknowledged, "
            f"{self.idempotent[2]} refused out of order, {self.idempotent[3]} new epochs, {self.idempotent[4]} "
            f"batches failed for good, {self.idempotent_splits} merged backlogs split, up to "
            f"{self.idempotent_in_flight_max} in flight per partition; "
            f"{self.idempotent[5]} batches committed, none twice, records in send order (but "
            f"{self.idempotent[6]} written again after logStartOffset deleted them everywhere)\n"
            f"controller fetches refused by the follower's own leader (an election without the fetch timeout): "
            f"{self.refused_leader_fetches} in {self.seeds_with_refused_leaders} seeds"
        )


def run_many(seeds: list[int], jobs: int, record: bool, progress_every: int) -> Summary:
    return seed_runner.run_many(run_seeds(seeds, jobs), Summary(), replay_command,
                                record_regression if record else None, progress_every)


def _ok_line(result: SimResult) -> str:
    figures, idempotent = result.checker, result.idempotent
    excused = ",".join(f"{kind.replace(' ', '-')}:{count}" for kind, count in sorted(figures.excused.items()))
    return (f"steps={result.steps} simulated_ms={result.simulated_ms} produced={result.produced} "
            f"acked_all={result.acked_all} acked_all_during_fault={result.acked_all_during_fault} "
            f"consumed_batches={figures.consumed_batches} crashes={result.crashes} "
            f"fast_fences={result.fast_fences} refused_leader_fetches={result.refused_leader_fetches} "
            f"wipes={result.wipes} rots={result.rots} halts={result.halts} stalls={result.stalls} "
            f"leader_changes={result.leader_changes} truncations={result.truncations} "
            f"excused=[{excused}] excused_unacked={figures.excused_unacked} offsets_reused={figures.offsets_reused} "
            f"group_commits={figures.group_commits_acked} group_fetches={figures.group_fetches_checked} "
            f"group_excused={figures.group_regressions_excused} idempotent_sends={idempotent.sends} "
            f"idempotent_acked={idempotent.acknowledged} idempotent_out_of_order={idempotent.out_of_order} "
            f"idempotent_new_epochs={idempotent.new_epochs} idempotent_failed={idempotent.failed} "
            f"idempotent_in_flight_max={idempotent.in_flight_max} idempotent_splits={idempotent.splits} "
            f"idempotent_committed={figures.idempotent_committed} "
            f"idempotent_rewritten_after_deletion={figures.idempotent_rewritten_after_deletion} "
            f"liveness_ms={result.liveness_ms}")


def run_one(seed: int, trace: bool) -> int:
    return seed_runner.run_one(ReplicationSimOptions.from_seed(seed).describe(),
                               lambda: Simulation(seed, trace=print if trace else None), replay_command(seed),
                               _ok_line)


def main(argv: list[str] | None = None) -> int:
    args = seed_runner.argument_parser("python -m tests.sim.replication.run", __doc__, REGRESSIONS).parse_args(argv)
    if args.seed is not None:
        return run_one(args.seed, args.trace)
    summary = run_many(seed_runner.chosen_seeds(args, REGRESSIONS), args.jobs, record=not args.no_record,
                       progress_every=args.progress)
    return seed_runner.exit_status(args, summary)


if __name__ == "__main__":
    sys.exit(main())
