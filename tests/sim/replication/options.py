"""ReplicationSimOptions: everything a replication simulation run varies, drawn from one seed.

`ReplicationSimOptions.from_seed(seed)` draws, from `random.Random(seed)` and in a fixed order: the
topic (partitions, min.insync.replicas, segment and index sizes, retention, fsync policy), the
replication and controller timings, the network (delays, long delays, drops, duplicates), the fault
rates (partitions, crashes, restarts, pauses, torn writes) and the workload. Printed first by the
runner as `key=value` pairs. Draws added later go last, so that older seeds keep their options.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from storage.config import LONG_MAX
from tests.sim.options import FaultOptions


@dataclass(frozen=True, slots=True)
class ReplicationSimOptions(FaultOptions):
    """One run's parameters. Times in simulated ms; probabilities per event or per chaos tick.

    `leader_fault_probability`: per chaos tick, crash, pause or cut off (from its followers, or
    from everyone) the leader of a random partition. `controller_fault_probability`: per chaos tick,
    crash or pause the active controller. `election_timeout_ms`, `fetch_timeout_ms`: the controller
    quorum's Raft timeouts. `follower_fault_probability`: per chaos tick, crash, pause (for one to
    three replica.lag.time.max.ms) or cut off from its leader a follower of a random partition.
    `rot_probability`: per chaos tick, one byte of a random batch's records on a random broker's
    disk changes (bit rot). `slow_disk_probability`: per chaos tick, a broker's disk turns slow
    (until its next restart, or the heal): every call of its core that fsynced stalls the broker for
    up to `slow_fsync_max_ms` (the node fsyncs on its event loop, so a slow fsync stops all of it).
    `clock_step_probability`: per chaos tick, a broker's wall clock steps
    (an hour, a minute or a second, either way). `wipe_probability`: a broker's crash also replaces
    its disk.

    `flush_messages`: 1 fsyncs every append (a crash loses nothing acknowledged); LONG_MAX is
    Kafka's default (rely on replication: a crash loses the unflushed tail, and the checker
    excuses a record only when every replica that held it at the ack lost it to a fault,
    DESIGN §6.1)."""

    seed: int
    partitions: int
    min_insync_replicas: int
    flush_messages: int
    segment_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_interval_ms: int
    replica_lag_time_max_ms: int
    heartbeat_interval_ms: int
    session_timeout_ms: int
    metadata_max_wait_ms: int
    fetch_max_wait_ms: int
    fetch_backoff_ms: int
    request_timeout_ms: int
    checkpoint_interval_ms: int
    produce_interval_max_ms: int
    acks_all_fraction: float
    produce_timeout_ms: int
    consume_interval_max_ms: int
    delete_records_probability: float
    safety_duration_ms: int
    leader_fault_probability: float
    election_timeout_ms: int
    fetch_timeout_ms: int
    controller_fault_probability: float
    clock_step_probability: float
    wipe_probability: float
    follower_fault_probability: float = 0.0
    rot_probability: float = 0.0
    slow_disk_probability: float = 0.0
    slow_fsync_max_ms: int = 0
    idempotent_producer: bool = False
    broker_probe_interval_ms: int = 0
    metadata_partitions_per_call: int = 200
    metadata_log_creations_per_call: int = 8

    FAULTS_AFTER: ClassVar[str] = "checkpoint_interval_ms"

    @classmethod
    def from_seed(cls, seed: int) -> ReplicationSimOptions:
        return cls.draw(seed, random.Random(seed))

    @classmethod
    def draw(cls, seed: int, rng: random.Random) -> ReplicationSimOptions:
        """Draw the options from `rng`, the run's one generator (seeded with `seed`)."""
        heartbeat_interval_ms = rng.choice((20, 40))
        replica_lag_time_max_ms = rng.choice((100, 200, 400))
        delay_max_ms = rng.choice((2, 5, 10))
        # The happy path must work too, but calm runs are few (2 %): a campaign needs 80 % of its seeds
        # with an acks=all write acknowledged during a fault (tests/sim/fault_window.py).
        calm = rng.random() < 0.02
        # Faults aimed at one follower, long enough for the ISR to shrink around it: the partition
        # goes on taking acks=all writes with fewer copies, the case durability is about. Drawn from
        # a generator of its own, so that the run's generator draws the options as before.
        follower_fault_probability = random.Random(f"follower-fault-{seed}").choice((0.1, 0.2, 0.4))
        # Disks that lie and disks that crawl, drawn from a generator of their own for the same reason.
        disks = random.Random(f"disks-{seed}")
        rot_probability = disks.choice((0.0, 0.02, 0.05))
        slow_disk_probability = disks.choice((0.0, 0.02, 0.05))
        slow_fsync_max_ms = disks.choice((20, 100, 400))
        chunks = random.Random(f"metadata-chunks-{seed}")
        return cls(
            seed=seed,
            partitions=rng.choice((1, 1, 2)),
            min_insync_replicas=rng.choice((1, 2, 2)),
            flush_messages=rng.choice((1, LONG_MAX)),
            segment_bytes=rng.choice((400, 1000, 4000)),
            index_interval_bytes=rng.choice((64, 256)),
            retention_ms=rng.choice((-1, 300, 1000)),
            retention_interval_ms=rng.choice((50, 200)),
            replica_lag_time_max_ms=replica_lag_time_max_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            session_timeout_ms=heartbeat_interval_ms * rng.choice((4, 8)),
            metadata_max_wait_ms=rng.choice((50, 200)),
            fetch_max_wait_ms=rng.choice((10, 25, replica_lag_time_max_ms // 4)),
            fetch_backoff_ms=rng.choice((5, 20)),
            request_timeout_ms=rng.choice((40, 100)),
            checkpoint_interval_ms=rng.choice((50, 200)),
            delay_min_ms=1,
            delay_max_ms=delay_max_ms,
            long_delay_probability=0.0 if calm else rng.choice((0.0, 0.01, 0.05)),
            long_delay_max_ms=rng.choice((50, 200)),
            drop_probability=0.0 if calm else rng.choice((0.0, 0.01, 0.05)),
            duplicate_probability=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
            chaos_interval_ms=rng.choice((50, 100)),
            partition_probability=0.0 if calm else rng.choice((0.1, 0.15, 0.2)),
            partition_heal_probability=rng.choice((0.3, 0.45, 0.6)),
            crash_probability=0.0 if calm else rng.choice((0.0, 0.05, 0.1)),
            restart_probability=rng.choice((0.5, 0.7, 0.9)),
            pause_probability=0.0 if calm else rng.choice((0.0, 0.03, 0.1)),
            pause_max_ms=rng.choice((100, 400, 1000)),
            tear_probability=rng.choice((0.0, 0.5, 1.0)),
            produce_interval_max_ms=rng.choice((5, 15, 40)),
            acks_all_fraction=rng.choice((0.6, 0.8, 1.0)),
            produce_timeout_ms=rng.choice((200, 500, 1000)),
            consume_interval_max_ms=rng.choice((10, 40)),
            delete_records_probability=rng.choice((0.0, 0.0, 0.002)),
            safety_duration_ms=max(rng.choice((900, 1200)), 3 * replica_lag_time_max_ms),
            # Faults aimed at a partition's leader (FoundationDB aims its faults too): these make
            # the unreplicated tails and back-to-back failovers that truncation must handle.
            leader_fault_probability=0.0 if calm else rng.choice((0.0, 0.1, 0.2)),
            # The controller quorum (dedicated controller nodes, real Raft): its timeouts, and faults
            # aimed at the active controller (crash or pause), so that controller failovers happen
            # while partitions fail over too. Drawn last: older seeds keep their earlier options.
            election_timeout_ms=(election_timeout_ms := rng.choice((50, 100, 150))),
            fetch_timeout_ms=election_timeout_ms * rng.choice((3, 4)) // 2,
            controller_fault_probability=0.0 if calm else rng.choice((0.0, 0.05, 0.15)),
            # A broker's wall clock steps (only storage reads it: record and segment times,
            # retention); a crash sometimes replaces the disk (KIP-858: the broker rejoins empty).
            clock_step_probability=0.0 if calm else rng.choice((0.0, 0.05, 0.2)),
            wipe_probability=0.0 if calm else rng.choice((0.0, 0.1, 0.3)),
            follower_fault_probability=0.0 if calm else follower_fault_probability,
            # Bit rot: per chaos tick, a byte of a random batch on a random broker's disk changes.
            # A slow disk: per chaos tick, a broker's disk turns slow until its next restart or the
            # heal; each of its fsyncs then stalls the broker up to slow_fsync_max_ms.
            rot_probability=0.0 if calm else rot_probability,
            slow_disk_probability=0.0 if calm else slow_disk_probability,
            slow_fsync_max_ms=slow_fsync_max_ms,
            # A second producer, idempotent, retrying each batch until it is answered (in half the
            # seeds, from a generator of its own: the others run as before it existed).
            idempotent_producer=random.Random(f"idempotent-{seed}").random() < 0.5,
            # Fast fencing of dead brokers (README, "Failover after kill -9"): the active controller probes every
            # unfenced broker's listener this often (0: never, the session timeout alone fences).
            broker_probe_interval_ms=random.Random(f"probe-{seed}").choice((0, 5, 10, 20)),
            # A metadata change applied a partition or a change at a time (the rest at the Ticks the
            # broker core asks for), as a change of thousands of partitions is on a node.
            metadata_partitions_per_call=chunks.choice((1, 2, 200)),
            metadata_log_creations_per_call=chunks.choice((1, 8)),
        )
