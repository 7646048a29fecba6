"""Simulation: partitions replicated over three brokers in one process, on simulated time, one seed.

Goal: find a schedule of messages, faults and requests under which replication breaks DESIGN §6
(invariants 1-4 and 6), and show that a healed cluster converges. Method (TigerBeetle's VOPR,
FoundationDB's simulation): one `random.Random(seed)` draws the options and then every choice of the
run — delays, drops, duplicates, partitions, crashes, restarts, pauses, torn writes, the workload —
in the order events happen, so a seed replays exactly.

Cast, all of it the node's own code: three brokers (`SimBroker`: real `storage` on a temp dir,
/dev/shm when present, under the OS-boundary crash model; the broker core `ReplicaManager` with a
`Partition` core per hosted partition; the lifecycle core `BrokerLifecycle`), three dedicated
controller nodes (`SimQuorum`: real Raft over a real metadata log, the office and the
`QuorumController`, controller failovers included), a producer (acks=1 and acks=all, to the leader
it believes in), in half the seeds an idempotent producer (the client's own sender logic, up to five
batches in flight per partition: `idempotent_producer.py`) and a consumer (reads from any replica,
KIP-392). Messages go through `tests/sim/network.SimNetwork` (drops, delays, duplicates, partitions
over brokers and controllers). Connections fail as TCP's do (README, "Failover after kill -9"): in three seeds of
four the controller in office probes every unfenced broker's listener; a probe reaching the host of
a crashed or halted broker is refused at once (the refusal travels back like a message), one on a
cut or lossy link is lost (a time-out), and a live broker's kernel accepts it even while the process
is paused. Raft's connections between controller nodes fail the same way, as in the quorum simulation
(tests/sim/connections.py): a fetch or quorum probe reaching a down controller is refused at once, a
crash closes the crashed controller's connections (the close travels like a message to a peer whose
last fetch it took), and campaigns count `refused_leader_fetches`. Time is an integer of simulated ms
in one event heap. The run starts once the quorum has a leader, every broker registered itself and
the admin created the topic.

Phases:
1. Safety (`safety_duration_ms`, longer while no write was acknowledged during a fault: up to
   SAFETY_EXTENSIONS_MAX more times, new faults at half the rate each time): faults at the drawn
   rates. `ReplicationChecker` is told every call of every broker core (its partitions' log edits,
   offsets and answers), every log as an incarnation opens it, every crash (what it cut) and wipe,
   and every fetch answer the consumer takes, as observations (`observer.py` builds them); it
   judges them as they come.
2. Liveness: every fault healed (down nodes restart, paused ones resume, links reconnect, no more
   drops). Within LIVENESS_BOUND_MS the quorum must have an active controller, and every partition a
   leader, a full ISR, one acks=all
   record acknowledged, and every replica at the same LEO with HW = LEO. Then the final checks:
   every replica's log is read whole for the checker, which gives its last verdicts.

`acked_all_during_fault` counts the acks=all writes sent in the safety phase that lived through a
fault (`FaultWindow`): the producers' (the idempotent one's from its batch's creation) and the
group's offset commits (produced acks=all to `__consumer_offsets`); the campaigns' coverage figure.
"""

from __future__ import annotations

import heapq
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any

from controller.controller_api import BrokerConnectionRefused, BrokerProbe
from controller.error_responses import is_not_controller
from controller.quorum_controller import ControllerConfig
from controller.raft_messages import Message as RaftMessage
from controller.raft_messages import Tick as QuorumTick
from controller.raft_messages import Unreachable
from replication.broker_events import FetchWait
from replication.broker_ready import BrokerReady
from replication.config import ReplicationConfig
from replication.events import ConsumerFetch, ProduceRequest, Tick
from replication.group_coordinator import (
    OFFSETS_TOPIC,
    CommitAnswer,
    CommitOffsets,
    FetchAnswer,
    FetchOffsets,
    PartitionOffset,
)
from replication.ready import FetchResult, ProduceResult, Role
from storage.config import LogConfig
from storage.records import build_batch_from_values
from tests.sim.connections import SimConnections, refused_by_leader
from tests.sim.fault_window import FaultWindow
from tests.sim.kernel.disk import DiskModel, default_root
from tests.sim.network import SimNetwork
from tests.sim.replication.broker import WALL_START_MS, SimBroker
from tests.sim.replication.checker import CheckerFigures, InvariantViolation, ReplicationChecker
from tests.sim.replication.controller import LISTENER, TOPIC, ClusterView
from tests.sim.replication.idempotent_producer import IdempotentFigures, SimIdempotentProducer
from tests.sim.replication.messages import (
    CONSUMER_ID,
    GROUP_CLIENT_ID,
    PRODUCER_ID,
    ClientDeleteRecords,
    ClientFetch,
    ClientFetchAnswer,
    ClientGroupAnswer,
    ClientGroupRequest,
    ClientProduce,
    ClientProduceAnswer,
    ControllerAnswer,
    ControllerRequest,
    Message,
    MetadataAnswer,
    MetadataFetch,
    RaftEnvelope,
    ReplicaFetchMessage,
    ReplicaFetchReply,
)
from tests.sim.replication.observations import (
    BatchRotted,
    BrokerCrashed,
    BrokerWiped,
    ConsumerPolled,
    GroupCommitAcked,
    GroupOffsetsFetched,
    ReadReason,
    batches_of,
)
from tests.sim.replication.observer import BrokerObserver, log_read
from tests.sim.replication.options import ReplicationSimOptions
from tests.sim.replication.quorum import CONTROLLER_IDS, SimQuorum
from wire.error_codes import ErrorCode
from wire.sentinels import NO_LEADER
from wire.topic_partition import TopicPartition
from wire.topics import CreatableTopic, CreateTopicsRequest

BROKER_IDS = (1, 2, 3)
DUTY_INTERVAL_MS = 20
LIVENESS_BOUND_MS = 20_000
PROBE_INTERVAL_MS = 20
STEPS_MAX = 2_000_000
BOOTSTRAP_STEPS_MAX = 10_000
ADMIN_ATTEMPTS_MAX = 20
# The safety phase lasts safety_duration_ms, and goes on, safety_duration_ms at a time up to this many
# times, while no write has been acknowledged during a fault yet (tests/sim/fault_window.py).
SAFETY_EXTENSIONS_MAX = 2
CLOCK_STEPS_MS = (-3_600_000, -60_000, -1_000, 1_000, 60_000, 3_600_000)
PRODUCES_IN_FLIGHT_MAX = 8
IDEMPOTENT_PRODUCER_ID = 4242  # the sim's idempotent producer (its id is not drawn from a controller)
GROUP = "sim-group"  # its coordinator is __consumer_offsets partition 0 (the topic has one)


class Kind(IntEnum):
    DELIVER = 0
    DUTY = 1
    BROKER_TICK = 2
    LIFECYCLE_TICK = 10
    QUORUM_TICK = 3
    METADATA_WAIT = 11
    PRODUCE = 4
    CONSUME = 5
    CHAOS = 6
    RESUME = 7
    HEAL = 8
    PROBE = 9
    RESTART = 12
    GROUP = 13
    IDEMPOTENT = 14
    CONNECT = 15  # the active controllers probe the brokers' listeners (README, "Failover after kill -9")
    SYN = 16  # a probe's connection attempt reaches a broker's host


class LivenessFailure(AssertionError):
    """The healed cluster did not converge within the bound."""


@dataclass(slots=True)
class SimResult:
    seed: int
    steps: int = 0
    simulated_ms: int = 0
    produced: int = 0
    acked_all: int = 0
    acked_all_during_fault: int = 0
    idempotent: IdempotentFigures = field(default_factory=IdempotentFigures)
    crashes: int = 0
    fast_fences: int = 0  # brokers fenced by a refused probe, before their session ran out
    refused_leader_fetches: int = 0  # controllers' fetches refused by their own leader ("A refused leader")
    wipes: int = 0
    rots: int = 0
    halts: int = 0  # a broker found a damaged batch and halted
    stalls: int = 0  # a slow disk's fsync stalled a broker
    leader_changes: int = 0
    truncations: int = 0
    checker: CheckerFigures = field(default_factory=CheckerFigures)
    liveness_ms: int | None = None
    stats: dict[str, int] = field(default_factory=dict)


def describe(item: object) -> str:
    """A stable one-line form of an event, message body or Ready: bytes show as <N bytes>."""
    if not is_dataclass(item):
        return repr(item)
    parts = []
    for item_field in fields(item):
        value = getattr(item, item_field.name)
        if value in ((), None, b"") and item_field.name not in ("error",):
            continue
        if isinstance(value, bytes):
            parts.append(f"{item_field.name}=<{len(value)} bytes>")
        elif isinstance(value, Enum):
            parts.append(f"{item_field.name}={value.name}")
        elif isinstance(value, tuple) and value and is_dataclass(value[0]):
            parts.append(f"{item_field.name}=[{', '.join(describe(v) for v in value)}]")
        elif is_dataclass(value):
            parts.append(f"{item_field.name}={describe(value)}")
        else:
            parts.append(f"{item_field.name}={value!r}")
    return f"{type(item).__name__}({', '.join(parts)})"


class Simulation:
    def __init__(self, seed: int, trace: Callable[[str], None] | None = None,
                 options: ReplicationSimOptions | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.disk_rng = random.Random(f"disk-faults-{seed}")  # the main generator draws as before them
        self.slow_disks: set[int] = set()
        drawn = ReplicationSimOptions.draw(seed, self.rng)
        self.options = options or drawn
        self.trace_sink = trace
        self.now_ms = 0
        self.heap: list[tuple[int, int, Kind, Any]] = []
        self.sequence = 0
        self.result = SimResult(seed)
        self.network = SimNetwork(self.rng, self.options)
        self.root = Path(tempfile.mkdtemp(prefix=f"tributary-replication-sim-{seed}-", dir=default_root()))
        self.disk_model = DiskModel()
        self.disk_model.watch()
        self.replication_config = ReplicationConfig(
            replica_lag_time_max_ms=self.options.replica_lag_time_max_ms,
            alter_partition_timeout_ms=self.options.request_timeout_ms,
            ineligible_replica_backoff_ms=self.options.heartbeat_interval_ms,
            replica_fetch_max_bytes=self.rng.choice((300, 2000, 1 << 20)),
        )
        self.topic_configs = {
            "min.insync.replicas": str(self.options.min_insync_replicas),
            "flush.messages": str(self.options.flush_messages),
            "segment.bytes": str(self.options.segment_bytes),
            "index.interval.bytes": str(self.options.index_interval_bytes),
            "retention.ms": str(self.options.retention_ms),
            "segment.index.bytes": "4096",
            "file.delete.delay.ms": "100",
        }
        self.log_config = LogConfig.from_properties(self.topic_configs)
        # The group's offsets topic: Kafka's configs for it (compacted, never deleted by time).
        self.offsets_topic_configs = {**self.topic_configs, "retention.ms": "-1", "cleanup.policy": "compact"}
        self.offsets_log_config = LogConfig.from_properties(self.offsets_topic_configs)
        self.topic_partitions = [TopicPartition(TOPIC, index) for index in range(self.options.partitions)]
        self.offsets_partition = TopicPartition(OFFSETS_TOPIC, 0)
        self.all_partitions = [*self.topic_partitions, self.offsets_partition]
        options = self.options
        self.quorum = SimQuorum(
            self.root, tuple(self.rng.getrandbits(63) for _ in CONTROLLER_IDS),
            SimQuorum.config(options.election_timeout_ms, options.fetch_timeout_ms, options.request_timeout_ms),
            ControllerConfig(broker_session_timeout_ms=options.session_timeout_ms,
                             probe_listener_name=LISTENER if options.broker_probe_interval_ms > 0 else None),
            tick_interval_ms=max(1, options.heartbeat_interval_ms // 2),
            send=self._send_raft, answer=self._on_controller_answer,
        )
        self.controller = ClusterView(self.quorum)
        self.quorum_tick_at: dict[int, int] = {}
        self.controller_paused_until: dict[int, int] = dict.fromkeys(CONTROLLER_IDS, -1)
        self.controller_held: dict[int, list[Message]] = {node_id: [] for node_id in CONTROLLER_IDS}
        self.raft_connections = SimConnections()
        self.admin_answers: dict[int, Any] = {}
        self.admin_attempts = 0  # the token of the next admin request
        self.safety_extensions = 0
        self.fault_scale = 1.0  # new faults start at the drawn rates times this (halved by each extension)
        self.checker = ReplicationChecker(self.all_partitions, self.offsets_partition)
        self.observers: dict[int, BrokerObserver] = {}
        self.fault_window = FaultWindow(self.options.session_timeout_ms + self.options.replica_lag_time_max_ms)
        self.produce_sent_ms: dict[int, int] = {}  # client request id -> when the producer sent it (safety phase)
        self.brokers = {broker_id: SimBroker(broker_id, self.root, self) for broker_id in BROKER_IDS}
        self.faulty = True
        self.client_ids = 0
        self.produces_in_flight: dict[int, tuple[int, TopicPartition]] = {}  # request id -> (deadline, partition)
        self.client_view: dict[TopicPartition, tuple[int, int]] = {}
        self.consumer_positions = dict.fromkeys(self.topic_partitions, 0)
        self.consumer_fetch_offsets: dict[int, int] = {}  # request id -> the position it fetched at
        self.liveness_started_ms: int | None = None
        self.probes_acked: set[TopicPartition] = set()
        self.produced_tails: dict[int, tuple[TopicPartition, bytes]] = {}
        self.last_leader: dict[TopicPartition, int] = {}
        self.parked_metadata: list[tuple[int, MetadataFetch, int]] = []  # (node, fetch, deadline)
        self.produce_results: dict[int, ProduceResult] = {}
        self.group_rng = random.Random(f"group-{seed}")
        self.idempotent_rng = random.Random(f"idempotent-workload-{seed}")
        self.idempotent = SimIdempotentProducer(
            IDEMPOTENT_PRODUCER_ID, self._idempotent_leader, lambda tp: self._view(tp, refresh=True),
            delivery_timeout_ms=4 * (self.options.produce_timeout_ms + self.options.request_timeout_ms),
            request_timeout_ms=self.options.produce_timeout_ms + self.options.request_timeout_ms,
            retry_backoff_ms=self.options.fetch_backoff_ms)
        self.result.idempotent = self.idempotent.figures
        self.group_commit: tuple[int, int, int, tuple[PartitionOffset, ...]] | None = None  # id, commit, sent, offsets
        self.group_fetches: dict[int, int] = {}  # request id -> sent at
        self.group_commits = 0
        self.group_probed: set[str] = set()  # "commit", "fetch": answered since the heal
        self.served_partitions = list(self.topic_partitions)  # and the offsets topic's, once created
        self.batch_records_max = 3

    # -- services for brokers ------------------------------------------------------------------------

    @property
    def topic_id(self) -> str:
        return self.controller.topic_id

    def log_config_of(self, topic: str) -> LogConfig:
        return self.offsets_log_config if topic == OFFSETS_TOPIC else self.log_config

    def trace(self, line: str) -> None:
        if self.trace_sink is not None:
            self.trace_sink(f"{self.now_ms:>7} {line}")

    def schedule(self, at_ms: int, kind: Kind, payload: Any = None) -> None:
        self.sequence += 1
        heapq.heappush(self.heap, (max(at_ms, self.now_ms), self.sequence, kind, payload))

    def send(self, message: Message, at_most_once: bool = False) -> None:
        """`at_most_once`: a request that reaches its node once or never (its copy is dropped)."""
        times = self.network.delivery_times(message.source, message.destination, self.now_ms)
        for at_ms in times[:1] if at_most_once else times:
            self.schedule(at_ms, Kind.DELIVER, message)

    def schedule_broker_tick(self, broker: SimBroker, at_ms: int) -> None:
        self.schedule(at_ms, Kind.BROKER_TICK, (broker.broker_id, broker.incarnation, at_ms))

    def schedule_lifecycle_tick(self, broker: SimBroker, at_ms: int) -> None:
        self.schedule(at_ms, Kind.LIFECYCLE_TICK, (broker.broker_id, broker.incarnation, at_ms))

    def opened(self, broker: SimBroker) -> None:
        """A broker's new incarnation opened its log directory: the checker reads every log as
        recovery left it."""
        assert broker.manager is not None
        observer = self.observers[broker.broker_id] = BrokerObserver(broker.broker_id, broker.incarnation, CONSUMER_ID)
        for read in observer.opened_logs(self.now_ms, broker.manager):
            self.checker.observe(read)

    def observe(self, broker: SimBroker, ready: BrokerReady) -> None:
        """Every call of every broker core: trace its partition steps, then tell the checker."""
        for step in ready.steps:
            topic_partition, event, partition_ready = step.topic_partition, step.event, step.ready
            if self.trace_sink is not None:
                self.trace(f"b{broker.broker_id}.{broker.incarnation} {topic_partition} {describe(event)} -> "
                           f"{describe(partition_ready)}")
            self.result.truncations += sum(1 for change in partition_ready.log_changes
                                           if type(change).__name__ == "Truncated")
            if partition_ready.role == Role.LEADER and self.last_leader.get(topic_partition) != broker.broker_id:
                self.last_leader[topic_partition] = broker.broker_id
                self.result.leader_changes += 1
        if ready.steps:
            for observation in self.observers[broker.broker_id].handled(self.now_ms, ready, broker.partitions):
                self.checker.observe(observation)

    def acked(self, broker: SimBroker, topic_partition: TopicPartition, client_request_id: int) -> None:
        """An acks=all produce answered with success (the checker saw it in the call's steps); did
        it live through a fault?"""
        self.result.acked_all += 1
        sent_ms = self.produce_sent_ms.pop(client_request_id, None)
        if sent_ms is not None and self.fault_window.covers(sent_ms, self.now_ms, self._fault_active()):
            self.result.acked_all_during_fault += 1

    def halted(self, broker: SimBroker, reason: str) -> None:
        """The broker's core found a damaged batch and the process halts."""
        broker.halt()
        self.fault_window.crashed(self.now_ms)
        self.result.halts += 1
        self.trace(f"broker {broker.broker_id} halts: {reason}")
        if not self.faulty:  # healed: its supervisor restarts it (in the safety phase, the chaos does)
            self.schedule(self.now_ms + self.options.heartbeat_interval_ms, Kind.RESTART, broker.broker_id)

    def fsynced(self, broker: SimBroker) -> None:
        """A call of the broker fsynced: on a slow disk that stalls the whole process."""
        if broker.broker_id not in self.slow_disks or not broker.up or self._paused(broker):
            return
        broker.paused_until_ms = self.now_ms + self.disk_rng.randint(1, self.options.slow_fsync_max_ms)
        self.schedule(broker.paused_until_ms, Kind.RESUME, (broker.broker_id, broker.incarnation))
        self.result.stalls += 1

    def _fault_active(self) -> bool:
        """A broker or controller node is down or paused, or a link is cut."""
        return (any(not broker.up or self._paused(broker) for broker in self.brokers.values())
                or any(node_id not in self.quorum.drivers or self._controller_paused(node_id)
                       for node_id in CONTROLLER_IDS)
                or bool(self.network.blocked))

    def _heal_links(self) -> None:
        if self.network.blocked:
            self.fault_window.ended(self.now_ms)
        self.network.heal()

    # -- the run -------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        try:
            self._setup()
            self._loop()
            self._final_checks()
        finally:
            self.close()
        self.result.simulated_ms = self.now_ms
        self.result.checker = self.checker.figures
        return self.result

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.close()
        self.quorum.close()
        self.idempotent.close()
        self.disk_model.unwatch()
        shutil.rmtree(self.root, ignore_errors=True)

    def _setup(self, scripted: bool = False) -> None:
        """Bootstrap the controller and the brokers; without `scripted`, schedule the workload, the
        chaos and the heal (a scripted scenario acts itself)."""
        assignments = {index: tuple(BROKER_IDS[(index + k) % 3] for k in range(3))
                       for index in range(self.options.partitions)}
        for node_id in CONTROLLER_IDS:
            self._start_controller(node_id, restarted=False)
        for broker_id, broker in self.brokers.items():
            broker.start(self.now_ms)
            self.schedule(self.rng.randint(0, DUTY_INTERVAL_MS), Kind.DUTY, (broker_id, broker.incarnation))
        # The quorum elects its leader, the brokers register themselves (their lifecycle cores), and
        # the admin creates the topic once every broker is unfenced, as an operator would after
        # starting a cluster; the request goes to the active controller like any other.
        self._run_until(lambda: self.quorum.active_controller() is not None
                        and all(self.controller.is_active(broker_id) for broker_id in BROKER_IDS))
        topic = CreatableTopic(TOPIC, assignments=assignments, configs=self.topic_configs)
        self._create_topic(topic)
        if scripted:
            return
        self._create_topic(CreatableTopic(OFFSETS_TOPIC, assignments={0: BROKER_IDS},
                                          configs=self.offsets_topic_configs))
        self.served_partitions = self.all_partitions
        started_ms = self.now_ms  # the safety phase starts once the cluster is up
        self.schedule(started_ms + 1, Kind.PRODUCE)
        self.schedule(started_ms + 1, Kind.CONSUME)
        self.schedule(started_ms + 1, Kind.GROUP)
        if self.options.idempotent_producer:
            self.schedule(started_ms + 1, Kind.IDEMPOTENT)
        self.schedule(started_ms + self.options.chaos_interval_ms, Kind.CHAOS)
        self.schedule(started_ms + self.options.safety_duration_ms, Kind.HEAL)
        if self.options.broker_probe_interval_ms > 0:
            self.schedule(started_ms + self.options.broker_probe_interval_ms, Kind.CONNECT)

    def _run_until(self, condition: Callable[[], bool]) -> None:
        for _ in range(BOOTSTRAP_STEPS_MAX):
            if condition():
                return
            self._step()
        raise AssertionError(f"the cluster did not start within {BOOTSTRAP_STEPS_MAX} steps")

    def _create_topic(self, topic: CreatableTopic) -> None:
        """Create the topic as an operator would: again, once every broker is active again, when the
        active controller found them all fenced. It fences a broker that has not heartbeated it within
        the session timeout, which the brokers of a freshly started cluster can miss while the quorum
        stalls for longer than that and the office defers their answers (replication sim seed
        731205389: the controller fenced brokers 1-3 while handling the creation, 100 ms after their
        last heartbeats reached it)."""
        for _ in range(ADMIN_ATTEMPTS_MAX):
            response = self._admin(CreateTopicsRequest((topic,)))
            result = response.topics[0]
            if result.error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                return
            assert result.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT, result
            self._run_until(lambda: all(self.controller.is_active(broker_id) for broker_id in BROKER_IDS))
        raise AssertionError(f"the topic was not created in {ADMIN_ATTEMPTS_MAX} attempts")

    def _admin(self, request: Any) -> Any:
        """An admin request to the active controller, retried (as an admin client retries) until
        it was answered, other than NOT_CONTROLLER (the office may change); the answer."""
        for _ in range(ADMIN_ATTEMPTS_MAX):
            attempt = self.admin_attempts
            self.admin_attempts += 1
            response = self._admin_attempt(request, attempt)
            if response is not None and not is_not_controller(response):
                return response
        raise AssertionError(f"{type(request).__name__} not answered in {ADMIN_ATTEMPTS_MAX} attempts")

    def _admin_attempt(self, request: Any, attempt: int) -> Any:
        self._run_until(lambda: self.quorum.active_controller() is not None)
        leader = self.quorum.active_controller()
        assert leader is not None
        self._quorum_step(leader, lambda: self.quorum.call(leader, ("admin", attempt), request, self.now_ms))
        deadline_ms = self.now_ms + 4 * self.options.request_timeout_ms
        self._run_until(lambda: attempt in self.admin_answers or self.now_ms > deadline_ms)
        return self.admin_answers.get(attempt)

    def _loop(self) -> None:
        for _ in range(STEPS_MAX):
            if self._step():
                return
        raise AssertionError(f"more than {STEPS_MAX} steps")

    def _step(self) -> bool:
        """Handle the next event; True once the liveness probe finds the cluster converged."""
        if not self.heap:
            raise AssertionError("the event heap ran dry")
        at_ms, _, kind, payload = heapq.heappop(self.heap)
        self.now_ms = at_ms
        self.result.steps += 1
        if kind == Kind.PROBE and self._probe():
            return True
        self._dispatch(kind, payload)
        return False

    def _dispatch(self, kind: Kind, payload: Any) -> None:
        if kind == Kind.DELIVER:
            self._deliver(payload)
        elif kind == Kind.DUTY:
            self._duty(*payload)
        elif kind in (Kind.BROKER_TICK, Kind.LIFECYCLE_TICK):
            broker_id, incarnation, at_ms = payload
            broker = self.brokers[broker_id]
            if broker.up and broker.incarnation == incarnation and not self._paused(broker):
                if kind == Kind.BROKER_TICK:
                    broker.tick(at_ms)
                else:
                    broker.lifecycle_tick(at_ms)
        elif kind == Kind.QUORUM_TICK:
            node_id, at_ms = payload
            if self.quorum_tick_at.get(node_id) == at_ms and node_id in self.quorum.drivers and not (
                self._controller_paused(node_id)
            ):
                del self.quorum_tick_at[node_id]
                self._quorum_step(node_id, lambda: self.quorum.step(node_id, QuorumTick(), self.now_ms))
        elif kind == Kind.METADATA_WAIT:
            self._answer_parked_metadata(payload)
        elif kind == Kind.PRODUCE:
            self._produce()
        elif kind == Kind.CONSUME:
            self._consume()
        elif kind == Kind.CHAOS:
            self._chaos()
        elif kind == Kind.RESUME:
            self._resume(*payload)
        elif kind == Kind.HEAL:
            self._heal_or_extend()
        elif kind == Kind.GROUP:
            self._group()
        elif kind == Kind.IDEMPOTENT:
            self._idempotent()
        elif kind == Kind.RESTART and not self.brokers[payload].up:
            self._restart(self.brokers[payload])
        elif kind == Kind.CONNECT:
            self._probe_brokers()
        elif kind == Kind.SYN:
            self._connection_attempt(*payload)

    def _paused(self, broker: SimBroker) -> bool:
        return broker.paused_until_ms > self.now_ms

    def _duty(self, broker_id: int, incarnation: int) -> None:
        broker = self.brokers[broker_id]
        if not broker.up or broker.incarnation != incarnation or self._paused(broker):
            return
        broker.duty()
        self.schedule(self.now_ms + DUTY_INTERVAL_MS, Kind.DUTY, (broker_id, incarnation))

    # -- messages ------------------------------------------------------------------------------------

    def _deliver(self, message: Message) -> None:
        destination = message.destination
        body = message.body
        if destination in CONTROLLER_IDS:
            self._to_controller_host(message)
            return
        if destination in (PRODUCER_ID, CONSUMER_ID, GROUP_CLIENT_ID):
            self._to_client(body)
            return
        broker = self.brokers[destination]
        if not broker.up:
            return
        if self._paused(broker):
            broker.held.append(message)
            return
        if isinstance(body, ControllerAnswer):
            broker.on_controller_answer(body)
        elif isinstance(body, MetadataAnswer):
            broker.on_metadata(body)
        elif isinstance(body, ReplicaFetchMessage):
            broker.on_replica_fetch(message.source, body)
        elif isinstance(body, ReplicaFetchReply):
            broker.on_replica_fetch_answer(body)
        else:
            broker.on_client(message.source, body)

    # -- probes of brokers' listeners (README, "Failover after kill -9") --------------------------------------------

    def _probe_brokers(self) -> None:
        """Every controller in office (a deposed one too, until it learns) runs the probes its core
        asks for: a connection attempt travels like a message, so a cut or lossy link loses it (a
        time-out: nothing is reported, the session timeout stays the only path)."""
        self.schedule(self.now_ms + self.options.broker_probe_interval_ms, Kind.CONNECT)
        for node_id, driver in sorted(self.quorum.drivers.items()):
            if self._controller_paused(node_id):
                continue
            for probe in driver.office.broker_probes():
                for at_ms in self.network.delivery_times(node_id, probe.broker_id, self.now_ms):
                    self.schedule(at_ms, Kind.SYN, (node_id, probe, self.now_ms))

    def _connection_attempt(self, node_id: int, probe: BrokerProbe, attempted_ms: int) -> None:
        """A live process's kernel accepts the connection, even while the process is paused; on a
        host whose broker process is gone (crashed, halted, not restarted yet) the kernel refuses
        it, and the refusal travels back like a message."""
        if self.brokers[probe.broker_id].up:
            return
        self.trace(f"controller {node_id}: probe of broker {probe.broker_id} (epoch {probe.broker_epoch}) "
                   f"sent at {attempted_ms} refused")
        refused = BrokerConnectionRefused(probe.broker_id, probe.broker_epoch, attempted_ms)
        self.send(Message(probe.broker_id, node_id, refused))

    # -- the controller quorum -----------------------------------------------------------------------

    def _start_controller(self, node_id: int, restarted: bool) -> None:
        self.quorum_tick_at.pop(node_id, None)
        self.controller_paused_until[node_id] = -1
        self.controller_held[node_id] = []
        if restarted:
            self.fault_window.ended(self.now_ms)
        self._quorum_step(node_id, lambda: self.quorum.start(node_id, self.now_ms, restarted))
        self.trace(f"controller {node_id} starts (incarnation {self.quorum.nodes[node_id].incarnation})")

    def _controller_paused(self, node_id: int) -> bool:
        return self.controller_paused_until[node_id] > self.now_ms

    def _quorum_step(self, node_id: int, perform: Callable[[], int]) -> None:
        """Run one step of a controller node, then schedule the tick it asks for and answer the
        metadata long polls its newly applied records satisfy."""
        next_tick_ms = perform()
        if node_id in self.quorum.drivers and self.quorum_tick_at.get(node_id) != next_tick_ms:
            self.quorum_tick_at[node_id] = next_tick_ms
            self.schedule(next_tick_ms, Kind.QUORUM_TICK, (node_id, next_tick_ms))
        self._answer_parked_metadata(node_id)

    def _send_raft(self, message: RaftMessage) -> None:
        self.send(Message(message.source_id, message.destination_id, RaftEnvelope(message)))

    def _on_controller_answer(self, node_id: int, token: object, response: Any) -> None:
        assert isinstance(token, tuple), token
        if token[0] == "probe":  # nobody waits for a refusal's answer; count what it did
            self.result.fast_fences += len(response.fenced_broker_ids)
            return
        if token[0] == "admin":
            self.admin_answers[token[1]] = response
            return
        broker_id, correlation_id = token
        self.send(Message(node_id, broker_id, ControllerAnswer(correlation_id, response)))

    def _to_controller_host(self, message: Message) -> None:
        """A message reaches a controller node's host: a Raft fetch or probe to a down process is
        refused, and its sender's transport reports it at once (tests/sim/connections.py)."""
        body = message.body
        if isinstance(body, RaftEnvelope):
            refusal = self.raft_connections.arrived(body.message, message.destination in self.quorum.drivers)
            if refusal is not None:
                source = self.quorum.nodes[message.source]
                if source.up and refused_by_leader(source.raft, refusal):
                    self.result.refused_leader_fetches += 1
                self.trace(f"controller {message.source}: {type(body.message.body).__name__} to "
                           f"{message.destination} refused")
                self._to_controller(Message(message.destination, message.source, refusal))
                return
        self._to_controller(message)

    def _to_controller(self, message: Message) -> None:
        node_id, body = message.destination, message.body
        if node_id not in self.quorum.drivers:
            return  # down
        if self._controller_paused(node_id):
            self.controller_held[node_id].append(message)
            return
        if isinstance(body, RaftEnvelope):
            self._quorum_step(node_id, lambda: self.quorum.step(node_id, body.message, self.now_ms))
        elif isinstance(body, Unreachable):  # its transport reports a refused or closed connection
            self._quorum_step(node_id, lambda: self.quorum.step(node_id, body, self.now_ms))
        elif isinstance(body, MetadataFetch):
            self.parked_metadata.append((node_id, body, self.now_ms + self.options.metadata_max_wait_ms))
            self.schedule(self.now_ms + self.options.metadata_max_wait_ms, Kind.METADATA_WAIT, node_id)
            self._answer_parked_metadata(node_id)
        elif isinstance(body, BrokerConnectionRefused):
            self._quorum_step(node_id, lambda: self.quorum.call(node_id, ("probe",), body, self.now_ms))
        else:
            assert isinstance(body, ControllerRequest), body
            token = (message.source, body.correlation_id)
            self._quorum_step(node_id, lambda: self.quorum.call(node_id, token, body.request, self.now_ms))

    def _answer_parked_metadata(self, node_id: int) -> None:
        """Answer the long polls at `node_id` that have something newer, or whose wait is over."""
        metadata = self.quorum.metadata(node_id)
        if metadata is None:
            return
        waiting = []
        for parked in self.parked_metadata:
            parked_node, fetch, deadline_ms = parked
            if parked_node == node_id and (fetch.offset < metadata.metadata_offset or deadline_ms <= self.now_ms):
                leader = self.quorum.drivers[node_id].raft.leader_id
                answer = MetadataAnswer(fetch.correlation_id, metadata.copy(), -1 if leader is None else leader)
                self.send(Message(node_id, fetch.broker_id, answer))
            else:
                waiting.append(parked)
        self.parked_metadata = waiting

    # -- clients -------------------------------------------------------------------------------------

    def _view(self, topic_partition: TopicPartition, refresh: bool = False) -> tuple[int, int]:
        """The clients' (leader, leader epoch) for a partition: cached, refreshed on errors."""
        if refresh or topic_partition not in self.client_view:
            state = self.controller.partition(topic_partition)
            self.client_view[topic_partition] = (state.leader, state.leader_epoch)
        return self.client_view[topic_partition]

    def _produce(self) -> None:
        if self.faulty:
            self.schedule(self.now_ms + self.rng.randint(1, self.options.produce_interval_max_ms), Kind.PRODUCE)
        self._expire_produces()
        if len(self.produces_in_flight) >= PRODUCES_IN_FLIGHT_MAX:
            return
        topic_partition = self.rng.choice(self.topic_partitions)
        acks = -1 if not self.faulty or self.rng.random() < self.options.acks_all_fraction else 1
        self._send_produce(topic_partition, acks)
        if self.faulty and self.rng.random() < self.options.delete_records_probability:
            leader, _ = self._view(topic_partition)
            if leader != NO_LEADER:
                self.send(Message(PRODUCER_ID, leader, ClientDeleteRecords(topic_partition, -1)))

    def _expire_produces(self) -> None:
        """Give up on produces unanswered a request timeout past their own (a real client's
        request.timeout.ms): the leader may be gone, so look the partition's leader up again
        rather than wait with every slot taken."""
        for request_id, (deadline_ms, topic_partition) in list(self.produces_in_flight.items()):
            if deadline_ms + self.options.request_timeout_ms < self.now_ms:
                del self.produces_in_flight[request_id]
                self._view(topic_partition, refresh=True)

    def _send_produce(self, topic_partition: TopicPartition, acks: int, leader_id: int | None = None) -> int:
        """Send one batch to the partition's leader as the client sees it (or `leader_id`); return
        the request id, -1 if the client knows no leader."""
        leader, epoch = self._view(topic_partition)
        if leader_id is not None:
            leader, epoch = leader_id, -1
        if leader == NO_LEADER:
            self._view(topic_partition, refresh=True)
            return -1
        self.client_ids += 1
        count = self.rng.randint(1, self.batch_records_max)
        values = [b"%d:%d:%d" % (topic_partition.partition, self.client_ids, index) for index in range(count)]
        records = build_batch_from_values(values, timestamp_ms=WALL_START_MS + self.now_ms)  # the producer's clock
        self.result.produced += 1
        self.produces_in_flight[self.client_ids] = (self.now_ms + self.options.produce_timeout_ms, topic_partition)
        if self.faulty and acks == -1:
            self.produce_sent_ms[self.client_ids] = self.now_ms
        request = ProduceRequest(self.client_ids, records, acks, self.options.produce_timeout_ms,
                                 epoch if self.rng.random() < 0.5 else -1)
        self.send(Message(PRODUCER_ID, leader, ClientProduce(topic_partition, request)))
        return self.client_ids

    def _consume(self) -> None:
        self.schedule(self.now_ms + self.rng.randint(1, self.options.consume_interval_max_ms), Kind.CONSUME)
        topic_partition = self.rng.choice(self.topic_partitions)
        state = self.controller.partition(topic_partition)
        replica = self.rng.choice(state.replicas)
        self.client_ids += 1
        self.consumer_fetch_offsets[self.client_ids] = self.consumer_positions[topic_partition]
        max_bytes = self.rng.choice((200, 4000))
        request = ConsumerFetch(self.client_ids, self.consumer_positions[topic_partition], max_bytes,
                                current_leader_epoch=state.leader_epoch if self.rng.random() < 0.3 else -1)
        wait = FetchWait(-1, min_bytes=self.rng.choice((0, 1)), max_wait_ms=self.rng.choice((0, 20)),
                         max_bytes=max_bytes)
        self.send(Message(CONSUMER_ID, replica, ClientFetch(topic_partition, request, wait)))

    def _idempotent(self) -> None:
        """The idempotent producer (`SimIdempotentProducer`, on the client's own sender logic): a few
        records for a partition now and then (in the safety phase: after the heal it only delivers
        what it holds, as the other producer stops, so that the replicas can converge), then a pass
        of its sender. Checker rules (9) and (11) judge its batches and records."""
        rng = self.idempotent_rng
        self.schedule(self.now_ms + rng.randint(2, 20), Kind.IDEMPOTENT)
        if self.faulty:
            topic_partition = rng.choice(self.topic_partitions)
            self.idempotent.append(topic_partition, rng.randint(1, self.batch_records_max), self.now_ms,
                                   WALL_START_MS + self.now_ms)  # the producer's clock
        self._idempotent_send()

    def _idempotent_send(self) -> None:
        for send in self.idempotent.poll(self.now_ms, self._next_client_id):
            if self.faulty:  # a retry is the same write: its lifetime starts with the batch
                self.produce_sent_ms[send.request_id] = send.created_ms
            _, epoch = self._view(send.topic_partition)
            request = ProduceRequest(send.request_id, send.records, -1, self.options.produce_timeout_ms, epoch)
            # Once: a request over HTTP reaches the broker once or never. A duplicated copy would be
            # a second write of the batch whose answer the producer never sees (seed 219107158: the
            # first copy refused as out of order, the second written, the batch then numbered anew
            # under a new epoch and written twice); the producer's own retries are its requests.
            message = Message(PRODUCER_ID, send.leader, ClientProduce(send.topic_partition, request))
            self.send(message, at_most_once=True)

    def _idempotent_leader(self, topic_partition: TopicPartition) -> int | None:
        """The idempotent producer's metadata: the partition's leader as the clients see it."""
        leader, _ = self._view(topic_partition)
        if leader == NO_LEADER:
            self._view(topic_partition, refresh=True)
            return None
        return leader

    def _next_client_id(self) -> int:
        self.client_ids += 1
        return self.client_ids

    def _to_client(self, body: Any) -> None:
        if isinstance(body, ClientProduceAnswer) and self.idempotent.owns(body.result.request_id):
            self.idempotent.answered(body.result.request_id, body.result.error, self.now_ms)
            self._idempotent_send()
        elif isinstance(body, ClientProduceAnswer):
            self.produce_results[body.result.request_id] = body.result
            self.produces_in_flight.pop(body.result.request_id, None)
            if body.result.error != ErrorCode.NONE:
                self._view(body.topic_partition, refresh=True)
            elif self.liveness_started_ms is not None:
                self.probes_acked.add(body.topic_partition)
        elif isinstance(body, ClientFetchAnswer):
            self._on_fetch_answer(body.topic_partition, body.broker_id, body.result)
        elif isinstance(body, ClientGroupAnswer):
            self._on_group_answer(body.answer)

    def _on_fetch_answer(self, topic_partition: TopicPartition, broker_id: int, result: FetchResult) -> None:
        """The consumer takes an answer (a late or duplicated one too): it moves to the end of the
        last batch, or up to the logStartOffset if it fell behind it; the checker sees each move."""
        position = self.consumer_positions[topic_partition]
        batches = batches_of(result.records) if result.error == ErrorCode.NONE else ()
        if result.error == ErrorCode.OFFSET_OUT_OF_RANGE and 0 <= position < result.log_start_offset:
            self.consumer_positions[topic_partition] = result.log_start_offset
        elif batches:
            self.consumer_positions[topic_partition] = max(position, batches[-1].next_offset)
        self.checker.observe(ConsumerPolled(
            self.now_ms, CONSUMER_ID, topic_partition, broker_id, self.consumer_fetch_offsets[result.request_id],
            result.error, result.log_start_offset, batches, position, self.consumer_positions[topic_partition],
        ))

    # -- the consumer group's offsets ----------------------------------------------------------------

    def _group(self) -> None:
        """The group's client: commits the consumer's positions (one commit at a time, each with its
        id as the metadata) and fetches them back, from the coordinator as it sees it."""
        rng = self.group_rng
        self.schedule(self.now_ms + rng.randint(5, 60), Kind.GROUP)
        give_up_ms = self.options.produce_timeout_ms + self.options.request_timeout_ms
        if self.group_commit is not None and self.group_commit[2] + give_up_ms < self.now_ms:
            self.group_commit = None  # it may still be written: the checker compares log positions
            self._view(self.offsets_partition, refresh=True)
        for request_id, sent_ms in list(self.group_fetches.items()):
            if sent_ms + give_up_ms < self.now_ms:
                del self.group_fetches[request_id]
        leader, _ = self._view(self.offsets_partition)
        if leader == NO_LEADER:
            self._view(self.offsets_partition, refresh=True)
            return
        self.client_ids += 1
        request: CommitOffsets | FetchOffsets
        if self.group_commit is None and rng.random() < 0.5:
            self.group_commits += 1
            offsets = tuple(PartitionOffset(topic_partition.topic, topic_partition.partition,
                                            self.consumer_positions[topic_partition], str(self.group_commits))
                            for topic_partition in self.topic_partitions)
            self.group_commit = (self.client_ids, self.group_commits, self.now_ms, offsets)
            request = CommitOffsets(self.client_ids, GROUP, 0, offsets, WALL_START_MS + self.now_ms)
        elif len(self.group_fetches) < 2:
            self.group_fetches[self.client_ids] = self.now_ms
            request = FetchOffsets(self.client_ids, GROUP, 0,
                                   tuple((tp.topic, tp.partition) for tp in self.topic_partitions))
        else:
            return
        self.send(Message(GROUP_CLIENT_ID, leader, ClientGroupRequest(request)))

    def _on_group_answer(self, answer: CommitAnswer | FetchAnswer) -> None:
        if answer.error != ErrorCode.NONE:
            self._view(self.offsets_partition, refresh=True)
        if isinstance(answer, CommitAnswer):
            if self.group_commit is None or self.group_commit[0] != answer.request_id:
                return  # late: the client gave up on it
            _, commit_id, sent_ms, offsets = self.group_commit
            self.group_commit = None
            if answer.error == ErrorCode.NONE:
                self.checker.observe(GroupCommitAcked(self.now_ms, commit_id, tuple(
                    (TopicPartition(entry.topic, entry.partition), entry.offset) for entry in offsets)))
                # an acks=all write too (its durability is the group rule's to check)
                if self.faulty and self.fault_window.covers(sent_ms, self.now_ms, self._fault_active()):
                    self.result.acked_all_during_fault += 1
                if self.liveness_started_ms is not None:
                    self.group_probed.add("commit")
            return
        sent_ms = self.group_fetches.pop(answer.request_id, None)
        if sent_ms is None or answer.error != ErrorCode.NONE:
            return
        self.checker.observe(GroupOffsetsFetched(self.now_ms, sent_ms, tuple(
            (TopicPartition(entry.topic, entry.partition), entry.offset, entry.metadata) for entry in answer.offsets)))
        if self.liveness_started_ms is not None:
            self.group_probed.add("fetch")

    # -- faults --------------------------------------------------------------------------------------

    def _chaos(self) -> None:
        if not self.faulty:
            return
        self.schedule(self.now_ms + self.options.chaos_interval_ms, Kind.CHAOS)
        options = self.options
        rng = self.rng
        scale = self.fault_scale
        node_ids = [*CONTROLLER_IDS, *BROKER_IDS]
        if rng.random() < options.partition_probability * scale:
            self.trace(f"chaos: partition {self.network.partition(node_ids)}")
        if self.network.blocked and rng.random() < options.partition_heal_probability:
            self._heal_links()
            self.trace("chaos: heal links")
        if rng.random() < options.leader_fault_probability * scale:
            self._leader_fault()
        if rng.random() < options.follower_fault_probability * scale:
            self._follower_fault()
        for broker in self.brokers.values():
            if broker.up and rng.random() < options.crash_probability * scale:
                self._crash(broker)
            elif not broker.up and rng.random() < options.restart_probability:
                self._restart(broker)
            elif broker.up and not self._paused(broker) and rng.random() < options.pause_probability * scale:
                broker.paused_until_ms = self.now_ms + rng.randint(1, options.pause_max_ms)
                self.trace(f"chaos: pause broker {broker.broker_id} until {broker.paused_until_ms}")
                self.schedule(broker.paused_until_ms, Kind.RESUME, (broker.broker_id, broker.incarnation))
        if rng.random() < options.controller_fault_probability * scale:
            self._controller_fault()
        self._disk_faults()
        if options.clock_step_probability and rng.random() < options.clock_step_probability * scale:
            broker = rng.choice(list(self.brokers.values()))
            step_ms = rng.choice(CLOCK_STEPS_MS)
            broker.wall_offset_ms += step_ms
            self.trace(f"chaos: broker {broker.broker_id}'s wall clock steps {step_ms:+d} ms")
        for node_id in CONTROLLER_IDS:
            up = node_id in self.quorum.drivers
            if up and rng.random() < options.crash_probability * scale:
                self._crash_controller(node_id)
            elif not up and rng.random() < options.restart_probability:
                self._start_controller(node_id, restarted=True)
            elif up and not self._controller_paused(node_id) and rng.random() < options.pause_probability * scale:
                self._pause_controller(node_id, rng.randint(1, options.pause_max_ms))

    def _disk_faults(self) -> None:
        """Bit rot on a random broker's disk; a broker's disk turning slow (until the heal)."""
        options, rng = self.options, self.disk_rng
        if options.rot_probability and rng.random() < options.rot_probability:
            broker = rng.choice(list(self.brokers.values()))
            found = broker.disk.rot(broker.manager, rng) if broker.up and broker.manager is not None else None
            if found is not None:
                topic_partition, batch = found
                self.checker.observe(BatchRotted(self.now_ms, broker.broker_id, topic_partition, batch))
                self.result.rots += 1
                self.trace(f"chaos: bit rot in {topic_partition} on broker {broker.broker_id} at {batch.base_offset}")
        if options.slow_disk_probability and rng.random() < options.slow_disk_probability:
            broker_id = rng.choice(BROKER_IDS)
            self.slow_disks.add(broker_id)
            self.trace(f"chaos: broker {broker_id}'s disk turns slow")

    def _controller_fault(self) -> None:
        """Crash or pause the active controller (a controller failover under replication)."""
        node_id = self.quorum.active_controller()
        if node_id is None or self._controller_paused(node_id):
            return
        if self.rng.random() < 0.5:
            self.trace(f"chaos: controller fault crash on {node_id}")
            self._crash_controller(node_id)
        else:
            self.trace(f"chaos: controller fault pause on {node_id}")
            self._pause_controller(node_id, self.rng.randint(1, self.options.pause_max_ms))

    def _crash_controller(self, node_id: int) -> None:
        closes = self.raft_connections.crashed(node_id)
        for peer_id, closed in closes:
            self.send(Message(node_id, peer_id, closed))
        cuts = self.quorum.crash(node_id, self.rng, self.options.tear_probability)
        self.quorum_tick_at.pop(node_id, None)
        self.parked_metadata = [parked for parked in self.parked_metadata if parked[0] != node_id]
        self.fault_window.crashed(self.now_ms)
        self.result.crashes += 1
        self.trace(f"chaos: crash controller {node_id} cuts={cuts} closes the fetch connections of "
                   f"{[peer_id for peer_id, _ in closes]}")

    def _pause_controller(self, node_id: int, duration_ms: int) -> None:
        self.controller_paused_until[node_id] = self.now_ms + duration_ms
        self.trace(f"chaos: pause controller {node_id} until {self.controller_paused_until[node_id]}")
        self.schedule(self.controller_paused_until[node_id], Kind.RESUME, (node_id, -1))

    def _resume_controller(self, node_id: int) -> None:
        if node_id not in self.quorum.drivers or self._controller_paused(node_id):
            return
        self.controller_paused_until[node_id] = -1
        self.fault_window.ended(self.now_ms)
        held, self.controller_held[node_id] = self.controller_held[node_id], []
        self.trace(f"resume controller {node_id} with {len(held)} held messages")
        for message in held:
            self._to_controller(message)
        if node_id in self.quorum.drivers:
            self.quorum_tick_at.pop(node_id, None)
            self._quorum_step(node_id, lambda: self.quorum.step(node_id, QuorumTick(), self.now_ms))

    def _leader_fault(self) -> None:
        """Crash, pause or cut off the current leader of a random partition."""
        rng = self.rng
        leader_id = self.controller.partition(rng.choice(self.topic_partitions)).leader
        kind = rng.choice(("crash", "pause", "cut-followers", "isolate"))
        broker = self.brokers.get(leader_id)
        if broker is None or not broker.up or self._paused(broker):
            return
        self.trace(f"chaos: leader fault {kind} on broker {leader_id}")
        if kind == "crash":
            self._crash(broker)
        elif kind == "pause":
            broker.paused_until_ms = self.now_ms + rng.randint(1, self.options.pause_max_ms)
            self.schedule(broker.paused_until_ms, Kind.RESUME, (broker.broker_id, broker.incarnation))
        else:
            others = [node for node in (*CONTROLLER_IDS, *BROKER_IDS) if node != leader_id]
            if kind == "cut-followers":
                others = [node for node in others if node not in CONTROLLER_IDS]
            for other in others:
                self.network.blocked |= {(leader_id, other), (other, leader_id)}

    def _follower_fault(self) -> None:
        """Crash, pause (one to three replica.lag.time.max.ms) or cut off from its leader a follower
        of a random partition: the ISR shrinks around it and the partition goes on acknowledging
        acks=all writes with fewer copies, the schedule durability is about."""
        rng = self.rng
        state = self.controller.partition(rng.choice(self.topic_partitions))
        follower_id = rng.choice([replica for replica in state.replicas if replica != state.leader])
        kind = rng.choice(("crash", "pause", "cut-leader"))
        broker = self.brokers[follower_id]
        if not broker.up or self._paused(broker):
            return
        self.trace(f"chaos: follower fault {kind} on broker {follower_id}")
        if kind == "crash":
            self._crash(broker)
        elif kind == "pause":
            lag_ms = self.options.replica_lag_time_max_ms
            broker.paused_until_ms = self.now_ms + rng.randint(lag_ms, 3 * lag_ms)
            self.schedule(broker.paused_until_ms, Kind.RESUME, (broker.broker_id, broker.incarnation))
        elif state.leader != NO_LEADER:
            self.network.blocked |= {(follower_id, state.leader), (state.leader, follower_id)}

    def _crash(self, broker: SimBroker) -> None:
        """A power loss; with `wipe_probability` the disk is replaced too (the broker restarts empty,
        with a new directory id: it must rejoin as an empty follower, never lead)."""
        if self.options.wipe_probability and self.rng.random() < self.options.wipe_probability:
            lost = broker.wipe()
            self.checker.observe(BrokerWiped(self.now_ms, broker.broker_id))
            self.result.wipes += 1
            self.trace(f"chaos: crash broker {broker.broker_id} and wipe its disk lost={lost}")
        else:
            cut_from, cuts = broker.crash(self.rng, self.options.tear_probability)
            self.checker.observe(BrokerCrashed(self.now_ms, broker.broker_id, tuple(sorted(cut_from.items()))))
            self.trace(f"chaos: crash broker {broker.broker_id} cut_from={cut_from} cuts={cuts}")
        self.fault_window.crashed(self.now_ms)
        self.result.crashes += 1

    def _restart(self, broker: SimBroker) -> None:
        broker.start(self.now_ms)
        self.fault_window.ended(self.now_ms)
        self.trace(f"chaos: restart broker {broker.broker_id} as incarnation {broker.incarnation}")
        self.schedule(self.now_ms, Kind.DUTY, (broker.broker_id, broker.incarnation))

    def _resume(self, broker_id: int, incarnation: int) -> None:
        if broker_id in CONTROLLER_IDS:
            self._resume_controller(broker_id)
            return
        broker = self.brokers[broker_id]
        if not broker.up or broker.incarnation != incarnation or self._paused(broker):
            return
        broker.paused_until_ms = -1
        self.fault_window.ended(self.now_ms)
        held, broker.held = broker.held, []
        self.trace(f"resume broker {broker_id} with {len(held)} held messages")
        for message in held:
            self._deliver(message)
        if broker.up and not self._paused(broker):
            broker.tick_at_ms = None
            broker.step(Tick())
        due_ms = broker.lifecycle_tick_at_ms if broker.up and not self._paused(broker) else None
        if due_ms is not None and due_ms <= self.now_ms:
            # The lifecycle's tick came due in the pause and was dropped: it fires now, late, as a
            # resumed process's overdue timer does (the lifecycle asks for the same tick until it
            # has sent, so it would never be armed again).
            broker.lifecycle_tick(due_ms)
        self.schedule(self.now_ms, Kind.DUTY, (broker_id, incarnation))

    def _heal_or_extend(self) -> None:
        """End the safety phase, unless no write was acknowledged during a fault yet: then the faults
        go on for another safety_duration_ms (at most SAFETY_EXTENSIONS_MAX times). A run whose
        faults kept the partitions from taking acks=all writes (several brokers or the whole
        controller quorum down, the ISR below min.insync.replicas) had nothing for the durability
        checks to check; it gets more time under the same kinds of faults, new ones starting at half
        the rate at each extension, instead of ending calm: at the drawn rates ~18 % of the seeds had
        no such write after two extensions (CI's campaign fell to 79 %), most of them no acks=all
        write at all, the partitions below min.insync.replicas or without a controller throughout.
        Runs that had such a write heal when they always did."""
        if self.result.acked_all_during_fault == 0 and self.safety_extensions < SAFETY_EXTENSIONS_MAX:
            self.safety_extensions += 1
            self.fault_scale /= 2
            self.trace(f"safety phase extended ({self.safety_extensions}): no write acknowledged during a fault yet")
            self.schedule(self.now_ms + self.options.safety_duration_ms, Kind.HEAL)
            return
        self._heal()

    def _heal(self) -> None:
        """End of the safety phase: no more faults; restart, resume, reconnect everything."""
        self.faulty = False
        self.network.faulty = False
        self.slow_disks.clear()
        self._heal_links()
        self.liveness_started_ms = self.now_ms
        self.trace("heal: liveness phase")
        for node_id in CONTROLLER_IDS:
            if node_id not in self.quorum.drivers:
                self._start_controller(node_id, restarted=True)
            elif self._controller_paused(node_id):
                self.controller_paused_until[node_id] = self.now_ms
                self._resume_controller(node_id)
        for broker in self.brokers.values():
            if not broker.up:
                self._restart(broker)
            elif self._paused(broker):
                broker.paused_until_ms = self.now_ms
                self._resume(broker.broker_id, broker.incarnation)
        self.schedule(self.now_ms + PROBE_INTERVAL_MS, Kind.PROBE)

    # -- liveness and the end ------------------------------------------------------------------------

    def _probe(self) -> bool:
        """True once converged; else send what is missing and probe again (or fail past the bound)."""
        assert self.liveness_started_ms is not None
        elapsed = self.now_ms - self.liveness_started_ms
        missing = self._not_converged()
        if missing is None:
            self.result.liveness_ms = elapsed
            return True
        if elapsed > LIVENESS_BOUND_MS:
            raise LivenessFailure(f"not converged {elapsed} ms after healing: {missing}")
        self._expire_produces()
        for topic_partition in self.topic_partitions:
            if topic_partition not in self.probes_acked and not self.produces_in_flight:
                self._send_produce(topic_partition, acks=-1)
        self.schedule(self.now_ms + PROBE_INTERVAL_MS, Kind.PROBE)
        return False

    def _not_converged(self) -> str | None:
        if any(node_id not in self.quorum.drivers for node_id in CONTROLLER_IDS):
            return "a controller node is down"
        if self.quorum.active_controller() is None:
            return "no active controller"
        for broker_id in BROKER_IDS:
            broker = self.brokers[broker_id]
            if not broker.up or not self.controller.is_active(broker_id):
                return f"broker {broker_id} is not up and active"
        if self.offsets_partition in self.served_partitions and self.group_probed != {"commit", "fetch"}:
            return f"the group has had no offset commit and fetch answered since healing ({self.group_probed})"
        for topic_partition in self.served_partitions:
            state = self.controller.partition(topic_partition)
            if state.leader == NO_LEADER or state.isr != state.replicas:
                return f"{topic_partition}: leader {state.leader}, ISR {state.isr}"
            if topic_partition not in self.probes_acked and topic_partition != self.offsets_partition:
                return f"{topic_partition}: no acks=all record acknowledged since healing"
            ends = set()
            for broker_id in state.replicas:
                partition = self.brokers[broker_id].partitions.get(topic_partition)
                if partition is None or (partition.leader_epoch, partition.partition_epoch) != (
                    state.leader_epoch, state.partition_epoch
                ):
                    return (f"{topic_partition}: broker {broker_id} has not applied leader epoch "
                            f"{state.leader_epoch}, partition epoch {state.partition_epoch}")
                log = partition.log
                if log.high_watermark != log.log_end_offset:
                    return f"{topic_partition}: broker {broker_id} HW {log.high_watermark} < LEO {log.log_end_offset}"
                ends.add(log.log_end_offset)
            if len(ends) != 1:
                return f"{topic_partition}: replicas end at {sorted(ends)}"
        return None

    def _final_checks(self) -> None:
        """Every replica's log, read whole, for the checker's last verdicts (every acks=all success
        kept unless deleted or excused; no two committed batches at one offset)."""
        for topic_partition in self.served_partitions:
            for broker_id in self.controller.partition(topic_partition).replicas:
                broker = self.brokers[broker_id]
                self.checker.observe(log_read(self.now_ms, broker_id, broker.incarnation, topic_partition,
                                              broker.partitions[topic_partition].log, ReadReason.FINAL))
        self.checker.finish()


def run_with(seed: int, trace: Callable[[str], None] | None = None) -> SimResult:
    return Simulation(seed, trace=trace).run()


__all__ = ["InvariantViolation", "LivenessFailure", "SimResult", "Simulation", "describe", "run_with"]
