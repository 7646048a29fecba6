"""GroupMember: one consumer's membership of its group (Kafka's ConsumerCoordinator, classic protocol).

`join` joins the group (again): a JoinGroup with an empty member id is answered MEMBER_ID_REQUIRED
with an id to join with (KIP-394). The member offers one protocol per assignor of its
`partition.assignment.strategy` (client/assignors.py), in its order of preference, each with
its subscription: its topics and, for a cooperative member, the partitions it owns and the
generation that gave them (KIP-429). The leader of the new generation runs the assignor the
coordinator chose over every member's subscription and hands the result over in its SyncGroup;
every member gets its part from its own. Then heartbeats run in the background every
`heartbeat.interval.ms`; the first that answers REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or
UNKNOWN_MEMBER_ID sets `needs_join`, and the consumer joins again on its next poll. The last two
(and the same answers to a SyncGroup) mean the group went on without this member: its generation
is reset and the partitions it owned are `lost` (Kafka's onPartitionsLost), since others may own
them now. Any node takes the requests (it forwards them to the coordinator). `leave` sends
LeaveGroup, so the others rebalance at once instead of after this member's session.

With `group_instance_id` (`group.instance.id`) the member is static (KIP-345): restarted with the
same instance id it takes its old place and assignment without a rebalance, so `leave` sends no
LeaveGroup (only its session timeout removes it, as Kafka's consumer does). FENCED_INSTANCE_ID (another
consumer joined with this instance id) is fatal, as in Kafka: every later `join` raises it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from client.assignors import Assignor, is_cooperative
from client.consumer_protocol import (
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from client.errors import TributaryError, error_for
from client.metadata import Metadata
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_membership import (
    GroupResponse,
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from wire.topic_partition import TopicPartition

PROTOCOL_TYPE = "consumer"
REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
JOIN_ATTEMPTS_MAX = 1000


class GroupMember:
    """See the module docstring. `partition_counts(topics)` gives each topic's partition count;
    `assignors` is the partition.assignment.strategy. `owned` is what the last SyncGroup gave,
    in generation `generation_id`; `cooperative` (every assignor is) says whether the member keeps
    it through a rebalance (KIP-429) or gives it all up before joining (eager)."""

    def __init__(self, group_id: str, topics: list[str], metadata: Metadata, *, session_timeout_ms: int,
                 rebalance_timeout_ms: int, heartbeat_interval_ms: int, retry_backoff_ms: int,
                 request_timeout_ms: int, partition_counts: Callable[[list[str]], Awaitable[dict[str, int]]],
                 assignors: tuple[Assignor, ...], group_instance_id: str | None = None) -> None:
        assert assignors, "a member offers at least one assignor"
        self.group_id = group_id
        self.topics = topics
        self.metadata = metadata
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self._partition_counts = partition_counts
        self.assignors = assignors
        self.cooperative = is_cooperative(assignors)
        self.group_instance_id = group_instance_id
        self._fenced: str | None = None  # why another consumer replaced this static member
        self.member_id = ""
        self.generation_id = -1
        self.owned: frozenset[TopicPartition] = frozenset()
        self.lost = False
        self.needs_join = True
        self._heartbeat: asyncio.Task[None] | None = None

    def _protocols(self) -> tuple[JoinGroupProtocol, ...]:
        subscription = encode_subscription(Subscription(
            tuple(self.topics), owned_partitions=self.owned if self.cooperative else frozenset(),
            generation_id=self.generation_id))
        return tuple(JoinGroupProtocol(assignor.name, subscription) for assignor in self.assignors)

    def update_topics(self, topics: list[str]) -> None:
        """A pattern subscription now matches `topics`: if they differ, join again with them (Kafka
        joins again when the subscription is no longer the one it joined with)."""
        if topics != self.topics:
            self.topics = topics
            self.needs_join = True

    async def join(self) -> dict[str, list[int]]:
        """Join (again) and return this member's assignment, topic -> partitions. An eager member's
        consumer has given up everything before calling this."""
        await self._stop_heartbeats()
        if self._fenced is not None:
            raise error_for(ErrorCode.FENCED_INSTANCE_ID, self._fenced)
        if not self.cooperative:
            self.owned = frozenset()
        for _ in range(JOIN_ATTEMPTS_MAX):
            join = await self.metadata.request(Api.JOIN_GROUP, JoinGroupRequest(
                self.group_id, self.session_timeout_ms, self.rebalance_timeout_ms, self.member_id, PROTOCOL_TYPE,
                self._protocols(), group_instance_id=self.group_instance_id), JoinGroupResponse,
                self.rebalance_timeout_ms + self.request_timeout_ms)
            if join.error_code is ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error_code is not ErrorCode.NONE:
                self._reset_if_left_behind(join.error_code)
                await self._back_off_or_raise(join.error_code, join.error_message)
                continue
            self.member_id = join.member_id  # a static member's id comes with its first answer (KIP-345)
            assignments: tuple[SyncGroupAssignment, ...] = ()
            if join.leader == self.member_id:
                assignments = await self._assign(join)
            sync = await self.metadata.request(Api.SYNC_GROUP, SyncGroupRequest(
                self.group_id, join.generation_id, self.member_id, assignments, self.group_instance_id),
                SyncGroupResponse)
            if sync.error_code is not ErrorCode.NONE:
                self._reset_if_left_behind(sync.error_code)
                await self._back_off_or_raise(sync.error_code, sync.error_message)
                continue
            assignment = decode_assignment(sync.assignment)
            self.generation_id = join.generation_id
            self.owned = frozenset(TopicPartition(topic, n) for topic, numbers in assignment.items() for n in numbers)
            self.needs_join = False
            self._heartbeat = asyncio.create_task(self._heartbeats(), name=f"tributary-heartbeat-{self.group_id}")
            return assignment
        raise error_for(ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.group_id}: no generation after "
                        f"{JOIN_ATTEMPTS_MAX} joins")

    async def _assign(self, join: JoinGroupResponse) -> tuple[SyncGroupAssignment, ...]:
        """As the leader: the chosen assignor over every member's subscription. A subscription that
        does not decode counts as one to nothing (that member gets nothing; the others go on)."""
        assignor = next((found for found in self.assignors if found.name == join.protocol_name), None)
        if assignor is None:
            raise error_for(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"group {self.group_id} chose assignor "
                            f"{join.protocol_name!r}, not one of {[found.name for found in self.assignors]}")
        subscriptions: dict[str, Subscription] = {}
        for member in join.members:
            try:
                subscriptions[member.member_id] = decode_subscription(member.metadata)
            except ConsumerProtocolError:
                subscriptions[member.member_id] = Subscription(())
        topics = sorted({topic for subscribed in subscriptions.values() for topic in subscribed.topics})
        plan = assignor.assign(subscriptions, await self._partition_counts(topics))
        return tuple(SyncGroupAssignment(member, encode_assignment(parts)) for member, parts in plan.items())

    def _reset_if_left_behind(self, code: ErrorCode) -> None:
        """ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID: the group went on without this member (Kafka's
        resetGenerationOnResponseError); what it owned may be another member's now."""
        if code not in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
            return
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.generation_id = -1
        self.lost = self.lost or bool(self.owned)
        self.owned = frozenset()

    async def _back_off_or_raise(self, code: ErrorCode, message: str) -> None:
        if code not in REJOIN and not code.retriable:
            raise error_for(code, message or f"joining group {self.group_id}")
        await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            try:
                answer = await self.metadata.request(Api.HEARTBEAT, HeartbeatRequest(
                    self.group_id, self.generation_id, self.member_id, self.group_instance_id), GroupResponse)
            except TributaryError:
                continue  # no node answered: try again at the next interval
            if answer.error_code is ErrorCode.FENCED_INSTANCE_ID:
                self._fenced = answer.error_message or f"group.instance.id {self.group_instance_id} was taken over"
                self.needs_join = True
                return
            if answer.error_code in REJOIN:
                self._reset_if_left_behind(answer.error_code)
                self.needs_join = True
                return

    async def _stop_heartbeats(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None

    async def leave(self) -> None:
        await self._stop_heartbeats()
        if self.member_id and self.group_instance_id is None:  # KIP-345: a static member keeps its place
            with contextlib.suppress(TributaryError):
                await self.metadata.request(Api.LEAVE_GROUP, LeaveGroupRequest(self.group_id, (self.member_id,)),
                                            GroupResponse)
        self.member_id, self.generation_id, self.needs_join = "", -1, True
        self.owned, self.lost = frozenset(), False
