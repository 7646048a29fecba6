"""GroupMember: one consumer's membership of its group (Kafka's ConsumerCoordinator, classic protocol).

`join` joins the group (again): a JoinGroup with an empty member id is answered MEMBER_ID_REQUIRED
with an id to join with (KIP-394); the leader of the new generation assigns the partitions of
every member's subscription (`consumer_protocol.range_assign`) and hands them over in its
SyncGroup; every member gets its part from its own. Then heartbeats run in the background every
`heartbeat.interval.ms`; the first that answers REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or
UNKNOWN_MEMBER_ID sets `needs_join`, and the consumer joins again on its next poll. Any node takes
the requests (it forwards them to the coordinator). `leave` sends LeaveGroup, so the others
rebalance at once instead of after this member's session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from client.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from client.errors import TributaryError, error_for
from client.metadata import Metadata
from client.protocol import (
    Api,
    ErrorCode,
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

PROTOCOL_TYPE = "consumer"
ASSIGNOR = "range"
REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
JOIN_ATTEMPTS_MAX = 1000


class GroupMember:
    """See the module docstring. `partition_counts(topics)` gives each topic's partition count."""

    def __init__(self, group_id: str, topics: list[str], metadata: Metadata, *, session_timeout_ms: int,
                 rebalance_timeout_ms: int, heartbeat_interval_ms: int, retry_backoff_ms: int,
                 request_timeout_ms: int, partition_counts: Callable[[list[str]], Awaitable[dict[str, int]]]) -> None:
        self.group_id = group_id
        self.topics = topics
        self.metadata = metadata
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self._partition_counts = partition_counts
        self.member_id = ""
        self.generation_id = -1
        self.needs_join = True
        self._heartbeat: asyncio.Task[None] | None = None

    def update_topics(self, topics: list[str]) -> None:
        """A pattern subscription now matches `topics`: if they differ, join again with them (Kafka
        joins again when the subscription is no longer the one it joined with)."""
        if topics != self.topics:
            self.topics = topics
            self.needs_join = True

    async def join(self) -> dict[str, list[int]]:
        """Join (again) and return this member's assignment, topic -> partitions."""
        await self._stop_heartbeats()
        for _ in range(JOIN_ATTEMPTS_MAX):
            join = await self.metadata.request(Api.JOIN_GROUP, JoinGroupRequest(
                self.group_id, self.session_timeout_ms, self.rebalance_timeout_ms, self.member_id, PROTOCOL_TYPE,
                (JoinGroupProtocol(ASSIGNOR, encode_subscription(self.topics)),)), JoinGroupResponse,
                self.rebalance_timeout_ms + self.request_timeout_ms)
            if join.error_code in (ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.UNKNOWN_MEMBER_ID):
                self.member_id = join.member_id if join.error_code is ErrorCode.MEMBER_ID_REQUIRED else ""
                continue
            if join.error_code is not ErrorCode.NONE:
                await self._back_off_or_raise(join.error_code, join.error_message)
                continue
            self.generation_id = join.generation_id
            assignments: tuple[SyncGroupAssignment, ...] = ()
            if join.leader == self.member_id:
                assignments = await self._assign(join)
            sync = await self.metadata.request(Api.SYNC_GROUP, SyncGroupRequest(
                self.group_id, self.generation_id, self.member_id, assignments), SyncGroupResponse)
            if sync.error_code is ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            if sync.error_code is not ErrorCode.NONE:
                await self._back_off_or_raise(sync.error_code, sync.error_message)
                continue
            self.needs_join = False
            self._heartbeat = asyncio.create_task(self._heartbeats(), name=f"tributary-heartbeat-{self.group_id}")
            return decode_assignment(sync.assignment)
        raise error_for(ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.group_id}: no generation after "
                        f"{JOIN_ATTEMPTS_MAX} joins")

    async def _assign(self, join: JoinGroupResponse) -> tuple[SyncGroupAssignment, ...]:
        subscriptions = {member.member_id: decode_subscription(member.metadata) for member in join.members}
        topics = sorted({topic for subscribed in subscriptions.values() for topic in subscribed})
        plan = range_assign(subscriptions, await self._partition_counts(topics))
        return tuple(SyncGroupAssignment(member, encode_assignment(parts)) for member, parts in plan.items())

    async def _back_off_or_raise(self, code: ErrorCode, message: str) -> None:
        if code not in REJOIN and not code.retriable:
            raise error_for(code, message or f"joining group {self.group_id}")
        await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            try:
                answer = await self.metadata.request(Api.HEARTBEAT, HeartbeatRequest(
                    self.group_id, self.generation_id, self.member_id), GroupResponse)
            except TributaryError:
                continue  # no node answered: try again at the next interval
            if answer.error_code in REJOIN:
                if answer.error_code is ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
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
        if self.member_id:
            with contextlib.suppress(TributaryError):
                await self.metadata.request(Api.LEAVE_GROUP, LeaveGroupRequest(self.group_id, (self.member_id,)),
                                            GroupResponse)
        self.member_id, self.generation_id, self.needs_join = "", -1, True
