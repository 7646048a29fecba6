"""Simulation: a whole controller quorum in one process, on simulated time, driven by one seed.

Goal: find any schedule of messages, faults and proposals under which Raft breaks a safety property,
and show that a healed cluster always recovers. Method (TigerBeetle's VOPR, FoundationDB's
simulation): one `random.Random(seed)` draws the options (`SimOptions.draw`) and then every choice of
the run — message delays, drops, duplicates, partitions, crashes, restarts, wiped disks, pauses, torn
writes, the workload — in the order events happen, so a seed replays exactly.

Connections fail as TCP's do (tests/sim/connections.py): a fetch or quorum probe that reaches a
down node is refused at once, a crash closes the crashed node's connections (the close reaches a
peer whose last fetch it took over the network), a cut link drops, a paused node's kernel accepts
and holds. Campaigns count `refused_leader_fetches`.

Time is an integer of simulated ms and is never slept. Events wait in one heap keyed by (time,
sequence): message deliveries, node ticks (each node is ticked at the `next_tick_ms` its last Ready
asked for), client proposals, chaos ticks, pause ends, the heal and liveness probes. Each node runs
real storage (a `storage.Log` through `RaftLog`) in a temp directory (/dev/shm when present); a crash
puts its files back to what a power loss leaves (`DiskModel`), a restart recovers through `LogLoader`. A
restart may find the directory wiped (log, quorum-state, snapshots): the node restores as a voter
without state (controller/raft.py). The system promises safety for one voter without state at a
time (README), so a disk is wiped only while every other voter has its state.

Workload. By default (`METADATA`) every node applies committed records to a `ClusterMetadata`
and runs the node's `ControllerOffice` (tests/sim/metadata_workload.py): the leading node takes
office with a `QuorumController`, and simulated brokers (each process running the node's lifecycle
core, `BrokerLifecycle`) and an admin client send it requests (registrations, heartbeats, topic
creation and deletion, config changes, AlterPartition, controlled shutdowns; dead brokers are fenced
by the controller's periodic tick); each request's records are one `ProposeBatch`. With
`HASH_LIST` the client proposes small opaque payloads instead.

Phases:
1. Safety (`safety_duration_ms`): faults at the drawn rates; the workload sends its requests to
   the node it believes leads, retrying on errors and timeouts. After every step `SafetyChecker`
   checks the node that moved (Raft safety, atomic requests, metadata invariants).
2. Liveness: every fault is healed (down nodes restart, paused ones resume, links reconnect, no more
   drops or duplicates). Within `liveness_bound_ms` (else `LivenessFailure`) the cluster must
   (a) elect a leader that every node follows, whose controller takes office and completes
   LIVENESS_PROPOSALS new requests, and converge (every node applied up to the
   leader's log end); then (b) after the leader is crashed, elect another (the election time is
   measured), restart the old leader, commit LIVENESS_PROPOSALS more and converge again.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any

from controller.controller_office import ControllerOffice
from controller.error_responses import is_not_controller
from controller.metadata import ClusterMetadata
from controller.quorum_config import QuorumConfig, VoterEndpoint
from controller.quorum_controller import ControllerConfig
from controller.raft_log import metadata_log_config
from controller.raft_messages import (
    Event,
    Message,
    ProposalCompletion,
    Propose,
    RaftError,
    Ready,
    Role,
    Tick,
    Unreachable,
)
from tests.sim.checker import SafetyChecker
from tests.sim.connections import SimConnections, refused_by_leader
from tests.sim.fault_window import FaultWindow
from tests.sim.kernel.disk import default_root
from tests.sim.metadata_workload import ControllerRequest, MetadataWorkload, SimControllerDriver
from tests.sim.network import SimNetwork
from tests.sim.node import SimNode
from tests.sim.options import SimOptions
from tests.sim.state_machines import METADATA, StateMachineSpec

LIVENESS_PROPOSALS = 5
PROBE_INTERVAL_MS = 5
STEPS_MAX = 3_000_000
SAME_TIME_TICKS_MAX = 10_000
OUTSTANDING_MAX = 16  # the client's proposals in flight (bounded, as a real client's buffer)
ATTEMPTS_MAX = 5  # tries per proposal in the safety phase; liveness proposals try until done


class Kind(IntEnum):
    DELIVER = 0
    TICK = 1
    PROPOSE = 2
    CHAOS = 3
    RESUME = 4
    HEAL = 5
    PROBE = 6
    CLIENT_TIMEOUT = 7
    RETRY = 8
    STREAM_CLOSED = 9


class LivenessFailure(AssertionError):
    """The healed cluster did not converge within the bound."""


@dataclass(slots=True)
class Proposal:
    """One client request: a payload, the id of its current attempt and where it went."""

    payload: bytes
    proposal_id: int
    node_id: int
    liveness: bool
    attempts: int = 1
    request: Any = None  # the metadata workload's controller request (payload is then empty)
    sent_ms: int = -1  # when the client first sent it


@dataclass(slots=True)
class SimResult:
    seed: int
    steps: int = 0
    simulated_ms: int = 0
    committed: int = 0
    elections: int = 0
    crashes: int = 0
    wipes: int = 0
    acked_during_fault: int = 0  # safety-phase requests answered across a fault (FaultWindow)
    election_after_crash_ms: int | None = None
    liveness_ms: int | None = None
    messages: int = 0
    refused_leader_fetches: int = 0  # fetches refused by a follower's own leader ("A refused leader")
    stats: dict[str, int] = field(default_factory=dict)


def describe(item: object) -> str:
    """A stable one-line form of an event or message body: bytes longer than 24 show as <N bytes>."""
    if isinstance(item, Message):
        return f"{item.source_id}->{item.destination_id} {describe(item.body)}"
    if not dataclasses.is_dataclass(item):
        return repr(item)
    fields = []
    for item_field in dataclasses.fields(item):
        value = getattr(item, item_field.name)
        if isinstance(value, bytes) and len(value) > 24:
            fields.append(f"{item_field.name}=<{len(value)} bytes>")
        elif isinstance(value, Enum):
            fields.append(f"{item_field.name}={value.name}")
        else:
            fields.append(f"{item_field.name}={value!r}")
    return f"{type(item).__name__}({', '.join(fields)})"


class Simulation:
    """One seeded run (see the module docstring). `run()` returns a SimResult or raises
    SafetyViolation or LivenessFailure; the temp directory goes either way."""

    def __init__(self, seed: int, spec: StateMachineSpec = METADATA, trace: Callable[[str], None] | None = None,
                 root: Path | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.options = SimOptions.draw(seed, self.rng)
        self.spec = spec
        self.trace = trace
        self.root = Path(tempfile.mkdtemp(prefix=f"tributary-sim-{seed}-", dir=root or default_root()))
        self.network = SimNetwork(self.rng, self.options)
        self.checker = SafetyChecker(spec)
        self.result = SimResult(seed)
        self.fault_window = FaultWindow(self.options.fetch_timeout_ms + self.options.election_timeout_ms)
        self.now_ms = 0
        self.queue: list[tuple[int, int, Kind, object]] = []
        self.sequence = 0
        self.nodes = self._build_nodes()
        self.proposals: dict[int, Proposal] = {}
        # Liveness requests not yet answered with success, wherever they are: in flight, or waiting
        # to be retried (then they are in no dict), so that a retry loop cannot pass for convergence.
        self.liveness_outstanding = 0
        self.next_proposal_id = 1
        self.payload_sequence = 0
        self.leader_hint: int | None = None
        self.client_backoff_until_ms = 0
        self.liveness_started_ms: int | None = None
        self.liveness_deadline_ms = 0
        self.stage = 0
        self.liveness_submitted = False
        self.crashed_leader: tuple[int, int, int] | None = None  # (node, epoch, crash time)
        self.done = False
        self.same_time_ticks = 0
        self.last_tick_ms = -1
        self.records: dict[int, tuple[bytes, ...]] = {}  # proposal id -> the records it proposed
        self.connections = SimConnections()
        self.controllers: dict[int, SimControllerDriver] = {}
        self.workload: MetadataWorkload | None = None
        if spec.controller:
            options = self.options
            # Brokers heartbeat a few times per fetch timeout and are fenced after several
            # fetch timeouts of silence: an election (about one to three fetch timeouts) may or may
            # not cost them their session, as with Kafka's 2 s / 9 s against a 2 s fetch timeout.
            self.controller_config = ControllerConfig(broker_session_timeout_ms=4 * options.fetch_timeout_ms,
                                                      num_partitions=2, default_replication_factor=2)
            self.workload = MetadataWorkload(self.rng, broker_count=self.rng.randint(2, 5),
                                             heartbeat_interval_ms=max(1, options.fetch_timeout_ms // 2),
                                             broker_down_max_ms=8 * options.fetch_timeout_ms,
                                             session_timeout_ms=self.controller_config.broker_session_timeout_ms,
                                             request_timeout_ms=2 * options.fetch_timeout_ms,
                                             controlled_shutdown_timeout_ms=8 * options.fetch_timeout_ms)

    # -- setup ----------------------------------------------------------------------------------

    def _build_nodes(self) -> dict[int, SimNode]:
        options = self.options
        voters = {node_id: VoterEndpoint(node_id, f"controller-{node_id}", 9093) for node_id in
                  range(1, options.voters + 1)}
        config = QuorumConfig(
            voters=voters,
            election_timeout_ms=options.election_timeout_ms,
            fetch_timeout_ms=options.fetch_timeout_ms,
            election_backoff_max_ms=options.election_backoff_max_ms,
            request_timeout_ms=options.request_timeout_ms,
            retry_backoff_ms=options.retry_backoff_ms,
            fetch_max_wait_ms=options.fetch_max_wait_ms,
            fetch_bytes_max=options.fetch_bytes_max,
            snapshot_interval_records=options.snapshot_interval_records,
        )
        log_config = metadata_log_config(segment_bytes=options.segment_bytes, segment_index_bytes=1024,
                                         index_interval_bytes=options.index_interval_bytes)
        node_ids = range(1, options.voters + options.observers + 1)
        return {node_id: SimNode(node_id, self.root, options.node_seeds[node_id - 1], config, log_config, self.spec)
                for node_id in node_ids}

    @property
    def liveness_bound_ms(self) -> int:
        """Generous but fixed: elections with pre-votes and backoff, catch-up at the smallest fetch
        size, one snapshot download, twice (before and after the leader crash)."""
        options = self.options
        return 60 * options.election_timeout_ms + 20 * options.fetch_timeout_ms + 10_000

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run both phases; raise SafetyViolation or LivenessFailure, else return the result."""
        try:
            self._log(self.options.describe())
            for node in self.nodes.values():
                self._start(node, restarted=False)
            self._schedule(self.options.chaos_interval_ms, Kind.CHAOS, None)
            self._schedule(1, Kind.PROPOSE, None)
            self._schedule(self.options.safety_duration_ms, Kind.HEAL, None)
            while self.queue and not self.done:
                time_ms, _, kind, data = heapq.heappop(self.queue)
                assert time_ms >= self.now_ms, f"event at {time_ms} < now {self.now_ms}"
                self.now_ms = time_ms
                if self.liveness_started_ms is not None and self.now_ms > self.liveness_deadline_ms:
                    raise LivenessFailure(self._liveness_report())
                self._dispatch(kind, data)
                self.result.steps += 1
                assert self.result.steps < STEPS_MAX, f"more than {STEPS_MAX} steps"
            assert self.done, "the event queue ran dry before the liveness phase finished"
            self.result.simulated_ms = self.now_ms
            self.result.committed = len(self.checker.canonical)
            self.result.elections = len(self.checker.leaders)
            self.result.messages = self.network.sent_count
            return self.result
        finally:
            for node in self.nodes.values():
                node.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def _dispatch(self, kind: Kind, data: object) -> None:
        if kind is Kind.DELIVER:
            assert isinstance(data, Message), data
            destination = self.nodes[data.destination_id]
            refusal = self.connections.arrived(data, destination.up)
            if refusal is not None:
                self._refused(data.source_id, refusal)
            else:
                self._deliver(destination, data)
        elif kind is Kind.STREAM_CLOSED:
            source_id, event = data  # type: ignore[misc]
            self._deliver(self.nodes[source_id], event)
        elif kind is Kind.TICK:
            node_id, generation = data  # type: ignore[misc]
            node = self.nodes[node_id]
            if node.up and generation == node.tick_generation and node.paused_until_ms < 0:
                self._step(node, Tick())
        elif kind is Kind.PROPOSE:
            self._propose_workload()
        elif kind is Kind.CHAOS:
            self._chaos()
        elif kind is Kind.RESUME:
            self._resume(self.nodes[data])  # type: ignore[index]
        elif kind is Kind.HEAL:
            self._heal()
        elif kind is Kind.PROBE:
            self._probe()
        elif kind is Kind.CLIENT_TIMEOUT:
            self._client_timeout(data)  # type: ignore[arg-type]
        elif kind is Kind.RETRY:
            self._submit(data)  # type: ignore[arg-type]

    def _schedule(self, time_ms: int, kind: Kind, data: object) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (time_ms, self.sequence, kind, data))

    def _log(self, line: str) -> None:
        if self.trace is not None:
            self.trace(line)

    # -- nodes ----------------------------------------------------------------------------------

    def _start(self, node: SimNode, restarted: bool) -> None:
        node.start(self.now_ms, self._send, self._observe_ready)
        if restarted:
            self.fault_window.ended(self.now_ms)
        self._log(f"{self.now_ms:9d} n{node.node_id} start incarnation={node.incarnation} "
                  f"epoch={node.raft.epoch} voted={node.raft.voted_id} log=[{node.raft.log.log_start_offset}, "
                  f"{node.raft.log.log_end_offset}) role={node.raft.role.value}")
        self.checker.on_start(node.node_id, node.raft, restarted)
        if self.workload is not None:
            self.controllers[node.node_id] = self._controller_driver(node)
        self._step(node, Tick())

    def _refused(self, source_id: int, event: Unreachable) -> None:
        source = self.nodes[source_id]
        if source.up and refused_by_leader(source.raft, event):
            self.result.refused_leader_fetches += 1
        self._deliver(source, event)

    def _crash(self, node: SimNode) -> None:
        for peer_id, event in self.connections.crashed(node.node_id):
            for time_ms in self.network.delivery_times(node.node_id, peer_id, self.now_ms):
                self._schedule(time_ms, Kind.STREAM_CLOSED, (peer_id, event))
        cuts = node.crash(self.rng, self.options.tear_probability)
        self.controllers.pop(node.node_id, None)
        self.fault_window.crashed(self.now_ms)
        self.result.crashes += 1
        self._log(f"{self.now_ms:9d} n{node.node_id} crash cuts={cuts}")

    def _deliver(self, node: SimNode, event: Event) -> None:
        if not node.up:
            return
        if node.paused_until_ms >= 0:
            node.inbox.append(event)
            return
        self._step(node, event)

    def _controller_driver(self, node: SimNode) -> SimControllerDriver:
        """The node incarnation's office, run by the node's own driver (with the simulator's checks)."""
        driver = node.driver
        assert driver is not None, f"node {node.node_id} is down"
        assert isinstance(driver.state_machine, ClusterMetadata), type(driver.state_machine)
        rng = random.Random(node.node_seed * 1_000_003 + node.incarnation)
        office = ControllerOffice(node.node_id, driver.state_machine, rng, self.controller_config,
                                  tick_interval_ms=self._controller_tick_interval_ms)

        def answer(token: object, response: Any) -> None:
            assert isinstance(token, int), token
            self._on_answer(node.node_id, token, response)

        def trace(event: Event) -> None:
            if self.trace is not None:
                self._log(f"{self.now_ms:9d} n{node.node_id} <- {describe(event)}")

        return SimControllerDriver(driver, office, answer, self.checker, trace)

    def _step(self, node: SimNode, event: Event | ControllerRequest) -> None:
        driver = node.driver
        assert driver is not None, f"step on a down node {node.node_id}"
        if self.trace is not None:
            self._log(f"{self.now_ms:9d} n{node.node_id} <- {describe(event)}")
        controller = self.controllers.get(node.node_id)
        if controller is not None:
            if isinstance(event, ControllerRequest):
                changes = controller.call(event.proposal_id, event.request, self.now_ms)
            elif isinstance(event, Tick):
                changes = controller.on_timer(self.now_ms)
            else:
                changes = controller.step(event, self.now_ms)
            for change in changes:
                self._log(f"{self.now_ms:9d} n{node.node_id} {describe(change)}")
            self._schedule_tick(node, controller.next_tick_ms)
            return
        assert not isinstance(event, ControllerRequest), f"{event} without a controller"
        completions = driver.step(event, self.now_ms)
        self.checker.after_step(node.node_id, driver.raft)
        for completion in completions:
            self._on_completion(node.node_id, completion)
        self._schedule_tick(node, driver.next_tick_ms)

    def _schedule_tick(self, node: SimNode, next_tick_ms: int) -> None:
        if node.scheduled_tick_ms > self.now_ms and node.scheduled_tick_ms <= next_tick_ms:
            return  # the tick already queued comes first; a tick is never harmful
        if next_tick_ms <= self.now_ms:
            self.same_time_ticks = self.same_time_ticks + 1 if self.last_tick_ms == self.now_ms else 0
            self.last_tick_ms = self.now_ms
            assert self.same_time_ticks < SAME_TIME_TICKS_MAX, (
                f"node {node.node_id} asks for a tick at {next_tick_ms} again and again at {self.now_ms}"
            )
        node.tick_generation += 1
        node.scheduled_tick_ms = max(next_tick_ms, self.now_ms)
        self._schedule(node.scheduled_tick_ms, Kind.TICK, (node.node_id, node.tick_generation))

    def _send(self, message: Message) -> None:
        for time_ms in self.network.delivery_times(message.source_id, message.destination_id, self.now_ms):
            self._schedule(time_ms, Kind.DELIVER, message)

    def _observe_ready(self, node_id: int, ready: Ready, follow_up: Event | None, state_machine: object) -> None:
        if self.trace is not None:
            self._trace_ready(node_id, ready)
        self.checker.on_ready(node_id, ready, follow_up, state_machine)

    def _trace_ready(self, node_id: int, ready: Ready) -> None:
        raft = self.nodes[node_id].raft
        parts = [f"role={raft.role.value} epoch={raft.epoch} hw={raft.high_watermark} "
                 f"log=[{raft.log.log_start_offset},{raft.log.log_end_offset})"]
        if ready.hard_state is not None:
            parts.append(f"persist={ready.hard_state}")
        if ready.must_sync:
            parts.append("sync")
        parts.extend(f"-> {message.destination_id} {describe(message.body)}" for message in ready.messages)
        if ready.restore is not None:
            parts.append(f"restore={ready.restore.snapshot_id}")
        if ready.committed:
            parts.append(f"apply=[{ready.committed[0].offset}..{ready.committed[-1].offset}]")
        if ready.snapshot_request is not None:
            parts.append(f"snapshot={ready.snapshot_request}")
        parts.extend(f"done={completion}" for completion in ready.completions)
        self._log(f"{self.now_ms:9d} n{node_id} ready " + " | ".join(parts))

    # -- workload -------------------------------------------------------------------------------

    def _propose_workload(self) -> None:
        if self.liveness_started_ms is not None:
            return
        if self.workload is not None:
            self._broker_heartbeats()
        # Like a real client, stop producing while no leader is known and the last try failed.
        if len(self.proposals) < OUTSTANDING_MAX and self.now_ms >= self.client_backoff_until_ms:
            self._new_proposal(liveness=False)
        self._schedule(self.now_ms + self.rng.randint(1, self.options.proposal_interval_max_ms), Kind.PROPOSE, None)

    def _new_proposal(self, liveness: bool) -> None:
        if self.workload is None:
            self.payload_sequence += 1
            payload = self.spec.payload(self.rng, self.payload_sequence)
            self.liveness_outstanding += 1 if liveness else 0
            self._submit(Proposal(payload, 0, 0, liveness))
            return
        if liveness:
            self.liveness_outstanding += 1
            self._submit(Proposal(b"", 0, 0, liveness, request=self.workload.liveness_request()))
            return
        request = self.workload.next_request(self.now_ms, self._client_view())
        if request is not None:
            self._submit(Proposal(b"", 0, 0, liveness, request=request))

    def _broker_heartbeats(self) -> None:
        """Every live broker's heartbeat (or registration) that is due; a broker does not wait for an
        admin client's backoff, but its requests are bounded too (one per broker per interval)."""
        assert self.workload is not None, "heartbeats without brokers"
        for request in self.workload.heartbeats(self.now_ms, self._client_view()):
            self._submit(Proposal(b"", 0, 0, False, request=request))

    def _client_view(self) -> ClusterMetadata:
        """The metadata a client or broker works from: the copy of the node it talks to (maybe stale)."""
        up = [node for node in self.nodes.values() if node.up]
        hinted = self.nodes.get(self.leader_hint) if self.leader_hint is not None else None
        node = hinted if hinted is not None and hinted.up else (up[0] if up else None)
        if node is None or node.driver is None:
            return ClusterMetadata()
        state_machine = node.driver.state_machine
        assert isinstance(state_machine, ClusterMetadata), type(state_machine)
        return state_machine

    def _submit(self, proposal: Proposal) -> None:
        if not proposal.liveness and (self.liveness_started_ms is not None or proposal.attempts > ATTEMPTS_MAX):
            return  # the client gives up; the liveness phase counts only its own proposals
        up = [node_id for node_id, node in self.nodes.items() if node.up]
        if not up:
            self._schedule(self.now_ms + self.options.election_timeout_ms, Kind.RETRY, proposal)
            return
        hinted = self.leader_hint if self.leader_hint in up else None
        target = hinted if hinted is not None else self.rng.choice(up)
        proposal.proposal_id = self.next_proposal_id
        proposal.node_id = target
        if proposal.sent_ms < 0:
            proposal.sent_ms = self.now_ms
        self.next_proposal_id += 1
        self.proposals[proposal.proposal_id] = proposal
        self._schedule(self.now_ms + 4 * self.options.fetch_timeout_ms, Kind.CLIENT_TIMEOUT, proposal.proposal_id)
        if proposal.request is not None:
            self._deliver(self.nodes[target], ControllerRequest(proposal.proposal_id, proposal.request))
            return
        self.records[proposal.proposal_id] = (proposal.payload,)
        self.checker.on_propose((proposal.payload,))
        self._deliver(self.nodes[target], Propose(proposal.proposal_id, proposal.payload))

    def _on_answer(self, node_id: int, proposal_id: int, response: Any) -> None:
        """A node's answer to a controller request: NOT_CONTROLLER sends the client elsewhere."""
        if is_not_controller(response):
            self._retry_elsewhere(node_id, proposal_id, self.nodes[node_id].raft.leader_id)
        else:
            self._respond(node_id, proposal_id, response)

    def _respond(self, node_id: int, proposal_id: int, response: Any = None) -> None:
        """The node's response reaches the client (its records, if any, are committed)."""
        self.leader_hint = node_id
        proposal = self.proposals.pop(proposal_id, None)
        if proposal is not None and not proposal.liveness and self.fault_window.covers(
            proposal.sent_ms, self.now_ms, self._fault_active()
        ):
            self.result.acked_during_fault += 1
        if proposal is not None and proposal.liveness:
            self.liveness_outstanding -= 1
            assert self.liveness_outstanding >= 0, f"{self.liveness_outstanding} liveness requests outstanding"
        if proposal is not None and self.workload is not None:
            self.workload.on_response(proposal.request, response, self.now_ms)

    @property
    def _controller_tick_interval_ms(self) -> int:
        return max(1, self.options.fetch_timeout_ms // 4)

    def _on_completion(self, node_id: int, completion: ProposalCompletion) -> None:
        """A payload proposal's completion (HASH_LIST; the office answers controller requests)."""
        if completion.error is RaftError.NONE:
            self.checker.check_completion(node_id, completion.offset, completion.epoch,
                                          self.records[completion.proposal_id])
            self._respond(node_id, completion.proposal_id)
            return
        self._retry_elsewhere(node_id, completion.proposal_id, completion.leader_id)

    def _retry_elsewhere(self, node_id: int, proposal_id: int, leader_id: int | None) -> None:
        """The node did not take the request: retry at the leader it named, after a backoff."""
        self.leader_hint = leader_id
        backoff_ms = self.options.retry_backoff_ms
        if leader_id is None or leader_id == node_id:
            backoff_ms = self.options.election_timeout_ms
            self.client_backoff_until_ms = self.now_ms + backoff_ms
        proposal = self.proposals.pop(proposal_id, None)
        if proposal is not None:
            proposal.attempts += 1
            self._schedule(self.now_ms + backoff_ms, Kind.RETRY, proposal)

    def _client_timeout(self, proposal_id: int) -> None:
        proposal = self.proposals.pop(proposal_id, None)
        if proposal is not None:
            proposal.attempts += 1
            self.leader_hint = None
            self._submit(proposal)

    # -- faults ---------------------------------------------------------------------------------

    def _chaos(self) -> None:
        if self.liveness_started_ms is not None:
            return
        options, rng = self.options, self.rng
        node_ids = sorted(self.nodes)
        if rng.random() < options.partition_probability:
            self._log(f"{self.now_ms:9d} partition {self.network.partition(node_ids)}")
        if self.network.blocked and rng.random() < options.partition_heal_probability:
            self._heal_links()
            self._log(f"{self.now_ms:9d} partition healed")
        up = [node for node in self.nodes.values() if node.up]
        if up and rng.random() < options.crash_probability:
            self._crash(rng.choice(up))
        for node in self.nodes.values():
            if not node.up and rng.random() < options.restart_probability:
                if options.wipe_probability > 0 and rng.random() < options.wipe_probability:
                    self._maybe_wipe(node)
                self._start(node, restarted=True)
        running = [node for node in self.nodes.values() if node.up and node.paused_until_ms < 0]
        if running and rng.random() < options.pause_probability:
            node = rng.choice(running)
            node.paused_until_ms = self.now_ms + rng.randint(1, options.pause_max_ms)
            self._log(f"{self.now_ms:9d} n{node.node_id} pause until {node.paused_until_ms}")
            self._schedule(node.paused_until_ms, Kind.RESUME, node.node_id)
        self._schedule(self.now_ms + options.chaos_interval_ms, Kind.CHAOS, None)

    def _maybe_wipe(self, node: SimNode) -> None:
        """Wipe a down node's disk, unless another voter is without its state (see the docstring)."""
        others = [other for other in self.nodes.values() if other is not node and other.is_voter]
        if any(other.restoring for other in others):
            self._log(f"{self.now_ms:9d} n{node.node_id} keeps its disk: another voter restores")
            return
        node.wipe()
        self.result.wipes += 1
        self.checker.on_wipe(node.node_id)
        self._log(f"{self.now_ms:9d} n{node.node_id} wiped")

    def _resume(self, node: SimNode) -> None:
        if not node.up or node.paused_until_ms < 0 or node.paused_until_ms > self.now_ms:
            return
        node.paused_until_ms = -1
        self.fault_window.ended(self.now_ms)
        inbox, node.inbox = node.inbox, []
        self._log(f"{self.now_ms:9d} n{node.node_id} resume with {len(inbox)} held events")
        for event in inbox:
            if node.up:
                self._step(node, event)
        if node.up:
            self._step(node, Tick())

    def _fault_active(self) -> bool:
        """A node is down or paused, or a link is cut."""
        return any(not node.up or node.paused_until_ms >= 0 for node in self.nodes.values()) or bool(
            self.network.blocked)

    def _heal_links(self) -> None:
        if self.network.blocked:
            self.fault_window.ended(self.now_ms)
        self.network.heal()

    # -- liveness -------------------------------------------------------------------------------

    def _heal(self) -> None:
        self.liveness_started_ms = self.now_ms
        self.liveness_deadline_ms = self.now_ms + self.liveness_bound_ms
        self.network.faulty = False
        self._heal_links()
        self.proposals = {pid: proposal for pid, proposal in self.proposals.items() if proposal.liveness}
        self._log(f"{self.now_ms:9d} heal: liveness phase until {self.liveness_deadline_ms}")
        for node in self.nodes.values():
            if not node.up:
                self._start(node, restarted=True)
            elif node.paused_until_ms >= 0:
                node.paused_until_ms = self.now_ms
                self._resume(node)
        self._schedule(self.now_ms + PROBE_INTERVAL_MS, Kind.PROBE, None)

    def _leader(self) -> SimNode | None:
        leaders = [node for node in self.nodes.values() if node.up and node.raft.role is Role.LEADER]
        return max(leaders, key=lambda node: node.raft.epoch) if leaders else None

    def _converged(self, leader: SimNode) -> bool:
        """Every node follows `leader` in its epoch and applied everything in its log, and no voter
        restores (it could not vote yet: one more failure would leave the quorum without a majority)."""
        raft = leader.raft
        if raft.high_watermark != raft.log.log_end_offset or self.proposals or self.liveness_outstanding:
            return False
        for node in self.nodes.values():
            other = node.raft
            if other.epoch != raft.epoch or other.applied_offset != raft.log.log_end_offset or other.restoring:
                return False
            if node is not leader and (other.role is not Role.FOLLOWER or other.leader_id != leader.node_id):
                return False
        return True

    def _probe(self) -> None:
        leader = self._leader()
        if self.stage in (0, 2) and leader is not None:
            if self.stage == 0 and not self.liveness_submitted:
                self.liveness_submitted = True
                for _ in range(LIVENESS_PROPOSALS):
                    self._new_proposal(liveness=True)
            elif self._converged(leader):
                self._next_stage(leader)
        elif self.stage == 1:
            crashed_id, epoch, crash_ms = self.crashed_leader  # type: ignore[misc]
            if leader is not None and leader.raft.epoch > epoch:
                self.result.election_after_crash_ms = self.now_ms - crash_ms
                self._start(self.nodes[crashed_id], restarted=True)
                for _ in range(LIVENESS_PROPOSALS):
                    self._new_proposal(liveness=True)
                self.stage = 2
        if not self.done:
            self._schedule(self.now_ms + PROBE_INTERVAL_MS, Kind.PROBE, None)

    def _next_stage(self, leader: SimNode) -> None:
        if self.stage == 0:
            self.crashed_leader = (leader.node_id, leader.raft.epoch, self.now_ms)
            self._crash(leader)
            self.stage = 1
            return
        assert self.liveness_started_ms is not None, "liveness stage without a start"
        self.result.liveness_ms = self.now_ms - self.liveness_started_ms
        self.done = True

    def _liveness_report(self) -> str:
        lines = [f"no convergence {self.liveness_bound_ms} ms after the heal at {self.liveness_started_ms} "
                 f"(stage {self.stage}, {len(self.proposals)} proposals pending, "
                 f"{self.liveness_outstanding} liveness requests unanswered)"]
        for node in self.nodes.values():
            if node.up:
                raft = node.raft
                lines.append(f"  n{node.node_id} role={raft.role.value} epoch={raft.epoch} leader={raft.leader_id} "
                             f"voted={raft.voted_id} hw={raft.high_watermark} applied={raft.applied_offset} "
                             f"log=[{raft.log.log_start_offset}, {raft.log.log_end_offset})")
            else:
                lines.append(f"  n{node.node_id} down")
        return "\n".join(lines)
