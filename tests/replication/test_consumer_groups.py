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
    DeleteGroup,
    GroupAnswer,
    GroupOverview,
    GroupResult,
    GroupsConfig,
    GroupState,
    GroupsTick,
    GroupStored,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    MemberSummary,
    StoreGroup,
    SyncGroup,
    SyncGroupResult,
)
from replication.group_listing import dead_group, merge_overviews
from replication.group_metadata import GroupMetadata, MemberMetadata
from wire.error_codes import ErrorCode

SESSION_MS = 10_000
REBALANCE_MS = 30_000
CONFIG = GroupsConfig(group_initial_rebalance_delay_ms=0)
PROTOCOLS = (("range", b"sub:orders"),)


class Coordinator:
    """The core, a clock and numbered requests; each call returns the answers its Ready had. The
    group records the core stores are acknowledged at once (`acks_stores`), or when told;
    `stored` holds each group's last acknowledged record, as a replay of the partition finds it."""

    def __init__(self, config: GroupsConfig = CONFIG, acks_stores: bool = True) -> None:
        self.core = ConsumerGroups(config, random.Random(1))
        self.now_ms = 0
        self.next_id = 0
        self.answers: dict[int, GroupAnswer] = {}
        self.acks_stores = acks_stores
        self.pending_stores: list[StoreGroup] = []
        self.stored: dict[str, GroupMetadata | None] = {}

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
        self.pending_stores.extend(ready.stores)
        if self.acks_stores:
            self.ack_stores()

    def ack_stores(self, error: ErrorCode = ErrorCode.NONE) -> None:
        """Answer the stores in flight, in the order they were asked (the partition appends them so)."""
        while self.pending_stores:
            store = self.pending_stores.pop(0)
            if error == ErrorCode.NONE:
                self.stored[store.group_id] = store.value
            self._take(self.core.handle(GroupStored(store.token, error), self.now_ms))

    def join(self, member_id: str = "", group: str = "g", protocols: tuple = PROTOCOLS,
             instance: str | None = None) -> int:
        return self.send(JoinGroup, group, member_id, "client", SESSION_MS, REBALANCE_MS, "consumer", protocols,
                         instance)

    def fail_over(self, land: bool) -> None:
        """A new coordinator takes office: it loads what the partition holds. The stores in flight
        were written before the old one died (`land`), or not; nothing answers them."""
        if land:
            for store in self.pending_stores:
                self.stored[store.group_id] = store.value
        self.pending_stores = []
        self.core = ConsumerGroups(self.core.config, random.Random(self.now_ms))
        self.core.load([(group, value) for group, value in self.stored.items() if value is not None], self.now_ms)

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
    assert coordinator.core.commit_error("g", 2, one)[0] == ErrorCode.REBALANCE_IN_PROGRESS, \
        "no commit between the join and the assignment of a generation"
    follower_sync = coordinator.send(SyncGroup, "g", 2, two, ())
    assert follower_sync not in coordinator.answers, "a follower's sync waits for the leader's"
    assert coordinator.core.commit_error("g", 2, two)[0] == ErrorCode.REBALANCE_IN_PROGRESS, \
        "no commit before the member knows its partitions"
    leader_sync = coordinator.send(SyncGroup, "g", 2, one, ((one, b"p0"), (two, b"p1")))
    assert (coordinator.answers[leader_sync].assignment, coordinator.answers[follower_sync].assignment) == (
        b"p0", b"p1")
    assert coordinator.state() is GroupState.STABLE
    assert coordinator.core.commit_error("g", 2, two) == (ErrorCode.NONE, "")


def test_the_syncs_are_answered_once_the_generations_record_is_stored() -> None:
    """Kafka writes the group (members, subscriptions, assignments) when the leader's SyncGroup
    arrives and answers the SyncGroups only once the write is acknowledged."""
    coordinator = Coordinator(acks_stores=False)
    one, two = stable_pair(coordinator, acked=False)
    (store,) = coordinator.pending_stores
    assert store.value == GroupMetadata("consumer", 2, "range", one, (
        MemberMetadata(one, None, "client", "", REBALANCE_MS, SESSION_MS, b"sub:orders", b"a"),
        MemberMetadata(two, None, "client", "", REBALANCE_MS, SESSION_MS, b"sub:orders", b"b")))
    assert coordinator.state() is GroupState.COMPLETING_REBALANCE
    assert not [answer for answer in coordinator.answers.values() if isinstance(answer, SyncGroupResult)]
    assert coordinator.core.commit_error("g", 2, one)[0] == ErrorCode.REBALANCE_IN_PROGRESS
    coordinator.ack_stores()
    assert coordinator.state() is GroupState.STABLE
    assert [answer.assignment for answer in coordinator.answers.values() if isinstance(answer, SyncGroupResult)] \
        == [b"a", b"b"]


def test_members_waiting_on_a_slow_store_are_not_expired_and_their_sessions_restart_with_the_answer() -> None:
    """Kafka's shouldKeepAlive: a member whose SyncGroup waits at the coordinator is not silent
    (the group simulation livelocked when stores outlasted sessions)."""
    coordinator = Coordinator(acks_stores=False)
    one, two = stable_pair(coordinator, acked=False)
    coordinator.tick(2 * SESSION_MS)
    assert set(coordinator.core.groups["g"].members) == {one, two}
    coordinator.ack_stores()
    assert coordinator.state() is GroupState.STABLE
    coordinator.tick(SESSION_MS - 1)
    assert set(coordinator.core.groups["g"].members) == {one, two}, "sessions count from the answer"
    coordinator.tick(1)
    assert coordinator.core.groups["g"].members == {}


def test_a_failed_store_fails_the_syncs_and_the_members_join_again() -> None:
    coordinator = Coordinator(acks_stores=False)
    one, _ = stable_pair(coordinator, acked=False)
    coordinator.ack_stores(ErrorCode.NOT_COORDINATOR)
    syncs = [answer for answer in coordinator.answers.values() if isinstance(answer, SyncGroupResult)]
    assert [answer.error for answer in syncs] == [ErrorCode.NOT_COORDINATOR] * 2
    assert coordinator.state() is GroupState.PREPARING_REBALANCE and coordinator.stored == {}
    assert coordinator.core.commit_error("g", 1, one)[0] == ErrorCode.ILLEGAL_GENERATION, \
        "the generation whose store failed still fences the one before"


def test_a_group_left_empty_is_stored_with_its_next_generation() -> None:
    coordinator = Coordinator()
    one, two = stable_pair(coordinator)
    coordinator.send(LeaveGroup, "g", (one, two))
    assert coordinator.state() is GroupState.EMPTY
    assert coordinator.stored["g"] == GroupMetadata("consumer", 3, None, None, ())


def test_a_new_coordinator_resumes_a_stored_group_in_its_generation() -> None:
    """Kafka's coordinator loads the groups on election: members that keep heartbeating stay in
    their generation, with their assignments, and commits are fenced as before the failover."""
    old = Coordinator()
    one, two = stable_pair(old)
    new = Coordinator()
    new.now_ms = 100_000
    new.core.load(old.stored.items(), new.now_ms)
    assert new.state() is GroupState.STABLE
    new.tick(SESSION_MS - 1)  # sessions count from the load
    assert [new.answers[new.send(Heartbeat, "g", 2, member)].error for member in (one, two)] == [ErrorCode.NONE] * 2
    assert new.core.commit_error("g", 2, one) == (ErrorCode.NONE, "")
    assert new.core.commit_error("g", 1, one)[0] == ErrorCode.ILLEGAL_GENERATION
    assert new.core.commit_error("g", 2, "stranger")[0] == ErrorCode.UNKNOWN_MEMBER_ID
    answer = new.answers[new.join(two)]
    assert (answer.error, answer.generation_id, answer.leader) == (ErrorCode.NONE, 2, one), "a follower rejoins"
    assert new.answers[new.send(SyncGroup, "g", 2, two, ())].assignment == b"b"
    for _ in range(3):  # two falls silent: the group rebalances into a later generation
        new.tick(SESSION_MS // 2)
        new.send(Heartbeat, "g", 2, one)
    assert new.answers[new.join(one)].generation_id == 3


def test_an_empty_group_loads_empty_at_its_generation_and_a_bad_record_never_lowers_it() -> None:
    new = Coordinator()
    leader_elsewhere = GroupMetadata("consumer", 9, "range", "gone", (
        MemberMetadata("m", None, "c", "", REBALANCE_MS, SESSION_MS, b"s", b"a"),))
    new.core.load([("g", GroupMetadata("consumer", 5, None, None)), ("h", leader_elsewhere)], 0)
    assert (new.state("g"), new.state("h")) == (GroupState.EMPTY, GroupState.EMPTY)
    _, join = new.new_member("g")
    assert new.answers[join].generation_id == 6
    _, join = new.new_member("h")
    assert new.answers[join].generation_id == 10


def test_members_starting_together_join_one_generation_after_the_initial_delay() -> None:
    coordinator = Coordinator(GroupsConfig(group_initial_rebalance_delay_ms=3_000))
    _, join_one = coordinator.new_member()
    coordinator.tick(1_000)
    _, join_two = coordinator.new_member()
    assert join_one not in coordinator.answers and join_two not in coordinator.answers
    coordinator.tick(2_000)
    assert coordinator.answers[join_one].generation_id == coordinator.answers[join_two].generation_id == 1


def stable_pair(coordinator: Coordinator, acked: bool = True) -> tuple[str, str]:
    """Two members in generation 2, `one` the leader assigning "a" and "b" (and the record stored,
    unless the test holds stores back)."""
    one, _ = coordinator.new_member()
    two, join_two = coordinator.new_member()
    coordinator.join(one)
    generation = coordinator.answers[join_two].generation_id
    coordinator.send(SyncGroup, "g", generation, two, ())
    coordinator.send(SyncGroup, "g", generation, one, ((one, b"a"), (two, b"b")))
    assert coordinator.state() is (GroupState.STABLE if acked else GroupState.COMPLETING_REBALANCE)
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
        "a member commits what it revokes before it joins again (Kafka allows it in PreparingRebalance)"
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


def test_describe_shows_each_members_client_subscription_and_assignment_once_stable() -> None:
    coordinator = Coordinator()
    one, two = stable_pair(coordinator)
    summary = coordinator.core.describe("g")
    assert summary is not None
    assert (summary.state, summary.protocol_type, summary.protocol) == (GroupState.STABLE, "consumer", "range")
    assert summary.members == (MemberSummary(one, None, "client", "", b"sub:orders", b"a"),
                               MemberSummary(two, None, "client", "", b"sub:orders", b"b"))


def test_describe_hides_subscriptions_and_assignments_while_the_group_rebalances() -> None:
    """Kafka's GroupMetadata.summary: outside Stable the assignment being made is not final."""
    coordinator = Coordinator()
    one, two = stable_pair(coordinator)
    coordinator.send(LeaveGroup, "g", (two,))
    summary = coordinator.core.describe("g")
    assert summary is not None and (summary.state, summary.protocol) == (GroupState.PREPARING_REBALANCE, "")
    assert [(m.member_id, m.metadata, m.assignment) for m in summary.members] == [(one, b"", b"")]


def test_describe_records_the_client_host_of_the_first_join() -> None:
    coordinator = Coordinator()
    (asked,) = coordinator.core.handle(JoinGroup(1, "g", "", "app-1", SESSION_MS, REBALANCE_MS, "consumer", PROTOCOLS,
                                                 client_host="/10.0.0.7"), 0).answers
    assert isinstance(asked, JoinGroupResult)
    coordinator.core.handle(JoinGroup(2, "g", asked.member_id, "app-1", SESSION_MS, REBALANCE_MS, "consumer",
                                      PROTOCOLS, client_host="/10.0.0.7"), 0)
    summary = coordinator.core.describe("g")
    assert summary is not None and [(m.client_id, m.client_host) for m in summary.members] == [("app-1", "/10.0.0.7")]


def test_overview_lists_every_group_held_with_its_state_and_describe_knows_no_other() -> None:
    coordinator = Coordinator()
    stable_pair(coordinator)
    coordinator.new_member("other")
    coordinator.new_member("left")
    coordinator.send(LeaveGroup, "left", tuple(coordinator.core.groups["left"].members))
    assert coordinator.core.overview() == (
        GroupOverview("g", "consumer", GroupState.STABLE),
        GroupOverview("left", "consumer", GroupState.EMPTY),
        GroupOverview("other", "consumer", GroupState.COMPLETING_REBALANCE),
    )
    assert coordinator.core.describe("never") is None


def test_groups_with_only_offsets_are_listed_empty_and_the_states_filter_applies() -> None:
    membership = (GroupOverview("g", "consumer", GroupState.STABLE),
                  GroupOverview("left", "consumer", GroupState.EMPTY))
    merged = merge_overviews(membership, ("g", "solo"), ())
    assert merged == (GroupOverview("g", "consumer", GroupState.STABLE),
                      GroupOverview("left", "consumer", GroupState.EMPTY), GroupOverview("solo", "", GroupState.EMPTY))
    assert [o.group_id for o in merge_overviews(membership, ("solo",), (GroupState.EMPTY,))] == ["left", "solo"]
    assert merge_overviews(membership, ("solo",), (GroupState.DEAD,)) == ()
    assert dead_group("x").state is GroupState.DEAD and dead_group("x").members == ()


def static_pair(coordinator: Coordinator) -> tuple[str, str]:
    """Static members "a" (the leader) and "b" in generation 2, assigned "a" and "b"."""
    one = coordinator.answers[coordinator.join(instance="a")]
    assert isinstance(one, JoinGroupResult) and one.error == ErrorCode.NONE, "KIP-345: no MEMBER_ID_REQUIRED round"
    coordinator.send(SyncGroup, "g", 1, one.member_id, ((one.member_id, b"a"),), "a")
    join_two = coordinator.join(instance="b")
    rejoin = coordinator.answers[coordinator.join(one.member_id, instance="a")]
    two = coordinator.answers[join_two].member_id
    coordinator.send(SyncGroup, "g", 2, two, (), "b")
    coordinator.send(SyncGroup, "g", 2, one.member_id, ((one.member_id, b"a"), (two, b"b")), "a")
    assert rejoin.generation_id == 2 and coordinator.state() is GroupState.STABLE
    return one.member_id, two


def test_a_restarted_static_member_takes_its_place_without_a_rebalance() -> None:
    """KIP-345: same instance id, empty member id, same subscription: a new member id in the same
    generation with the old assignment, answered once stored; the old member id is fenced."""
    coordinator = Coordinator(acks_stores=False)
    coordinator.acks_stores = True
    one, two = static_pair(coordinator)
    coordinator.acks_stores = False
    join = coordinator.join(instance="b")
    assert join not in coordinator.answers, "answered once the new member id is stored"
    (store,) = coordinator.pending_stores
    assert store.value is not None and [(m.member_id, m.group_instance_id) for m in store.value.members] == [
        (one, "a"), (coordinator.core.groups["g"].static_members["b"], "b")]
    coordinator.ack_stores()
    answer = coordinator.answers[join]
    assert (answer.error, answer.generation_id, answer.leader) == (ErrorCode.NONE, 2, one)
    assert answer.member_id not in (one, two) and coordinator.state() is GroupState.STABLE
    assert coordinator.answers[coordinator.send(SyncGroup, "g", 2, answer.member_id, (), "b")].assignment == b"b"
    assert coordinator.answers[coordinator.send(Heartbeat, "g", 2, two, "b")].error == ErrorCode.FENCED_INSTANCE_ID
    assert coordinator.core.commit_error("g", 2, two, "b")[0] == ErrorCode.FENCED_INSTANCE_ID
    assert coordinator.answers[coordinator.join(two, instance="b")].error == ErrorCode.FENCED_INSTANCE_ID
    assert coordinator.answers[coordinator.send(Heartbeat, "g", 2, one, "a")].error == ErrorCode.NONE


def test_a_restarted_static_leader_is_not_told_it_leads_and_keeps_the_generation() -> None:
    coordinator = Coordinator()
    one, _ = static_pair(coordinator)
    answer = coordinator.answers[coordinator.join(instance="a")]
    assert (answer.generation_id, answer.leader, answer.members) == (2, one, ()), "the previous leader id (Kafka)"
    assert coordinator.core.groups["g"].leader == answer.member_id and coordinator.state() is GroupState.STABLE


def test_a_static_member_with_a_new_subscription_rebalances() -> None:
    coordinator = Coordinator()
    one, _ = static_pair(coordinator)
    join = coordinator.join(protocols=(("range", b"sub:other"),), instance="b")
    assert join not in coordinator.answers and coordinator.state() is GroupState.PREPARING_REBALANCE
    coordinator.join(one, instance="a")
    assert coordinator.answers[join].generation_id == 3


def test_a_static_member_leaves_by_instance_id_and_its_session_still_ends() -> None:
    coordinator = Coordinator()
    one, _ = static_pair(coordinator)
    answer = coordinator.answers[coordinator.send(LeaveGroup, "g", (), (("", "b"),))]
    assert answer.error == ErrorCode.NONE and set(coordinator.core.groups["g"].members) == {one}
    assert coordinator.answers[coordinator.send(LeaveGroup, "g", (), (("", "b"),))].error == ErrorCode.UNKNOWN_MEMBER_ID
    rejoin = coordinator.answers[coordinator.join(one, instance="a")]
    coordinator.send(SyncGroup, "g", rejoin.generation_id, one, ((one, b"a"),), "a")
    coordinator.tick(SESSION_MS)
    assert coordinator.state() is GroupState.EMPTY and coordinator.core.groups["g"].static_members == {}


def test_static_members_are_loaded_with_their_instance_ids() -> None:
    coordinator = Coordinator()
    one, two = static_pair(coordinator)
    coordinator.fail_over(land=False)
    assert coordinator.core.groups["g"].static_members == {"a": one, "b": two}
    answer = coordinator.answers[coordinator.join(instance="b")]
    assert (answer.error, answer.generation_id) == (ErrorCode.NONE, 2), "a restart after a failover keeps its place"


# -- DeleteGroups and OffsetDelete -----------------------------------------------------------------


def delete(coordinator: Coordinator, group: str = "g", has_offsets: bool = False) -> GroupAnswer | None:
    return coordinator.answers.get(coordinator.send(DeleteGroup, group, has_offsets))


def test_a_group_with_members_is_not_deleted_and_an_empty_one_is_dead_until_its_tombstone_is_stored() -> None:
    coordinator = Coordinator(acks_stores=False)
    one, two = stable_pair(coordinator, acked=False)
    coordinator.ack_stores()
    answer = delete(coordinator)
    assert answer is not None and answer.error == ErrorCode.NON_EMPTY_GROUP
    coordinator.send(LeaveGroup, "g", (one, two))
    coordinator.ack_stores()
    assert coordinator.state() is GroupState.EMPTY and coordinator.core.groups["g"].generation_id == 3
    request = coordinator.send(DeleteGroup, "g", False)
    assert request not in coordinator.answers, "answered once the tombstone is stored"
    assert [(store.group_id, store.value) for store in coordinator.pending_stores] == [("g", None)]
    assert coordinator.state() is GroupState.DEAD and coordinator.core.describe("g").state is GroupState.DEAD
    refused = coordinator.answers[coordinator.join()]
    assert refused.error == ErrorCode.COORDINATOR_NOT_AVAILABLE, "Kafka: a Dead group's members look again"
    assert coordinator.core.commit_error("g", -1, "")[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (delete(coordinator) or GroupResult(0, ErrorCode.NONE)).error == ErrorCode.GROUP_ID_NOT_FOUND
    coordinator.ack_stores()
    assert coordinator.answers[request] == GroupResult(request, ErrorCode.NONE)
    assert "g" not in coordinator.core.groups and coordinator.core.overview() == ()
    coordinator.fail_over(land=True)
    assert "g" not in coordinator.core.groups, "the tombstone is what a new coordinator loads"
    coordinator.acks_stores = True
    _, join = coordinator.new_member()
    assert coordinator.answers[join].generation_id == 1, "created afresh from generation 0, as Kafka does"
    assert coordinator.answers[coordinator.send(Heartbeat, "g", 1, one)].error == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_group_mid_rebalance_is_not_empty() -> None:
    coordinator = Coordinator()
    _, two = stable_pair(coordinator)
    coordinator.send(LeaveGroup, "g", (two,))
    assert coordinator.state() is GroupState.PREPARING_REBALANCE
    answer = delete(coordinator)
    assert answer is not None and answer.error == ErrorCode.NON_EMPTY_GROUP


def test_static_members_that_stopped_hold_the_group_until_their_sessions_end() -> None:
    """KIP-345: a static member sends no LeaveGroup when it closes; its place stays for its session."""
    coordinator = Coordinator()
    static_pair(coordinator)
    answer = delete(coordinator)
    assert answer is not None and answer.error == ErrorCode.NON_EMPTY_GROUP
    coordinator.tick(SESSION_MS)
    assert coordinator.state() is GroupState.EMPTY
    answer = delete(coordinator)
    assert answer is not None and answer.error == ErrorCode.NONE and "g" not in coordinator.core.groups


def test_unknown_groups_are_not_found_and_those_with_only_offsets_are_deleted() -> None:
    coordinator = Coordinator(acks_stores=False)
    answer = delete(coordinator, "nobody")
    assert answer is not None and answer.error == ErrorCode.GROUP_ID_NOT_FOUND
    request = coordinator.send(DeleteGroup, "solo", True)
    assert coordinator.state("solo") is GroupState.DEAD, "held Dead while deleting: its commits are refused"
    coordinator.ack_stores(ErrorCode.NOT_COORDINATOR)
    assert coordinator.answers[request].error == ErrorCode.NOT_COORDINATOR and "solo" not in coordinator.core.groups
    coordinator.send(DeleteGroup, "solo", True)
    coordinator.ack_stores()
    assert "solo" not in coordinator.core.groups and coordinator.stored["solo"] is None


def test_a_failed_tombstone_leaves_the_group_empty_in_its_generation() -> None:
    coordinator = Coordinator(acks_stores=False)
    one, two = stable_pair(coordinator, acked=False)
    coordinator.ack_stores()
    coordinator.send(LeaveGroup, "g", (one, two))
    coordinator.ack_stores()
    request = coordinator.send(DeleteGroup, "g", True)
    coordinator.ack_stores(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert coordinator.answers[request].error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (coordinator.state(), coordinator.core.groups["g"].generation_id) == (GroupState.EMPTY, 3)


def topics_of(metadata: bytes) -> frozenset[str] | None:
    """A test decoder: b"sub:a,b" subscribes to a and b; anything else does not decode."""
    return frozenset(metadata[4:].decode().split(",")) if metadata.startswith(b"sub:") else None


def test_offsets_of_topics_no_member_subscribes_to_may_go() -> None:
    coordinator = Coordinator()
    coordinator.core = ConsumerGroups(CONFIG, random.Random(1), topics_of)
    assert coordinator.core.offsets_deletable("g", ["orders"], has_offsets=False)[0] == ErrorCode.GROUP_ID_NOT_FOUND
    assert coordinator.core.offsets_deletable("g", ["orders"], has_offsets=True) == (ErrorCode.NONE, "", frozenset())
    stable_pair(coordinator)
    assert coordinator.core.offsets_deletable("g", ["orders", "old"], has_offsets=True) == (
        ErrorCode.NONE, "", frozenset({"orders"}))
    given = coordinator.answers[coordinator.join(group="other", protocols=(("range", b"\x00\x07"),))].member_id
    coordinator.join(given, group="other", protocols=(("range", b"\x00\x07"),))
    assert coordinator.core.offsets_deletable("other", ["orders", "old"], has_offsets=False)[2] == frozenset(
        {"orders", "old"}), "a subscription that does not decode may hold any topic"
    given = coordinator.answers[coordinator.send(JoinGroup, "connect", "", "c", SESSION_MS, REBALANCE_MS, "connect",
                                                 PROTOCOLS)].member_id
    coordinator.send(JoinGroup, "connect", given, "c", SESSION_MS, REBALANCE_MS, "connect", PROTOCOLS)
    assert coordinator.core.offsets_deletable("connect", ["old"], has_offsets=True)[0] == ErrorCode.NON_EMPTY_GROUP


# -- the state machine -----------------------------------------------------------------------------


class Client:
    """A consumer that follows the protocol: joins, syncs (as leader it assigns one slot per
    member), heartbeats, and joins again when told to."""

    def __init__(self, instance: str | None) -> None:
        self.instance = instance  # a static member's group.instance.id (KIP-345)
        self.member_id = ""
        self.generation = -1
        self.waiting: int | None = None  # a join or sync in flight
        self.silent = False
        self.join_sent_in = 0  # the coordinator (failovers so far) its last JoinGroup went to
        self.id_given_in = 0  # the coordinator that gave its member id

    @property
    def owner(self) -> str:
        """Who holds an assignment: a static member's instance (a restart keeps it), else the member."""
        return self.instance or self.member_id


class GroupMachine(RuleBasedStateMachine):
    """Clients 0 and 1 are static members, 2 and 3 dynamic. Group records are acknowledged, failed
    or lost in a failover, after which a new core loads what was written."""

    def __init__(self) -> None:
        super().__init__()
        self.coordinator = Coordinator(acks_stores=False)
        self.clients = [Client("i0"), Client("i1"), Client(None), Client(None)]
        self.handed_out: dict[int, dict[str, bytes]] = {}  # generation -> owner -> assignment
        self.zombies: list[tuple[str, str, int]] = []  # (member id, instance, generation) of restarted members
        self.failovers = 0

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
            client.join_sent_in = self.failovers
            client.waiting = coordinator.join(client.member_id, instance=client.instance)
            self._take_if_answered(client)
        else:
            heartbeat = coordinator.answers[coordinator.send(Heartbeat, "g", client.generation, client.member_id,
                                                             client.instance)]
            self._check_fenced(client, heartbeat.error)
            if heartbeat.error != ErrorCode.NONE:
                client.generation = -1

    def _check_fenced(self, client: Client, error: ErrorCode) -> None:
        """Only a replaced process is fenced, or one that joined again (a new member id) just before
        a failover lost the record of its new id: as Kafka's consumer, it stops (FencedInstanceIdException)
        and is started again."""
        if error == ErrorCode.FENCED_INSTANCE_ID:
            assert client.id_given_in < self.failovers, "only a replaced process is fenced"
            client.member_id = ""

    def _take_if_answered(self, client: Client) -> None:
        if client.waiting in self.coordinator.answers:
            answer = self.coordinator.answers[client.waiting]
            client.waiting = None
            self._take(client, answer)

    def _take(self, client: Client, answer: GroupAnswer) -> None:
        coordinator = self.coordinator
        self._check_fenced(client, answer.error)
        if isinstance(answer, JoinGroupResult):
            client.member_id = answer.member_id if answer.error in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED) \
                else ""
            client.id_given_in = client.join_sent_in
            if answer.error != ErrorCode.NONE:
                return
            assignments = tuple((member, b"slot-%d" % slot) for slot, (member, _) in enumerate(answer.members))
            client.generation = answer.generation_id
            client.waiting = coordinator.send(SyncGroup, "g", answer.generation_id, client.member_id, assignments,
                                              client.instance)
            self._take_if_answered(client)
        elif isinstance(answer, SyncGroupResult):
            if answer.error != ErrorCode.NONE:
                client.generation = -1
                if answer.error == ErrorCode.FENCED_INSTANCE_ID:
                    client.member_id = ""
                return
            handed = self.handed_out.setdefault(client.generation, {})
            assert handed.get(client.owner, answer.assignment) == answer.assignment, "a restart keeps its assignment"
            handed[client.owner] = answer.assignment
            assert len(set(handed.values())) == len(handed), f"generation {client.generation} hands out {handed}"
        else:
            assert isinstance(answer, GroupResult)
            client.member_id = "" if answer.error == ErrorCode.NOT_COORDINATOR else client.member_id

    @rule(index=st.integers(0, 3))
    def fall_silent_or_wake(self, index: int) -> None:
        self.clients[index].silent = not self.clients[index].silent

    @rule(index=st.integers(0, 3))
    def leave(self, index: int) -> None:
        client = self.clients[index]
        if client.member_id and client.waiting is None:
            if client.instance is None:
                self.coordinator.send(LeaveGroup, "g", (client.member_id,))
            else:  # static members do not leave on close; an admin removes them by instance id (KIP-345)
                self.coordinator.send(LeaveGroup, "g", (), ((client.member_id, client.instance),))
            client.member_id, client.generation = "", -1

    @rule(index=st.integers(0, 3))
    def restart(self, index: int) -> None:
        """The client's process is killed and started again: it sends no LeaveGroup and forgets its
        member id; what it had in flight is answered to nobody."""
        client = self.clients[index]
        if client.member_id and client.instance is not None:
            self.zombies.append((client.member_id, client.instance, client.generation))
        client.member_id, client.generation, client.waiting, client.silent = "", -1, None, False

    @rule()
    def a_replaced_process_is_fenced(self) -> None:
        group = self.coordinator.core.groups.get("g")
        for member_id, instance, generation in self.zombies:
            if group is not None and group.static_members.get(instance) not in (None, member_id):
                answer = self.coordinator.answers[self.coordinator.send(Heartbeat, "g", generation, member_id,
                                                                        instance)]
                assert answer.error == ErrorCode.FENCED_INSTANCE_ID
                assert self.coordinator.core.commit_error("g", generation, member_id, instance)[0] == \
                    ErrorCode.FENCED_INSTANCE_ID

    @rule(failed=st.booleans())
    def stores_answered(self, failed: bool) -> None:
        self.coordinator.ack_stores(ErrorCode.NOT_COORDINATOR if failed else ErrorCode.NONE)
        self._forget_if_deleted()

    @rule()
    def delete(self) -> None:
        """An admin deletes the group: refused while it has members or is rebalancing."""
        group = self.coordinator.core.groups.get("g")
        state = None if group is None else group.state
        request = self.coordinator.send(DeleteGroup, "g", False)
        answer = self.coordinator.answers.get(request)
        if state in (None, GroupState.DEAD):
            assert answer is not None and answer.error == ErrorCode.GROUP_ID_NOT_FOUND
        elif state is not GroupState.EMPTY:
            assert answer is not None and answer.error == ErrorCode.NON_EMPTY_GROUP
        else:
            assert answer is None and self.coordinator.core.groups["g"].state is GroupState.DEAD

    def _forget_if_deleted(self) -> None:
        """Once its tombstone is stored the group is gone, and so are its generations: a new group
        starts again from generation 0."""
        if "g" not in self.coordinator.core.groups and self.coordinator.stored.get("g", b"") is None:
            self.handed_out.clear()

    @rule(land=st.booleans())
    def fail_over(self, land: bool) -> None:
        """The coordinator moves: requests in flight are answered NOT_COORDINATOR (the node's edge
        does so), and the new one resumes what was written; no generation a member was handed an
        assignment in is ever handed out again."""
        coordinator = self.coordinator
        for client in self.clients:
            if client.waiting is not None and client.waiting not in coordinator.answers:
                coordinator.answers[client.waiting] = GroupResult(client.waiting, ErrorCode.NOT_COORDINATOR)
                client.waiting, client.generation = None, -1
        coordinator.fail_over(land)
        self.failovers += 1
        self._forget_if_deleted()
        group = coordinator.core.groups.get("g")
        if self.handed_out:
            assert group is not None and group.generation_id >= max(self.handed_out), "generations never go back"

    @rule(advance_ms=st.sampled_from((100, 3_000, SESSION_MS, REBALANCE_MS)))
    def time_passes(self, advance_ms: int) -> None:
        self.coordinator.tick(advance_ms)

    @invariant()
    def describe_and_overview_show_the_group_as_it_stands(self) -> None:
        group = self.coordinator.core.groups.get("g")
        summary = self.coordinator.core.describe("g")
        if group is None:
            assert summary is None and self.coordinator.core.overview() == ()
            return
        assert summary is not None and summary.state is group.state
        assert self.coordinator.core.overview() == (GroupOverview("g", "consumer", group.state),)
        assert [member.member_id for member in summary.members] == list(group.members)
        if group.state is GroupState.STABLE:
            handed = self.handed_out.get(group.generation_id, {})
            assert all(member.assignment == handed[member.member_id]
                       for member in summary.members if member.member_id in handed)
        else:
            assert all(member.assignment == member.metadata == b"" for member in summary.members)

    @invariant()
    def a_stable_generation_assigned_every_member(self) -> None:
        group = self.coordinator.core.groups.get("g")
        if group is not None and group.state is GroupState.STABLE:
            members = set(group.members)
            assert all(group.members[member].assignment for member in members if len(members) > 0)
            assert len({group.members[member].assignment for member in members}) == len(members)


GroupMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
test_group_state_machine = GroupMachine.TestCase
