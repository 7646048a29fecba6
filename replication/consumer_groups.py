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
- COMPLETING_REBALANCE: the leader's SyncGroup carries the assignment; the group's record (its
  generation, members, subscriptions and assignments) is stored (`StoreGroup` in the Ready), and once
  the write is acknowledged (`GroupStored`) every member's SyncGroup is answered with its part
  (STABLE); a failed write answers them with its error and the group rebalances, as Kafka does. A
  member that leaves or expires meanwhile restarts the rebalance.
- STABLE: a JoinGroup of a known member with the same subscription (a follower) is answered with
  the current generation; one of the leader or with another subscription, or of a new member,
  starts a rebalance. A member silent for its `session_timeout_ms` (heartbeats, joins, syncs)
  is removed and the group rebalances; a LeaveGroup does the same at once. A member whose JoinGroup
  or SyncGroup waits here is not silent (Kafka's shouldKeepAlive): its session restarts when the
  answer goes out, so a slow store of the group's record cannot expire the members waiting on it.
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

DeleteGroups (`DeleteGroup`, Kafka's GroupCoordinator.handleDeleteGroups): a group with members, or
rebalancing, is NON_EMPTY_GROUP (a static member that stopped holds its place until its session
ends); one that is neither held here nor has committed offsets (the owner asks the offsets core) is
GROUP_ID_NOT_FOUND. An Empty group turns Dead (joins and commits are refused, retriably, as Kafka
refuses them for a Dead group) and its tombstone is stored (`StoreGroup` with value None; the
offsets core writes the tombstones of its offsets in the same batch); once acknowledged the group is
forgotten, and a later JoinGroup creates it afresh at generation 0, as Kafka does. Kafka appends the
tombstones without waiting for the ISR ("appended again in the next purge cycle"); here the
DeleteGroups waits for them, so that a deleted group stays deleted after a failover.

`offsets_deletable(group_id, topics, has_offsets)` decides OffsetDelete (Kafka's handleDeleteOffsets):
every topic of an Empty group (or of one with only offsets); of a consumer group with members only
the topics none of them subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for the others). Subscriptions are
the consumer protocol's, opaque here: the owner passes `subscribed_topics(metadata)` to decode them.

`describe(group_id)` and `overview()` are read-only views for DescribeGroups and ListGroups
(replication/group_listing.py merges them with the groups that only have offsets).

Bounds: `group.max.size` members per group (GROUP_MAX_SIZE_REACHED), session timeouts within
[`group.min.session.timeout.ms`, `group.max.session.timeout.ms`] (INVALID_SESSION_TIMEOUT),
`max_groups` groups (an empty group is forgotten to make room, never a group with members).

Group records (replication/group_metadata.py, Kafka's formats) are stored when a generation's
assignment is complete and when a group becomes EMPTY (with its new generation, so that a new
coordinator never hands out a generation again); the owner writes them to the group's
`__consumer_offsets` partition. A new coordinator (a new leader epoch of the partition) `load`s them
before it answers any request.

Static members (`group.instance.id`, KIP-345) join with their instance id and get a member id at
once (no MEMBER_ID_REQUIRED round). One that joins again with an empty member id (a restarted
process) replaces its old member id: in a STABLE group with the same subscription it keeps its
assignment in the same generation, answered once the new id is stored; otherwise the group
rebalances. Requests naming the instance with the old member id are FENCED_INSTANCE_ID. A static
member leaves by its session timeout, or by a LeaveGroup naming its instance id.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from replication.group_metadata import GroupMetadata, MemberMetadata
from wire.error_codes import ErrorCode

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
    # A group being deleted (its tombstone not yet acknowledged), and what DescribeGroups calls a
    # group this coordinator does not hold (Kafka's Dead, the state of a removed group).
    DEAD = "Dead"


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
    group_instance_id: str | None = None  # a static member's (KIP-345)
    client_host: str = ""  # where the JoinGroup came from, for DescribeGroups (Kafka's clientHost)


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
    group_instance_id: str | None = None


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
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    """`member_ids` leave (LeaveGroup v0-2); `members` (v3+) name a static member by its instance id,
    with its member id or "" (Kafka's admin removes a static member by instance id alone)."""

    request_id: int
    group_id: str
    member_ids: tuple[str, ...]
    members: tuple[tuple[str, str], ...] = ()  # (member id or "", group instance id)


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    """DeleteGroups of one group. `has_offsets`: the offsets core holds committed offsets of it (read
    up to the partition's HW), which this core does not see."""

    request_id: int
    group_id: str
    has_offsets: bool


@dataclass(frozen=True, slots=True)
class GroupResult:
    """The answer to a Heartbeat, a LeaveGroup or a DeleteGroup."""

    request_id: int
    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class GroupsTick:
    """Time passed: sessions, rebalance timeouts and initial delays are due."""


@dataclass(frozen=True, slots=True)
class GroupStored:
    """The answer to `StoreGroup` `token`: acknowledged by the ISR (NONE), or the coordinator error."""

    token: int
    error: ErrorCode
    message: str = ""


GroupEvent = JoinGroup | SyncGroup | Heartbeat | LeaveGroup | DeleteGroup | GroupsTick | GroupStored
GroupAnswer = JoinGroupResult | SyncGroupResult | GroupResult


@dataclass(frozen=True, slots=True)
class StoreGroup:
    """Write group `group_id`'s record to its `__consumer_offsets` partition (`value` None: a
    tombstone), acks=all, and answer with `GroupStored(token)`."""

    token: int
    group_id: str
    value: GroupMetadata | None


@dataclass(frozen=True, slots=True)
class GroupsReady:
    """Send `answers` (to the requests they name), carry out `stores`; tick again no later than
    `next_tick_ms`."""

    answers: tuple[GroupAnswer, ...]
    next_tick_ms: int | None
    stores: tuple[StoreGroup, ...] = ()


# -- descriptions (DescribeGroups, ListGroups) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberSummary:
    """One member as DescribeGroups shows it; `metadata` is its subscription for the group's
    protocol and `assignment` what the leader gave it (both empty unless the group is STABLE)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One group as DescribeGroups shows it; `protocol` is the chosen assignor while STABLE, else ""."""

    group_id: str
    state: GroupState
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


@dataclass(frozen=True, slots=True)
class GroupOverview:
    """One group as ListGroups shows it."""

    group_id: str
    protocol_type: str
    state: GroupState


# -- state ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    expires_ms: int
    assignment: bytes = b""
    group_instance_id: str | None = None
    join: int | None = None  # the request id of its JoinGroup waiting for the rebalance
    sync: int | None = None  # the request id of its SyncGroup waiting for the leader's
    client_host: str = ""  # of its first JoinGroup, as Kafka keeps it (for DescribeGroups)

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
    static_members: dict[str, str] = field(default_factory=dict)  # group instance id -> its member id
    pending: dict[str, int] = field(default_factory=dict)  # member ids given out, not yet joined -> expiry
    rebalance_deadline_ms: int = NEVER_MS
    initial_delay_until_ms: int = 0  # a rebalance from EMPTY waits for more members until then
    storing: int | None = None  # COMPLETING_REBALANCE: the token of the store the SyncGroups wait for

    def supported_protocols(self) -> set[str]:
        names = [set(name for name, _ in member.protocols) for member in self.members.values()]
        return set.intersection(*names) if names else set()


def every_topic(metadata: bytes) -> frozenset[str] | None:
    """A subscription not decoded: None, "maybe every topic" (the safe reading for OffsetDelete)."""
    return None


class ConsumerGroups:
    """See the module docstring. One owner; `handle` is the only mutator. `subscribed_topics(metadata)`
    decodes a member's subscription into its topics, None when it cannot (the member then counts as
    subscribed to every topic, as Kafka counts a group whose subscriptions it cannot parse)."""

    def __init__(self, config: GroupsConfig, rng: RandomSource,
                 subscribed_topics: Callable[[bytes], frozenset[str] | None] = every_topic) -> None:
        self.config = config
        self._rng = rng
        self._subscribed_topics = subscribed_topics
        self.groups: dict[str, Group] = {}
        self._answers: list[GroupAnswer] = []
        self._stores: list[StoreGroup] = []
        self._store_tokens = itertools.count(1)
        self._syncs_stored: dict[int, str] = {}  # the token of a generation's store -> its group
        # the token of a static member's replacement store -> (group, member id, leader to answer)
        self._joins_stored: dict[int, tuple[str, str, str]] = {}
        # the token of a deleted group's tombstone -> (group, the DeleteGroup to answer, held before it)
        self._deletes_stored: dict[int, tuple[str, int, bool]] = {}
        self._now_ms = 0

    def load(self, groups: Iterable[tuple[str, GroupMetadata]], now_ms: int) -> None:
        """Take office with the groups as last stored in the partition (Kafka loads them when its
        coordinator is elected). A group with members resumes STABLE in its generation with its
        assignments, each member's session counted from now, so members that keep heartbeating stay
        in their generation without a rebalance; one without members resumes EMPTY. A record that
        does not describe a consistent group (anyone may produce to the topic) loads EMPTY at its
        generation, which still never goes back."""
        assert not self.groups and now_ms >= self._now_ms, (len(self.groups), now_ms, self._now_ms)
        self._now_ms = now_ms
        for group_id, stored in groups:
            group = self.groups[group_id] = Group(group_id, generation_id=stored.generation_id,
                                                  protocol_type=stored.protocol_type)
            ids = [member.member_id for member in stored.members]
            instances = [member.group_instance_id for member in stored.members if member.group_instance_id]
            if not ids or stored.protocol is None or stored.leader not in ids or len(set(ids)) != len(ids) \
                    or len(set(instances)) != len(instances):
                continue
            group.state, group.protocol, group.leader = GroupState.STABLE, stored.protocol, stored.leader
            for member in stored.members:
                group.members[member.member_id] = Member(
                    member.member_id, member.client_id, member.session_timeout_ms, member.rebalance_timeout_ms,
                    ((stored.protocol, member.subscription),), now_ms + member.session_timeout_ms, member.assignment,
                    member.group_instance_id, client_host=member.client_host)
                if member.group_instance_id is not None:
                    group.static_members[member.group_instance_id] = member.member_id
        self._check_invariants()

    # -- the entry point --------------------------------------------------------------------------

    def handle(self, event: GroupEvent, now_ms: int) -> GroupsReady:
        assert now_ms >= self._now_ms, f"time went back: {now_ms} < {self._now_ms}"
        self._now_ms = now_ms
        self._answers, self._stores = [], []
        if isinstance(event, JoinGroup):
            self._join(event)
        elif isinstance(event, SyncGroup):
            self._sync(event)
        elif isinstance(event, Heartbeat):
            self._heartbeat(event)
        elif isinstance(event, LeaveGroup):
            self._leave(event)
        elif isinstance(event, DeleteGroup):
            self._delete(event)
        elif isinstance(event, GroupStored):
            self._stored(event)
        else:
            assert isinstance(event, GroupsTick), f"not a group event: {event!r}"
        self._expire()
        self._check_invariants()
        answers, stores, self._answers, self._stores = tuple(self._answers), tuple(self._stores), [], []
        return GroupsReady(answers, self._next_tick_ms(), stores)

    def commit_error(self, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None = None) -> tuple[ErrorCode, str]:
        """Whether an OffsetCommit with this generation and member may write (module docstring)."""
        group = self.groups.get(group_id)
        if group is not None and group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id} is being deleted; retry"
        if generation_id < 0 and member_id == UNKNOWN_MEMBER:
            if group is None or not group.members:
                return ErrorCode.NONE, ""
            return ErrorCode.UNKNOWN_MEMBER_ID, (f"group {group_id} has members: a commit needs the committing "
                                                 "member's id and generation")
        error = self._member_error(group_id, generation_id, member_id, group_instance_id)
        if error is not None:
            return error
        assert group is not None
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id} is rebalancing; join again, then commit"
        return ErrorCode.NONE, ""

    def offsets_deletable(self, group_id: str, topics: Iterable[str],
                          has_offsets: bool) -> tuple[ErrorCode, str, frozenset[str]]:
        """OffsetDelete (module docstring): the group's error, else the topics refused because a member
        subscribes to them (GROUP_SUBSCRIBED_TO_TOPIC); the partitions of the others may go."""
        group = self.groups.get(group_id)
        if (group is None and not has_offsets) or (group is not None and group.state is GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist", frozenset()
        if group is None or group.state is GroupState.EMPTY:
            return ErrorCode.NONE, "", frozenset()
        if group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP, (f"group {group_id} has members of protocol type "
                                               f"{group.protocol_type!r}, whose topics are not known"), frozenset()
        subscribed = self._subscriptions(group)
        wanted = frozenset(topics)
        return ErrorCode.NONE, "", wanted if subscribed is None else wanted & subscribed

    def _subscriptions(self, group: Group) -> frozenset[str] | None:
        """The topics any member subscribes to, by every protocol it offered (the one the next
        generation chooses is not known while it rebalances); None: maybe every topic."""
        topics: set[str] = set()
        for member in group.members.values():
            for _, metadata in member.protocols:
                decoded = self._subscribed_topics(metadata)
                if decoded is None:
                    return None
                topics |= decoded
        return frozenset(topics)

    def describe(self, group_id: str) -> GroupSummary | None:
        """The group as it stands (None: not held here). Protocol, subscriptions and assignments only
        while STABLE, as Kafka's GroupMetadata.summary: before, the assignment being made is not final."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        stable = group.state is GroupState.STABLE
        members = tuple(MemberSummary(member.member_id, member.group_instance_id, member.client_id, member.client_host,
                                      member.subscription(group.protocol) if stable else b"",
                                      member.assignment if stable else b"")
                        for member in group.members.values())
        return GroupSummary(group_id, group.state, group.protocol_type, group.protocol if stable else "", members)

    def overview(self) -> tuple[GroupOverview, ...]:
        """Every group held here, by group id (ListGroups)."""
        return tuple(GroupOverview(group_id, group.protocol_type, group.state)
                     for group_id, group in sorted(self.groups.items()))

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
        member_id = join.member_id
        if member_id == UNKNOWN_MEMBER:
            if join.group_instance_id in group.static_members:
                self._replace_static_member(group, join)
                return
            if join.group_instance_id is None:
                member_id = f"{join.client_id}-{self._rng.getrandbits(64):016x}"
                group.pending[member_id] = self._now_ms + join.session_timeout_ms
                self._answers.append(JoinGroupResult(join.request_id, ErrorCode.MEMBER_ID_REQUIRED,
                                                     member_id=member_id,
                                                     message="join again with this member id (KIP-394)"))
                return
            # KIP-345: a static member is known by its instance id; it joins at once, with no second round.
            member_id = f"{join.group_instance_id}-{self._rng.getrandbits(64):016x}"
        member = group.members.get(member_id)
        if member is None:
            group.pending.pop(member_id, None)
            member = group.members[member_id] = Member(
                member_id, join.client_id, join.session_timeout_ms, join.rebalance_timeout_ms, join.protocols,
                self._now_ms + join.session_timeout_ms, group_instance_id=join.group_instance_id,
                client_host=join.client_host)
            if join.group_instance_id is not None:
                group.static_members[join.group_instance_id] = member_id
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
        if group.state is GroupState.DEAD:  # Kafka: the member looks for its coordinator again, then joins
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {join.group_id} is being deleted; retry"
        fenced = _fenced(group, join.member_id, join.group_instance_id) if join.member_id != UNKNOWN_MEMBER else None
        if fenced is not None:
            return fenced
        known = join.member_id in group.members or join.member_id in group.pending \
            or join.group_instance_id in group.static_members
        if join.member_id != UNKNOWN_MEMBER and not known:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"{join.member_id!r} is not a member of group {join.group_id}"
        if group.members and (join.protocol_type != group.protocol_type or not (
                group.supported_protocols() & {name for name, _ in join.protocols})):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL, (
                f"group {join.group_id} runs {group.protocol_type} protocols {sorted(group.supported_protocols())}")
        if not known and len(group.members) + len(group.pending) >= config.group_max_size:
            return ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {join.group_id} has group.max.size members"
        return None

    def _replace_static_member(self, group: Group, join: JoinGroup) -> None:
        """KIP-345: a static member that joins again with an empty member id (a restarted process) takes
        its old place under a new member id; the old id is fenced (FENCED_INSTANCE_ID). In a stable
        group with its subscription unchanged it keeps its assignment with no rebalance, once the new id
        is stored (Kafka answers the JoinGroup with the current generation and the previous leader
        id, so a former leader does not assign again); otherwise the group rebalances."""
        instance = join.group_instance_id
        assert instance is not None
        old = group.members[group.static_members[instance]]
        replaced = f"instance {instance} joined again as another member"
        if old.join is not None:
            self._answers.append(JoinGroupResult(old.join, ErrorCode.FENCED_INSTANCE_ID, message=replaced))
        if old.sync is not None:
            self._answers.append(SyncGroupResult(old.sync, ErrorCode.FENCED_INSTANCE_ID, message=replaced))
        member_id = f"{instance}-{self._rng.getrandbits(64):016x}"
        member = Member(member_id, join.client_id, join.session_timeout_ms, join.rebalance_timeout_ms, join.protocols,
                        self._now_ms + join.session_timeout_ms, old.assignment, instance, join.request_id,
                        client_host=join.client_host)
        group.members = {(member_id if key == old.member_id else key): (member if key == old.member_id else value)
                         for key, value in group.members.items()}
        group.static_members[instance] = member_id
        shown_leader = group.leader
        if group.leader == old.member_id:
            group.leader = member_id
        if group.state is GroupState.STABLE and old.protocols == join.protocols:
            token = self._store(group)
            self._joins_stored[token] = (group.group_id, member_id, shown_leader)
        elif group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        self._maybe_complete_rebalance(group)

    def _evict_empty_group(self) -> bool:
        """Make room: forget a group with no members (kept until then, so that its generations
        never repeat while its former members may still send them)."""
        for group_id, group in self.groups.items():
            if group.state is GroupState.EMPTY and not group.pending:
                del self.groups[group_id]
                return True
        return False

    def _prepare_rebalance(self, group: Group) -> None:
        group.storing = None  # a store in flight for the abandoned generation is ignored when answered
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():  # their SyncGroups wait in vain: they join again
                if member.sync is not None:
                    self._answers.append(SyncGroupResult(member.sync, ErrorCode.REBALANCE_IN_PROGRESS))
                    member.sync = None
                    member.expires_ms = self._now_ms + member.session_timeout_ms
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
            # Did not join within the rebalance timeout. (Kafka keeps a static member's place until its
            # session ends; here it goes, and joins again with its instance id as a new member.)
            _forget(group, member.member_id)
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
        """Kafka stores an Empty group with its new generation, so a new coordinator never hands out
        a generation its former members may still hold; nothing waits for that write."""
        group.state = GroupState.EMPTY
        group.generation_id += 1
        group.leader = group.protocol = ""
        group.rebalance_deadline_ms = NEVER_MS
        group.storing = None  # the last member went while its generation was being stored
        self._store(group)

    def _store(self, group: Group) -> int:
        token = next(self._store_tokens)
        members = tuple(MemberMetadata(member.member_id, member.group_instance_id, member.client_id, member.client_host,
                                       member.rebalance_timeout_ms, member.session_timeout_ms,
                                       member.subscription(group.protocol), member.assignment)
                        for member in group.members.values())
        self._stores.append(StoreGroup(token, group.group_id, GroupMetadata(
            group.protocol_type, group.generation_id, group.protocol or None, group.leader or None, members)))
        return token

    # -- SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------------------

    def _member_error(self, group_id: str, generation_id: int, member_id: str,
                      group_instance_id: str | None) -> tuple[ErrorCode, str] | None:
        group = self.groups.get(group_id)
        fenced = _fenced(group, member_id, group_instance_id)
        if fenced is not None:
            return fenced
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member of group {group_id}; join again"
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, (f"generation {generation_id} is not group {group_id}'s "
                                                  f"{group.generation_id}; join again")
        return None

    def _sync(self, sync: SyncGroup) -> None:
        error = self._member_error(sync.group_id, sync.generation_id, sync.member_id, sync.group_instance_id)
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
            if member.sync is not None:  # an earlier SyncGroup of it still waits: this one replaces it
                self._answers.append(SyncGroupResult(member.sync, ErrorCode.REBALANCE_IN_PROGRESS,
                                                     message="superseded by a later SyncGroup of this member"))
            member.sync = sync.request_id
            if sync.member_id == group.leader and group.storing is None:
                # Kafka stores the generation's assignment before any member gets its part: a new
                # coordinator after a failover then resumes the group as its members know it.
                assignments = dict(sync.assignments)
                for other in group.members.values():
                    other.assignment = assignments.get(other.member_id, b"")
                group.storing = self._store(group)
                self._syncs_stored[group.storing] = group.group_id

    def _stored(self, stored: GroupStored) -> None:
        if stored.token in self._joins_stored:
            self._static_member_stored(stored)
            return
        if stored.token in self._deletes_stored:
            self._deleted(stored)
            return
        group = self.groups.get(self._syncs_stored.pop(stored.token, ""))
        if group is None or group.storing != stored.token:
            return  # an Empty group's record, or a generation abandoned since
        group.storing = None
        if stored.error == ErrorCode.NONE:
            group.state = GroupState.STABLE
            for member in group.members.values():
                if member.sync is not None:
                    self._answers.append(SyncGroupResult(member.sync, ErrorCode.NONE, member.assignment))
                    member.sync = None
                    member.expires_ms = self._now_ms + member.session_timeout_ms
            return
        # Kafka: the members hear the write's error (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) and
        # join again; the group rebalances.
        for member in group.members.values():
            member.assignment = b""
            if member.sync is not None:
                self._answers.append(SyncGroupResult(member.sync, stored.error, message=stored.message))
                member.sync = None
                member.expires_ms = self._now_ms + member.session_timeout_ms
        self._prepare_rebalance(group)

    def _static_member_stored(self, stored: GroupStored) -> None:
        """A replaced static member's JoinGroup is answered once its new id is stored, unless a
        rebalance has taken it over since (it is answered by the rebalance)."""
        group_id, member_id, shown_leader = self._joins_stored.pop(stored.token)
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or member.join is None or group.state is not GroupState.STABLE:
            return
        if stored.error == ErrorCode.NONE:
            self._answers.append(JoinGroupResult(member.join, ErrorCode.NONE, group.generation_id, group.protocol,
                                                 shown_leader, member_id))
        else:  # it joins again with an empty member id and takes its place again
            self._answers.append(JoinGroupResult(member.join, stored.error, message=stored.message))
        member.join = None
        member.expires_ms = self._now_ms + member.session_timeout_ms

    def _heartbeat(self, heartbeat: Heartbeat) -> None:
        error = self._member_error(heartbeat.group_id, heartbeat.generation_id, heartbeat.member_id,
                                   heartbeat.group_instance_id)
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
        errors: list[tuple[ErrorCode, str]] = []
        leaving = list(leave.member_ids)
        for member_id, instance in leave.members:  # KIP-345: by instance id, its member id if given
            fenced = _fenced(group, member_id, instance) if member_id != UNKNOWN_MEMBER else None
            if fenced is not None:
                errors.append(fenced)
            elif group is None or instance not in group.static_members:
                errors.append((ErrorCode.UNKNOWN_MEMBER_ID, f"instance {instance} is not in group {leave.group_id}"))
            else:
                leaving.append(group.static_members[instance])
        unknown = [member_id for member_id in leaving if group is None or member_id not in group.members]
        if unknown:
            errors.append((ErrorCode.UNKNOWN_MEMBER_ID, f"not members: {unknown}"))
        if group is not None:
            for member_id in dict.fromkeys(leaving):
                if member_id in group.members:
                    self._remove(group, member_id)
        code, message = errors[0] if errors else (ErrorCode.NONE, "")
        self._answers.append(GroupResult(leave.request_id, code, message))

    def _remove(self, group: Group, member_id: str) -> None:
        member = _forget(group, member_id)
        if member.join is not None:
            self._answers.append(JoinGroupResult(member.join, ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        if member.sync is not None:
            self._answers.append(SyncGroupResult(member.sync, ErrorCode.UNKNOWN_MEMBER_ID))
        if not group.members and group.state is not GroupState.PREPARING_REBALANCE:
            self._become_empty(group)
        elif group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        self._maybe_complete_rebalance(group)

    # -- DeleteGroups -----------------------------------------------------------------------------

    def _delete(self, delete: DeleteGroup) -> None:
        group = self.groups.get(delete.group_id)
        if (group is None and not delete.has_offsets) or (group is not None and group.state is GroupState.DEAD):
            self._answers.append(GroupResult(delete.request_id, ErrorCode.GROUP_ID_NOT_FOUND,
                                             f"group {delete.group_id} does not exist"))
            return
        if group is not None and group.state is not GroupState.EMPTY:
            self._answers.append(GroupResult(delete.request_id, ErrorCode.NON_EMPTY_GROUP, (
                f"group {delete.group_id} has members ({group.state.value}); stop its consumers first (a static "
                "member holds its place until its session.timeout.ms ends)")))
            return
        held = group is not None
        if group is None:  # only offsets: held Dead while its tombstones are written, to fence commits
            group = self.groups[delete.group_id] = Group(delete.group_id)
        group.state = GroupState.DEAD
        group.pending.clear()  # a member id given out and not yet used: it joins again from scratch
        token = next(self._store_tokens)
        self._stores.append(StoreGroup(token, delete.group_id, None))
        self._deletes_stored[token] = (delete.group_id, delete.request_id, held)

    def _deleted(self, stored: GroupStored) -> None:
        """The tombstone is acknowledged: the group is gone. A JoinGroup creates it again from
        generation 0 (Kafka's new GroupMetadata). Generations never repeat for a live group; this one
        had no members left, and a former member's late request names a member id drawn at random,
        which the new group never gives out again, so it is still refused (UNKNOWN_MEMBER_ID). A failed
        write leaves the group as it was (one with only offsets is again not held here)."""
        group_id, request_id, held = self._deletes_stored.pop(stored.token)
        group = self.groups[group_id]
        assert group.state is GroupState.DEAD, (group_id, group.state)
        if stored.error == ErrorCode.NONE or not held:
            del self.groups[group_id]
        else:
            group.state = GroupState.EMPTY
        self._answers.append(GroupResult(request_id, stored.error, stored.message))

    # -- time -------------------------------------------------------------------------------------

    def _expire(self) -> None:
        now_ms = self._now_ms
        for group in list(self.groups.values()):
            for member_id, expires_ms in list(group.pending.items()):
                if expires_ms <= now_ms:
                    del group.pending[member_id]
            for member in list(group.members.values()):
                if member.expires_ms <= now_ms and member.join is None and member.sync is None:
                    self._remove(group, member.member_id)
            if group.state is GroupState.PREPARING_REBALANCE and group.rebalance_deadline_ms <= now_ms:
                self._maybe_complete_rebalance(group, timed_out=True)

    def _next_tick_ms(self) -> int | None:
        times = [group.rebalance_deadline_ms for group in self.groups.values()]
        times += [member.expires_ms for group in self.groups.values() for member in group.members.values()
                  if member.join is None and member.sync is None]
        times += [expires for group in self.groups.values() for expires in group.pending.values()]
        due = min(times, default=NEVER_MS)
        return None if due >= NEVER_MS else due

    def _check_invariants(self) -> None:
        for group in self.groups.values():
            assert group.storing is None or group.state is GroupState.COMPLETING_REBALANCE, (
                group.group_id, group.state, group.storing)
            for instance, member_id in group.static_members.items():
                assert group.members[member_id].group_instance_id == instance, (group.group_id, instance, member_id)
            assert len(group.static_members) == sum(1 for member in group.members.values()
                                                    if member.group_instance_id is not None), group.group_id
            assert (group.state in (GroupState.EMPTY, GroupState.DEAD)) == (not group.members) or group.state is \
                GroupState.PREPARING_REBALANCE, (group.group_id, group.state, len(group.members))
            assert group.state is not GroupState.DEAD or not group.pending, group.group_id
            assert group.state is GroupState.EMPTY or not group.members or group.state is \
                GroupState.PREPARING_REBALANCE or group.leader in group.members, (group.group_id, group.leader)


def _fenced(group: Group | None, member_id: str, group_instance_id: str | None) -> tuple[ErrorCode, str] | None:
    """KIP-345: a request naming a static member's instance id with another member id comes from a
    process that instance has replaced since."""
    if group is None or group_instance_id is None:
        return None
    current = group.static_members.get(group_instance_id)
    if current is None or current == member_id:
        return None
    return ErrorCode.FENCED_INSTANCE_ID, (f"instance {group_instance_id} of group {group.group_id} has joined as "
                                         "another member since; this consumer was replaced (two consumers with one "
                                         "group.instance.id?)")


def _forget(group: Group, member_id: str) -> Member:
    member = group.members.pop(member_id)
    if member.group_instance_id is not None:
        del group.static_members[member.group_instance_id]
    return member


def _preference(member: Member, name: str) -> int:
    """Higher for a protocol earlier in `member`'s list (ties in votes go to the first member's choice)."""
    names = [protocol for protocol, _ in member.protocols]
    return -names.index(name) if name in names else -len(names)

