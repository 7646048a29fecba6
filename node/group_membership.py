"""GroupMembership: the node's edge of the consumer-group membership core
(`replication/consumer_groups.py`).

Any node accepts JoinGroup, SyncGroup, Heartbeat and LeaveGroup and forwards them to the group's
coordinator, the leader of its `__consumer_offsets` partition, as OffsetCommit is routed
(node/group_offsets.py). On the coordinator one core per partition decides; this module steps it,
answers each request when the core's Ready answers it (a JoinGroup waits for the rebalance, a
follower's SyncGroup for the leader's), ticks the core when it asks, and stores the group records
it asks for through `store` (GroupOffsets.write_group), handing the outcome back. A core belongs to
one leader epoch of its partition: when this node takes office (the first request in a new epoch)
it replays the partition for the stored groups and the core resumes them (members keep their
generation); until then requests are answered COORDINATOR_LOAD_IN_PROGRESS, as Kafka's are.
DeleteGroups and OffsetDelete reach it already routed (node/group_deletion.py).

The core reads the members' subscriptions (for OffsetDelete) through Kafka's consumer protocol
decoder, given here: one that does not decode counts as subscribed to every topic, as Kafka counts a
group whose subscriptions it cannot parse. Refusing an OffsetDelete costs a retry once the member is
gone; deleting offsets a live member reads from would reset it by auto.offset.reset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

from client.consumer_protocol import ConsumerProtocolError, decode_subscription
from replication.consumer_groups import (
    ConsumerGroups,
    DeleteGroup,
    GroupAnswer,
    GroupEvent,
    GroupOverview,
    GroupResult,
    GroupsConfig,
    GroupsTick,
    GroupStored,
    GroupSummary,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    StoreGroup,
    SyncGroup,
    SyncGroupResult,
)
from replication.group_coordinator import OFFSETS_TOPIC, coordinator_partition
from replication.group_metadata import GroupMetadata
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_membership import (
    GroupResponse,
    HeartbeatRequest,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)

Route = Callable[[int, bool], Awaitable[ErrorCode | None]]
Store = Callable[[int, str, GroupMetadata | None], Awaitable[tuple[ErrorCode, str]]]
Load = Callable[[int], Awaitable[tuple[ErrorCode, int, Iterable[tuple[str, GroupMetadata]]]]]
log = logging.getLogger(__name__)


class GroupMembership:
    """`leader_of(partition)` and `leader_epoch_of(partition)` read the metadata; `route` and
    `coordinator_address` are GroupOffsets' (which node coordinates, creating the topic if asked);
    `forward(address, api, request, response_type)` calls another node; `store(partition, group,
    value)` writes a group's record (GroupOffsets.write_group) and `load_groups(partition)` reads them
    all (GroupOffsets.load_groups); `clock` is monotonic."""

    def __init__(self, node_id: int, partition_count: int, config: GroupsConfig,
                 leader_of: Callable[[int], int | None], leader_epoch_of: Callable[[int], int], route: Route,
                 coordinator_address: Callable[[int], str | None],
                 forward: Callable[[str, Api, Any, type], Awaitable[Any]], store: Store,
                 load_groups: Load, clock: Callable[[], int], rng: random.Random) -> None:
        self._node_id = node_id
        self._partition_count = partition_count
        self._config = config
        self._leader_of = leader_of
        self._leader_epoch_of = leader_epoch_of
        self._route = route
        self._coordinator_address = coordinator_address
        self._forward = forward
        self._store = store
        self._load_groups = load_groups
        self._clock = clock
        self._rng = rng
        self._cores: dict[int, tuple[int, ConsumerGroups]] = {}  # partition -> (leader epoch, core)
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._request_ids = itertools.count(1)
        self._waiting: dict[int, tuple[int, asyncio.Future[GroupAnswer | ErrorCode]]] = {}  # id -> partition
        self._tasks: set[asyncio.Task[None]] = set()
        self._loading: dict[int, tuple[int, asyncio.Task[None]]] = {}  # partition -> (leader epoch, its load)

    async def join(self, request: JoinGroupRequest) -> JoinGroupResponse:
        protocols = tuple((p.name, p.metadata) for p in request.protocols)
        answer = await self._call(request.group_id, Api.JOIN_GROUP, request, JoinGroupResponse,
                                  lambda request_id: JoinGroup(request_id, request.group_id, request.member_id,
                                                               request.client_id, request.session_timeout_ms,
                                                               request.rebalance_timeout_ms, request.protocol_type,
                                                               protocols, request.group_instance_id,
                                                               request.client_host))
        if isinstance(answer, JoinGroupResponse):
            return answer
        if isinstance(answer, ErrorCode):
            return JoinGroupResponse(answer, member_id=request.member_id, error_message=_message(answer))
        assert isinstance(answer, JoinGroupResult), answer
        return JoinGroupResponse(answer.error, answer.generation_id, answer.protocol_name, answer.leader,
                                          answer.member_id, tuple(JoinGroupMember(member, metadata)
                                                                  for member, metadata in answer.members),
                                          answer.message)

    async def sync(self, request: SyncGroupRequest) -> SyncGroupResponse:
        assignments = tuple((a.member_id, a.assignment) for a in request.assignments)
        answer = await self._call(request.group_id, Api.SYNC_GROUP, request, SyncGroupResponse,
                                  lambda request_id: SyncGroup(request_id, request.group_id, request.generation_id,
                                                               request.member_id, assignments,
                                                               request.group_instance_id))
        if isinstance(answer, SyncGroupResponse):
            return answer
        if isinstance(answer, ErrorCode):
            return SyncGroupResponse(answer, error_message=_message(answer))
        assert isinstance(answer, SyncGroupResult), answer
        return SyncGroupResponse(answer.error, answer.assignment, answer.message)

    async def heartbeat(self, request: HeartbeatRequest) -> GroupResponse:
        return await self._simple(request.group_id, Api.HEARTBEAT, request, lambda request_id: Heartbeat(
            request_id, request.group_id, request.generation_id, request.member_id, request.group_instance_id))

    async def leave(self, request: LeaveGroupRequest) -> GroupResponse:
        return await self._simple(request.group_id, Api.LEAVE_GROUP, request, lambda request_id: LeaveGroup(
            request_id, request.group_id, request.member_ids,
            tuple((member.member_id, member.group_instance_id) for member in request.members)))

    def commit_error(self, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None = None) -> tuple[ErrorCode, str]:
        """On the coordinator: may this OffsetCommit write (replication/consumer_groups.py)? Not
        before the partition's groups are loaded: the commit is fenced by them."""
        partition = coordinator_partition(group_id, self._partition_count)
        core = self._core(partition)
        if core is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, _message(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        return core.commit_error(group_id, generation_id, member_id, group_instance_id)

    async def delete_group(self, group_id: str, has_offsets: bool) -> tuple[ErrorCode, str]:
        """On the coordinator: DeleteGroups of one group, answered once its tombstones are stored
        (`has_offsets`: the offsets core holds offsets of it)."""
        partition = coordinator_partition(group_id, self._partition_count)
        core = self._core(partition)
        if core is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, _message(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        answer = await self._ask(partition, core, lambda request_id: DeleteGroup(request_id, group_id, has_offsets))
        if isinstance(answer, ErrorCode):
            return answer, _message(answer)
        assert isinstance(answer, GroupResult), answer
        return answer.error, answer.message

    def offsets_deletable(self, group_id: str, topics: Iterable[str],
                          has_offsets: bool) -> tuple[ErrorCode, str, frozenset[str]]:
        """On the coordinator: OffsetDelete's decision (replication/consumer_groups.py), once the
        partition's groups are loaded."""
        core = self._core(coordinator_partition(group_id, self._partition_count))
        if core is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, _message(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), frozenset()
        return core.offsets_deletable(group_id, topics, has_offsets)

    def describe(self, group_id: str) -> GroupSummary | None:
        """On the coordinator: the group as its core holds it (None: not held in this leader epoch)."""
        core = self._current_core(coordinator_partition(group_id, self._partition_count))
        return None if core is None else core.describe(group_id)

    def overview(self, partition: int) -> tuple[GroupOverview, ...]:
        """The groups of `partition` this node holds as its leader (ListGroups)."""
        core = self._current_core(partition)
        return () if core is None else core.overview()

    def _current_core(self, partition: int) -> ConsumerGroups | None:
        """The partition's core if this node leads it in the core's epoch; never makes one."""
        held = self._cores.get(partition)
        if held is None or held[0] != self._leader_epoch_of(partition) or self._leader_of(partition) != self._node_id:
            return None
        return held[1]

    # -- internals --------------------------------------------------------------------------------

    async def _simple(self, group_id: str, api: Api, request: Any,
                      event_for: Callable[[int], GroupEvent]) -> GroupResponse:
        answer = await self._call(group_id, api, request, GroupResponse, event_for)
        if isinstance(answer, GroupResponse):
            return answer
        if isinstance(answer, ErrorCode):
            return GroupResponse(answer, _message(answer))
        assert isinstance(answer, GroupResult), answer
        return GroupResponse(answer.error, answer.message)

    async def _call(self, group_id: str, api: Api, request: Any, response_type: type,
                    event_for: Callable[[int], GroupEvent]) -> Any:
        """The core's answer here, the coordinator's response from another node, or an error code."""
        partition = coordinator_partition(group_id, self._partition_count)
        code = await self._route(partition, api is Api.JOIN_GROUP)
        if code is not None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else code
        if self._leader_of(partition) != self._node_id:
            address = self._coordinator_address(partition)
            assert address is not None
            return await self._forward(address, api, request, response_type)
        core = self._core(partition)
        if core is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return await self._ask(partition, core, event_for)

    async def _ask(self, partition: int, core: ConsumerGroups,
                   event_for: Callable[[int], GroupEvent]) -> GroupAnswer | ErrorCode:
        """Step the core with the request; its answer, or NOT_COORDINATOR if the core is dropped first."""
        request_id = next(self._request_ids)
        future: asyncio.Future[GroupAnswer | ErrorCode] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (partition, future)
        try:
            self._step(partition, core, event_for(request_id))
            return await future
        finally:
            self._waiting.pop(request_id, None)

    def _core(self, partition: int) -> ConsumerGroups | None:
        """The partition's core in its current leader epoch; None while its groups load (the load
        starts here when this node takes office, as Kafka's coordinator loads on election)."""
        epoch = self._leader_epoch_of(partition)
        held = self._cores.get(partition)
        if held is not None and held[0] == epoch:
            return held[1]
        if held is not None:
            self._drop(partition)
        loading = self._loading.get(partition)
        if loading is None or loading[0] != epoch:
            self._loading[partition] = (epoch, self._spawn(self._load(partition, epoch)))
        return None

    async def take_office(self, partition: int) -> None:
        """Load the partition's groups now, if this node leads it and has not loaded them in its
        current epoch (requests start the load too; this awaits it)."""
        if self._leader_of(partition) == self._node_id and self._core(partition) is None:
            await self._loading[partition][1]

    async def _load(self, partition: int, epoch: int) -> None:
        """Replay the partition (GroupOffsets.load_groups) and install its core, loaded, unless the
        partition moved on meanwhile (the next request then loads again)."""
        try:
            code, loaded_epoch, groups = await self._load_groups(partition)
        except Exception as error:  # the broker failed the call (a bug, or stopping): a later request retries
            code, loaded_epoch, groups = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, ()
            log.warning("loading the groups of %s-%d failed: %s", OFFSETS_TOPIC, partition, error)
        if self._loading.get(partition, (None,))[0] == epoch:
            del self._loading[partition]
        if (code != ErrorCode.NONE or loaded_epoch != epoch or self._leader_epoch_of(partition) != epoch
                or self._leader_of(partition) != self._node_id or partition in self._cores):
            return
        core = ConsumerGroups(self._config, random.Random(self._rng.getrandbits(64)), subscribed_topics)
        core.load(groups, self._clock())
        self._cores[partition] = (epoch, core)
        self._step(partition, core, GroupsTick())  # schedules the loaded members' session expiries

    def _drop(self, partition: int) -> None:
        """This node no longer coordinates the partition's groups (or does so in a new epoch): the
        requests waiting on its old core are answered NOT_COORDINATOR, so their members look again."""
        self._cores.pop(partition, None)
        timer = self._timers.pop(partition, None)
        if timer is not None:
            timer.cancel()
        for waiting_partition, future in self._waiting.values():
            if waiting_partition == partition and not future.done():
                future.set_result(ErrorCode.NOT_COORDINATOR)

    def _step(self, partition: int, core: ConsumerGroups, event: GroupEvent) -> None:
        """One event for `core`, if it still decides for the partition (a timer or a store of a core
        dropped since is late)."""
        held = self._cores.get(partition)
        if held is None or held[1] is not core:
            return
        if self._leader_of(partition) != self._node_id or self._leader_epoch_of(partition) != held[0]:
            self._drop(partition)
            return
        ready = core.handle(event, self._clock())
        for store in ready.stores:
            self._spawn(self._carry_out(partition, core, store))
        for answer in ready.answers:
            waiting = self._waiting.get(answer.request_id)
            if waiting is not None and not waiting[1].done():
                waiting[1].set_result(answer)
        timer = self._timers.pop(partition, None)
        if timer is not None:
            timer.cancel()
        if ready.next_tick_ms is not None:
            loop = asyncio.get_running_loop()
            delay_s = max(0, ready.next_tick_ms - self._clock()) / 1000
            self._timers[partition] = loop.call_later(delay_s, self._step, partition, core, GroupsTick())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _carry_out(self, partition: int, core: ConsumerGroups, store: StoreGroup) -> None:
        """Write the record; its outcome goes back to the core that asked, if it still decides."""
        try:
            code, message = await self._store(partition, store.group_id, store.value)
        except Exception as error:  # the broker failed the call (a bug, or stopping): the group hears of it
            code, message = ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{type(error).__name__}: {error}"
        self._step(partition, core, GroupStored(store.token, code, message))


def with_client_host(request: JoinGroupRequest, peer: str | None,
                     from_a_node: bool) -> JoinGroupRequest:
    """The JoinGroup with Kafka's clientHost ("/" and the peer's address): the one a node forwarded
    (`from_a_node`: it came in on a listener of node traffic) keeps its client's; any other is
    stamped with its peer, whatever it said. On a listener shared by clients and nodes a client
    could name another host: it is shown by DescribeGroups and decides nothing."""
    if from_a_node and request.client_host:
        return request
    return dataclasses.replace(request, client_host=f"/{peer}" if peer else "")


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """A member's topics from its ConsumerProtocolSubscription; None when it is not one."""
    try:
        return frozenset(decode_subscription(metadata).topics)
    except ConsumerProtocolError:
        return None


def _message(code: ErrorCode) -> str:
    if code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ErrorCode.NOT_COORDINATOR):
        return "the group's coordinator (its __consumer_offsets partition's leader) is not ready; retry"
    return code.name
