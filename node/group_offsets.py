"""Committed consumer offsets, stored in the compacted internal topic `__consumer_offsets`.

As in Kafka, a group belongs to partition `abs(java hashCode(group_id)) % offsets.topic.num.partitions`
and the leader of that partition is its coordinator. A commit is a produce (acks=all) of one record
per partition to that partition, with Kafka's OffsetCommitKey (version 1) and OffsetCommitValue
(version 3) encodings, so Kafka's tools can read the topic; compaction keeps the last commit per key.
An offset fetch replays the partition up to its high watermark into an in-memory map, continuing
from where the previous replay stopped; the log is the only truth, so a new coordinator after
failover answers the same. Two rules keep a replay from missing acknowledged commits:
- A new leader's HW may lag the start of its leader epoch until its followers fetch, and a commit
  the old leader acknowledged may lie in between. The partition then answers "latest" ListOffsets
  with OFFSET_NOT_AVAILABLE, and the coordinator answers COORDINATOR_LOAD_IN_PROGRESS (retriable),
  as Kafka's does while it loads the partition after its election.
- A replay belongs to one leader epoch: its fetches carry that epoch (fenced once it ends), and a
  coordinator elected again replays afresh, as Kafka unloads a group's offsets when its coordinator
  resigns and loads them when it is elected. A replay kept across epochs could continue over a log
  that changed below it (an unclean election truncates it and writes other commits at those offsets).
Any node accepts both requests and forwards them to the coordinator.
The topic is created on the first commit (Kafka's auto-creation of internal topics).
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from client import protocol
from client.protocol import ErrorCode
from storage.records import build_batch, iter_records

OFFSETS_TOPIC = "__consumer_offsets"
KEY_VERSION = 1
VALUE_VERSION = 3
NO_LEADER_EPOCH = -1
REPLAY_MAX_BYTES = 4 * 1024 * 1024


def coordinator_partition(group_id: str, partition_count: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode()) % partitionCount` (Java String.hashCode over UTF-16)."""
    code = 0
    for unit in struct.unpack(f">{len(group_id.encode('utf-16-be')) // 2}H", group_id.encode("utf-16-be")):
        code = (31 * code + unit) & 0xFFFFFFFF
    return (code & 0x7FFFFFFF) % partition_count


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def encode_key(group_id: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(group_id) + _string(topic) + struct.pack(">i", partition)


def encode_value(offset: int, metadata: str, commit_timestamp_ms: int) -> bytes:
    return (struct.pack(">hqi", VALUE_VERSION, offset, NO_LEADER_EPOCH) + _string(metadata)
            + struct.pack(">q", commit_timestamp_ms))


def _read_string(data: bytes, position: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, position)
    start = position + 2
    return data[start:start + length].decode(), start + length


def decode_key(data: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset-commit key; None for other key versions (group metadata)."""
    (version,) = struct.unpack_from(">h", data, 0)
    if version not in (0, 1):
        return None
    group, position = _read_string(data, 2)
    topic, position = _read_string(data, position)
    (partition,) = struct.unpack_from(">i", data, position)
    return group, topic, partition


def decode_value(data: bytes) -> tuple[int, str]:
    """(offset, metadata) of an OffsetCommitValue of version 1 to 3."""
    (version, offset) = struct.unpack_from(">hq", data, 0)
    position = 10 + (4 if version >= 3 else 0)
    metadata, _ = _read_string(data, position)
    return offset, metadata


@dataclass
class _Replay:
    """One `__consumer_offsets` partition as read so far by its leader in `leader_epoch`."""

    leader_epoch: int
    next_offset: int = 0
    offsets: dict[tuple[str, str, int], tuple[int, str]] = field(default_factory=dict)


class GroupOffsets:
    """The node's coordinator role. `produce`/`fetch`/`list_offsets` are the broker's own request methods;
    `coordinator_address(partition)` is the leader's inter-broker address (None: no leader);
    `forward(address, api, request, response_type)` calls another node; `create_topic()` makes
    `__consumer_offsets` exist; `clock` gives the commit timestamp."""

    def __init__(
        self,
        node_id: int,
        partition_count: int,
        leader_of: Callable[[int], int | None],
        coordinator_address: Callable[[int], str | None],
        produce: Callable[[protocol.ProduceRequest], Awaitable[protocol.ProduceResponse]],
        fetch: Callable[[protocol.FetchRequest], Awaitable[protocol.FetchResponse]],
        list_offsets: Callable[[protocol.ListOffsetsRequest], Awaitable[protocol.ListOffsetsResponse]],
        forward: Callable[[str, protocol.Api, Any, type], Awaitable[Any]],
        create_topic: Callable[[], Awaitable[ErrorCode]],
        clock: Callable[[], int],
        timeout_ms: int,
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
        self._replays: dict[int, _Replay] = {}

    async def commit(self, request: protocol.OffsetCommitRequest) -> protocol.OffsetCommitResponse:
        partition = coordinator_partition(request.group_id, self._partition_count)
        code = await self._route(partition, create=True)
        if code is not None:
            return self._commit_failed(request, code)
        leader = self._leader_of(partition)
        if leader != self._node_id:
            address = self._coordinator_address(partition)
            assert address is not None
            return await self._forward(address, protocol.Api.OFFSET_COMMIT, request, protocol.OffsetCommitResponse)
        now = self._clock()
        records = [
            (encode_key(request.group_id, p.topic, p.partition),
             encode_value(p.committed_offset, p.committed_metadata, now))
            for p in request.partitions
        ]
        if not records:
            return protocol.OffsetCommitResponse(())
        produced = await self._produce(protocol.ProduceRequest(
            -1, self._timeout_ms, (protocol.ProducePartition(OFFSETS_TOPIC, partition, build_batch(records)),)))
        result = produced.partitions[0]
        if result.error_code != ErrorCode.NONE:
            return self._commit_failed(request, _coordinator_error(result.error_code), result.error_message)
        return protocol.OffsetCommitResponse(tuple(
            protocol.OffsetCommitPartitionResponse(p.topic, p.partition, ErrorCode.NONE) for p in request.partitions))

    async def fetch(self, request: protocol.OffsetFetchRequest) -> protocol.OffsetFetchResponse:
        partition = coordinator_partition(request.group_id, self._partition_count)
        code = await self._route(partition, create=False)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return self._answer(request, {})  # nothing was ever committed
        if code is not None:
            return protocol.OffsetFetchResponse(code, (), _message(code))
        if self._leader_of(partition) != self._node_id:
            address = self._coordinator_address(partition)
            assert address is not None
            return await self._forward(address, protocol.Api.OFFSET_FETCH, request, protocol.OffsetFetchResponse)
        latest = await self._latest(partition)
        if latest.error_code != ErrorCode.NONE:
            code = _coordinator_error(latest.error_code)
            return protocol.OffsetFetchResponse(code, (), _message(code, latest.error_message))
        assert latest.leader_epoch >= 0, f"latest of {OFFSETS_TOPIC}-{partition} has no epoch: {latest}"
        replay = self._replays.get(partition)
        if replay is None or replay.leader_epoch != latest.leader_epoch:
            replay = self._replays[partition] = _Replay(latest.leader_epoch)
        code = await self._catch_up(partition, replay)
        if code != ErrorCode.NONE:
            return protocol.OffsetFetchResponse(_coordinator_error(code), (), _message(code))
        return self._answer(request, replay.offsets)

    async def _latest(self, partition: int) -> protocol.ListOffsetsPartitionResponse:
        """The "latest" ListOffsets of `partition` on this node, which the partition refuses with
        OFFSET_NOT_AVAILABLE while its leader's HW lags the start of its epoch, and off the leader.
        Once answered, the HW covers every commit an earlier leader acknowledged, and `leader_epoch`
        (the epoch of the HW's offset) is this leader's epoch."""
        response = await self._list_offsets(protocol.ListOffsetsRequest(
            (protocol.ListOffsetsPartition(OFFSETS_TOPIC, partition, protocol.LATEST_TIMESTAMP),)))
        return response.partitions[0]

    async def _route(self, partition: int, create: bool) -> ErrorCode | None:
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

    async def _catch_up(self, partition: int, replay: _Replay) -> ErrorCode:
        while True:
            response = await self._fetch(protocol.FetchRequest(
                (protocol.FetchPartition(OFFSETS_TOPIC, partition, replay.next_offset, REPLAY_MAX_BYTES,
                                         current_leader_epoch=replay.leader_epoch),),
                max_wait_ms=0, min_bytes=0))
            data = response.partitions[0]
            if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and replay.next_offset < data.log_start_offset:
                replay.next_offset = data.log_start_offset
                continue
            if data.error_code != ErrorCode.NONE:
                return data.error_code
            if not data.records:
                return ErrorCode.NONE
            for header, records in iter_records(data.records):
                for record in records:
                    if record.offset < replay.next_offset or record.key is None:
                        continue
                    key = decode_key(record.key)
                    if key is None:
                        continue
                    if record.value is None:
                        replay.offsets.pop(key, None)
                    else:
                        replay.offsets[key] = decode_value(record.value)
                replay.next_offset = max(replay.next_offset, header.last_offset + 1)

    def _answer(self, request: protocol.OffsetFetchRequest,
                offsets: dict[tuple[str, str, int], tuple[int, str]]) -> protocol.OffsetFetchResponse:
        if request.partitions is None:
            wanted = sorted((topic, partition) for group, topic, partition in offsets if group == request.group_id)
        else:
            wanted = list(request.partitions)
        partitions = []
        for topic, partition in wanted:
            offset, metadata = offsets.get((request.group_id, topic, partition), (-1, ""))
            partitions.append(protocol.OffsetFetchPartitionResponse(topic, partition, ErrorCode.NONE, offset, metadata))
        return protocol.OffsetFetchResponse(ErrorCode.NONE, tuple(partitions))

    def _commit_failed(self, request: protocol.OffsetCommitRequest, code: ErrorCode,
                       message: str = "") -> protocol.OffsetCommitResponse:
        return protocol.OffsetCommitResponse(tuple(
            protocol.OffsetCommitPartitionResponse(p.topic, p.partition, code, message or _message(code))
            for p in request.partitions))


def _coordinator_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed offsets-topic write or read to what the group's client sees."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.NOT_COORDINATOR
    if code == ErrorCode.OFFSET_NOT_AVAILABLE:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # a new leader's HW lags its epoch start
    if code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


def _message(code: ErrorCode, detail: str = "") -> str:
    """What to do about `code`; `detail` is the partition's own message, when it gave one."""
    suffix = f" ({detail})" if detail else ""
    if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR):
        return ("the group's coordinator is moving or starting, or fewer brokers are active than "
                f"offsets.topic.replication.factor; retry after a short backoff{suffix}")
    return (f"{OFFSETS_TOPIC} could not be created or read ({code.name}); check that "
            "offsets.topic.replication.factor does not exceed the live brokers and that the controller is reachable, "
            f"then retry{suffix}")
