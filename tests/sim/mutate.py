"""Mutation check of the simulator: plant a known Raft bug, run seeds, expect a failure.

A simulator that never fails proves little unless it fails on broken code. Each mutation below
breaks one rule the theory of operation in controller/raft.py (or quorum_controller.py) depends on; the run reports, per
mutation, how many of the seeds failed and the first failing seed (the one to replay with
`--mutation NAME --seed N`). Mutations are applied in the parent before the worker processes fork.

    .venv/bin/python -m tests.sim.mutate --seeds 200 --jobs 2
    .venv/bin/python -m tests.sim.mutate --mutation vote_twice --seeds 50
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from controller import controller_office, leader_state, quorum_controller, quorum_state, raft, raft_log
from controller.metadata_records import FenceBroker
from controller.quorum_state import ElectionState, LogEnd
from controller.raft_messages import Event, Ready, Role, VoteRequest
from storage.log import LogAppendInfo
from storage.records import build_batch_from_values
from tests.sim.run import run_seeds


def _grant_any_log() -> None:
    """Voters ignore the candidate's log (Raft §5.4.1 gone): leader completeness must fail."""
    def current(self: raft.Raft, request: VoteRequest) -> bool:
        return True

    raft.Raft._candidate_log_is_current = current  # type: ignore[method-assign]


def _commit_old_epochs() -> None:
    """The leader counts a majority without an entry of its own epoch (Raft §5.4.2, Figure 8)."""
    def candidate(self: leader_state.LeaderState) -> int | None:
        offsets = sorted((state.end_offset for state in self.voters.values()), reverse=True)
        value = offsets[self.majority - 1]
        return value if value > 0 else None

    leader_state.LeaderState.high_watermark_candidate = candidate  # type: ignore[method-assign]


def _vote_twice() -> None:
    """A voter forgets whom it voted for in the epoch: two leaders in one epoch must show."""
    original = raft.Raft._may_grant_vote

    def may_grant(self: raft.Raft, request: VoteRequest) -> bool:
        state = self._state
        self._state = ElectionState(state.epoch, None, state.leader_id)
        try:
            return original(self, request)
        finally:
            self._state = state

    def set_state(self: raft.Raft, state: ElectionState) -> None:
        if state != self._state:
            self._state = state
            self._hard_state_dirty = True

    raft.Raft._may_grant_vote = may_grant  # type: ignore[method-assign]
    raft.Raft._set_state = set_state  # type: ignore[method-assign]


def _forget_votes_on_crash() -> None:
    """The vote is sent before it is persisted (never persisted): a restarted voter votes again."""
    def set_state(self: raft.Raft, state: ElectionState) -> None:
        if state != self._state:
            self._hard_state_dirty = self._hard_state_dirty or state.epoch != self._state.epoch
            self._state = state

    raft.Raft._set_state = set_state  # type: ignore[method-assign]


def _vote_without_state() -> None:
    """A voter that lost its quorum-state reads as epoch 0 with no vote and votes at once (the old
    reading of a missing file): a wiped voter votes again where its lost vote counted."""
    original = quorum_state.QuorumStateStore.read

    def read(self: quorum_state.QuorumStateStore) -> ElectionState:
        return dataclasses.replace(original(self), restoration=None)

    quorum_state.QuorumStateStore.read = read  # type: ignore[method-assign]


def _restore_without_log_bound() -> None:
    """A restored voter votes for any log its own log does not beat, ignoring the logs the others
    reported: it may elect a leader without an entry its lost acknowledgement helped commit."""
    def allows_vote(self: quorum_state.Restoration, others: frozenset[int], epoch: int, log_end: LogEnd) -> bool:
        return self.allows_vote_in(others, epoch)

    quorum_state.Restoration.allows_vote = allows_vote  # type: ignore[method-assign]


def _ack_before_flush() -> None:
    """Followers acknowledge fetched entries without an fsync: a crash loses committed entries."""
    original = raft.Raft.handle

    def handle(self: raft.Raft, event: Event, now_ms: int) -> Ready:
        ready = original(self, event, now_ms)
        if self.role is Role.FOLLOWER and ready.must_sync:
            return dataclasses.replace(ready, must_sync=False)
        return ready

    raft.Raft.handle = handle  # type: ignore[method-assign]


def _truncate_to_leader_end() -> None:
    """Followers truncate to the leader's epoch end without looking up their own (KRaft's rule)."""
    def truncate(self: raft_log.RaftLog, diverging: raft.OffsetAndEpoch, now_ms: int) -> int:
        offset = min(diverging.offset, self.log.log_end_offset)
        if self.log.truncate_to(offset, now_ms):
            self.truncation_count += 1
            self._refresh()
        end = self.log.log_end_offset
        self._tail = {base: entries for base, entries in self._tail.items() if entries[-1].offset < end}
        return end

    raft_log.RaftLog.truncate_to_end_offset = truncate  # type: ignore[method-assign]


def _split_batches() -> None:
    """Each record of a controller request is its own batch: a failover can commit a prefix of a
    request, which the atomic-requests check must catch."""
    def append_batch(self: raft_log.RaftLog, values: tuple[bytes, ...], epoch: int, now_ms: int) -> LogAppendInfo:
        infos = [self.log.append_as_leader(build_batch_from_values([value], timestamp_ms=now_ms), epoch, now_ms)
                 for value in values]
        self._refresh()
        return dataclasses.replace(infos[-1], first_offset=infos[0].first_offset)

    raft_log.RaftLog.append_batch_as_leader = append_batch  # type: ignore[method-assign]


def _fence_keeps_leadership() -> None:
    """The controller fences a broker without moving its leaderships: a fenced broker leads."""
    def fence(self: quorum_controller.QuorumController, batch: Any, broker: Any) -> None:
        batch.append(FenceBroker(broker.broker_id, broker.broker_epoch))

    quorum_controller.QuorumController._fence = fence  # type: ignore[method-assign]


def _controller_never_takes_office() -> None:
    """The office never finds the leader's log applied: no controller takes office, no request
    completes, and the liveness phase must end in a LivenessFailure (the bound is asserted)."""
    def may_take_office(self: controller_office.ControllerOffice, raft: controller_office.RaftStepped) -> bool:
        return False

    controller_office.ControllerOffice.may_take_office = may_take_office  # type: ignore[method-assign]


MUTATIONS: dict[str, Callable[[], None]] = {
    "grant_any_log": _grant_any_log,
    "commit_old_epochs": _commit_old_epochs,
    "vote_twice": _vote_twice,
    "forget_votes_on_crash": _forget_votes_on_crash,
    "vote_without_state": _vote_without_state,
    "restore_without_log_bound": _restore_without_log_bound,
    "ack_before_flush": _ack_before_flush,
    "truncate_to_leader_end": _truncate_to_leader_end,
    "split_batches": _split_batches,
    "fence_keeps_leadership": _fence_keeps_leadership,
    "controller_never_takes_office": _controller_never_takes_office,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.mutate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mutation", choices=sorted(MUTATIONS), help="only this one (default: each in turn)")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    names = [args.mutation] if args.mutation else sorted(MUTATIONS)
    survived = []
    for name in names:
        caught = _run_mutation(name, range(args.start, args.start + args.seeds), args.jobs)
        if caught == 0:
            survived.append(name)
    print(f"survived: {survived or 'none'}")
    return 1 if survived else 0


def _run_mutation(name: str, seeds: range, jobs: int) -> int:
    """Apply one mutation in a fresh process tree and count the failing seeds."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=_child, args=(name, list(seeds), jobs, queue))
    process.start()
    failures, first, example = queue.get()
    process.join()
    print(f"{name}: {failures}/{len(seeds)} seeds failed; first {first}: {example}", flush=True)
    return failures


def _child(name: str, seeds: list[int], jobs: int, queue: object) -> None:
    MUTATIONS[name]()
    failures = 0
    first: int | None = None
    example = ""
    for outcome in run_seeds(seeds, jobs):
        if outcome.failure is not None:
            failures += 1
            if first is None or outcome.seed < first:
                first = outcome.seed
                example = outcome.failure.strip().splitlines()[-1][:140]
    queue.put((failures, first, example))  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
