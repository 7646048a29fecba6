"""RaftDriver: performs each `Ready` of a `Raft` in the order its docstring fixes.

The order is written once, here, and shared by the node (real sockets, a real clock, asyncio
around it) and the simulator (a fake network): STYLE §7. The driver is synchronous; the node
calls `step` from the one task that owns the quorum, the simulator from its event loop.

`step(event, now_ms)` hands the event to the core, then for each Ready:
1. persists the hard state (`QuorumStateStore.write`, fsynced),
2. flushes the log when `must_sync`,
3. sends the messages (`send`, given by the owner),
4. restores the state machine from a snapshot,
5. applies committed entries (control records are Raft's own and are skipped),
6. takes a requested snapshot and feeds it back to the core as `SnapshotCreated` (whose Ready
   is performed the same way),
7. collects the proposal completions, which `step` returns.
Peer messages the core refused (`Ready.refused`) are logged as warnings first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from controller.quorum_state import ElectionState, QuorumStateStore
from controller.raft import Raft, StateMachine
from controller.raft_messages import Event, Message, ProposalCompletion, Ready, SnapshotCreated

log = logging.getLogger(__name__)

FOLLOW_UPS_MAX = 4  # SnapshotCreated is the only follow-up event; one per Ready at most


class RaftDriver:
    """Owns one node's quorum pieces: the core, its quorum-state file, its state machine, and a
    `send` function for messages. `next_tick_ms` is when the core wants its next `Tick`."""

    def __init__(self, raft: Raft, store: QuorumStateStore, state_machine: StateMachine,
                 send: Callable[[Message], None]) -> None:
        self.raft = raft
        self.store = store
        self.state_machine = state_machine
        self.send = send
        self.next_tick_ms = 0

    def step(self, event: Event, now_ms: int) -> list[ProposalCompletion]:
        """Handle one event and perform everything it led to; return the completed proposals."""
        completions: list[ProposalCompletion] = []
        ready = self.raft.handle(event, now_ms)
        for _ in range(FOLLOW_UPS_MAX):
            follow_up = self.perform(ready, now_ms)
            completions.extend(ready.completions)
            if follow_up is None:
                break
            ready = self.raft.handle(follow_up, now_ms)
        else:
            raise AssertionError(f"node {self.raft.node_id}: more than {FOLLOW_UPS_MAX} follow-up events")
        self.next_tick_ms = ready.next_tick_ms
        return completions

    def perform(self, ready: Ready, now_ms: int) -> Event | None:
        """Do one Ready's work in order; return the follow-up event (a snapshot), if any."""
        for reason in ready.refused:
            log.warning("node %s: %s", self.raft.node_id, reason)
        if ready.hard_state is not None:
            self.persist_hard_state(ready.hard_state)
        if ready.must_sync:
            self.flush_log(now_ms)
        for message in ready.messages:
            self.send(message)
        if ready.restore is not None:
            self.state_machine.restore(ready.restore.snapshot_id.offset - 1, ready.restore.data)
        for entry in ready.committed:
            if not entry.control:
                self.state_machine.apply(entry.offset, entry.epoch, entry.data)
        if ready.snapshot_request is not None:
            return SnapshotCreated(ready.snapshot_request, self.state_machine.snapshot())
        return None

    def persist_hard_state(self, state: ElectionState) -> None:
        self.store.write(state, self.raft.config.voter_ids)

    def flush_log(self, now_ms: int) -> None:
        self.raft.log.flush(now_ms)
