"""GroupOffsets: the node's edge of the group coordinator core (`replication/group_coordinator.py`).

Any node accepts OffsetCommit and OffsetFetch and forwards them to the coordinator, the leader of the
group's `__consumer_offsets` partition; the topic is created on the first commit (Kafka's
auto-creation of internal topics). On the coordinator the core decides everything; this module
carries out its requests on the node's broker (a produce, a "latest" ListOffsets, a consumer fetch)
and hands the answers back.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from replication.group_coordinator import (
    OFFSETS_TOPIC,
    CommitAnswer,
    CommitOffsets,
    CoordinatorAnswer,
    CoordinatorEvent,
    CoordinatorReady,
    DeleteOffsets,
    FetchAnswer,
    FetchOffsets,
    GroupCoordinator,
    GroupsLoaded,
    LatestListed,
    ListLatest,
    ListOffsetGroups,
    LoadGroups,
    OffsetGroupsAnswer,
    PartitionOffset,
    Produced,
    ProduceOffsets,
    Read,
    ReadOffsets,
    WriteGroupMetadata,
    coordinator_partition,
)
from replication.group_metadata import GroupMetadata
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchRequest, FetchResponse
from wire.group_offsets import (
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from wire.log_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse
from wire.produce import ProducePartition, ProduceRequest, ProduceResponse
from wire.sentinels import LATEST_TIMESTAMP, NO_EPOCH

__all__ = ["OFFSETS_TOPIC", "GroupOffsets"]

REPLAY_MAX_BYTES = 4 * 1024 * 1024
INT32_MAX = 2**31 - 1  # committed_leader_epoch is Kafka's int32, as the OffsetCommitValue stores it


class GroupOffsets:
    """The node's coordinator role. `produce`/`fetch`/`list_offsets` are the broker's own request methods;
    `coordinator_address(partition)` is the leader's inter-broker address (None: no leader);
    `forward(address, api, request, response_type)` calls another node; `create_topic()` makes
    `__consumer_offsets` exist; `clock` gives the commit timestamp; `commit_error(group, generation,
    member, instance)` fences a commit by the group's membership (node/group_membership.py)."""

    def __init__(
        self,
        node_id: int,
        partition_count: int,
        leader_of: Callable[[int], int | None],
        coordinator_address: Callable[[int], str | None],
        produce: Callable[[ProduceRequest], Awaitable[ProduceResponse]],
        fetch: Callable[[FetchRequest], Awaitable[FetchResponse]],
        list_offsets: Callable[[ListOffsetsRequest], Awaitable[ListOffsetsResponse]],
        forward: Callable[[str, Api, Any, type], Awaitable[Any]],
        create_topic: Callable[[], Awaitable[ErrorCode]],
        clock: Callable[[], int],
        timeout_ms: int,
        commit_error: Callable[[str, int, str, str | None], tuple[ErrorCode, str]],
    ) -> None:
        self._node_id = node_id
        self._partition_count = partition_count
        self._leader_of = leader_of
        self._coordinator_address = coordinator_address
        self._produce = produce
        self._fetch = fetch
        self._list_offsets = list_offsets
        self._forward = forward
        self._create_topic = create_topic
        self._clock = clock
        self._timeout_ms = timeout_ms
        self._commit_error = commit_error
        self._core = GroupCoordinator()
        self._request_ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[CoordinatorAnswer]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def commit(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        partition = coordinator_partition(request.group_id, self._partition_count)
        code = await self.route(partition, create=True)
        if code is not None:
            return self._commit_failed(request, code)
        if self._leader_of(partition) != self._node_id:
            address = self._coordinator_address(partition)
            assert address is not None
            return await self._forward(address, Api.OFFSET_COMMIT, request, OffsetCommitResponse)
        fenced, why = self._commit_error(request.group_id, request.generation_id, request.member_id,
                                         request.group_instance_id)
        if fenced != ErrorCode.NONE:
            return self._commit_failed(request, fenced, why)
        if any(not NO_EPOCH <= p.committed_leader_epoch <= INT32_MAX for p in request.partitions):
            return self._commit_failed(request, ErrorCode.INVALID_REQUEST, "committed_leader_epoch is an epoch "
                                       f"(0 to {INT32_MAX}) or {NO_EPOCH} for none")
        offsets = tuple(PartitionOffset(p.topic, p.partition, p.committed_offset, p.committed_metadata,
                                        p.committed_leader_epoch) for p in request.partitions)
        answer = await self._ask(lambda request_id: CommitOffsets(request_id, request.group_id, partition, offsets,
                                                                  self._clock()))
        assert isinstance(answer, CommitAnswer), answer
        if answer.error != ErrorCode.NONE:
            return self._commit_failed(request, answer.error, answer.message)
        return OffsetCommitResponse(tuple(
            OffsetCommitPartitionResponse(p.topic, p.partition, ErrorCode.NONE) for p in request.partitions))

    async def fetch(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        partition = coordinator_partition(request.group_id, self._partition_count)
        code = await self.route(partition, create=False)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return OffsetFetchResponse(ErrorCode.NONE, tuple(  # nothing was ever committed
                OffsetFetchPartitionResponse(topic, index, ErrorCode.NONE, -1, "")
                for topic, index in request.partitions or ()))
        if code is not None:
            return OffsetFetchResponse(code, (), _message(code))
        if self._leader_of(partition) != self._node_id:
            address = self._coordinator_address(partition)
            assert address is not None
            return await self._forward(address, Api.OFFSET_FETCH, request, OffsetFetchResponse)
        wanted = None if request.partitions is None else tuple(request.partitions)
        answer = await self._ask(lambda request_id: FetchOffsets(request_id, request.group_id, partition, wanted))
        assert isinstance(answer, FetchAnswer), answer
        if answer.error != ErrorCode.NONE:
            return OffsetFetchResponse(answer.error, (), _message(answer.error, answer.message))
        return OffsetFetchResponse(ErrorCode.NONE, tuple(
            OffsetFetchPartitionResponse(entry.topic, entry.partition, ErrorCode.NONE, entry.offset,
                                                  entry.metadata, entry.leader_epoch)
            for entry in answer.offsets))

    async def group_ids(self, partition: int) -> OffsetGroupsAnswer:
        """On the partition's leader: the groups with committed offsets on it, read up to its HW
        (ListGroups and DescribeGroups show them; node/group_queries.py)."""
        answer = await self._ask(lambda request_id: ListOffsetGroups(request_id, partition))
        assert isinstance(answer, OffsetGroupsAnswer), answer
        return answer

    async def write_group(self, partition: int, group_id: str, value: GroupMetadata | None) -> tuple[ErrorCode, str]:
        """Store a group's membership record here, the coordinator (node/group_membership.py asks)."""
        answer = await self._ask(lambda request_id: WriteGroupMetadata(request_id, group_id, partition, value,
                                                                       self._clock()))
        assert isinstance(answer, CommitAnswer), answer
        return answer.error, answer.message

    async def delete_offsets(self, partition: int, group_id: str,
                             topic_partitions: tuple[tuple[str, int], ...]) -> tuple[ErrorCode, str]:
        """Write tombstones of the group's offsets of `topic_partitions` here, the coordinator (OffsetDelete,
        decided by the membership core; node/group_deletion.py)."""
        answer = await self._ask(lambda request_id: DeleteOffsets(request_id, group_id, partition, topic_partitions))
        assert isinstance(answer, CommitAnswer), answer
        return answer.error, answer.message

    async def load_groups(self, partition: int) -> tuple[ErrorCode, int, tuple[tuple[str, GroupMetadata], ...]]:
        """Every group stored in `partition`, replayed to its HW, and the leader epoch of the replay."""
        answer = await self._ask(lambda request_id: LoadGroups(request_id, partition))
        assert isinstance(answer, GroupsLoaded), answer
        return answer.error, answer.leader_epoch, answer.groups

    async def _ask(self, event_for: Callable[[int], CoordinatorEvent]) -> CoordinatorAnswer:
        """Step the core with the request and await its answer."""
        request_id = next(self._request_ids)
        future: asyncio.Future[CoordinatorAnswer] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        try:
            self._step(event_for(request_id))
            return await future
        finally:
            self._waiting.pop(request_id, None)

    def _step(self, event: CoordinatorEvent) -> None:
        self._perform(self._core.handle(event))

    def _perform(self, ready: CoordinatorReady) -> None:
        for answer in ready.answers:
            future = self._waiting.get(answer.request_id)
            if future is not None and not future.done():
                future.set_result(answer)
        for request in ready.requests:
            task = asyncio.create_task(self._carry_out(request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _carry_out(self, request: ProduceOffsets | ListLatest | ReadOffsets) -> None:
        """One request of the core on this node's broker; its answer goes back to the core (an
        exception of the broker as REQUEST_TIMED_OUT, so that no load waits for ever)."""
        event: CoordinatorEvent
        try:
            if isinstance(request, ProduceOffsets):
                produced = (await self._produce(ProduceRequest(-1, self._timeout_ms, (
                    ProducePartition(OFFSETS_TOPIC, request.partition, request.records),)))).partitions[0]
                event = Produced(request.token, produced.error_code, produced.error_message)
            elif isinstance(request, ListLatest):
                latest = (await self._list_offsets(ListOffsetsRequest((
                    ListOffsetsPartition(OFFSETS_TOPIC, request.partition, LATEST_TIMESTAMP),
                )))).partitions[0]
                event = LatestListed(request.token, latest.error_code, latest.leader_epoch, latest.error_message)
            else:
                data = (await self._fetch(FetchRequest(
                    (FetchPartition(OFFSETS_TOPIC, request.partition, request.offset, REPLAY_MAX_BYTES,
                                             current_leader_epoch=request.leader_epoch),),
                    max_wait_ms=0, min_bytes=0))).partitions[0]
                event = Read(request.token, data.error_code, data.records, data.log_start_offset)
        except Exception as error:  # the broker failed the call (a bug, or stopping): the waiters hear of it
            message = f"{type(error).__name__}: {error}"
            event = _failed(request, message)
        self._step(event)

    async def route(self, partition: int, create: bool) -> ErrorCode | None:
        """None when the coordinator is known; else the error to answer with."""
        leader = self._leader_of(partition)
        if leader is None and create:
            code = await self._create_topic()
            if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                return code
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # retriable: the topic's leaders are being elected
        if leader is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if leader < 0 or (leader != self._node_id and self._coordinator_address(partition) is None):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return None

    def _commit_failed(self, request: OffsetCommitRequest, code: ErrorCode,
                       message: str = "") -> OffsetCommitResponse:
        return OffsetCommitResponse(tuple(
            OffsetCommitPartitionResponse(p.topic, p.partition, code, message or _message(code))
            for p in request.partitions))


def _failed(request: ProduceOffsets | ListLatest | ReadOffsets, message: str) -> CoordinatorEvent:
    if isinstance(request, ProduceOffsets):
        return Produced(request.token, ErrorCode.REQUEST_TIMED_OUT, message)
    if isinstance(request, ListLatest):
        return LatestListed(request.token, ErrorCode.REQUEST_TIMED_OUT, message=message)
    return Read(request.token, ErrorCode.REQUEST_TIMED_OUT)


def _message(code: ErrorCode, detail: str = "") -> str:
    """What to do about `code`; `detail` is the partition's own message, when it gave one."""
    suffix = f" ({detail})" if detail else ""
    if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
        return ("the group's coordinator is moving or starting, or fewer brokers are active than "
                f"offsets.topic.replication.factor; retry after a short backoff{suffix}")
    return (f"{OFFSETS_TOPIC} could not be created or read ({code.name}); check that "
            "offsets.topic.replication.factor does not exceed the live brokers and that the controller is reachable, "
            f"then retry{suffix}")
