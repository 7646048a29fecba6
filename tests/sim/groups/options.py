"""GroupSimOptions: one group simulation's settings, all drawn from its seed."""

from __future__ import annotations

import random
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class GroupSimOptions:
    seed: int
    members: int  # consumer processes, each a member while it runs
    partitions: int  # of the one subscribed topic
    assignor: str  # every member's partition.assignment.strategy
    session_timeout_ms: int
    heartbeat_interval_ms: int
    rebalance_timeout_ms: int
    initial_rebalance_delay_ms: int
    request_timeout_ms: int
    retry_backoff_ms: int
    commit_interval_ms: int
    delay_max_ms: int
    long_delay_probability: float  # a message overtaken by later ones (a retransmission, a slow link)
    long_delay_max_ms: int
    drop_probability: float
    duplicate_probability: float
    chaos_interval_ms: int
    crash_probability: float  # a member process dies (kill -9): no LeaveGroup
    close_probability: float  # a member closes cleanly: LeaveGroup
    restart_probability: float
    pause_probability: float  # a member stops (GC, SIGSTOP) and resumes later, believing what it believed
    pause_max_ms: int
    partition_probability: float  # a member is cut off from the coordinator
    heal_probability: float
    failover_probability: float  # the coordinator moves: a new core for the group's partition
    load_max_ms: int  # how long a new coordinator answers COORDINATOR_LOAD_IN_PROGRESS
    store_failure_probability: float  # a group record's write fails
    safety_duration_ms: int

    @classmethod
    def from_seed(cls, seed: int) -> GroupSimOptions:
        rng = random.Random(f"groups-{seed}")
        session_timeout_ms = rng.choice((60, 120, 300))
        calm = rng.random() < 0.02  # the happy path must work too
        return cls(
            seed=seed,
            members=rng.randint(1, 5),
            partitions=rng.choice((1, 3, 6, 8)),
            assignor=random.Random(f"groups-assignor-{seed}").choice(("range", "roundrobin", "cooperative-sticky")),
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=session_timeout_ms // rng.choice((3, 4)),
            # max.poll.interval.ms: Kafka's default is 300 s against a 45 s session. A rebalance
            # timeout under a heartbeat interval and a round trip or two removes members before they
            # can hear of the rebalance and join, and each comes back and starts another (Kafka's
            # coordinator too): seeds 1 and 18283 livelocked with it at 1 session.
            rebalance_timeout_ms=session_timeout_ms * rng.choice((2, 4)),
            initial_rebalance_delay_ms=rng.choice((0, 0, 50, 200)),
            # A SyncGroup waits for the leader's and for the group's record to be stored: a request
            # timeout under those round trips and the store makes members give up on answers that
            # are coming and join again, a rebalance each time (seed 1378 livelocked at 50 ms).
            request_timeout_ms=rng.choice((150, 300)),
            retry_backoff_ms=rng.choice((5, 20)),
            commit_interval_ms=rng.choice((10, 40)),
            delay_max_ms=rng.choice((2, 5, 20)),
            long_delay_probability=0.0 if calm else random.Random(f"groups-delay-{seed}").choice((0.0, 0.01, 0.05)),
            long_delay_max_ms=random.Random(f"groups-delay-max-{seed}").choice((100, 500)),
            drop_probability=0.0 if calm else rng.choice((0.0, 0.01, 0.05)),
            duplicate_probability=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
            chaos_interval_ms=rng.choice((50, 100)),
            crash_probability=0.0 if calm else rng.choice((0.0, 0.05, 0.1)),
            close_probability=0.0 if calm else rng.choice((0.0, 0.05)),
            restart_probability=rng.choice((0.3, 0.6, 0.9)),
            pause_probability=0.0 if calm else rng.choice((0.0, 0.05, 0.1)),
            pause_max_ms=rng.choice((100, 400, 1000)),
            partition_probability=0.0 if calm else rng.choice((0.0, 0.05, 0.1)),
            heal_probability=rng.choice((0.3, 0.6)),
            failover_probability=0.0 if calm else rng.choice((0.0, 0.03, 0.08)),
            load_max_ms=rng.choice((0, 20, 100)),
            store_failure_probability=0.0 if calm else rng.choice((0.0, 0.05, 0.2)),
            safety_duration_ms=rng.choice((2_000, 4_000)),
        )

    def line(self) -> str:
        return " ".join(f"{field.name}={getattr(self, field.name)}" for field in fields(self))
