"""SimQuorum: the controller quorum of the replication simulation — real Raft, real office, real
controller — as dedicated controller nodes (`process.roles=controller`).

Each controller node is the quorum simulator's `SimNode` (the node's `Raft` over a real metadata log
on the simulated disk, its quorum-state file, a `ClusterMetadata` it applies committed records to)
driven by the node's own `ControllerDriver` and `ControllerOffice` (`SimControllerDriver` adds the
Raft safety and metadata checks around every Raft step, as in tests/sim). Nothing of the controller
is written again here: this module only routes. Brokers reach the quorum over the simulated network:
Raft messages between controller nodes travel as `RaftEnvelope`s; a broker's controller request is
a `ControllerCall` to the node it believes leads, answered after its records commit (NOT_CONTROLLER
names the leader that node knows); a broker's metadata long poll is answered from the node's applied,
hence committed, metadata (a copy), as a broker observing the metadata log would see it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.controller_office import ControllerOffice
from controller.metadata import ClusterMetadata
from controller.quorum_config import QuorumConfig, VoterEndpoint
from controller.quorum_controller import ControllerConfig
from controller.raft_log import metadata_log_config
from controller.raft_messages import Event, Ready, Tick
from controller.raft_messages import Message as RaftMessage
from tests.sim.checker import SafetyChecker
from tests.sim.metadata_workload import SimControllerDriver
from tests.sim.node import SimNode
from tests.sim.state_machines import METADATA

CONTROLLER_IDS = (11, 12, 13)


class SimQuorum:
    """The controller nodes (see the module docstring). State: the nodes, their drivers while up,
    and the Raft safety checker over all of them. Owner: the replication Simulation, which delivers
    events, schedules the ticks the drivers ask for, and carries the answers back."""

    def __init__(self, root: Path, node_seeds: tuple[int, ...], quorum_config: QuorumConfig,
                 controller_config: ControllerConfig, tick_interval_ms: int,
                 send: Callable[[RaftMessage], None], answer: Callable[[int, object, Any], None]) -> None:
        self.controller_config = controller_config
        self.tick_interval_ms = tick_interval_ms
        self.checker = SafetyChecker(METADATA)
        self._send = send
        self._answer = answer
        log_config = metadata_log_config(segment_bytes=16_384, segment_index_bytes=1024, index_interval_bytes=512)
        self.nodes = {node_id: SimNode(node_id, root, seed, quorum_config, log_config, METADATA)
                      for node_id, seed in zip(CONTROLLER_IDS, node_seeds, strict=True)}
        self.drivers: dict[int, SimControllerDriver] = {}

    @staticmethod
    def config(election_timeout_ms: int, fetch_timeout_ms: int, request_timeout_ms: int) -> QuorumConfig:
        voters = {node_id: VoterEndpoint(node_id, f"controller-{node_id}", 9093) for node_id in CONTROLLER_IDS}
        return QuorumConfig(voters=voters, election_timeout_ms=election_timeout_ms, fetch_timeout_ms=fetch_timeout_ms,
                            election_backoff_max_ms=election_timeout_ms, request_timeout_ms=request_timeout_ms,
                            retry_backoff_ms=5, fetch_max_wait_ms=request_timeout_ms // 2, fetch_bytes_max=1 << 20,
                            snapshot_interval_records=256)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, node_id: int, now_ms: int, restarted: bool) -> int:
        """Open a new incarnation of a controller node; returns when it wants its first tick."""
        node = self.nodes[node_id]
        node.start(now_ms, self._send, self._observe)
        self.checker.on_start(node_id, node.raft, restarted)
        driver = node.driver
        assert driver is not None and isinstance(driver.state_machine, ClusterMetadata)
        rng = random.Random(node.node_seed * 1_000_003 + node.incarnation)
        office = ControllerOffice(node_id, driver.state_machine, rng, self.controller_config,
                                  tick_interval_ms=self.tick_interval_ms)

        def answer(token: object, response: Any) -> None:
            self._answer(node_id, token, response)

        self.drivers[node_id] = SimControllerDriver(driver, office, answer, self.checker, lambda event: None)
        return self.step(node_id, Tick(), now_ms)

    def crash(self, node_id: int, rng: random.Random, tear_probability: float) -> list[str]:
        self.drivers.pop(node_id, None)
        return self.nodes[node_id].crash(rng, tear_probability)

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()
        self.drivers.clear()

    # -- events ------------------------------------------------------------------------------------

    def step(self, node_id: int, event: Event, now_ms: int) -> int:
        """A Raft message or a tick for a node that is up; returns its next tick time."""
        driver = self.drivers[node_id]
        if isinstance(event, Tick):
            driver.on_timer(now_ms)
        else:
            driver.step(event, now_ms)
        return driver.next_tick_ms

    def call(self, node_id: int, token: object, request: Any, now_ms: int) -> int:
        """A broker's controller request at a node that is up; the answer comes through `answer`."""
        driver = self.drivers[node_id]
        driver.call(token, request, now_ms)
        return driver.next_tick_ms

    # -- reads -------------------------------------------------------------------------------------

    def metadata(self, node_id: int) -> ClusterMetadata | None:
        """The node's applied (committed) metadata; None while it is down."""
        driver = self.drivers.get(node_id)
        if driver is None:
            return None
        state = driver.raft_driver.state_machine
        assert isinstance(state, ClusterMetadata)
        return state

    def active_controller(self) -> int | None:
        """The node in office, if one is (the newest epoch's, if two believe so)."""
        in_office = [(driver.office.office_epoch, node_id) for node_id, driver in self.drivers.items()
                     if driver.office.office_epoch is not None]
        return max(in_office)[1] if in_office else None

    def _observe(self, node_id: int, ready: Ready, follow_up: Event | None, state_machine: object) -> None:
        self.checker.on_ready(node_id, ready, follow_up, state_machine)
