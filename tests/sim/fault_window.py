"""FaultWindow: whether a write lived through a fault, for the campaigns' coverage figure.

A campaign counts the seeds that had a write acknowledged during a fault, and fails when fewer than
COVERAGE_MIN of its seeds did (issue 11): a durability check that rarely has anything to check
proves nothing. A write is acknowledged during a fault when a fault was active at some moment
between the client sending it and the acknowledgement, or a node crashed less than `settle_ms`
before the acknowledgement. A fault is active while a node is down (crashed, not yet restarted) or
paused, or a network link is cut (a partition, an isolated or clogged node, a one-way cut); a crash
is active at its instant even if the node restarts at once. `settle_ms` is the time the cluster
takes to notice a silent node (`broker.session.timeout.ms` for the controller fencing a broker,
the Raft fetch timeout for a quorum's followers): until then it has not reacted to the crash.

Why the write's lifetime and not the moment of the ack: a follower that is paused or cut off holds
back every acks=all write until it returns or leaves the ISR, so the writes a fault puts at risk
are mostly acknowledged just after it. Message drops, delays and duplicates do not count: they go
on through the whole safety phase.

The simulator tells the window when a fault is active (`active`, asked at each ack with the state
of its nodes and links), when a node crashed (`crashed`) and when a fault ended (`ended`: a
restart, a resume, healed links).
"""

from __future__ import annotations

from dataclasses import dataclass

COVERAGE_MIN = 0.8


@dataclass(slots=True)
class FaultWindow:
    settle_ms: int
    last_crash_ms: int | None = None
    last_fault_ms: int | None = None  # the latest moment a fault was known active (before now)

    def crashed(self, now_ms: int) -> None:
        self.last_crash_ms = self.last_fault_ms = now_ms

    def ended(self, now_ms: int) -> None:
        self.last_fault_ms = now_ms

    def covers(self, sent_ms: int, now_ms: int, active: bool) -> bool:
        """Did a write sent at `sent_ms` and acknowledged now live through a fault? `active`: a
        node is down or paused, or a link is cut, now."""
        if active:
            return True
        return self.last_fault_ms is not None and (self.last_fault_ms >= sent_ms
                                                   or now_ms - self.last_fault_ms < self.settle_ms)
