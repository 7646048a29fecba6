"""SimOptions: everything a simulation run varies, drawn from one seed (TigerBeetle's VOPR).

`SimOptions.from_seed(seed)` draws, from `random.Random(seed)` and in a fixed order: the cluster
(3 or 5 voters, maybe an observer), the quorum's timeouts and bounds, the storage sizes, the
network (delay, long delays, drops, duplicates), the fault rates (partitions, crashes, pauses,
torn writes), the workload (proposal rate) and each node's rng seed; then the draws added later
(index interval, wiped disks), last so that older seeds keep their options. Printed first by the
runner; `key=value` pairs so that a run's line can be read back.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class FaultOptions:
    """The options both simulators share (SimOptions, ReplicationSimOptions): what `SimNetwork` does
    to a message, how often a chaos tick partitions, crashes, restarts or pauses, and how much of an
    unflushed tail a crash keeps.

    A subclass's own fields come after these in the dataclass; `describe` prints these after the
    subclass's `FAULTS_AFTER` field, where the subclass once declared them, so that a seed's
    `key=value` line stays as it was."""

    delay_min_ms: int
    delay_max_ms: int
    long_delay_probability: float
    long_delay_max_ms: int
    drop_probability: float
    duplicate_probability: float
    chaos_interval_ms: int
    partition_probability: float
    partition_heal_probability: float
    crash_probability: float
    restart_probability: float
    pause_probability: float
    pause_max_ms: int
    tear_probability: float

    FAULTS_AFTER: ClassVar[str]  # the subclass's field that `describe` prints these after
    HIDDEN: ClassVar[tuple[str, ...]] = ()  # the fields `describe` leaves out

    def describe(self) -> str:
        """`key=value` for every option but the HIDDEN ones."""
        values = asdict(self)
        shared = [option.name for option in fields(FaultOptions)]
        own = [name for name in values if name not in shared]
        cut = own.index(self.FAULTS_AFTER) + 1
        order = [*own[:cut], *shared, *own[cut:]]
        return " ".join(f"{name}={values[name]}" for name in order if name not in self.HIDDEN)


@dataclass(frozen=True, slots=True)
class SimOptions(FaultOptions):
    """One run's parameters. Times in simulated ms, probabilities per event or per chaos tick."""

    seed: int
    voters: int
    observers: int
    election_timeout_ms: int
    fetch_timeout_ms: int
    election_backoff_max_ms: int
    request_timeout_ms: int
    retry_backoff_ms: int
    fetch_max_wait_ms: int
    fetch_bytes_max: int
    snapshot_interval_records: int
    segment_bytes: int
    index_interval_bytes: int
    proposal_interval_max_ms: int
    safety_duration_ms: int
    node_seeds: tuple[int, ...]
    wipe_probability: float  # a restart finds the node's directory gone (a wiped or replaced disk)

    FAULTS_AFTER: ClassVar[str] = "index_interval_bytes"
    HIDDEN: ClassVar[tuple[str, ...]] = ("node_seeds",)

    @classmethod
    def from_seed(cls, seed: int) -> SimOptions:
        return cls.draw(seed, random.Random(seed))

    @classmethod
    def draw(cls, seed: int, rng: random.Random) -> SimOptions:
        """Draw the options from `rng` (the run's one generator, seeded with `seed`)."""
        voters = rng.choice((3, 3, 5))
        observers = 1 if rng.random() < 0.3 else 0
        election_timeout_ms = rng.choice((50, 100, 150))
        fetch_timeout_ms = election_timeout_ms * rng.choice((3, 4, 6)) // 2
        # Some runs have no faults at all: the happy path must work too. Few (3 %), and every other
        # run crashes nodes now and then: a campaign needs 80 % of its seeds with a write acknowledged
        # during a fault (tests/sim/fault_window.py).
        calm = rng.random() < 0.03
        election_backoff_max_ms = rng.choice((0, election_timeout_ms // 2, election_timeout_ms))
        request_timeout_ms = rng.choice((election_timeout_ms // 2, election_timeout_ms, fetch_timeout_ms))
        return cls(
            seed=seed,
            voters=voters,
            observers=observers,
            election_timeout_ms=election_timeout_ms,
            fetch_timeout_ms=fetch_timeout_ms,
            election_backoff_max_ms=election_backoff_max_ms,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=rng.choice((1, 5, 20)),
            fetch_max_wait_ms=rng.choice((0, request_timeout_ms // 4, request_timeout_ms // 2)),
            fetch_bytes_max=rng.choice((100, 300, 4096, 1 << 20)),
            snapshot_interval_records=rng.choice((4, 16, 64, 256)),
            segment_bytes=rng.choice((512, 2048, 16384)),
            delay_min_ms=1,
            # Round trips stay below the request timeout and well below the election timeout, as on
            # any network a quorum can work on; long delays (below) break that on purpose.
            delay_max_ms=rng.choice((2, 5, max(2, election_timeout_ms // 10), election_timeout_ms // 5)),
            long_delay_probability=0.0 if calm else rng.choice((0.0, 0.01, 0.05)),
            long_delay_max_ms=rng.choice((2, 5, 10)) * election_timeout_ms,
            drop_probability=0.0 if calm else rng.choice((0.0, 0.01, 0.05, 0.2)),
            duplicate_probability=0.0 if calm else rng.choice((0.0, 0.01, 0.1)),
            chaos_interval_ms=election_timeout_ms // 2,
            partition_probability=0.0 if calm else rng.choice((0.0, 0.05, 0.1)),
            partition_heal_probability=rng.choice((0.05, 0.2, 0.5)),
            crash_probability=0.0 if calm else rng.choice((0.05, 0.1, 0.15)),
            restart_probability=rng.choice((0.1, 0.3, 0.8)),
            pause_probability=0.0 if calm else rng.choice((0.0, 0.03, 0.05)),
            pause_max_ms=rng.choice((2, 5, 20)) * election_timeout_ms,
            tear_probability=rng.choice((0.0, 0.5, 1.0)),
            proposal_interval_max_ms=rng.choice((2, 10, 40)),
            safety_duration_ms=rng.choice((1000, 2000, 4000)),
            node_seeds=tuple(rng.getrandbits(63) for _ in range(voters + observers)),
            # Draws added later come last, so that older seeds keep their earlier options.
            index_interval_bytes=rng.choice((128, 512)),
            wipe_probability=0.0 if calm else rng.choice((0.0, 0.1, 0.5, 1.0)),
        )
