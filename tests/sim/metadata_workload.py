"""The cluster-metadata workload: the real `ClusterMetadata` state machine, `ControllerOffice` and
`QuorumController` in the simulation.

Every node applies committed entries to a `ClusterMetadata` (the `METADATA` spec). Every node
incarnation runs the node's own `ControllerOffice` (controller/controller_office.py: when to take
and leave office, which calls wait for it, one `ProposeBatch` per request, answers after commit,
the `ControllerTick` cadence) through the node's own `ControllerDriver`; `SimControllerDriver`
adds the simulator's checks to every Raft step. Requests reach a node directly (the client is not
on the simulated network, as in the hash-list workload), as `ControllerRequest` events.

`MetadataWorkload` plays the cluster around the controller, all from the run's generator:
brokers that register, heartbeat every `heartbeat_interval_ms`, die (stop heartbeating, so the
controller's `tick` fences them after `broker_session_timeout_ms`) and come back as a new
incarnation that re-registers, ask for controlled shutdowns, and report ISR changes of partitions
they lead (AlterPartition, from a possibly stale copy of the metadata); and an admin client that
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

from controller.controller_api import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterPartitionData,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ConfigResourceType,
    ControlledShutdownRequest,
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from controller.controller_driver import ControllerDriver
from controller.controller_office import ControllerOffice
from controller.metadata import ClusterMetadata, check_invariants
from controller.metadata_records import NO_LEADER
from controller.raft_driver import RaftDriver
from controller.raft_messages import Event, ProposalCompletion, ProposeBatch, RaftError
from storage.error_codes import ErrorCode
from tests.sim.checker import SafetyChecker, SafetyViolation

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
class SimBroker:
    """A broker process as the workload plays it: its current incarnation and broker epoch."""

    broker_id: int
    incarnation: int = 1
    alive: bool = True
    broker_epoch: int | None = None  # None: (re-)register next
    register_again_ms: int = 0  # a registration is in flight until then (or until answered)
    next_heartbeat_ms: int = 0
    revive_ms: int = 0
    shutting_down: bool = False
    clean_epoch: int = -1  # the broker epoch a controlled shutdown left in its clean-shutdown marker


@dataclass(slots=True)
class MetadataWorkload:
    """Brokers and an admin client (see the module docstring). Owner: the Simulation, which asks
    for requests (`heartbeats`, `next_request`, `liveness_request`) and reports responses."""

    rng: random.Random
    broker_count: int
    heartbeat_interval_ms: int
    broker_down_max_ms: int
    brokers: dict[int, SimBroker] = field(default_factory=dict)
    liveness_sequence: int = 0

    def __post_init__(self) -> None:
        self.brokers = {broker_id: SimBroker(broker_id) for broker_id in range(1, self.broker_count + 1)}

    def heartbeats(self, now_ms: int, view: ClusterMetadata) -> list[Any]:
        """Heartbeats (and registrations) of every live broker that is due."""
        requests: list[Any] = []
        for broker in self.brokers.values():
            if not broker.alive and now_ms >= broker.revive_ms:
                broker.alive, broker.incarnation, broker.broker_epoch = True, broker.incarnation + 1, None
                broker.register_again_ms, broker.shutting_down = 0, False
            if not broker.alive or now_ms < broker.next_heartbeat_ms:
                continue
            broker.next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
            if broker.broker_epoch is None:
                if now_ms >= broker.register_again_ms:
                    # One registration at a time: each success is a new broker epoch.
                    broker.register_again_ms = now_ms + 8 * self.heartbeat_interval_ms
                    requests.append(self._registration(broker))
            elif broker.shutting_down:
                requests.append(ControlledShutdownRequest(broker.broker_id, broker.broker_epoch,
                                                          view.last_applied_offset))
            else:
                requests.append(BrokerHeartbeatRequest(broker.broker_id, broker.broker_epoch,
                                                       view.last_applied_offset))
        return requests

    def _registration(self, broker: SimBroker) -> BrokerRegistrationRequest:
        rack = None if broker.broker_id % 3 == 0 else f"rack-{broker.broker_id % 2}"
        return BrokerRegistrationRequest(broker.broker_id, f"b{broker.broker_id}-i{broker.incarnation}",
                                         {"PLAINTEXT": f"broker-{broker.broker_id}:9092"}, rack,
                                         (f"dir-{broker.broker_id}",), broker.clean_epoch)

    def next_request(self, now_ms: int, view: ClusterMetadata) -> Any | None:
        """One admin or broker request (None: this turn the workload crashed a broker instead)."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.004:
            broker = self.brokers[rng.randint(1, self.broker_count)]
            if broker.alive:
                broker.alive = False  # the process dies: no more heartbeats until it comes back
                broker.revive_ms = now_ms + rng.randint(1, self.broker_down_max_ms)
                broker.clean_epoch = -1  # no clean-shutdown marker: it registers as an unclean restart
            return None
        if roll < 0.008:
            broker = self.brokers[rng.randint(1, self.broker_count)]
            broker.shutting_down = broker.alive and broker.broker_epoch is not None
            return None
        if roll < 0.35:
            return self._create_topic(view)
        if roll < 0.50:
            names = [rng.choice(TOPIC_NAMES)] if rng.random() < 0.8 else [rng.choice(TOPIC_NAMES) for _ in range(2)]
            return DeleteTopicsRequest(tuple(names))
        if roll < 0.62:
            return self._alter_configs()
        return self._alter_partition(view)

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
        if broker is None or broker.broker_epoch is None or not broker.alive:
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
        return AlterPartitionRequest(state.leader, broker.broker_epoch, (data,))

    def on_response(self, request: Any, response: Any) -> None:
        """Learn from an answer: a registration's broker epoch; a stale epoch means re-register."""
        broker_id = getattr(request, "broker_id", None)
        broker = self.brokers.get(broker_id) if isinstance(broker_id, int) else None
        if broker is None:
            return
        if isinstance(request, BrokerRegistrationRequest):
            assert isinstance(response, BrokerRegistrationResponse), response
            broker.register_again_ms = 0
            current = request.incarnation_id == f"b{broker.broker_id}-i{broker.incarnation}"
            if response.error_code == ErrorCode.NONE and current:
                broker.broker_epoch = response.broker_epoch
            return
        error_code = getattr(response, "error_code", ErrorCode.NONE)
        stale = error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED)
        if stale and getattr(request, "broker_epoch", None) == broker.broker_epoch:
            broker.broker_epoch = None
        if getattr(response, "should_shut_down", False):
            broker.alive, broker.shutting_down = False, False
            broker.revive_ms = 0
            # A controlled shutdown ends with the marker naming this epoch: the next registration is
            # clean (KIP-966), so the controller keeps the broker's ELR memberships.
            broker.clean_epoch = broker.broker_epoch if broker.broker_epoch is not None else -1
