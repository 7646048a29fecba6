"""SimNode: one simulated quorum member — its directory, disk model and current incarnation.

An incarnation is what a process holds: a `Raft` core opened from the directory (the log through
`LogLoader` recovery, the quorum-state file), a fresh state machine, and a `SimDriver`. The node's
disk is a `tests/sim/kernel/disk.DiskModel` of its own, watching the fsyncs of its metadata log
directory (segments, quorum-state, snapshots, the leader-epoch checkpoint) while the node is up. A
crash drops the incarnation and puts every file back to what a power loss leaves (what was not
fsynced is lost, an unsynced truncation comes back, with `tear_probability` a random prefix of an
unsynced tail survives, maybe with a damaged byte); a restart opens a new incarnation from what is
left, or from nothing after a wipe (the directory is gone, as after a disk replacement, a reformat
or an operator's `rm -r`). A pause keeps the incarnation but holds every event for the node until it
resumes.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

from controller.quorum_config import QuorumConfig
from controller.quorum_state import QuorumStateStore
from controller.raft import Raft, StateMachine
from controller.raft_driver import RaftDriver
from controller.raft_log import METADATA_LOG_DIR, RaftLog
from controller.raft_messages import Event, Message, Ready
from storage.config import LogConfig
from tests.sim.kernel.disk import DiskModel
from tests.sim.state_machines import StateMachineSpec

ReadyObserver = Callable[[int, Ready, "Event | None", StateMachine], None]


class SimDriver(RaftDriver):
    """The shared `RaftDriver` with the simulator's effect: every performed Ready is shown to the
    checker (and the trace). The disk model sees the fsyncs itself."""

    def __init__(self, raft: Raft, store: QuorumStateStore, state_machine: StateMachine,
                 send: Callable[[Message], None], observe: ReadyObserver) -> None:
        super().__init__(raft, store, state_machine, send)
        self.observe = observe

    def perform(self, ready: Ready, now_ms: int) -> Event | None:
        follow_up = super().perform(ready, now_ms)
        self.observe(self.raft.node_id, ready, follow_up, self.state_machine)
        return follow_up


class SimNode:
    """One quorum member across incarnations (see the module docstring). State: its directory and
    disk model, the current driver (None while down), the pause deadline and held events, and the
    generation of its queued tick. Owner: the Simulation."""

    def __init__(self, node_id: int, root: Path, node_seed: int, quorum_config: QuorumConfig,
                 log_config: LogConfig, spec: StateMachineSpec) -> None:
        self.node_id = node_id
        self.directory = root / f"node-{node_id}" / METADATA_LOG_DIR
        self.directory.mkdir(parents=True)
        self.node_seed = node_seed
        self.quorum_config = quorum_config
        self.log_config = log_config
        self.spec = spec
        self.disk = DiskModel()
        self.disk.track(self.directory)
        self.driver: SimDriver | None = None
        self.incarnation = 0
        self.restoring_when_down = True  # the directory is empty before the first start
        self.paused_until_ms = -1
        self.inbox: list[Event] = []
        self.tick_generation = 0
        self.scheduled_tick_ms = -1

    @property
    def up(self) -> bool:
        return self.driver is not None

    @property
    def raft(self) -> Raft:
        assert self.driver is not None, f"node {self.node_id} is down"
        return self.driver.raft

    @property
    def is_voter(self) -> bool:
        return self.quorum_config.is_voter(self.node_id)

    @property
    def restoring(self) -> bool:
        """This node lost its quorum state and has not yet restored (`Raft.restoring`); a node that is
        down is as it was when it went down, or after a wipe."""
        return self.driver.raft.restoring if self.driver is not None else self.restoring_when_down

    def wipe(self) -> None:
        """The node's disk is wiped while it is down: it restarts with nothing."""
        assert self.driver is None, f"node {self.node_id} is up; wipe it while it is down"
        self.disk.wipe(self.directory)
        shutil.rmtree(self.directory)
        self.directory.mkdir(parents=True)
        self.restoring_when_down = True

    def start(self, now_ms: int, send: Callable[[Message], None], observe: ReadyObserver) -> None:
        """Open a new incarnation from the directory (recovery after a crash)."""
        assert self.driver is None, f"node {self.node_id} is already up"
        self.incarnation += 1
        self.disk.watch()
        log = RaftLog.open(self.directory, now_ms, self.log_config, had_clean_shutdown=False)
        store = QuorumStateStore(self.directory)
        rng = random.Random(self.node_seed * 1_000 + self.incarnation)
        raft = Raft(self.node_id, self.quorum_config, log, store.read(), rng, now_ms)
        self.driver = SimDriver(raft, store, self.spec.factory(), send, observe)
        self.paused_until_ms = -1
        self.inbox.clear()
        self.tick_generation += 1
        self.scheduled_tick_ms = -1

    def crash(self, rng: random.Random, tear_probability: float) -> list[str]:
        """Kill the incarnation; put the files back to what a power loss leaves. Returns the cuts,
        for the trace."""
        assert self.driver is not None, f"node {self.node_id} is already down"
        self.restoring_when_down = self.driver.raft.restoring
        abandon(self.driver.raft.log)
        self.disk.unwatch()
        cuts = self.disk.crash(self.directory, rng, tear_probability)
        self.driver = None
        self.inbox.clear()
        self.paused_until_ms = -1
        self.tick_generation += 1
        self.scheduled_tick_ms = -1
        return [cut.describe() for cut in cuts]

    def close(self) -> None:
        if self.driver is not None:
            self.driver.raft.log.close()
            self.driver = None
        self.disk.unwatch()


def abandon(log: RaftLog) -> None:
    """Release a log's files as a dying process would: no flush, no index trimming."""
    log.log.close_handlers()
