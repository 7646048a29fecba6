"""Scenario: the simulator driven by a script instead of dice, for the named classic failures.

Same brokers, controller, network, crash model and checker as the random runs (every step is
checked against DESIGN §6), but a calm network (no drops, 1-2 ms delays), no random workload and no
chaos: the test cuts links, crashes, pauses and produces exactly when it says. `story` keeps one
line per milestone (leader and follower changes, truncations, ISR proposals and their answers,
fencing answers), stable across runs, which a test compares with the story it expects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from controller.metadata import PartitionRegistration
from replication.broker_ready import BrokerReady, PartitionStep
from replication.events import AlterPartitionResponse, MakeFollower, MakeLeader
from replication.ready import FetchResult, ProduceResult, Truncated, TruncatedFully
from storage.records import iter_headers
from tests.sim.replication.broker import SimBroker
from tests.sim.replication.controller import TOPIC
from tests.sim.replication.messages import CONTROLLER_ID, PRODUCER_ID
from tests.sim.replication.observations import TAIL
from tests.sim.replication.options import ReplicationSimOptions
from tests.sim.replication.quorum import CONTROLLER_IDS
from tests.sim.replication.simulator import Kind, Simulation
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

P0 = TopicPartition(TOPIC, 0)
STEPS_PER_WAIT_MAX = 1_000_000


def scenario_options(**overrides: object) -> ReplicationSimOptions:
    """Calm, fixed options: replica.lag.time.max.ms 200, session timeout 160, fsync on every append."""
    base = ReplicationSimOptions(
        seed=0, partitions=1, min_insync_replicas=1, flush_messages=1, segment_bytes=4000, index_interval_bytes=256,
        retention_ms=-1, retention_interval_ms=200, replica_lag_time_max_ms=200, heartbeat_interval_ms=20,
        session_timeout_ms=160, metadata_max_wait_ms=50, fetch_max_wait_ms=20, fetch_backoff_ms=10,
        request_timeout_ms=50, checkpoint_interval_ms=50, delay_min_ms=1, delay_max_ms=2,
        long_delay_probability=0.0, long_delay_max_ms=2, drop_probability=0.0, duplicate_probability=0.0,
        chaos_interval_ms=100, partition_probability=0.0, partition_heal_probability=0.0, crash_probability=0.0,
        restart_probability=0.0, pause_probability=0.0, pause_max_ms=1, tear_probability=0.0,
        leader_fault_probability=0.0,
        produce_interval_max_ms=10, acks_all_fraction=1.0, produce_timeout_ms=300, consume_interval_max_ms=10,
        delete_records_probability=0.0, safety_duration_ms=0, election_timeout_ms=100, fetch_timeout_ms=150,
        controller_fault_probability=0.0, clock_step_probability=0.0, wipe_probability=0.0,
    )
    return dataclasses.replace(base, **overrides)


class Scenario(Simulation):
    def __init__(self, seed: int = 0, trace: Callable[[str], None] | None = None, **overrides: object) -> None:
        super().__init__(seed, trace=trace, options=scenario_options(seed=seed, **overrides))
        self.story: list[str] = []
        self.batch_records_max = 1  # one record per batch: offsets count the records
        self._setup(scripted=True)

    # -- the story ---------------------------------------------------------------------------------

    def observe(self, broker: SimBroker, broker_ready: BrokerReady) -> None:
        super().observe(broker, broker_ready)
        for step in broker_ready.steps:
            self._tell_step(broker, step)

    def _tell_step(self, broker: SimBroker, step: PartitionStep) -> None:
        event, ready = step.event, step.ready
        name = f"broker {broker.broker_id}"
        if isinstance(event, MakeLeader | MakeFollower) and ready.leader_epoch == event.leader_epoch:
            role = "leader" if isinstance(event, MakeLeader) else f"follower of {event.leader_id}"
            self._tell(f"{name}: {role} in epoch {event.leader_epoch}, ISR {list(event.isr)}")
        for change in ready.log_changes:
            if isinstance(change, Truncated | TruncatedFully):
                self._tell(f"{name}: {type(change).__name__}({change})")
        for proposal in ready.messages:
            if (lineage := proposal.epoch_lineage) is not None:
                self._tell(f"{name}: proposes lineage of epoch {lineage.leader_epoch}: after epoch "
                           f"{lineage.previous_epoch}, from offset {lineage.start_offset}")
            else:
                self._tell(f"{name}: proposes ISR {list(proposal.new_isr)}")
        if isinstance(event, AlterPartitionResponse):
            self._tell(f"{name}: AlterPartition answer {event.error.name} ISR {list(event.isr)}")
        for completion in ready.completions:
            if isinstance(completion, FetchResult) and completion.error == ErrorCode.FENCED_LEADER_EPOCH:
                self._tell(f"{name}: answers a fetch FENCED_LEADER_EPOCH")

    def _tell(self, line: str) -> None:
        if not self.story or self.story[-1] != line:
            self.story.append(line)

    # -- time ----------------------------------------------------------------------------------------

    def run_for(self, duration_ms: int) -> None:
        until_ms = self.now_ms + duration_ms
        for _ in range(STEPS_PER_WAIT_MAX):
            if not self.heap or self.heap[0][0] > until_ms:
                self.now_ms = until_ms
                return
            self._step()
        raise AssertionError(f"more than {STEPS_PER_WAIT_MAX} steps in {duration_ms} ms")

    def run_until(self, condition: Callable[[], bool], bound_ms: int = 5_000) -> None:
        deadline_ms = self.now_ms + bound_ms
        for _ in range(STEPS_PER_WAIT_MAX):
            if condition():
                return
            if self.now_ms > deadline_ms:
                raise AssertionError(f"condition not met within {bound_ms} ms (now {self.now_ms})")
            self._step()
        raise AssertionError("too many steps")

    def converge(self) -> None:
        """Heal everything and wait for the liveness conditions, then run the final checks."""
        self._heal()
        self._loop()
        self._final_checks()

    # -- actions -------------------------------------------------------------------------------------

    def produce(self, acks: int, leader_id: int | None = None, topic_partition: TopicPartition = P0,
                wait: bool = True) -> ProduceResult | None:
        """Send one batch; with `wait`, run until its answer and return it."""
        self._view(topic_partition, refresh=True)
        request_id = self._send_produce(topic_partition, acks, leader_id)
        assert request_id >= 0, "no leader"
        if not wait:
            return None
        self.run_until(lambda: request_id in self.produce_results, bound_ms=2 * self.options.produce_timeout_ms)
        return self.produce_results[request_id]

    def cut(self, source: int, destination: int) -> None:
        """Cut both directions between two nodes; CONTROLLER_ID stands for every controller node."""
        for node in CONTROLLER_IDS if destination == CONTROLLER_ID else (destination,):
            self.network.blocked |= {(source, node), (node, source)}
        self._tell(f"links {source} <-> {destination} cut")

    def isolate(self, node_id: int) -> None:
        for other in (*CONTROLLER_IDS, 1, 2, 3, PRODUCER_ID):
            if other != node_id:
                self.network.blocked |= {(node_id, other), (other, node_id)}
        self._tell(f"node {node_id} isolated")

    def reconnect(self) -> None:
        self.network.heal()
        self._tell("links healed")

    def crash(self, broker_id: int) -> None:
        self._tell(f"broker {broker_id} crashes")
        self._crash(self.brokers[broker_id])

    def crash_controller(self, node_id: int) -> None:
        self._tell(f"controller {node_id} crashes")
        self._crash_controller(node_id)

    def restart(self, broker_id: int) -> None:
        self._tell(f"broker {broker_id} restarts")
        self._restart(self.brokers[broker_id])

    def pause(self, broker_id: int, duration_ms: int) -> None:
        broker = self.brokers[broker_id]
        broker.paused_until_ms = self.now_ms + duration_ms
        self._tell(f"broker {broker_id} pauses")
        self.schedule(broker.paused_until_ms, Kind.RESUME, (broker_id, broker.incarnation))

    # -- reads ---------------------------------------------------------------------------------------

    def state(self, topic_partition: TopicPartition = P0) -> PartitionRegistration:
        return self.controller.partition(topic_partition)

    def values(self, broker_id: int, topic_partition: TopicPartition = P0) -> list[int]:
        """Base offsets of the batches in a broker's log."""
        log = self.brokers[broker_id].partitions[topic_partition].log
        offsets, offset = [], log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20).records
            for _, header in iter_headers(data):
                offsets.append(header.base_offset)
                offset = header.next_offset
        return offsets

    def records(self, broker_id: int, topic_partition: TopicPartition = P0) -> dict[int, bytes]:
        """Each batch in a broker's log by base offset, as the bytes a leader does not rewrite (from
        magic on): equal bytes at an offset mean the same record."""
        log = self.brokers[broker_id].partitions[topic_partition].log
        batches, offset = {}, log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read(offset, 1 << 20).records
            for position, header in iter_headers(data):
                batches[header.base_offset] = bytes(data[position + TAIL : position + header.size_in_bytes])
                offset = header.next_offset
        return batches

    def leader_id(self, broker_id: int, topic_partition: TopicPartition = P0) -> int:
        partition = self.brokers[broker_id].partitions.get(topic_partition)
        return -2 if partition is None else partition.leader_id


__all__ = ["P0", "PRODUCER_ID", "Scenario", "scenario_options"]
