"""The consumer-group membership core (Kafka's classic protocol): joins with member ids given out,
generations, the leader's assignment handed out by SyncGroup, rebalances on join, leave, session
expiry and rebalance timeout, the initial rebalance delay, OffsetCommit fencing. A state-machine
test drives clients that follow the protocol, and some that fall silent, and checks that no
generation ever hands out two assignments and every member of a stable generation has one."""

from __future__ import annotations

import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from replication.consumer_groups import (
    ConsumerGroups,
    GroupResult,
    GroupsConfig,
    GroupState,
    GroupsTick,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    SyncGroup,
    SyncGroupResult,
)
from storage.error_codes import ErrorCode

SESSION_MS = 10_000
REBALANCE_MS = 30_000
CONFIG = GroupsConfig(group_initial_rebalance_delay_ms=0)
PROTOCOLS = (("range", b"sub:orders"),)


class Coordinator:
    """The core, a clock and numbered requests; each call returns the answers its Ready had."""

    def __init__(self, config: GroupsConfig = CONFIG) -> None:
        self.core = ConsumerGroups(config, random.Random(1))
        self.now_ms = 0
        self.next_id = 0
        self.answers: dict[int, object] = {}

    def send(self, make: type, *fields: object) -> int:
        self.next_id += 1
        self._take(self.core.handle(make(self.next_id, *fields), self.now_ms))
        return self.next_id

    def tick(self, advance_ms: int) -> None:
        self.now_ms += advance_ms
        self._take(self.core.handle(GroupsTick(), self.now_ms))

    def _take(self, ready) -> None:  # type: ignore[no-untyped-def]
        for answer in ready.answers:
            assert answer.request_id not in self.answers, f"request {answer.request_id} answered twice"
            self.answers[answer.request_id] = answer

    def join(self, member_id: str = "", group: str = "g", protocols: tuple = PROTOCOLS) -> int:
        return self.send(JoinGroup, group, member_id, "client", SESSION_MS, REBALANCE_MS, "consumer", protocols)

    def new_member(self, group: str = "g") -> tuple[str, int]:
        """A member joining from scratch: its id (MEMBER_ID_REQUIRED) and the request of its real join."""
        first = self.answers[self.join(group=group)]
        assert isinstance(first, JoinGroupResult) and first.error == ErrorCode.MEMBER_ID_REQUIRED
        return first.member_id, self.join(first.member_id, group)

    def state(self, group: str = "g") -> GroupState:
        return self.core.groups[group].state


def test_members_join_one_generation_and_the_leader_assigns() -> None:
    coordinator = Coordinator()
    one, join_one = coordinator.new_member()
    first = coordinator.answers[join_one]
    assert isinstance(first, JoinGroupResult) and (first.error, first.generation_id, first.leader) == (
        ErrorCode.NONE, 1, one)
    two, join_two = coordinator.new_member()
    assert join_two not in coordinator.answers, "a new member starts a rebalance: its join waits"
    heartbeat = coordinator.send(Heartbeat, "g", 1, one)
    assert coordinator.answers[heartbeat].error == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = coordinator.join(one)
    leader, follower = coordinator.answers[rejoin], coordinator.answers[join_two]
    assert (leader.generation_id, leader.leader, leader.protocol_name) == (2, one, "range")
    assert leader.members == ((one, b"sub:orders"), (two, b"sub:orders")) and follower.members == ()
    follower_sync = coordinator.send(SyncGroup, "g", 2, two, ())
    assert follower_sync not in coordinator.answers, "a follower's sync waits for the leader's"
    assert coordinator.core.commit_error("g", 2, two)[0] == ErrorCode.REBALANCE_IN_PROGRESS, \
        "no commit before the member knows its partitions"
    leader_sync = coordinator.send(SyncGroup, "g", 2, one, ((one, b"p0"), (two, b"p1")))
    assert (coordinator.answers[leader_sync].assignment, coordinator.answers[follower_sync].assignment) == (
        b"p0", b"p1")
    assert coordinator.state() is GroupState.STABLE
    assert coordinator.core.commit_error("g", 2, two) == (ErrorCode.NONE, "")


def test_members_starting_together_join_one_generation_after_the_initial_delay() -> None:
    coordinator = Coordinator(GroupsConfig(group_initial_rebalance_delay_ms=3_000))
    _, join_one = coordinator.new_member()
    coordinator.tick(1_000)
    _, join_two = coordinator.new_member()
    assert join_one not in coordinator.answers and join_two not in coordinator.answers
    coordinator.tick(2_000)
    assert coordinator.answers[join_one].generation_id == coordinator.answers[join_two].generation_id == 1


def stable_pair(coordinator: Coordinator) -> tuple[str, str]:
    one, _ = coordinator.new_member()
    two, join_two = coordinator.new_member()
    coordinator.join(one)
    generation = coordinator.answers[join_two].generation_id
    coordinator.send(SyncGroup, "g", generation, two, ())
    coordinator.send(SyncGroup, "g", generation, one, ((one, b"a"), (two, b"b")))
    assert coordinator.state() is GroupState.STABLE
    return one, two


def test_a_silent_member_is_removed_after_its_session_and_the_group_rebalances() -> None:
    coordinator = Coordinator()
    one, two = stable_pair(coordinator)
    for _ in range(3):
        coordinator.tick(SESSION_MS // 2)
        coordinator.send(Heartbeat, "g", 2, one)  # two falls silent
    assert two not in coordinator.core.groups["g"].members
    assert coordinator.state() is GroupState.PREPARING_REBALANCE
    assert coordinator.core.commit_error("g", 2, two)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    rejoin = coordinator.join(one)
    answer = coordinator.answers[rejoin]
    assert (answer.generation_id, answer.members) == (3, ((one, b"sub:orders"),))


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed() -> None:
    coordinator = Coordinator()
    one, two = stable_pair(coordinator)
    _, join_three = coordinator.new_member()
    rejoin_one = coordinator.join(one)
    coordinator.tick(SESSION_MS - 1)
    coordinator.send(Heartbeat, "g", 2, two)  # alive, but never joins again
    coordinator.tick(REBALANCE_MS)
    answer = coordinator.answers[rejoin_one]
    assert answer.generation_id == 3 and [member for member, _ in answer.members] == [one, coordinator.answers[
        join_three].member_id]


def test_leaving_rebalances_at_once_and_a_stale_member_is_fenced() -> None:
    coordinator = Coordinator()
    one, two = stable_pair(coordinator)
    assert coordinator.answers[coordinator.send(LeaveGroup, "g", (two,))].error == ErrorCode.NONE
    assert coordinator.state() is GroupState.PREPARING_REBALANCE
    assert coordinator.core.commit_error("g", 2, one) == (ErrorCode.NONE, ""), \
        "the generation's owners commit before giving their partitions up (Kafka, KIP-429)"
    coordinator.join(one)
    assert coordinator.core.commit_error("g", 2, one)[0] == ErrorCode.ILLEGAL_GENERATION, \
        "a commit of the old generation cannot overwrite the new owner's offsets"
    assert coordinator.answers[coordinator.send(Heartbeat, "g", 2, one)].error == ErrorCode.ILLEGAL_GENERATION


def test_a_stable_follower_joining_again_with_the_same_subscription_keeps_the_generation() -> None:
    coordinator = Coordinator()
    _, two = stable_pair(coordinator)
    answer = coordinator.answers[coordinator.join(two)]
    assert (answer.error, answer.generation_id) == (ErrorCode.NONE, 2) and coordinator.state() is GroupState.STABLE


def test_commits_without_a_generation_go_only_to_groups_without_members() -> None:
    coordinator = Coordinator()
    assert coordinator.core.commit_error("solo", -1, "") == (ErrorCode.NONE, "")
    stable_pair(coordinator)
    assert coordinator.core.commit_error("g", -1, "")[0] == ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(("join", "error"), [
    (JoinGroup(1, "", "", "c", SESSION_MS, REBALANCE_MS, "consumer", PROTOCOLS), ErrorCode.INVALID_GROUP_ID),
    (JoinGroup(1, "g", "", "c", 10, REBALANCE_MS, "consumer", PROTOCOLS), ErrorCode.INVALID_SESSION_TIMEOUT),
    (JoinGroup(1, "g", "", "c", SESSION_MS, REBALANCE_MS, "consumer", ()), ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    (JoinGroup(1, "g", "made-up", "c", SESSION_MS, REBALANCE_MS, "consumer", PROTOCOLS), ErrorCode.UNKNOWN_MEMBER_ID),
    (JoinGroup(1, "g", "", "c", SESSION_MS, REBALANCE_MS, "connect", PROTOCOLS), ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
])
def test_joins_that_break_the_rules_are_refused(join: JoinGroup, error: ErrorCode) -> None:
    coordinator = Coordinator()
    stable_pair(coordinator)
    (answer,) = coordinator.core.handle(join, coordinator.now_ms).answers
    assert isinstance(answer, JoinGroupResult) and answer.error == error


def test_a_full_group_refuses_new_members() -> None:
    coordinator = Coordinator(GroupsConfig(group_initial_rebalance_delay_ms=0, group_max_size=2))
    stable_pair(coordinator)
    assert coordinator.answers[coordinator.join()].error == ErrorCode.GROUP_MAX_SIZE_REACHED


# -- the state machine -----------------------------------------------------------------------------


class Client:
    """A consumer that follows the protocol: joins, syncs (as leader it assigns one slot per
    member), heartbeats, and joins again when told to."""

    def __init__(self) -> None:
        self.member_id = ""
        self.generation = -1
        self.waiting: int | None = None  # a join or sync in flight
        self.silent = False


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.coordinator = Coordinator()
        self.clients = [Client() for _ in range(4)]
        self.handed_out: dict[int, dict[str, bytes]] = {}  # generation -> member -> assignment

    @rule(index=st.integers(0, 3))
    def act(self, index: int) -> None:
        client = self.clients[index]
        coordinator = self.coordinator
        if client.silent:
            return
        if client.waiting is not None:
            answer = coordinator.answers.get(client.waiting)
            if answer is None:
                return
            client.waiting = None
            self._take(client, answer)
            return
        if client.generation < 0:
            client.waiting = coordinator.join(client.member_id)
            self._take_if_answered(client)
        else:
            heartbeat = coordinator.send(Heartbeat, "g", client.generation, client.member_id)
            if coordinator.answers[heartbeat].error != ErrorCode.NONE:
                client.generation = -1

    def _take_if_answered(self, client: Client) -> None:
        if client.waiting in self.coordinator.answers:
            answer = self.coordinator.answers[client.waiting]
            client.waiting = None
            self._take(client, answer)

    def _take(self, client: Client, answer: object) -> None:
        coordinator = self.coordinator
        if isinstance(answer, JoinGroupResult):
            client.member_id = answer.member_id if answer.error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED) \
                else ""
            if answer.error != ErrorCode.NONE:
                return
            assignments = tuple((member, b"slot-%d" % slot) for slot, (member, _) in enumerate(answer.members))
            client.generation = answer.generation_id
            client.waiting = coordinator.send(SyncGroup, "g", answer.generation_id, client.member_id, assignments)
            self._take_if_answered(client)
        elif isinstance(answer, SyncGroupResult):
            if answer.error != ErrorCode.NONE:
                client.generation = -1
                return
            handed = self.handed_out.setdefault(client.generation, {})
            handed[client.member_id] = answer.assignment
            assert len(set(handed.values())) == len(handed), f"generation {client.generation} hands out {handed}"
        else:
            assert isinstance(answer, GroupResult)

    @rule(index=st.integers(0, 3))
    def fall_silent_or_wake(self, index: int) -> None:
        self.clients[index].silent = not self.clients[index].silent

    @rule(index=st.integers(0, 3))
    def leave(self, index: int) -> None:
        client = self.clients[index]
        if client.member_id and client.waiting is None:
            self.coordinator.send(LeaveGroup, "g", (client.member_id,))
            client.member_id, client.generation = "", -1

    @rule(advance_ms=st.sampled_from((100, 3_000, SESSION_MS, REBALANCE_MS)))
    def time_passes(self, advance_ms: int) -> None:
        self.coordinator.tick(advance_ms)

    @invariant()
    def a_stable_generation_assigned_every_member(self) -> None:
        group = self.coordinator.core.groups.get("g")
        if group is not None and group.state is GroupState.STABLE:
            members = set(group.members)
            assert all(group.members[member].assignment for member in members if len(members) > 0)
            assert len({group.members[member].assignment for member in members}) == len(members)


GroupMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
test_group_state_machine = GroupMachine.TestCase
