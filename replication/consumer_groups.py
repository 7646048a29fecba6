"""ConsumerGroups: membership of consumer groups, Kafka's classic group protocol, as a core.

Events in (`handle(event, now_ms)`), `GroupsReady` out; no I/O, no clock, ids drawn from the
seeded random source it is given. One instance runs on the coordinator of the groups' partitions
of `__consumer_offsets`; the node (or the simulator) routes JoinGroup, SyncGroup, Heartbeat and
LeaveGroup here and sends back the results the Ready lists, some of them later than the request
(a JoinGroup waits for the rebalance, a follower's SyncGroup for the leader's).

A group moves through Kafka's states:
- EMPTY: no member. A JoinGroup starts a rebalance (PREPARING_REBALANCE) after
  `group.initial.rebalance.delay.ms`, so that members starting together join one generation.
- PREPARING_REBALANCE: every known member must join again; the rebalance completes once all
  have, or at the rebalance timeout (the largest `rebalance_timeout_ms` of the members), which
  removes the ones that did not. Then the generation goes up by one, the protocol the most members
  support is chosen, the leader (the previous one if still a member, else the first to join) gets
  every member's subscription, and every JoinGroup is answered (COMPLETING_REBALANCE).
- COMPLETING_REBALANCE: the leader's SyncGroup carries the assignment; it answers every member's
  SyncGroup with its part (STABLE). A member that leaves or expires meanwhile restarts the rebalance.
- STABLE: a JoinGroup of a known member with the same subscription (a follower) is answered with
  the current generation; one of the leader or with another subscription, or of a new member,
  starts a rebalance. A member silent for its `session_timeout_ms` (heartbeats, joins, syncs)
  is removed and the group rebalances; a LeaveGroup does the same at once.
A new member joins with an empty member id and is given one (MEMBER_ID_REQUIRED, KIP-394), so that
a member that never comes back with it holds no place in a rebalance. Heartbeats answer
REBALANCE_IN_PROGRESS while the group prepares a rebalance (the member joins again),
ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID when the member is behind or gone.

`commit_error(group_id, generation_id, member_id)` fences OffsetCommit: a commit with a generation
(>= 0) must come from a current member in the current generation, and not while the group waits
for its leader's assignment (COMPLETING_REBALANCE: the member does not know its partitions yet).
While the group prepares a rebalance the current generation's assignment still holds, so its
members may commit, as in Kafka: an eager member commits before giving its partitions up, a
cooperative one (KIP-429) what it gives up between its two rebalances. One without (-1, "") only
to a group with no members (a consumer that assigns its partitions itself). So a consumer that
lost its partitions cannot overwrite the new owner's offsets.

Bounds: `group.max.size` members per group (GROUP_MAX_SIZE_REACHED), session timeouts within
[`group.min.session.timeout.ms`, `group.max.session.timeout.ms`] (INVALID_SESSION_TIMEOUT),
`max_groups` groups (an empty group is forgotten to make room, never a group with members). Not
here (yet): static membership (`group.instance.id`, KIP-345) and the
group metadata records in `__consumer_offsets`, so a new coordinator after a failover starts
every group EMPTY and its members join again.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from storage.error_codes import ErrorCode

NO_GENERATION = -1
UNKNOWN_MEMBER = ""
NEVER_MS = 2**62


class RandomSource(Protocol):
    def getrandbits(self, k: int) -> int: ...


@dataclass(frozen=True, slots=True)
class GroupsConfig:
    """Kafka's broker keys in snake_case, and ours: `max_groups` bounds the groups kept."""

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    max_groups: int = 100_000


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


# -- events and results ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroup:
    request_id: int
    group_id: str
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, subscription metadata), in the member's preference


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    request_id: int
    error: ErrorCode
    generation_id: int = NO_GENERATION
    protocol_name: str = ""
    leader: str = ""
    member_id: str = UNKNOWN_MEMBER
    members: tuple[tuple[str, bytes], ...] = ()  # for the leader: every member's subscription
    message: str = ""


@dataclass(frozen=True, slots=True)
class SyncGroup:
    request_id: int
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()  # the leader's: (member id, assignment)


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    request_id: int
    error: ErrorCode
    assignment: bytes = b""
    message: str = ""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    request_id: int
    group_id: str
    generation_id: int
    member_id: str


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    request_id: int
    group_id: str
    member_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupResult:
    """The answer to a Heartbeat or a LeaveGroup."""

    request_id: int
    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class GroupsTick:
    """Time passed: sessions, rebalance timeouts and initial delays are due."""


GroupEvent = JoinGroup | SyncGroup | Heartbeat | LeaveGroup | GroupsTick
GroupAnswer = JoinGroupResult | SyncGroupResult | GroupResult


@dataclass(frozen=True, slots=True)
class GroupsReady:
    """Send `answers` (to the requests they name); tick again no later than `next_tick_ms`."""

    answers: tuple[GroupAnswer, ...]
    next_tick_ms: int | None


# -- state ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Member:
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    expires_ms: int
    assignment: bytes = b""
    join: int | None = None  # the request id of its JoinGroup waiting for the rebalance
    sync: int | None = None  # the request id of its SyncGroup waiting for the leader's

    def subscription(self, protocol: str) -> bytes:
        return next(metadata for name, metadata in self.protocols if name == protocol)


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str = ""
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    pending: dict[str, int] = field(default_factory=dict)  # member ids given out, not yet joined -> expiry
    rebalance_deadline_ms: int = NEVER_MS
    initial_delay_until_ms: int = 0  # a rebalance from EMPTY waits for more members until then

    def supported_protocols(self) -> set[str]:
        names = [set(name for name, _ in member.protocols) for member in self.members.values()]
        return set.intersection(*names) if names else set()


class ConsumerGroups:
    """See the module docstring. One owner; `handle` is the only mutator."""

    def __init__(self, config: GroupsConfig, rng: RandomSource) -> None:
        self.config = config
        self._rng = rng
        self.groups: dict[str, Group] = {}
        self._answers: list[GroupAnswer] = []
        self._now_ms = 0

    # -- the entry point --------------------------------------------------------------------------

    def handle(self, event: GroupEvent, now_ms: int) -> GroupsReady:
        assert now_ms >= self._now_ms, f"time went back: {now_ms} < {self._now_ms}"
        self._now_ms = now_ms
        self._answers = []
        if isinstance(event, JoinGroup):
            self._join(event)
        elif isinstance(event, SyncGroup):
            self._sync(event)
        elif isinstance(event, Heartbeat):
            self._heartbeat(event)
        elif isinstance(event, LeaveGroup):
            self._leave(event)
        else:
            assert isinstance(event, GroupsTick), f"not a group event: {event!r}"
        self._expire()
        self._check_invariants()
        answers, self._answers = tuple(self._answers), []
        return GroupsReady(answers, self._next_tick_ms())

    def commit_error(self, group_id: str, generation_id: int, member_id: str) -> tuple[ErrorCode, str]:
        """Whether an OffsetCommit with this generation and member may write (module docstring)."""
        group = self.groups.get(group_id)
        if generation_id < 0 and member_id == UNKNOWN_MEMBER:
            if group is None or not group.members:
                return ErrorCode.NONE, ""
            return ErrorCode.UNKNOWN_MEMBER_ID, (f"group {group_id} has members: a commit needs the committing "
                                                 "member's id and generation")
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member of group {group_id}; join again"
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, (f"generation {generation_id} is not group {group_id}'s "
                                                  f"{group.generation_id}; join again")
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id} is rebalancing; join again, then commit"
        return ErrorCode.NONE, ""

    # -- JoinGroup --------------------------------------------------------------------------------

    def _join(self, join: JoinGroup) -> None:
        error = self._join_error(join)
        if error is not None:
            self._answers.append(JoinGroupResult(join.request_id, error[0], member_id=join.member_id,
                                                 message=error[1]))
            return
        group = self.groups.get(join.group_id)
        if group is None:
            group = self.groups[join.group_id] = Group(join.group_id, protocol_type=join.protocol_type)
        if join.member_id == UNKNOWN_MEMBER:
            member_id = f"{join.client_id}-{self._rng.getrandbits(64):016x}"
            group.pending[member_id] = self._now_ms + join.session_timeout_ms
            self._answers.append(JoinGroupResult(join.request_id, ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id,
                                                 message="join again with this member id (KIP-394)"))
            return
        member = group.members.get(join.member_id)
        if member is None:
            del group.pending[join.member_id]
            member = group.members[join.member_id] = Member(
                join.member_id, join.session_timeout_ms, join.rebalance_timeout_ms, join.protocols,
                self._now_ms + join.session_timeout_ms)
            same = False
        else:
            same = member.protocols == join.protocols
            member.protocols = join.protocols
            member.session_timeout_ms, member.rebalance_timeout_ms = join.session_timeout_ms, join.rebalance_timeout_ms
            member.expires_ms = self._now_ms + join.session_timeout_ms
        if member.join is not None:  # an earlier JoinGroup of it still waits: this one replaces it
            self._answers.append(JoinGroupResult(member.join, ErrorCode.REBALANCE_IN_PROGRESS,
                                                 member_id=member.member_id,
                                                 message="superseded by a later JoinGroup of this member"))
        member.join = join.request_id
        if same and (group.state is GroupState.COMPLETING_REBALANCE or (
                group.state is GroupState.STABLE and member.member_id != group.leader)):
            self._answer_join(group, member)  # it missed its answer, or a follower joins again: no rebalance
        elif group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)
        self._maybe_complete_rebalance(group)

    def _join_error(self, join: JoinGroup) -> tuple[ErrorCode, str] | None:
        config = self.config
        group = self.groups.get(join.group_id)
        if not join.group_id:
            return ErrorCode.INVALID_GROUP_ID, "the group id is empty"
        if not config.group_min_session_timeout_ms <= join.session_timeout_ms <= config.group_max_session_timeout_ms:
            return ErrorCode.INVALID_SESSION_TIMEOUT, (
                f"session.timeout.ms={join.session_timeout_ms} is outside [{config.group_min_session_timeout_ms}, "
                f"{config.group_max_session_timeout_ms}] (group.min/max.session.timeout.ms)")
        if join.rebalance_timeout_ms <= 0 or not join.protocols or not join.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "a JoinGroup names a protocol type and at least one protocol"
        if group is None and join.member_id != UNKNOWN_MEMBER:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"{join.member_id!r} is not a member of group {join.group_id}"
        if group is None:
            if len(self.groups) >= config.max_groups and not self._evict_empty_group():
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"this coordinator holds {len(self.groups)} groups"
            return None
        known = join.member_id in group.members or join.member_id in group.pending
        if join.member_id != UNKNOWN_MEMBER and not known:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"{join.member_id!r} is not a member of group {join.group_id}"
        if group.members and (join.protocol_type != group.protocol_type or not (
                group.supported_protocols() & {name for name, _ in join.protocols})):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, (
                f"group {join.group_id} runs {group.protocol_type} protocols {sorted(group.supported_protocols())}")
        if not known and len(group.members) + len(group.pending) >= config.group_max_size:
            return ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {join.group_id} has group.max.size members"
        return None

    def _evict_empty_group(self) -> bool:
        """Make room: forget a group with no members (kept until then, so that its generations
        never repeat while its former members may still send them)."""
        for group_id, group in self.groups.items():
            if group.state is GroupState.EMPTY and not group.pending:
                del self.groups[group_id]
                return True
        return False

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():  # their SyncGroups wait in vain: they join again
                if member.sync is not None:
                    self._answers.append(SyncGroupResult(member.sync, ErrorCode.REBALANCE_IN_PROGRESS))
                    member.sync = None
        if group.state is GroupState.EMPTY:  # members starting together join one generation
            group.initial_delay_until_ms = self._now_ms + self.config.group_initial_rebalance_delay_ms
            group.rebalance_deadline_ms = group.initial_delay_until_ms
        else:
            timeout = max((member.rebalance_timeout_ms for member in group.members.values()), default=0)
            group.rebalance_deadline_ms = self._now_ms + timeout
        group.state = GroupState.PREPARING_REBALANCE

    def _maybe_complete_rebalance(self, group: Group, timed_out: bool = False) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or self._now_ms < group.initial_delay_until_ms:
            return
        if not timed_out and any(member.join is None for member in group.members.values()):
            return
        for member in [member for member in group.members.values() if member.join is None]:
            del group.members[member.member_id]  # did not join within the rebalance timeout
        if not group.members:
            self._become_empty(group)
            return
        group.generation_id += 1
        votes = Counter(name for member in group.members.values() for name, _ in member.protocols
                        if name in group.supported_protocols())
        first = next(iter(group.members.values()))
        group.protocol = max(group.supported_protocols(), key=lambda name: (votes[name], _preference(first, name)))
        if group.leader not in group.members:
            group.leader = first.member_id
        group.state = GroupState.COMPLETING_REBALANCE
        group.rebalance_deadline_ms = NEVER_MS
        for member in group.members.values():
            member.assignment = b""
            self._answer_join(group, member)

    def _answer_join(self, group: Group, member: Member) -> None:
        assert member.join is not None
        members = tuple((other.member_id, other.subscription(group.protocol)) for other in group.members.values()) \
            if member.member_id == group.leader else ()
        self._answers.append(JoinGroupResult(member.join, ErrorCode.NONE, group.generation_id, group.protocol,
                                             group.leader, member.member_id, members))
        member.join = None
        member.expires_ms = self._now_ms + member.session_timeout_ms

    def _become_empty(self, group: Group) -> None:
        group.state = GroupState.EMPTY
        group.generation_id += 1
        group.leader = group.protocol = ""
        group.rebalance_deadline_ms = NEVER_MS

    # -- SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------------------

    def _member_error(self, group_id: str, generation_id: int, member_id: str) -> tuple[ErrorCode, str] | None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member of group {group_id}; join again"
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, (f"generation {generation_id} is not group {group_id}'s "
                                                  f"{group.generation_id}; join again")
        return None

    def _sync(self, sync: SyncGroup) -> None:
        error = self._member_error(sync.group_id, sync.generation_id, sync.member_id)
        if error is not None:
            self._answers.append(SyncGroupResult(sync.request_id, error[0], message=error[1]))
            return
        group = self.groups[sync.group_id]
        member = group.members[sync.member_id]
        member.expires_ms = self._now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            self._answers.append(SyncGroupResult(sync.request_id, ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.state is GroupState.STABLE:
            self._answers.append(SyncGroupResult(sync.request_id, ErrorCode.NONE, member.assignment))
        else:
            member.sync = sync.request_id
            if sync.member_id == group.leader:
                assignments = dict(sync.assignments)
                for other in group.members.values():
                    other.assignment = assignments.get(other.member_id, b"")
                group.state = GroupState.STABLE
                for other in group.members.values():
                    if other.sync is not None:
                        self._answers.append(SyncGroupResult(other.sync, ErrorCode.NONE, other.assignment))
                        other.sync = None

    def _heartbeat(self, heartbeat: Heartbeat) -> None:
        error = self._member_error(heartbeat.group_id, heartbeat.generation_id, heartbeat.member_id)
        group = self.groups.get(heartbeat.group_id)
        if error is None and group is not None and group.state is GroupState.PREPARING_REBALANCE:
            member = group.members[heartbeat.member_id]
            member.expires_ms = self._now_ms + member.session_timeout_ms
            error = ErrorCode.REBALANCE_IN_PROGRESS, f"group {heartbeat.group_id} is rebalancing; join again"
        elif error is None and group is not None:
            member = group.members[heartbeat.member_id]
            member.expires_ms = self._now_ms + member.session_timeout_ms
        code, message = error or (ErrorCode.NONE, "")
        self._answers.append(GroupResult(heartbeat.request_id, code, message))

    def _leave(self, leave: LeaveGroup) -> None:
        group = self.groups.get(leave.group_id)
        unknown = [member_id for member_id in leave.member_ids if group is None or member_id not in group.members]
        if group is not None:
            for member_id in leave.member_ids:
                if member_id in group.members:
                    self._remove(group, member_id)
        code = ErrorCode.UNKNOWN_MEMBER_ID if unknown else ErrorCode.NONE
        self._answers.append(GroupResult(leave.request_id, code, f"not members: {unknown}" if unknown else ""))

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.join is not None:
            self._answers.append(JoinGroupResult(member.join, ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        if member.sync is not None:
            self._answers.append(SyncGroupResult(member.sync, ErrorCode.UNKNOWN_MEMBER_ID))
        if not group.members and group.state is not GroupState.PREPARING_REBALANCE:
            self._become_empty(group)
        elif group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        self._maybe_complete_rebalance(group)

    # -- time -------------------------------------------------------------------------------------

    def _expire(self) -> None:
        now_ms = self._now_ms
        for group in list(self.groups.values()):
            for member_id, expires_ms in list(group.pending.items()):
                if expires_ms <= now_ms:
                    del group.pending[member_id]
            for member in list(group.members.values()):
                if member.expires_ms <= now_ms and member.join is None:
                    self._remove(group, member.member_id)
            if group.state is GroupState.PREPARING_REBALANCE and group.rebalance_deadline_ms <= now_ms:
                self._maybe_complete_rebalance(group, timed_out=True)

    def _next_tick_ms(self) -> int | None:
        times = [group.rebalance_deadline_ms for group in self.groups.values()]
        times += [member.expires_ms for group in self.groups.values() for member in group.members.values()
                  if member.join is None]
        times += [expires for group in self.groups.values() for expires in group.pending.values()]
        due = min(times, default=NEVER_MS)
        return None if due >= NEVER_MS else due

    def _check_invariants(self) -> None:
        for group in self.groups.values():
            assert (group.state is GroupState.EMPTY) == (not group.members) or group.state is \
                GroupState.PREPARING_REBALANCE, (group.group_id, group.state, len(group.members))
            assert group.state is GroupState.EMPTY or not group.members or group.state is \
                GroupState.PREPARING_REBALANCE or group.leader in group.members, (group.group_id, group.leader)


def _preference(member: Member, name: str) -> int:
    """Higher for a protocol earlier in `member`'s list (ties in votes go to the first member's choice)."""
    names = [protocol for protocol, _ in member.protocols]
    return -names.index(name) if name in names else -len(names)

