"""GroupSimulation: one consumer group under faults, on simulated time, one seed.

Goal: find a schedule under which the membership core (`replication/consumer_groups.py`, the code
the coordinator node runs) gives one partition to two members in one generation, accepts an offset
commit from a member that does not own the partition in the current generation, or leaves the
group unable to settle once the faults end. Method: as the replication simulation, one seeded
generator draws the options and every choice; the coordinator is the real core, stepped with
its events and ticked when its Ready asks; the members are consumers that follow our client's
rules (client/group_member.py: the leader assigns with the client's own assignor, drawn per seed
from range, roundrobin and cooperative-sticky, and consumer-protocol encodings; heartbeats every
`heartbeat.interval.ms`; joining again on REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and
UNKNOWN_MEMBER_ID, the last two losing what it owned; an eager member revokes everything before it
joins, a cooperative one (KIP-429) keeps its partitions and sends them as owned, gives up only
what the new assignment took away, committing it first, and then joins again at once) and commit
the partitions they own every `commit_interval_ms`, whatever their state.

Faults: message drops, delays, duplicates; member crashes (no LeaveGroup) and clean closes
(LeaveGroup), restarts as new consumers; pauses (the member keeps believing what it believed, as a
stopped process does); a member cut off from the coordinator; group records whose write fails;
coordinator failovers: the group's `__consumer_offsets` partition moves, so a new core takes over,
loaded from the records acknowledged so far (a write in flight at the failover may have landed or
not), answering COORDINATOR_LOAD_IN_PROGRESS while it loads; requests waiting on the old core are
answered NOT_COORDINATOR, as node/group_membership.py does. Generations therefore go on across
failovers, and the checks hold across them.

Checks (GroupChecker): (1) within one generation no partition is handed to two members, whichever
coordinator handed it out, and a generation's assignment as the coordinator holds it never
changes; (2) a commit the core accepts names no partition that the current generation gives to
another member (a cooperative member commits what it gives up in the generation that withholds it
from everyone); (3) after the faults heal, within `liveness_bound_ms` the group is Stable,
every running member is in its current generation, and the partitions are split among them,
each to exactly one. A partition owned by a member of an old generation at the same time as by a
member of the new one is not a violation: Kafka's classic protocol allows it (a cut-off member
learns of the rebalance only when it hears from the coordinator); check (2) is what makes it harmless.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from client.assignors import assignor_for
from client.consumer_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from replication.consumer_groups import (
    ConsumerGroups,
    GroupAnswer,
    GroupEvent,
    GroupResult,
    GroupsConfig,
    GroupState,
    GroupsTick,
    GroupStored,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    StoreGroup,
    SyncGroup,
    SyncGroupResult,
)
from replication.group_metadata import GroupMetadata
from tests.sim.groups.options import GroupSimOptions
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition

GROUP = "sim-group"
TOPIC = "events"
PROTOCOL_TYPE = "consumer"
REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
STEPS_MAX = 2_000_000
NEVER_MS = 2**62


class Kind(IntEnum):
    TO_COORDINATOR = 0
    TO_MEMBER = 1
    CORE_TICK = 2
    STORED = 6
    MEMBER_TIMER = 3
    CHAOS = 4
    HEAL = 5


@dataclass(slots=True)
class Member:
    """One consumer process (its incarnation changes at each restart: a new consumer)."""

    index: int
    incarnation: int = 0
    up: bool = True
    paused_until_ms: int = 0
    cut_off: bool = False
    member_id: str = ""
    generation: int = -1  # of what it owns
    joining_generation: int = -1  # of the JoinGroup answer its SyncGroup is for
    epoch: int = -1  # the coordinator epoch that answered its last JoinGroup
    state: str = "joining"  # joining | syncing | stable | backoff
    owned: frozenset[int] = frozenset()
    outstanding: int | None = None  # the correlation id of its join or sync in flight
    deadline_ms: int = 0  # when the outstanding join or sync is given up
    next_heartbeat_ms: int = 0
    next_commit_ms: int = 0
    backoff_until_ms: int = 0
    armed: set[int] = field(default_factory=set)  # when its timers fire


@dataclass(slots=True)
class GroupSimResult:
    steps: int = 0
    generations: int = 0  # stable assignments members received
    generations_during_fault: int = 0
    commits_accepted: int = 0
    commits_refused: int = 0
    crashes: int = 0
    failovers: int = 0
    pauses: int = 0
    converged_ms: int | None = None  # heal to converged


@dataclass(slots=True)
class GroupChecker:
    claims: dict[int, dict[int, str]] = field(default_factory=dict)  # generation -> partition -> member
    plans: dict[int, dict[int, str]] = field(default_factory=dict)  # generation -> the coordinator's assignment

    def planned(self, generation: int, plan: dict[int, str]) -> None:
        """The coordinator's view of a generation loses members that go, never changes an owner."""
        known = self.plans.setdefault(generation, {})
        for partition, member_id in plan.items():
            owner = known.setdefault(partition, member_id)
            assert owner == member_id, (f"(1) generation {generation}: the coordinator gives partition {partition} "
                                        f"to {member_id}, before to {owner}")

    def assigned(self, epoch: int, generation: int, member_id: str, partitions: frozenset[int]) -> None:
        claim = self.claims.setdefault(generation, {})
        for partition in partitions:
            owner = claim.setdefault(partition, member_id)
            assert owner == member_id, (f"(1) generation {generation} (coordinator epoch {epoch}): partition "
                                        f"{partition} handed to {member_id} and to {owner}")

    def commit_accepted(self, epoch: int, generation: int, member_id: str, partitions: frozenset[int]) -> None:
        plan = self.plans.get(generation, {})
        for partition in partitions:
            assert plan.get(partition, member_id) == member_id, (
                f"(2) coordinator epoch {epoch} in generation {generation} accepted {member_id}'s commit of "
                f"partition {partition}, given to {plan.get(partition)}")


class GroupSimulation:
    def __init__(self, seed: int, trace: Callable[[str], None] | None = None) -> None:
        self.options = options = GroupSimOptions.from_seed(seed)
        self.rng = random.Random(seed)
        self._trace = trace
        self.now_ms = 0
        self.result = GroupSimResult()
        self.checker = GroupChecker()
        self.config = GroupsConfig(group_min_session_timeout_ms=1, group_max_session_timeout_ms=600_000,
                                   group_initial_rebalance_delay_ms=options.initial_rebalance_delay_ms)
        self.assignor = assignor_for(options.assignor)
        self.members = [Member(index) for index in range(options.members)]
        self.epoch = 0
        self.core = self._new_core()
        self.loaded_at_ms = 0
        self.core_tick_ms: int | None = None
        # core request id -> member index, incarnation, correlation id, kind
        self.waiting: dict[int, tuple[int, int, int, str]] = {}
        self.log: dict[str, GroupMetadata] = {}  # the group records acknowledged: what a new coordinator loads
        # the writes in flight, in the order they were appended (a partition's log keeps it); each
        # with whether it was appended at all (or fails) and whether a later acknowledgement committed it
        self.writes: dict[int, tuple[StoreGroup, bool, bool]] = {}
        self.request_ids = 0
        self.correlations = 0
        self.faulty = True
        self.last_fault_ms = -10**9
        self.healed_ms: int | None = None
        self.queue: list[tuple[int, int, Kind, Any]] = []
        self.sequence = 0

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> GroupSimResult:
        options = self.options
        for member in self.members:
            self._join(member)
        self.schedule(options.chaos_interval_ms, Kind.CHAOS)
        self.schedule(options.safety_duration_ms, Kind.HEAL)
        bound_ms = self.liveness_bound_ms()
        while self.queue:
            self.result.steps += 1
            assert self.result.steps < STEPS_MAX, "the run does not end"
            at_ms, _, kind, payload = heapq.heappop(self.queue)
            self.now_ms = at_ms
            self._handle(kind, payload)
            if self.healed_ms is not None:
                if self._converged():
                    self.result.converged_ms = self.now_ms - self.healed_ms
                    return self.result
                assert self.now_ms - self.healed_ms <= bound_ms, (
                    f"(3) the group has not settled {bound_ms} ms after the faults healed: {self._describe()}")
        raise AssertionError("the event queue ran dry")

    def liveness_bound_ms(self) -> int:
        """Old members' sessions expire, one rebalance waits for every member (at most the rebalance
        timeout) after the initial delay, and a second may follow for members that joined late."""
        options = self.options
        return (options.session_timeout_ms + options.initial_rebalance_delay_ms + 2 * options.rebalance_timeout_ms
                + 4 * options.request_timeout_ms + 500)

    def schedule(self, at_ms: int, kind: Kind, payload: Any = None) -> None:
        self.sequence += 1
        heapq.heappush(self.queue, (at_ms, self.sequence, kind, payload))

    def trace(self, line: str) -> None:
        if self._trace is not None:
            self._trace(f"{self.now_ms:7d} {line}")

    def _handle(self, kind: Kind, payload: Any) -> None:
        if kind is Kind.TO_COORDINATOR:
            self._at_coordinator(*payload)
        elif kind is Kind.TO_MEMBER:
            self._at_member(*payload)
        elif kind is Kind.CORE_TICK:
            epoch, at_ms = payload
            if epoch == self.epoch and at_ms == self.core_tick_ms:
                self.core_tick_ms = None
                self._step(GroupsTick())
        elif kind is Kind.STORED:
            epoch, store = payload
            if epoch == self.epoch and store.token in self.writes:
                self._stored(store)
        elif kind is Kind.MEMBER_TIMER:
            member = self.members[payload[0]]
            if member.incarnation == payload[1]:
                member.armed.discard(payload[2])
                self._member_timer(member)
        elif kind is Kind.CHAOS:
            if self.faulty:
                self._chaos()
                self.schedule(self.now_ms + self.options.chaos_interval_ms, Kind.CHAOS)
        else:
            self._heal()

    # -- the network ------------------------------------------------------------------------------

    def _deliveries(self, cut: bool) -> list[int]:
        options = self.options
        if cut or (self.faulty and self.rng.random() < options.drop_probability):
            return []
        times = [self.now_ms + self._delay_ms()]
        if self.faulty and self.rng.random() < options.duplicate_probability:
            times.append(self.now_ms + self._delay_ms())
        return times

    def _delay_ms(self) -> int:
        options = self.options
        if self.faulty and self.rng.random() < options.long_delay_probability:
            return self.rng.randint(options.delay_max_ms, options.long_delay_max_ms)
        return self.rng.randint(1, options.delay_max_ms)

    def _send(self, member: Member, kind: str, make: Callable[[int], GroupEvent],
              commit: tuple[int, int, str, frozenset[int]] | None = None) -> int:
        self.correlations += 1
        for at_ms in self._deliveries(member.cut_off):
            self.schedule(at_ms, Kind.TO_COORDINATOR, (member.index, member.incarnation, self.correlations, kind,
                                                       make, commit))
        return self.correlations

    def _answer(self, member_index: int, incarnation: int, correlation: int, kind: str, answer: Any) -> None:
        for at_ms in self._deliveries(self.members[member_index].cut_off):
            self.schedule(at_ms, Kind.TO_MEMBER, (member_index, incarnation, correlation, kind, answer, self.epoch))

    # -- the coordinator --------------------------------------------------------------------------

    def _new_core(self) -> ConsumerGroups:
        return ConsumerGroups(self.config, random.Random(self.rng.getrandbits(64)))

    def _at_coordinator(self, member_index: int, incarnation: int, correlation: int, kind: str,
                        make: Callable[[int], GroupEvent], commit: tuple[int, int, str, frozenset[int]] | None) -> None:
        if self.now_ms < self.loaded_at_ms:
            self._answer(member_index, incarnation, correlation, kind, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            return
        if commit is not None:
            _, generation, member_id, partitions = commit
            error, _ = self.core.commit_error(GROUP, generation, member_id)
            if error == ErrorCode.NONE:  # judged against the generation the coordinator is in
                current = self.core.groups[GROUP].generation_id
                self.checker.commit_accepted(self.epoch, current, member_id, partitions)
                self.result.commits_accepted += 1
            else:
                self.result.commits_refused += 1
            return
        self.request_ids += 1
        self.waiting[self.request_ids] = (member_index, incarnation, correlation, kind)
        self._step(make(self.request_ids))

    def _step(self, event: GroupEvent) -> None:
        ready = self.core.handle(event, self.now_ms)
        self._record_plan()
        for answer in ready.answers:
            self._deliver_answer(answer)
        for store in ready.stores:
            appended = not (self.faulty and self.rng.random() < self.options.store_failure_probability)
            self.writes[store.token] = (store, appended, False)
            self.schedule(self.now_ms + self.rng.randint(1, 2 * self.options.delay_max_ms), Kind.STORED,
                          (self.epoch, store))
        if ready.next_tick_ms is not None and ready.next_tick_ms != self.core_tick_ms:
            self.core_tick_ms = max(ready.next_tick_ms, self.now_ms)
            self.schedule(self.core_tick_ms, Kind.CORE_TICK, (self.epoch, self.core_tick_ms))

    def _record_plan(self) -> None:
        """The assignment the core holds for its current generation once it is stored (Stable): one
        lost with its record before any member got it is not a generation anyone saw."""
        group = self.core.groups.get(GROUP)
        if group is None or group.state is not GroupState.STABLE:
            return
        plan = {partition: member.member_id for member in group.members.values()
                for partition in decode_assignment(member.assignment).get(TOPIC, ())}
        self.checker.planned(group.generation_id, plan)

    def _stored(self, store: StoreGroup) -> None:
        """The write of a group record ends: acknowledged by the ISR, which commits every record
        appended before it too (the log is in order), or failed (its leader moved, too few replicas)."""
        _, appended, _ = self.writes[store.token]
        if not appended:
            del self.writes[store.token]
            self._step(GroupStored(store.token, self.rng.choice((ErrorCode.NOT_COORDINATOR,
                                                                 ErrorCode.COORDINATOR_NOT_AVAILABLE))))
            return
        for token, (earlier, earlier_appended, committed) in list(self.writes.items()):
            if earlier_appended and not committed:
                self._commit(earlier)
                self.writes[token] = (earlier, True, True)
            if token == store.token:
                break
        del self.writes[store.token]
        self._step(GroupStored(store.token, ErrorCode.NONE))

    def _commit(self, store: StoreGroup) -> None:
        if store.value is None:
            self.log.pop(store.group_id, None)
        else:
            self.log[store.group_id] = store.value

    def _deliver_answer(self, answer: GroupAnswer) -> None:
        waiting = self.waiting.pop(answer.request_id, None)
        if waiting is not None:
            self._answer(*waiting, answer)

    def _failover(self) -> None:
        """The group's partition moves: its waiters hear NOT_COORDINATOR; the new core loads."""
        self.result.failovers += 1
        for request_id in list(self.waiting):
            member_index, incarnation, correlation, kind = self.waiting.pop(request_id)
            self._answer(member_index, incarnation, correlation, kind, ErrorCode.NOT_COORDINATOR)
        appended = [(store, committed) for store, was_appended, committed in self.writes.values() if was_appended]
        prefix = max([index + 1 for index, (_, committed) in enumerate(appended) if committed], default=0)
        for store, committed in appended[:self.rng.randint(prefix, len(appended))]:  # the HW moved on, or not
            if not committed:
                self._commit(store)
        self.writes.clear()
        self.epoch += 1
        self.core = self._new_core()
        self.core_tick_ms = None
        self.loaded_at_ms = self.now_ms + self.rng.randint(0, self.options.load_max_ms)
        self.core.load(sorted(self.log.items()), self.loaded_at_ms)
        self.last_fault_ms = self.now_ms
        self.trace(f"coordinator fails over to epoch {self.epoch}, loaded at {self.loaded_at_ms}")

    # -- the members ------------------------------------------------------------------------------

    def _join(self, member: Member) -> None:
        """Send a JoinGroup; an eager member gives up everything first."""
        options = self.options
        if not self.assignor.cooperative:
            member.owned, member.generation = frozenset(), -1
        member.state = "joining"
        member_id = member.member_id
        client_id = f"consumer-{member.index}"
        metadata = encode_subscription(Subscription(
            (TOPIC,), owned_partitions=frozenset(TopicPartition(TOPIC, partition) for partition in member.owned),
            generation_id=member.generation))
        protocols = ((self.assignor.name, metadata),)
        member.outstanding = self._send(member, "join", lambda request_id: JoinGroup(
            request_id, GROUP, member_id, client_id, options.session_timeout_ms, options.rebalance_timeout_ms,
            PROTOCOL_TYPE, protocols))
        member.deadline_ms = self.now_ms + options.rebalance_timeout_ms + options.request_timeout_ms
        self._arm(member, member.deadline_ms)

    def _left_behind(self, member: Member, code: ErrorCode) -> None:
        """ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: the group went on without it; what it owned is lost."""
        if code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
            member.owned, member.generation = frozenset(), -1
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            member.member_id = ""

    def _arm(self, member: Member, at_ms: int) -> None:
        if at_ms not in member.armed:
            member.armed.add(at_ms)
            self.schedule(at_ms, Kind.MEMBER_TIMER, (member.index, member.incarnation, at_ms))

    def _running(self, member: Member) -> bool:
        return member.up and member.paused_until_ms <= self.now_ms

    def _at_member(self, member_index: int, incarnation: int, correlation: int, kind: str, answer: Any,
                   epoch: int) -> None:
        member = self.members[member_index]
        if member.incarnation != incarnation or not self._running(member):
            return  # an answer to an earlier consumer, or one a stopped process misses (dropped)
        code = answer if isinstance(answer, ErrorCode) else answer.error
        if kind == "heartbeat":
            if member.state == "stable" and code in REJOIN:
                assert isinstance(answer, GroupResult)
                self._left_behind(member, code)
                self.trace(f"member {member.index} heartbeat {code.name}: joins again")
                self._join(member)
            return
        if correlation != member.outstanding:
            return  # late or duplicated
        member.outstanding = None
        if kind == "join":
            self._on_join(member, answer, code, epoch)
        else:
            self._on_sync(member, answer, code, epoch)

    def _on_join(self, member: Member, answer: Any, code: ErrorCode, epoch: int) -> None:
        if code is ErrorCode.MEMBER_ID_REQUIRED:
            assert isinstance(answer, JoinGroupResult)
            member.member_id = answer.member_id
            self._join(member)
            return
        if code is not ErrorCode.NONE:
            self._left_behind(member, code)
            self._back_off(member)
            return
        assert isinstance(answer, JoinGroupResult)
        member.joining_generation, member.epoch, member.state = answer.generation_id, epoch, "syncing"
        assignments: tuple[tuple[str, bytes], ...] = ()
        if answer.leader == member.member_id:
            subscriptions = {member_id: decode_subscription(metadata) for member_id, metadata in answer.members}
            plan = self.assignor.assign(subscriptions, {TOPIC: self.options.partitions})
            assignments = tuple((member_id, encode_assignment(parts)) for member_id, parts in plan.items())
        generation, member_id = member.joining_generation, member.member_id
        member.outstanding = self._send(member, "sync", lambda request_id: SyncGroup(
            request_id, GROUP, generation, member_id, assignments))
        member.deadline_ms = self.now_ms + self.options.request_timeout_ms
        self._arm(member, member.deadline_ms)

    def _on_sync(self, member: Member, answer: Any, code: ErrorCode, epoch: int) -> None:
        if code is not ErrorCode.NONE:
            self._left_behind(member, code)
            self._back_off(member)
            return
        assert isinstance(answer, SyncGroupResult)
        assigned = frozenset(decode_assignment(answer.assignment).get(TOPIC, ()))
        revoked = member.owned - assigned
        if revoked:  # cooperative: commit what it gives up, in the new generation (it holds it still)
            self._send_commit(member, member.joining_generation, revoked)
        member.owned, member.generation, member.state = assigned, member.joining_generation, "stable"
        self.checker.assigned(epoch, member.generation, member.member_id, member.owned)
        self.result.generations += 1
        if self._fault_active():
            self.result.generations_during_fault += 1
        self.trace(f"member {member.index} ({member.member_id}) owns {sorted(member.owned)} in epoch {epoch} "
                   f"generation {member.generation}" + (f", gave up {sorted(revoked)}" if revoked else ""))
        member.next_heartbeat_ms = self.now_ms + self.options.heartbeat_interval_ms
        member.next_commit_ms = self.now_ms + self.options.commit_interval_ms
        if revoked:
            self._join(member)  # KIP-429: at once, so that what it gave up finds its new owner
        else:
            self._arm(member, min(member.next_heartbeat_ms, member.next_commit_ms))

    def _send_commit(self, member: Member, generation: int, partitions: frozenset[int]) -> None:
        self._send(member, "commit", lambda request_id: GroupsTick(),
                   (member.epoch, generation, member.member_id, partitions))

    def _back_off(self, member: Member) -> None:
        member.state = "backoff"
        member.backoff_until_ms = self.now_ms + self.options.retry_backoff_ms
        self._arm(member, member.backoff_until_ms)

    def _member_timer(self, member: Member) -> None:
        if not self._running(member):
            return  # a stopped process's timers fire when it resumes (the resume arms one)
        now_ms = self.now_ms
        if member.state == "backoff" and now_ms >= member.backoff_until_ms:
            self._join(member)
        elif member.state in ("joining", "syncing") and member.outstanding is not None and now_ms >= member.deadline_ms:
            member.outstanding = None
            self._back_off(member)
        if member.state == "stable" and now_ms >= member.next_heartbeat_ms:
            generation, member_id = member.generation, member.member_id
            self._send(member, "heartbeat", lambda request_id: Heartbeat(request_id, GROUP, generation, member_id))
            member.next_heartbeat_ms = now_ms + self.options.heartbeat_interval_ms
        if member.owned and now_ms >= member.next_commit_ms:  # a cooperative member commits while it rejoins
            self._send_commit(member, member.generation, member.owned)
            member.next_commit_ms = now_ms + self.options.commit_interval_ms
        if member.state == "stable" or member.owned:
            self._arm(member, min(member.next_heartbeat_ms if member.state == "stable" else NEVER_MS,
                                  member.next_commit_ms if member.owned else NEVER_MS))

    # -- faults -----------------------------------------------------------------------------------

    def _fault_active(self) -> bool:
        """A member is down, paused or cut off, or the coordinator loads, now or within a session
        timeout (the group has not reacted to a fault before its sessions expire)."""
        self._note_faults()
        return self.now_ms - self.last_fault_ms < self.options.session_timeout_ms

    def _note_faults(self) -> None:
        if any(not member.up or member.paused_until_ms > self.now_ms or member.cut_off for member in self.members) \
                or self.now_ms < self.loaded_at_ms:
            self.last_fault_ms = self.now_ms

    def _chaos(self) -> None:
        options, rng = self.options, self.rng
        self._note_faults()
        for member in self.members:
            if not member.up:
                if rng.random() < options.restart_probability:
                    self._restart(member)
                continue
            if member.paused_until_ms > self.now_ms:
                continue
            if member.cut_off and rng.random() < options.heal_probability:
                member.cut_off = False
                self.trace(f"member {member.index} reconnects")
            roll = rng.random()
            if roll < options.crash_probability:
                self._stop(member, clean=False)
            elif roll < options.crash_probability + options.close_probability:
                self._stop(member, clean=True)
            elif roll < options.crash_probability + options.close_probability + options.pause_probability:
                member.paused_until_ms = self.now_ms + rng.randint(1, options.pause_max_ms)
                self.result.pauses += 1
                self._arm(member, member.paused_until_ms)  # its overdue timers fire when it resumes
                self.trace(f"member {member.index} paused until {member.paused_until_ms}")
            elif rng.random() < options.partition_probability:
                member.cut_off = True
                self.trace(f"member {member.index} cut off from the coordinator")
        if rng.random() < options.failover_probability:
            self._failover()

    def _stop(self, member: Member, clean: bool) -> None:
        if clean and member.member_id:
            member_id = member.member_id
            self._send(member, "leave", lambda request_id: LeaveGroup(request_id, GROUP, (member_id,)))
        else:
            self.result.crashes += 1
        self.trace(f"member {member.index} {'closes' if clean else 'crashes'}")
        self.last_fault_ms = self.now_ms
        member.up = False
        member.owned = frozenset()
        member.outstanding = None

    def _restart(self, member: Member) -> None:
        self.trace(f"member {member.index} restarts as a new consumer")
        self.members[member.index] = fresh = Member(member.index, incarnation=member.incarnation + 1)
        self._join(fresh)

    def _heal(self) -> None:
        self.faulty = False
        self.healed_ms = self.now_ms
        self.trace("heal: every member runs, every link works, no more failovers")
        for member in self.members:
            member.cut_off = False
            if not member.up:
                self._restart(member)
            elif member.paused_until_ms > self.now_ms:
                member.paused_until_ms = self.now_ms
                self._arm(member, self.now_ms)

    # -- liveness ---------------------------------------------------------------------------------

    def _converged(self) -> bool:
        if self.now_ms < self.loaded_at_ms:
            return False
        group = self.core.groups.get(GROUP)
        if group is None or group.state is not GroupState.STABLE:
            return False
        members = {member.member_id: member for member in self.members}
        if set(group.members) != set(members) or any(
                member.state != "stable" or member.generation != group.generation_id for member in self.members):
            return False
        owned = [partition for member in self.members for partition in member.owned]
        return sorted(owned) == list(range(self.options.partitions))

    def _describe(self) -> str:
        group = self.core.groups.get(GROUP)
        core = "no group" if group is None else (f"{group.state.name} generation {group.generation_id} "
                                                 f"members {sorted(group.members)}")
        members = "; ".join(f"{member.index}: {member.member_id or '-'} {member.state} gen {member.generation} "
                            f"owns {sorted(member.owned)}" for member in self.members)
        return f"coordinator epoch {self.epoch}: {core}; members {members}"
