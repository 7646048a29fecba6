"""A small fake cluster for client tests: aiohttp servers on 127.0.0.1 over real `storage.Log`s.

Every fake node serves metadata, produce, fetch, list_offsets, offsets_for_leader_epoch,
delete_records, create/delete topics, describe_configs, incremental_alter_configs,
describe_replicas, offset commit/fetch and the group APIs (the node's own edges and cores: every
node coordinates every group; a group's tombstone or an OffsetDelete drops its offsets here) from
one shared state: one `Log` per partition (a single copy; the HW moves to the LEO on every append,
and a follower-served fetch sees `follower_lag` records less), the leader of each partition, and
committed offsets (with their leader epochs). A current leader epoch in a request is checked as a
node checks it. Tests steer it: move a leader (`move_leader`), truncate a log under a new leader
epoch (`truncate`), queue per-partition errors for an API (`inject`) or for the batch with a given
first sequence (`fail_sequence`), drop connections (`disconnect`), hold answers as a purgatory
does (`hold_answers`, counting how many wait at once), or stop a node.
Fetches long-poll on an `asyncio.Condition` signalled by appends, as a node's purgatory does.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from client.metadata import Metadata
from node.group_deletion import GroupDeletion
from node.group_membership import GroupMembership, with_client_host
from node.group_queries import GroupQueries
from replication.consumer_groups import GroupsConfig
from replication.group_coordinator import OffsetGroupsAnswer
from storage.config import LogConfig
from storage.errors import StorageError
from storage.log import Log
from storage.log_loader import LogLoader
from storage.records import read_header
from wire.api import REQUESTS, Api, error_response
from wire.codec import ProtocolError, pack, unpack
from wire.configs import (
    AlterConfigsResourceResult,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartitionResponse, FetchRequest, FetchResponse
from wire.group_admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from wire.group_membership import (
    GroupResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from wire.group_offsets import (
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from wire.log_offsets import (
    DeleteRecordsPartitionResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EpochEndOffsetResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from wire.metadata import (
    DescribeReplicasRequest,
    DescribeReplicasResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataRequest,
    MetadataResponse,
    MetadataTopic,
    ReplicaState,
)
from wire.produce import ProducePartitionResponse, ProduceRequest, ProduceResponse
from wire.producer_ids import InitProducerIdRequest, InitProducerIdResponse
from wire.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from wire.stream import STREAM_PATH, encode_response
from wire.stream import decode_request as decode_stream_request
from wire.topics import (
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class FakePartition:
    log: Log
    leader: int
    replicas: tuple[int, ...]
    leader_epoch: int = 0


@dataclass
class FakeState:
    directory: Path
    partitions: dict[tuple[str, int], FakePartition] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # group -> (topic, partition) -> (offset, leader epoch)
    committed: dict[str, dict[tuple[str, int], tuple[int, int]]] = field(default_factory=lambda: defaultdict(dict))
    injected: dict[tuple[Api, str, int], list[ErrorCode]] = field(default_factory=lambda: defaultdict(list))
    disconnects: dict[Api, int] = field(default_factory=lambda: defaultdict(int))
    lost_answers: dict[Api, int] = field(default_factory=lambda: defaultdict(int))
    failed_sequences: dict[tuple[str, int, int], list[ErrorCode]] = field(default_factory=lambda: defaultdict(list))
    lost_sequences: set[tuple[str, int, int]] = field(default_factory=set)
    held: dict[Api, asyncio.Event] = field(default_factory=dict)  # answers wait until the event is set
    holding: dict[Api, int] = field(default_factory=lambda: defaultdict(int))  # answers waiting now
    most_held: dict[Api, int] = field(default_factory=lambda: defaultdict(int))
    hold_changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    follower_lag: int = 0
    next_producer_id: int = 0
    requests: list[tuple[int, Api, object]] = field(default_factory=list)
    appended: asyncio.Condition = field(default_factory=asyncio.Condition)
    fetch_parked: asyncio.Event = field(default_factory=asyncio.Event)  # a fetch is long-polling


class FakeCluster:
    """`nodes` fake nodes with ids 0..nodes-1; `async with` starts and stops them."""

    def __init__(self, directory: Path, nodes: int = 3, rack_of: dict[int, str] | None = None) -> None:
        self.state = FakeState(directory)
        self.node_ids = list(range(nodes))
        self.rack_of = rack_of or {}
        self.ports: dict[int, int] = {}
        self.runners: dict[int, web.AppRunner] = {}
        # Consumer groups: the node's own edge and core, every node the coordinator of every group.
        self.groups = GroupMembership(0, 1, GroupsConfig(group_initial_rebalance_delay_ms=0), lambda partition: 0,
                                      lambda partition: 0, _coordinator_known, lambda partition: None, _no_forward,
                                      self._stored, _loaded, lambda: time.monotonic_ns() // 1_000_000, random.Random(0))
        self.group_queries = GroupQueries(0, 1, lambda partition: 0, _coordinator_known, lambda partition: None,
                                          _no_forward, self.groups, self._offset_groups)
        self.group_deletion = GroupDeletion(0, 1, lambda partition: 0, _coordinator_known, lambda partition: None,
                                            _no_forward, self.groups, self._offset_groups, self._delete_offsets,
                                            lambda topic, partition: (topic, partition) in self.state.partitions)

    async def __aenter__(self) -> FakeCluster:
        for node_id in self.node_ids:
            await self.start_node(node_id)
        await self.groups.take_office(0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop_all()
        for partition in self.state.partitions.values():
            partition.log.close()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for node, port in self.ports.items() if node in self.runners)

    async def start_node(self, node_id: int) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        streams: set[web.WebSocketResponse] = set()
        app.router.add_get(STREAM_PATH, self._stream_handler(node_id, streams))

        async def close_streams(_app: web.Application) -> None:  # connections to a stopped node close
            for stream in list(streams):
                await stream.close()
        app.on_shutdown.append(close_streams)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.ports.get(node_id, 0))
        await site.start()
        self.ports[node_id] = runner.addresses[0][1]
        self.runners[node_id] = runner

    async def stop_node(self, node_id: int) -> None:
        await self.runners.pop(node_id).cleanup()

    async def stop_all(self) -> None:
        """Every node stops: connections to them are refused at once."""
        for node_id in list(self.runners):
            await self.stop_node(node_id)

    # -- test controls ------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     configs: dict[str, str] | None = None) -> None:
        for number in range(partitions):
            replicas = tuple((number + i) % len(self.node_ids) for i in range(replication_factor))
            log = LogLoader(self.state.directory / f"{topic}-{number}", LogConfig(), now_ms()).load()
            self.state.partitions[(topic, number)] = FakePartition(log, replicas[0], replicas)
        self.state.configs[topic] = dict(configs or {})

    def move_leader(self, topic: str, partition: int, leader: int) -> None:
        fake = self.state.partitions[(topic, partition)]
        fake.leader = leader
        fake.leader_epoch += 1

    def truncate(self, topic: str, partition: int, offset: int) -> None:
        """A new leader in a new epoch whose log ends at `offset` (an unclean election: the records
        from `offset` on were only on the replica that led before)."""
        fake = self.state.partitions[(topic, partition)]
        fake.log.truncate_to(offset, now_ms())
        fake.leader_epoch += 1

    def inject(self, api: Api, topic: str, partition: int, *codes: ErrorCode) -> None:
        """The next answers of `api` for the partition carry `codes`, one per request (group APIs:
        `topic` is the group id and `partition` -1)."""
        self.state.injected[(api, topic, partition)].extend(codes)

    def disconnect(self, api: Api, times: int = 1) -> None:
        """The next `times` requests of `api` lose their connection with no answer."""
        self.state.disconnects[api] += times

    def lose_answers(self, api: Api, times: int = 1) -> None:
        """The next `times` requests of `api` are carried out, then lose their connection: the
        sender cannot tell whether they were (a timeout during a failover, seen from the client)."""
        self.state.lost_answers[api] += times

    def fail_sequence(self, topic: str, partition: int, base_sequence: int, *codes: ErrorCode) -> None:
        """The next produces of the idempotent batch whose first sequence is `base_sequence` get
        `codes` (one per request), appending nothing; so a test fails one batch among several in
        flight whatever order their requests arrive in."""
        self.state.failed_sequences[(topic, partition, base_sequence)].extend(codes)

    def lose_answer_of_sequence(self, topic: str, partition: int, base_sequence: int) -> None:
        """The next produce carrying the idempotent batch whose first sequence is `base_sequence` is
        carried out, then loses its connection (`lose_answers` for one batch among several)."""
        self.state.lost_sequences.add((topic, partition, base_sequence))

    def hold_answers(self, api: Api) -> None:
        """Requests of `api` are carried out at once but answered only after `release_answers`, as
        acks=all produces wait in a purgatory; `state.most_held[api]` counts how many waited at once."""
        self.state.held[api] = asyncio.Event()

    def release_answers(self, api: Api) -> None:
        self.state.held.pop(api).set()

    async def wait_held(self, api: Api, count: int) -> None:
        """Until `count` answers of `api` wait at once."""
        async with self.state.hold_changed:
            await self.state.hold_changed.wait_for(lambda: self.state.holding[api] >= count)

    def log(self, topic: str, partition: int) -> Log:
        return self.state.partitions[(topic, partition)].log

    def requests_of(self, api: Api) -> list[tuple[int, object]]:
        return [(node, request) for node, seen, request in self.state.requests if seen is api]

    # -- serving ------------------------------------------------------------------------

    def _stream_handler(self, node_id: int, streams: set[web.WebSocketResponse]):
        """Request streams (wire/stream.py), as a node serves them; a call the test has lose its
        connection closes the stream, failing every call on it (as a lost connection does)."""
        async def handle(request: web.Request) -> web.StreamResponse:
            stream = web.WebSocketResponse(max_msg_size=0)
            await stream.prepare(request)
            streams.add(stream)

            async def answer(correlation_id: int, api: Api, body: bytes) -> None:
                served = await self._serve(node_id, api, body, request.remote)
                if served is None:
                    await stream.close()
                elif not stream.closed:
                    with contextlib.suppress(ConnectionResetError):
                        await stream.send_bytes(encode_response(correlation_id, *served))

            calls: set[asyncio.Task[None]] = set()
            async for message in stream:
                call = asyncio.create_task(answer(*decode_stream_request(message.data)))
                calls.add(call)
                call.add_done_callback(calls.discard)
            streams.discard(stream)
            return stream

        return handle

    async def _serve(self, node_id: int, api: Api, body: bytes, remote: str | None) -> tuple[int, bytes] | None:
        """The status and body of one call's answer; None: its connection is lost instead."""
        if self.state.disconnects[api] > 0:
            self.state.disconnects[api] -= 1
            return None
        try:
            message = unpack(REQUESTS[api], body)
        except ProtocolError as error:
            return 400, pack(error_response(error.code, str(error)))
        if isinstance(message, JoinGroupRequest):
            message = with_client_host(message, remote, from_a_node=False)
        self.state.requests.append((node_id, api, message))
        answer = await getattr(self, f"_{api.value}")(node_id, message)
        held = self.state.held.get(api)
        if held is not None:
            await self._hold(api, held)
        if self.state.lost_answers[api] > 0 or self._loses_sequence(message):
            self.state.lost_answers[api] = max(0, self.state.lost_answers[api] - 1)
            return None
        return 200, pack(answer)

    async def _offset_groups(self, partition: int) -> OffsetGroupsAnswer:
        return OffsetGroupsAnswer(0, ErrorCode.NONE, frozenset(group for group, offsets in self.state.committed.items()
                                                               if offsets))

    async def _stored(self, partition: int, group_id: str, value: object) -> tuple[ErrorCode, str]:
        """A group's record is kept in memory only; its tombstone takes its offsets with it."""
        if value is None:
            self.state.committed.pop(group_id, None)
        return ErrorCode.NONE, ""

    async def _delete_offsets(self, partition: int, group_id: str,
                              topic_partitions: tuple[tuple[str, int], ...]) -> tuple[ErrorCode, str]:
        for tp in topic_partitions:
            self.state.committed[group_id].pop(tp, None)
        return ErrorCode.NONE, ""

    def _loses_sequence(self, message: object) -> bool:
        if not isinstance(message, ProduceRequest):
            return False
        carried = {(p.topic, p.partition, _base_sequence(p.records)) for p in message.partitions}
        lost = carried & self.state.lost_sequences
        self.state.lost_sequences -= lost
        return bool(lost)

    async def _hold(self, api: Api, held: asyncio.Event) -> None:
        state = self.state
        async with state.hold_changed:
            state.holding[api] += 1
            state.most_held[api] = max(state.most_held[api], state.holding[api])
            state.hold_changed.notify_all()
        await held.wait()
        state.holding[api] -= 1

    def _injected(self, api: Api, topic: str, partition: int) -> ErrorCode | None:
        queue = self.state.injected.get((api, topic, partition))
        return queue.pop(0) if queue else None

    async def _metadata(self, node_id: int, request: MetadataRequest) -> MetadataResponse:
        names = sorted({topic for topic, _ in self.state.partitions}) if request.topics is None else request.topics
        topics = []
        for name in names:
            numbers = sorted(p for t, p in self.state.partitions if t == name)
            if not numbers:
                topics.append(MetadataTopic(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partitions = tuple(
                MetadataPartition(n, fake.leader, fake.leader_epoch, fake.replicas, fake.replicas)
                for n in numbers for fake in [self.state.partitions[(name, n)]]
            )
            topics.append(MetadataTopic(name, ErrorCode.NONE, f"id-{name}", partitions, self.state.configs[name]))
        brokers = tuple(
            MetadataBroker(n, "127.0.0.1", self.ports[n], self.rack_of.get(n)) for n in self.node_ids if n in self.ports
        )
        return MetadataResponse("fake-cluster", 0, len(self.state.requests), brokers, tuple(topics))

    async def _produce(self, node_id: int, request: ProduceRequest) -> ProduceResponse:
        answers = []
        for p in request.partitions:
            fake = self.state.partitions.get((p.topic, p.partition))
            code = self._injected(Api.PRODUCE, p.topic, p.partition)
            sequence_failures = self.state.failed_sequences.get((p.topic, p.partition, _base_sequence(p.records)))
            if code is None and sequence_failures:
                code = sequence_failures.pop(0)
            if fake is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif code is None and fake.leader != node_id:
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            if code is not None:
                answers.append(ProducePartitionResponse(p.topic, p.partition, code, f"injected {code.name}"))
                continue
            try:
                info = fake.log.append_as_leader(p.records, fake.leader_epoch, now_ms())
            except StorageError as error:
                answers.append(ProducePartitionResponse(p.topic, p.partition, ErrorCode[error.error_name], str(error)))
                continue
            fake.log.update_high_watermark(fake.log.log_end_offset)
            answers.append(ProducePartitionResponse(
                p.topic, p.partition, ErrorCode.NONE, base_offset=info.first_offset,
                log_start_offset=fake.log.log_start_offset,
            ))
        async with self.state.appended:
            self.state.appended.notify_all()
        return ProduceResponse(tuple(answers))

    async def _fetch(self, node_id: int, request: FetchRequest) -> FetchResponse:
        deadline = asyncio.get_running_loop().time() + request.max_wait_ms / 1000
        while True:
            answers = [self._fetch_partition(node_id, request, p) for p in request.partitions]
            size = sum(len(answer.records) for answer in answers)
            errors = any(answer.error_code is not ErrorCode.NONE for answer in answers)
            remaining = deadline - asyncio.get_running_loop().time()
            if size >= request.min_bytes or errors or remaining <= 0:
                return FetchResponse(tuple(answers))
            async with self.state.appended:
                self.state.fetch_parked.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.state.appended.wait(), remaining)

    def _fetch_partition(self, node_id: int, request: FetchRequest, p) -> FetchPartitionResponse:
        fake = self.state.partitions.get((p.topic, p.partition))
        code = self._injected(Api.FETCH, p.topic, p.partition)
        if fake is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif code is None and node_id not in fake.replicas:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif code is None:
            code = _epoch_error(p.current_leader_epoch, fake.leader_epoch)
        if code is not None:
            return FetchPartitionResponse(p.topic, p.partition, code, f"injected {code.name}")
        log = fake.log
        high_watermark = log.high_watermark
        if node_id != fake.leader:
            high_watermark = max(log.log_start_offset, high_watermark - self.state.follower_lag)
        preferred = -1
        if request.rack_id and node_id == fake.leader:
            preferred = next((n for n in fake.replicas if self.rack_of.get(n) == request.rack_id), -1)
        if preferred >= 0 and preferred != node_id:
            return FetchPartitionResponse(p.topic, p.partition, ErrorCode.NONE, high_watermark=high_watermark,
                                          log_start_offset=log.log_start_offset, preferred_read_replica=preferred)
        try:
            data = log.read(p.fetch_offset, p.partition_max_bytes, max_offset=high_watermark)
        except StorageError as error:
            return FetchPartitionResponse(p.topic, p.partition, ErrorCode[error.error_name], str(error),
                                          high_watermark, log.log_start_offset)
        return FetchPartitionResponse(p.topic, p.partition, ErrorCode.NONE, "", high_watermark, log.log_start_offset,
                                      log.log_end_offset, data.records)

    async def _list_offsets(self, node_id: int, request: ListOffsetsRequest) -> ListOffsetsResponse:
        answers = []
        for p in request.partitions:
            fake = self.state.partitions.get((p.topic, p.partition))
            if fake is None:
                answers.append(ListOffsetsPartitionResponse(p.topic, p.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if p.timestamp == LATEST_TIMESTAMP:
                offset, timestamp = fake.log.high_watermark, -1
            elif p.timestamp == EARLIEST_TIMESTAMP:
                offset, timestamp = fake.log.log_start_offset, -1
            else:
                found = fake.log.offset_for_timestamp(p.timestamp)
                offset, timestamp = (-1, -1) if found is None else (found.offset, found.timestamp)
            answers.append(ListOffsetsPartitionResponse(p.topic, p.partition, ErrorCode.NONE, "", timestamp, offset,
                                                        fake.leader_epoch))
        return ListOffsetsResponse(tuple(answers))

    async def _delete_records(self, node_id: int, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        answers = []
        for p in request.partitions:
            fake = self.state.partitions.get((p.topic, p.partition))
            if fake is None:
                answers.append(DeleteRecordsPartitionResponse(p.topic, p.partition,
                                                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if p.offset > fake.log.high_watermark:
                answers.append(DeleteRecordsPartitionResponse(p.topic, p.partition, ErrorCode.OFFSET_OUT_OF_RANGE,
                                                              f"offset {p.offset} is above the high watermark"))
                continue
            low = fake.log.delete_records(p.offset)
            answers.append(DeleteRecordsPartitionResponse(p.topic, p.partition, ErrorCode.NONE, low_watermark=low))
        return DeleteRecordsResponse(tuple(answers))

    async def _create_topics(self, node_id: int, request: CreateTopicsRequest) -> CreateTopicsResponse:
        results = []
        for topic in request.topics:
            if any(t == topic.name for t, _ in self.state.partitions):
                results.append(CreatableTopicResult(topic.name, ErrorCode.TOPIC_ALREADY_EXISTS,
                                                    f"topic {topic.name!r} already exists"))
                continue
            partitions = 1 if topic.num_partitions < 0 else topic.num_partitions
            factor = min(len(self.node_ids), 1 if topic.replication_factor < 0 else topic.replication_factor)
            if topic.replication_factor > len(self.node_ids):
                results.append(CreatableTopicResult(topic.name, ErrorCode.INVALID_REPLICATION_FACTOR,
                                                    f"replication factor {topic.replication_factor} is larger than "
                                                    f"the {len(self.node_ids)} available brokers"))
                continue
            if not request.validate_only:
                self.create_topic(topic.name, partitions, factor, dict(topic.configs))
            results.append(CreatableTopicResult(topic.name, ErrorCode.NONE, None, f"id-{topic.name}", partitions,
                                                factor, dict(topic.configs)))
        return CreateTopicsResponse(tuple(results))

    async def _delete_topics(self, node_id: int, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        results = []
        for name in request.topic_names:
            keys = [key for key in self.state.partitions if key[0] == name]
            if not keys:
                results.append(DeletableTopicResult(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                    f"topic {name!r} does not exist"))
                continue
            for key in keys:
                self.state.partitions.pop(key).log.close()
            results.append(DeletableTopicResult(name, f"id-{name}", ErrorCode.NONE))
        return DeleteTopicsResponse(tuple(results))

    async def _describe_configs(self, node_id: int, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
        results = []
        for topic in request.topics:
            if topic not in self.state.configs:
                results.append(DescribeConfigsResult(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such topic"))
                continue
            overrides = self.state.configs[topic]
            results.append(DescribeConfigsResult(topic, ErrorCode.NONE, "",
                                                 {"retention.ms": "604800000", **overrides}, overrides))
        return DescribeConfigsResponse(tuple(results))

    async def _incremental_alter_configs(
        self, node_id: int, request: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        results = []
        for resource in request.resources:
            configs = self.state.configs.get(resource.resource_name)
            if configs is None:
                results.append(AlterConfigsResourceResult(resource.resource_type, resource.resource_name,
                                                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such topic"))
                continue
            for entry in resource.configs:
                if entry.op == 0:
                    configs[entry.name] = entry.value or ""
                elif entry.op == 1:
                    configs.pop(entry.name, None)
            results.append(AlterConfigsResourceResult(resource.resource_type, resource.resource_name, ErrorCode.NONE))
        return IncrementalAlterConfigsResponse(tuple(results))

    async def _describe_replicas(self, node_id: int, request: DescribeReplicasRequest) -> DescribeReplicasResponse:
        replicas = []
        for (topic, number), fake in sorted(self.state.partitions.items()):
            if node_id not in fake.replicas:
                continue
            log = fake.log
            lag = 0 if node_id == fake.leader else self.state.follower_lag
            replicas.append(ReplicaState(
                topic, number, "leader" if node_id == fake.leader else "follower", fake.leader, fake.leader_epoch,
                log.log_start_offset, max(log.log_start_offset, log.log_end_offset - lag),
                max(log.log_start_offset, log.high_watermark - lag), fake.replicas, log.size_in_bytes(),
            ))
        return DescribeReplicasResponse(node_id, tuple(replicas))

    async def _offset_commit(self, node_id: int, request: OffsetCommitRequest) -> OffsetCommitResponse:
        code = self._injected(Api.OFFSET_COMMIT, request.group_id, -1)
        if code is not None:
            return OffsetCommitResponse(tuple(
                OffsetCommitPartitionResponse(p.topic, p.partition, code) for p in request.partitions
            ))
        fenced, why = self.groups.commit_error(request.group_id, request.generation_id, request.member_id,
                                               request.group_instance_id)
        if fenced != ErrorCode.NONE:
            return OffsetCommitResponse(tuple(
                OffsetCommitPartitionResponse(p.topic, p.partition, fenced, why) for p in request.partitions))
        committed = self.state.committed[request.group_id]
        for p in request.partitions:
            committed[(p.topic, p.partition)] = (p.committed_offset, p.committed_leader_epoch)
        return OffsetCommitResponse(tuple(
            OffsetCommitPartitionResponse(p.topic, p.partition, ErrorCode.NONE) for p in request.partitions
        ))

    async def _join_group(self, node_id: int, request: JoinGroupRequest) -> JoinGroupResponse:
        return await self.groups.join(request)

    async def _sync_group(self, node_id: int, request: SyncGroupRequest) -> SyncGroupResponse:
        return await self.groups.sync(request)

    async def _heartbeat(self, node_id: int, request: HeartbeatRequest) -> GroupResponse:
        return await self.groups.heartbeat(request)

    async def _leave_group(self, node_id: int, request: LeaveGroupRequest) -> GroupResponse:
        return await self.groups.leave(request)

    async def _list_groups(self, node_id: int, request: ListGroupsRequest) -> ListGroupsResponse:
        code = self._injected(Api.LIST_GROUPS, "", node_id)  # inject(Api.LIST_GROUPS, "", node_id, ...)
        if code is not None:
            return ListGroupsResponse(code, (), f"injected {code.name}")
        return await self.group_queries.list_groups(request)

    async def _describe_groups(self, node_id: int, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
        groups = []
        for group in (await self.group_queries.describe_groups(request)).groups:
            code = self._injected(Api.DESCRIBE_GROUPS, group.group_id, -1)
            groups.append(group if code is None else DescribedGroup(code, group.group_id,
                                                                    error_message=f"injected {code.name}"))
        return DescribeGroupsResponse(tuple(groups))

    async def _delete_groups(self, node_id: int, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
        return await self.group_deletion.delete_groups(request)

    async def _offset_delete(self, node_id: int, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
        return await self.group_deletion.delete_offsets(request)

    async def _init_producer_id(self, node_id: int, request: InitProducerIdRequest) -> InitProducerIdResponse:
        self.state.next_producer_id += 1
        return InitProducerIdResponse(ErrorCode.NONE, self.state.next_producer_id - 1, 0)

    async def _offset_fetch(self, node_id: int, request: OffsetFetchRequest) -> OffsetFetchResponse:
        code = self._injected(Api.OFFSET_FETCH, request.group_id, -1)
        if code is not None:
            return OffsetFetchResponse(code, error_message=f"injected {code.name}")
        committed = self.state.committed.get(request.group_id, {})
        wanted = list(committed) if request.partitions is None else list(request.partitions)
        return OffsetFetchResponse(ErrorCode.NONE, tuple(
            OffsetFetchPartitionResponse(topic, partition, ErrorCode.NONE, offset, committed_leader_epoch=epoch)
            for topic, partition in wanted for offset, epoch in [committed.get((topic, partition), (-1, -1))]
        ))

    async def _offsets_for_leader_epoch(
        self, node_id: int, request: OffsetsForLeaderEpochRequest
    ) -> OffsetsForLeaderEpochResponse:
        answers = []
        for p in request.partitions:
            fake = self.state.partitions.get((p.topic, p.partition))
            if fake is None:
                answers.append(EpochEndOffsetResponse(p.topic, p.partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            code = (self._injected(Api.OFFSETS_FOR_LEADER_EPOCH, p.topic, p.partition)
                    or _epoch_error(p.current_leader_epoch, fake.leader_epoch)
                    or (ErrorCode.NOT_LEADER_OR_FOLLOWER if fake.leader != node_id else None))
            if code is not None:
                answers.append(EpochEndOffsetResponse(p.topic, p.partition, code, code.name))
                continue
            epoch, end_offset = fake.log.leader_epoch_cache.end_offset_for(p.leader_epoch, fake.log.log_end_offset)
            answers.append(EpochEndOffsetResponse(p.topic, p.partition, ErrorCode.NONE, "", epoch, end_offset))
        return OffsetsForLeaderEpochResponse(tuple(answers))


class FakeClusterThread:
    """A FakeCluster on its own event loop in a thread, for code that runs its own loop (the CLI's
    `asyncio.run`). `call(function)` runs `function(cluster)` on the cluster's loop, `run(coroutine)`
    a coroutine there."""

    def __init__(self, directory: Path, nodes: int = 3) -> None:
        self.directory = directory
        self.nodes = nodes
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.cluster: FakeCluster | None = None

    def __enter__(self) -> FakeCluster:
        self.thread.start()
        self.cluster = self.run(self._start())
        return self.cluster

    def __exit__(self, *exc_info: object) -> None:
        assert self.cluster is not None, "entered"
        self.run(self.cluster.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

    async def _start(self) -> FakeCluster:
        return await FakeCluster(self.directory, self.nodes).__aenter__()

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)

    def call(self, function):
        async def on_loop():
            return function(self.cluster)

        return self.run(on_loop())


async def serve_forever(directory: Path, nodes: int, topics: list[str]) -> None:
    """`python -m tests.client.fake_node DIR TOPIC:PARTITIONS...`: a fake cluster for manual runs
    and perf measurements; prints its bootstrap address."""
    async with FakeCluster(directory, nodes) as cluster:
        for spec in topics:
            name, _, partitions = spec.partition(":")
            cluster.create_topic(name, int(partitions or 1))
        print(cluster.bootstrap, flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    import sys

    asyncio.run(serve_forever(Path(sys.argv[1]), 3, sys.argv[2:]))


def _base_sequence(records: bytes) -> int:
    try:
        return read_header(records).base_sequence
    except StorageError:
        return -1


def count_refreshes(metadata: Metadata) -> list[int]:
    """Wrap `metadata.refresh`: the returned list has one entry per call from then on."""
    calls: list[int] = []
    refresh = metadata.refresh

    async def counted(all_topics: bool = False) -> MetadataResponse:
        calls.append(len(calls))
        return await refresh(all_topics)

    metadata.refresh = counted  # type: ignore[method-assign]
    return calls


def _epoch_error(requested: int, current: int) -> ErrorCode | None:
    """A request's current_leader_epoch checked as a node does: older is fenced, newer unknown."""
    if requested in (-1, current):
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


async def _coordinator_known(partition: int, create: bool) -> None:
    return None


async def _no_forward(address: str, api: Api, request: object, response_type: type) -> object:
    raise AssertionError("a fake node coordinates every group itself")


async def _loaded(partition: int) -> tuple[ErrorCode, int, tuple[()]]:
    return ErrorCode.NONE, 0, ()  # no groups stored; leader epoch 0, as `leader_epoch_of` says
