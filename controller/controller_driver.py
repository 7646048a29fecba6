"""ControllerDriver: performs what a controller node's two cores return — Raft's `Ready` through the
`RaftDriver`, and the `ControllerOffice`'s `OfficeReady` — in the one order both rely on.

Written once, here, and shared by the node (node/quorum.py: an asyncio task owns it, answers
resolve futures) and the simulator (tests/sim/: answers reach the simulated client, and a subclass
checks every Raft step). The driver is synchronous.

The order:
1. Every Raft step (`RaftDriver.step`: persist, send, apply, ...) is followed at once by a
   `RaftStepped` to the office, with the step's proposal completions.
2. The office's answers are passed to `answer(token, response)`, in order.
3. A batch the office proposes is stepped into Raft at once (back to 1), until the office proposes
   nothing more; a bounded loop, since one event releases at most every call waiting for office.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.controller_office import (
    CALLS_AWAITING_OFFICE_MAX,
    ControllerCall,
    ControllerOffice,
    OfficeChange,
    OfficeEvent,
    OfficeReady,
    OfficeTick,
    RaftStepped,
    Shutdown,
)
from controller.raft import Raft
from controller.raft_driver import RaftDriver
from controller.raft_messages import Event, ProposalCompletion, Tick

# One event proposes at most: the call itself, every call released on taking office, and a tick.
PROPOSALS_PER_EVENT_MAX = CALLS_AWAITING_OFFICE_MAX + 2


class ControllerDriver:
    """Owns one node's `RaftDriver` and `ControllerOffice`, and the `answer` function the owner
    gives. Every method returns the office changes it led to, for the owner's log."""

    def __init__(self, raft_driver: RaftDriver, office: ControllerOffice,
                 answer: Callable[[object, Any], None]) -> None:
        self.raft_driver = raft_driver
        self.office = office
        self.answer = answer

    @property
    def raft(self) -> Raft:
        return self.raft_driver.raft

    @property
    def next_tick_ms(self) -> int:
        """When `on_timer` is next due: Raft's next `Tick` or the office's next `OfficeTick`."""
        return min(self.raft_driver.next_tick_ms, self.office.next_tick_ms)

    def step(self, event: Event, now_ms: int) -> list[OfficeChange]:
        """A Raft event (a peer's message, a tick), then everything that follows from it."""
        completions = self.step_raft(event, now_ms)
        return self._perform(RaftStepped.after(self.raft, completions), now_ms)

    def call(self, token: object, request: Any, now_ms: int) -> list[OfficeChange]:
        """A controller request; its answer goes to `answer(token, ...)`, now or after a later step."""
        return self._perform(ControllerCall(token, request), now_ms)

    def on_timer(self, now_ms: int) -> list[OfficeChange]:
        """Whatever is due: the office's tick first, then Raft's (so a busy Raft cannot starve it)."""
        changes: list[OfficeChange] = []
        if now_ms >= self.office.next_tick_ms:
            changes += self._perform(OfficeTick(), now_ms)
        if now_ms >= self.raft_driver.next_tick_ms:
            changes += self.step(Tick(), now_ms)
        return changes

    def stop(self, now_ms: int) -> list[OfficeChange]:
        """Leave office: what is pending is answered, and every later `call` NOT_CONTROLLER."""
        return self._perform(Shutdown(), now_ms)

    def step_raft(self, event: Event, now_ms: int) -> list[ProposalCompletion]:
        """One Raft step and its Ready (the simulator overrides this to check each step)."""
        return self.raft_driver.step(event, now_ms)

    def _perform(self, event: OfficeEvent, now_ms: int) -> list[OfficeChange]:
        changes: list[OfficeChange] = []
        ready: OfficeReady = self.office.handle(event, now_ms)
        for _ in range(PROPOSALS_PER_EVENT_MAX):
            changes.extend(ready.changes)
            for answer in ready.answers:
                self.answer(answer.token, answer.response)
            if ready.propose is None:
                return changes
            completions = self.step_raft(ready.propose, now_ms)
            ready = self.office.handle(RaftStepped.after(self.raft, completions), now_ms)
        raise AssertionError(f"node {self.raft.node_id}: over {PROPOSALS_PER_EVENT_MAX} proposals after one event")
