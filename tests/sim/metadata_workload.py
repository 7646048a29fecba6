"""The cluster-metadata workload: the real `ClusterMetadata` state machine, `ControllerOffice` and
`QuorumController` in the simulation.

Every node applies committed entries to a `ClusterMetadata` (the `METADATA` spec). Every node
incarnation runs the node's own `ControllerOffice` (controller/controller_office.py: when to take
and leave office, which calls wait for it, one `ProposeBatch` per request, answers after commit,
the `ControllerTick` cadence) through the node's own `ControllerDriver`; `SimControllerDriver`
adds the simulator's checks to every Raft step. Requests reach a node directly (the client is not
on the simulated network, as in the hash-list workload), as `ControllerRequest` events.

`MetadataWorkload` plays the cluster around the controller, all from the run's generator:
brokers and an admin client. Each broker process runs the node's lifecycle core
(`controller.broker_lifecycle.BrokerLifecycle`, as `node/lifecycle.py` drives it): the core decides
when to register (with the directory id of its log dir and the broker epoch its clean-shutdown
marker names, -1 after a crash), heartbeat (`want_fence` until the metadata it applied includes its
registration), register again, give a request up, and end a controlled shutdown; the workload only
carries its requests to the controller (as the simulator's client requests, retried on
NOT_CONTROLLER and timeouts), hands the answers back, ticks it when it asked and reports the
metadata the broker applied (the offset of the copy it reads, never falling within a process). The
workload decides what a process suffers: it dies (its core is dropped: the controller's `tick` fences
it after `broker_session_timeout_ms`) and comes back as a new incarnation, or it is asked for a
controlled shutdown and, once its core ends it, stops cleanly (its marker names its broker epoch)
and starts again at once. Leaders report ISR changes of partitions they lead (AlterPartition, from a
possibly stale copy of the metadata, with the broker epoch their core holds). The admin client
creates topics (names from a small pool, so TOPIC_ALREADY_EXISTS happens; sometimes illegal names,
too many replicas, bad configs), deletes them and toggles their configs (unclean leader election,
min.insync.replicas). The simulator's checker runs `check_invariants` and `MetadataHistory` on
every node's metadata after every step that applied something.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.broker_lifecycle import (
    NO_BROKER_EPOCH,
    BeginControlledShutdown,
    BrokerLifecycle,
    BrokerLifecycleConfig,
    BrokerState,
    ControllerAnswer,
    LifecycleEvent,
    LifecycleTick,
    MetadataApplied,
    StartLifecycle,
)
from controller.controller_api import BrokerConnectionRefused
from controller.controller_driver import ControllerDriver
from controller.controller_office import ControllerOffice
from controller.metadata import ClusterMetadata, check_invariants
from controller.raft_driver import RaftDriver
from controller.raft_messages import Event, ProposalCompletion, ProposeBatch, RaftError
from tests.sim.checker import SafetyChecker, SafetyViolation
from wire.alter_partition import AlterPartitionData, AlterPartitionRequest
from wire.configs import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
)
from wire.sentinels import NO_LEADER
from wire.topics import CreatableTopic, CreateTopicsRequest, DeleteTopicsRequest

TOPIC_NAMES = ("orders", "payments", "clicks", "audit.log", "audit_log", "events-v2")
BAD_TOPIC_NAMES = ("", ".", "..", "no spaces", "x" * 250)
LIVENESS_TOPIC_PREFIX = "live-"


@dataclass(frozen=True, slots=True)
class ControllerRequest:
    """A request delivered to a node for its active controller (a simulator event, held while the
    node is paused like any other)."""

    proposal_id: int
    request: Any


class SimControllerDriver(ControllerDriver):
    """The node's `ControllerDriver` with the simulator's checks around every Raft step, the office's
    proposals included: the speculative metadata's invariants and the checker's record of each
    proposed batch before it goes to Raft; Raft safety after the step; and that every proposal
    Raft completes committed exactly its batch (atomic requests)."""

    def __init__(self, raft_driver: RaftDriver, office: ControllerOffice, answer: Callable[[object, Any], None],
                 checker: SafetyChecker, trace: Callable[[Event], None]) -> None:
        super().__init__(raft_driver, office, answer)
        self.checker = checker
        self.trace = trace
        self.proposed: dict[int, tuple[bytes, ...]] = {}  # proposal id -> its records, until completed

    def step_raft(self, event: Event, now_ms: int) -> list[ProposalCompletion]:
        node_id = self.raft.node_id
        if isinstance(event, ProposeBatch):
            self.trace(event)
            assert self.office.controller is not None, "a proposal without a controller"
            problems = check_invariants(self.office.controller.metadata)
            if problems:
                raise SafetyViolation(f"metadata invariants: node {node_id}'s controller before proposal "
                                      f"{event.proposal_id}: " + "; ".join(problems))
            self.checker.on_propose(event.records)
            self.proposed[event.proposal_id] = event.records
        completions = super().step_raft(event, now_ms)
        self.checker.after_step(node_id, self.raft)
        for completion in completions:
            records = self.proposed.pop(completion.proposal_id, None)
            assert records is not None, f"node {node_id}: {completion} of a batch it never proposed"
            if completion.error is RaftError.NONE:
                self.checker.check_completion(node_id, completion.offset, completion.epoch, records)
        return completions


@dataclass(slots=True)
class WorkloadBroker:
    """A broker process as the workload plays it: its lifecycle core while the process is up, and
    what the workload must remember for the core (see the module docstring)."""

    broker_id: int
    lifecycle: BrokerLifecycle | None = None  # None while the process is down
    incarnation: int = 0
    revive_ms: int = 0  # when a down process starts again
    previous_broker_epoch: int = NO_BROKER_EPOCH  # what the clean-shutdown marker names (-1: none)
    metadata_offset: int = -1  # the metadata this process applied
    reported: tuple[int, bool] = (-1, False)  # the last MetadataApplied (offset, caught up) its core heard
    next_tick_ms: int | None = None  # when its core asked to be ticked
    sent: tuple[Any, int] | None = None  # the core's last request (by identity) and its id


@dataclass(slots=True)
class MetadataWorkload:
    """Brokers and an admin client (see the module docstring). Owner: the Simulation, which asks
    for requests (`heartbeats`, `next_request`, `liveness_request`) and reports responses
    (`on_response`). The brokers' requests wait in `outbox` until `heartbeats` hands them over: an
    answer arrives in the middle of a node's step, where the simulator cannot submit."""

    rng: random.Random
    broker_count: int
    heartbeat_interval_ms: int
    broker_down_max_ms: int
    session_timeout_ms: int
    request_timeout_ms: int
    controlled_shutdown_timeout_ms: int
    brokers: dict[int, WorkloadBroker] = field(default_factory=dict)
    outbox: list[Any] = field(default_factory=list)
    liveness_sequence: int = 0

    def __post_init__(self) -> None:
        self.brokers = {broker_id: WorkloadBroker(broker_id) for broker_id in range(1, self.broker_count + 1)}

    def heartbeats(self, now_ms: int, view: ClusterMetadata) -> list[Any]:
        """The brokers' requests since the last call: every due start, metadata report and tick of
        their lifecycle cores, in broker order, after the answers' follow-ups."""
        for broker in self.brokers.values():
            if broker.lifecycle is None:
                if now_ms < broker.revive_ms:
                    continue
                self._start(broker, now_ms)
            self._report_metadata(broker, view, now_ms)
            if broker.next_tick_ms is not None and now_ms >= broker.next_tick_ms:
                self._step(broker, LifecycleTick(), now_ms)
        requests, self.outbox = self.outbox, []
        return requests

    def on_response(self, request: Any, response: Any, now_ms: int) -> None:
        """An answer reached the client: a broker's core gets the answer to its last request (an
        earlier one it gave up, or one of a previous process, goes nowhere)."""
        broker_id = getattr(request, "broker_id", None)
        broker = self.brokers.get(broker_id) if isinstance(broker_id, int) else None
        if broker is None or broker.lifecycle is None or broker.sent is None or broker.sent[0] is not request:
            return
        self._step(broker, ControllerAnswer(broker.sent[1], response), now_ms)

    # -- the brokers' processes --------------------------------------------------------------------

    def _start(self, broker: WorkloadBroker, now_ms: int) -> None:
        """A new process: a fresh lifecycle core, registering with what the marker names."""
        broker_id = broker.broker_id
        rack = None if broker_id % 3 == 0 else f"rack-{broker_id % 2}"
        config = BrokerLifecycleConfig(
            broker_id=broker_id, endpoints=(("PLAINTEXT", f"broker-{broker_id}:9092"),), rack=rack,
            log_dirs=(f"dir-{broker_id}",), heartbeat_interval_ms=self.heartbeat_interval_ms,
            session_timeout_ms=self.session_timeout_ms, request_timeout_ms=self.request_timeout_ms,
        )
        broker.incarnation += 1
        broker.lifecycle = BrokerLifecycle(config, now_ms)
        broker.metadata_offset, broker.reported, broker.next_tick_ms, broker.sent = -1, (-1, False), None, None
        previous_broker_epoch, broker.previous_broker_epoch = broker.previous_broker_epoch, NO_BROKER_EPOCH
        self._step(broker, StartLifecycle(f"b{broker_id}-i{broker.incarnation}", previous_broker_epoch), now_ms)

    def _crash(self, broker: WorkloadBroker, revive_ms: int) -> None:
        """The process dies: no clean-shutdown marker, so it registers as an unclean restart."""
        broker.lifecycle, broker.sent, broker.next_tick_ms = None, None, None
        broker.revive_ms = revive_ms
        broker.previous_broker_epoch = NO_BROKER_EPOCH

    def _stop_cleanly(self, broker: WorkloadBroker, now_ms: int) -> None:
        """The core ended a controlled shutdown: the process stops cleanly, its marker naming its
        broker epoch (node/broker.py's stop), and starts again at once."""
        assert broker.lifecycle is not None, f"broker {broker.broker_id} is down"
        broker_epoch = broker.lifecycle.broker_epoch
        self._crash(broker, now_ms)
        broker.previous_broker_epoch = broker_epoch

    def _report_metadata(self, broker: WorkloadBroker, view: ClusterMetadata, now_ms: int) -> None:
        """The broker applied the metadata of the copy it reads, if newer; caught up once that
        includes its registration (the broker core's rule)."""
        assert broker.lifecycle is not None, f"broker {broker.broker_id} is down"
        broker.metadata_offset = max(broker.metadata_offset, view.last_applied_offset)
        broker_epoch = broker.lifecycle.broker_epoch
        caught_up = broker_epoch != NO_BROKER_EPOCH and broker.metadata_offset >= broker_epoch
        if (broker.metadata_offset, caught_up) != broker.reported:
            broker.reported = (broker.metadata_offset, caught_up)
            self._step(broker, MetadataApplied(broker.metadata_offset, caught_up), now_ms)

    def _step(self, broker: WorkloadBroker, event: LifecycleEvent, now_ms: int) -> None:
        """One event for the broker's lifecycle core, then what its Ready asks."""
        assert broker.lifecycle is not None, f"broker {broker.broker_id} is down"
        ready = broker.lifecycle.handle(event, now_ms)
        broker.next_tick_ms = ready.next_tick_ms
        if ready.request is not None:
            request_id, request = ready.request
            broker.sent = (request, request_id)
            self.outbox.append(request)
        if ready.shutdown is not None:
            self._stop_cleanly(broker, now_ms)

    def next_request(self, now_ms: int, view: ClusterMetadata) -> Any | None:
        """One admin or broker request (None: this turn the workload crashed a broker instead)."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.004:
            broker = self.brokers[rng.randint(1, self.broker_count)]
            if broker.lifecycle is not None:
                self._crash(broker, now_ms + rng.randint(1, self.broker_down_max_ms))
            return None
        if roll < 0.008:
            broker = self.brokers[rng.randint(1, self.broker_count)]
            lifecycle = broker.lifecycle
            if lifecycle is not None and lifecycle.state in (BrokerState.STARTING, BrokerState.RECOVERY,
                                                             BrokerState.RUNNING):
                self._step(broker, BeginControlledShutdown(self.controlled_shutdown_timeout_ms), now_ms)
            return None
        if roll < 0.35:
            return self._create_topic(view)
        if roll < 0.50:
            names = [rng.choice(TOPIC_NAMES)] if rng.random() < 0.8 else [rng.choice(TOPIC_NAMES) for _ in range(2)]
            return DeleteTopicsRequest(tuple(names))
        if roll < 0.62:
            return self._alter_configs()
        if roll >= 0.985:
            return self._refused_probe(view, now_ms)
        return self._alter_partition(view)

    def _refused_probe(self, view: ClusterMetadata, now_ms: int) -> BrokerConnectionRefused | None:
        """A controller's probe of a broker whose process is down was refused (README, "Failover after kill -9"): a
        down process's port refuses, a live one's never does. Sent to whichever node, maybe late:
        the broker may have registered again by the time it lands."""
        down = [broker.broker_id for broker in self.brokers.values() if broker.lifecycle is None]
        registration = view.broker(self.rng.choice(down)) if down else None
        if registration is None:
            return None
        return BrokerConnectionRefused(registration.broker_id, registration.broker_epoch, now_ms)

    def liveness_request(self) -> CreateTopicsRequest:
        """A request that always proposes records while a broker is unfenced: a fresh topic."""
        self.liveness_sequence += 1
        return CreateTopicsRequest((CreatableTopic(f"{LIVENESS_TOPIC_PREFIX}{self.liveness_sequence}", 1, 1),))

    def _create_topic(self, view: ClusterMetadata) -> CreateTopicsRequest:
        rng = self.rng
        name = rng.choice(BAD_TOPIC_NAMES) if rng.random() < 0.05 else rng.choice(TOPIC_NAMES)
        configs: dict[str, str] = {}
        if rng.random() < 0.3:
            configs["unclean.leader.election.enable"] = rng.choice(("true", "false"))
        if rng.random() < 0.1:
            configs["min.insync.replicas"] = str(rng.randint(1, 4))
        if rng.random() < 0.1:
            brokers = [broker.broker_id for broker in view.brokers()] or [1]
            factor = rng.randint(1, len(brokers))
            assignments = {index: tuple(rng.sample(brokers, factor)) for index in range(rng.randint(1, 3))}
            topic = CreatableTopic(name, assignments=assignments, configs=configs)
        else:
            topic = CreatableTopic(name, rng.randint(1, 4), rng.choice((1, 1, 2, 2, 3)), configs=configs)
        return CreateTopicsRequest((topic,), validate_only=rng.random() < 0.05)

    def _alter_configs(self) -> IncrementalAlterConfigsRequest:
        rng = self.rng
        name = rng.choice(TOPIC_NAMES)
        key = rng.choice(("unclean.leader.election.enable", "min.insync.replicas", "retention.ms"))
        value = {"unclean.leader.election.enable": rng.choice(("true", "false")),
                 "min.insync.replicas": str(rng.randint(1, 3)),
                 "retention.ms": str(rng.randint(-1, 10**6))}[key]
        op = AlterConfigOp.DELETE if rng.random() < 0.2 else AlterConfigOp.SET
        resource = AlterConfigsResource(ConfigResourceType.TOPIC, name, (AlterableConfig(key, op, value),))
        return IncrementalAlterConfigsRequest((resource,))

    def _alter_partition(self, view: ClusterMetadata) -> AlterPartitionRequest | None:
        """A leader's ISR change, from the (maybe stale) metadata the broker has."""
        rng = self.rng
        led = [(topic_id, index, state) for topic_id, index, state in view.all_partitions()
               if state.leader != NO_LEADER]
        if not led:
            return None
        topic_id, index, state = rng.choice(led)
        broker = self.brokers.get(state.leader)
        lifecycle = broker.lifecycle if broker is not None else None
        if lifecycle is None or lifecycle.broker_epoch == NO_BROKER_EPOCH:
            return None
        # Shrink when every replica is in sync, otherwise mostly expand (a follower caught up), so
        # that most requests change something; sometimes a random set, which may name a fenced broker.
        others = [replica for replica in state.replicas if replica != state.leader]
        if set(state.isr) == set(state.replicas) and others:
            dropped = rng.choice(others)
            chosen = [replica for replica in state.replicas if replica != dropped]
        elif rng.random() < 0.7:
            chosen = list(state.replicas)
        else:
            chosen = [replica for replica in others if rng.random() < 0.5] + [state.leader]
        new_isr = tuple(replica for replica in state.replicas if replica in chosen)
        data = AlterPartitionData(topic_id, index, state.leader_epoch, state.partition_epoch, new_isr)
        return AlterPartitionRequest(state.leader, lifecycle.broker_epoch, (data,))
