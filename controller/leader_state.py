"""LeaderState: what a Raft leader tracks during its epoch (KRaft's LeaderState).

- Each voter's end offset (its last valid fetch offset: it holds every entry below) and the time
  of its last fetch. The high watermark (commit index) is the largest offset that a majority of
  voters hold, and only once it passes `epoch_start_offset`, the leader's own LeaderChange
  record: Raft commits entries of older epochs only by committing one of its own (§5.4.2 of the
  Raft paper; KRaft's "the high watermark is unknown until the leader commits in its epoch").
- Observers' progress, tracked for fetch answers but never counted.
- Check-quorum: the leader must have heard a fetch from a majority of voters (itself included)
  within `check_quorum_timeout_ms`; otherwise it resigns (KRaft uses 1.5 x the fetch timeout).
- Proposals appended but not yet committed, by the offset of their record.
- Parked fetches (long polling): a caught-up follower's fetch waits here until there are new
  entries, the high watermark moved, or `fetch_max_wait_ms` passed.

Owner: the `Raft` core, which creates one on election and drops it on resignation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.raft_messages import FetchRequest

OBSERVERS_MAX = 1024


@dataclass(slots=True)
class ReplicaState:
    """One replica as the leader sees it: `end_offset` -1 until its first valid fetch; `fetched`
    once any fetch of this epoch arrived (so it needs no more BeginQuorumEpoch)."""

    replica_id: int
    end_offset: int = -1
    last_fetch_ms: int = -1
    fetched: bool = False


@dataclass(frozen=True, slots=True)
class ParkedFetch:
    """A fetch with nothing to return yet: answered on new data, a new HW, or at `expires_ms`."""

    source_id: int
    request: FetchRequest
    expires_ms: int
    high_watermark: int


@dataclass(slots=True)
class LeaderState:
    """Leader-only state for one epoch; see the module docstring."""

    local_id: int
    epoch: int
    epoch_start_offset: int
    voter_ids: frozenset[int]
    check_quorum_timeout_ms: int
    elected_ms: int
    voters: dict[int, ReplicaState] = field(default_factory=dict)
    observers: dict[int, ReplicaState] = field(default_factory=dict)
    parked: dict[int, ParkedFetch] = field(default_factory=dict)
    pending: dict[int, int] = field(default_factory=dict)  # last offset of a proposal's batch -> proposal id
    first_offsets: dict[int, int] = field(default_factory=dict)  # last -> first offset, for batches of 2+ records
    begin_epoch_sent_ms: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.local_id in self.voter_ids, f"leader {self.local_id} is not a voter of {sorted(self.voter_ids)}"
        # Every voter gets the benefit of the doubt for one check-quorum period after the election.
        self.voters = {voter: ReplicaState(voter, last_fetch_ms=self.elected_ms) for voter in self.voter_ids}
        self.voters[self.local_id].end_offset = self.epoch_start_offset

    @property
    def majority(self) -> int:
        return len(self.voter_ids) // 2 + 1

    def update_local_end_offset(self, end_offset: int) -> None:
        local = self.voters[self.local_id]
        assert end_offset >= local.end_offset, f"leader end offset fell: {local.end_offset} -> {end_offset}"
        local.end_offset = end_offset

    def record_fetch(self, replica_id: int, now_ms: int) -> ReplicaState | None:
        """Note that `replica_id` fetched now; None for an observer beyond OBSERVERS_MAX."""
        replica = self.voters.get(replica_id) or self.observers.get(replica_id)
        if replica is None:
            if len(self.observers) >= OBSERVERS_MAX:
                return None
            replica = self.observers[replica_id] = ReplicaState(replica_id)
        replica.last_fetch_ms = now_ms
        replica.fetched = True
        return replica

    def voters_not_fetched(self) -> list[int]:
        """Voters that have not fetched in this epoch: they still need BeginQuorumEpoch."""
        return sorted(voter for voter, state in self.voters.items() if voter != self.local_id and not state.fetched)

    def high_watermark_candidate(self) -> int | None:
        """The offset a majority of voters hold, if it passes the epoch start; else None."""
        offsets = sorted((state.end_offset for state in self.voters.values()), reverse=True)
        candidate = offsets[self.majority - 1]
        return candidate if candidate > self.epoch_start_offset else None

    def has_quorum(self, now_ms: int) -> bool:
        """Check-quorum: a majority of voters (the leader included) fetched recently."""
        return now_ms < self.quorum_deadline_ms()

    def quorum_deadline_ms(self) -> int:
        """When the leader resigns unless more fetches arrive: the majority-th most recent fetch
        time (the leader's own counts as always fresh) plus the check-quorum timeout."""
        others = sorted((state.last_fetch_ms for voter, state in self.voters.items() if voter != self.local_id),
                        reverse=True)
        needed = self.majority - 1
        if needed == 0:
            return 2**62
        return others[needed - 1] + self.check_quorum_timeout_ms
