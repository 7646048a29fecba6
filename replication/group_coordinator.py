"""GroupCoordinator: committed consumer offsets in `__consumer_offsets`, as a core.

As in Kafka, a group belongs to partition `abs(java hashCode(group_id)) % offsets.topic.num.partitions`
and the leader of that partition is its coordinator. A commit is a produce (acks=all) of one record
per partition to that partition, with Kafka's OffsetCommitKey (version 1) and OffsetCommitValue
(version 3) encodings, so Kafka's tools can read the topic; compaction keeps the last commit per key.
An offset fetch replays the partition up to its high watermark into a map, continuing from where the
previous replay stopped; the log is the only truth, so a new coordinator after failover answers the
same.

Committed offsets never go backwards (DESIGN §6.10), for two reasons checked here:
- a new leader's HW may lag the start of its leader epoch until its followers fetch, while the old
  leader acknowledged commits above it: a load first asks the partition for "latest" (ListOffsets),
  which the partition refuses with OFFSET_NOT_AVAILABLE in that window; the answer is then
  COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka answers while it loads a partition;
- a replay belongs to one leader epoch (the epoch "latest" answered with): its reads carry it, so a
  replay that outlives its epoch is fenced, and a node that leads the partition again replays from
  the start, as Kafka unloads a group's offsets on resignation and loads them on election.
Fetches of one partition share one load; a fetch that joins a load in progress is answered only by a
read issued after it joined (its acknowledged commits are below the HW by then). `ListOffsetGroups`
loads the same way and answers which groups have offsets on the partition (ListGroups and
DescribeGroups show such groups, as Kafka's coordinator shows the groups it loaded).
The same replay keeps the group metadata records (replication/group_metadata.py): `LoadGroups`,
asked when a node takes office as a partition's coordinator, is answered like a fetch, with every
group stored.

Deleting (DeleteGroups, OffsetDelete) writes tombstones (null values), which compaction keeps for
`delete.retention.ms` and then drops with the records they delete. A group's tombstone
(`WriteGroupMetadata` with no value: the membership core deletes the group) first waits for a replay
to the HW, as a fetch does, and goes out in one batch with a tombstone for every offset of the group
replayed or still being committed: the group and its offsets go together or not at all, and a new
coordinator's replay finds neither. `DeleteOffsets` writes the tombstones of the partitions named.

Events in, `CoordinatorReady` out: the core never touches the log itself. The owner performs each
request on its broker core (a produce, a "latest" ListOffsets, a consumer fetch at the replay's
epoch) and hands the answer back with the request's token. Routing (which node coordinates a group)
and creating the topic are the owner's (the node forwards a request to the leader's node).
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field

from replication.group_metadata import (
    GroupMetadata,
    decode_group_key,
    decode_group_value,
    encode_group_key,
    encode_group_value,
)
from storage.records import build_batch, iter_records
from wire.error_codes import ErrorCode
from wire.sentinels import NO_EPOCH

OFFSETS_TOPIC = "__consumer_offsets"
KEY_VERSION = 1
VALUE_VERSION = 3
NO_OFFSET = -1


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


def encode_value(offset: int, metadata: str, commit_timestamp_ms: int, leader_epoch: int = NO_EPOCH) -> bytes:
    return (struct.pack(">hqi", VALUE_VERSION, offset, leader_epoch) + _string(metadata)
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


def decode_value(data: bytes) -> tuple[int, str, int]:
    """(offset, metadata, leader epoch) of an OffsetCommitValue of version 1 to 3 (the leader
    epoch, KIP-320's committed_leader_epoch, only from version 3)."""
    (version, offset) = struct.unpack_from(">hq", data, 0)
    leader_epoch = struct.unpack_from(">i", data, 10)[0] if version >= 3 else NO_EPOCH
    metadata, _ = _read_string(data, 10 + (4 if version >= 3 else 0))
    return offset, metadata, leader_epoch


# -- events ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    """A committed offset of one partition of a group, with its metadata string and the leader epoch
    of the record before it (KIP-320: a consumer that starts there validates it first)."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""
    leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class CommitOffsets:
    """An OffsetCommit of group `group_id`, coordinated here on `__consumer_offsets` partition `partition`."""

    request_id: int
    group_id: str
    partition: int
    offsets: tuple[PartitionOffset, ...]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class WriteGroupMetadata:
    """Store group `group_id`'s membership record (`value` None: a tombstone), as the membership
    core asks (replication/consumer_groups.py); answered like a commit."""

    request_id: int
    group_id: str
    partition: int
    value: GroupMetadata | None
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class DeleteOffsets:
    """OffsetDelete: tombstones for group `group_id`'s offsets of `topic_partitions` (decided by
    the membership core, replication/consumer_groups.py); answered like a commit."""

    request_id: int
    group_id: str
    partition: int
    topic_partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class FetchOffsets:
    """An OffsetFetch of group `group_id` for `topic_partitions` (None: every partition it committed)."""

    request_id: int
    group_id: str
    partition: int
    topic_partitions: tuple[tuple[str, int], ...] | None


@dataclass(frozen=True, slots=True)
class LoadGroups:
    """The group records of partition `partition`, as its coordinator takes office (a new leader
    epoch): read with the offsets, by the same replay."""

    request_id: int
    partition: int


@dataclass(frozen=True, slots=True)
class Produced:
    """The answer to `ProduceOffsets` `token`."""

    token: int
    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class LatestListed:
    """The answer to `ListLatest` `token`: the leader epoch of the partition's "latest" offset."""

    token: int
    error: ErrorCode
    leader_epoch: int = NO_EPOCH
    message: str = ""


@dataclass(frozen=True, slots=True)
class Read:
    """The answer to `ReadOffsets` `token`: whole batches from the offset read (none: the replay is
    at the HW), and the partition's logStartOffset."""

    token: int
    error: ErrorCode
    records: bytes = b""
    log_start_offset: int = NO_OFFSET


@dataclass(frozen=True, slots=True)
class ListOffsetGroups:
    """Which groups have committed offsets on `__consumer_offsets` partition `partition`."""

    request_id: int
    partition: int


CoordinatorEvent = (CommitOffsets | WriteGroupMetadata | DeleteOffsets | FetchOffsets | LoadGroups | ListOffsetGroups
                    | Produced | LatestListed | Read)


# -- what the owner does ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceOffsets:
    """Produce `records` to `__consumer_offsets` partition `partition` with acks=all."""

    token: int
    partition: int
    records: bytes


@dataclass(frozen=True, slots=True)
class ListLatest:
    """ListOffsets "latest" of `__consumer_offsets` partition `partition` on this broker (leader only)."""

    token: int
    partition: int


@dataclass(frozen=True, slots=True)
class ReadOffsets:
    """A consumer fetch (max wait 0) of `partition` at `offset`, refused unless the leader is in `leader_epoch`."""

    token: int
    partition: int
    offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class CommitAnswer:
    """The answer to a CommitOffsets, a WriteGroupMetadata or a DeleteOffsets: the write acknowledged,
    or why not."""

    request_id: int
    error: ErrorCode
    message: str = ""


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The group's offsets (NO_OFFSET for a partition it never committed), or an error."""

    request_id: int
    error: ErrorCode
    offsets: tuple[PartitionOffset, ...] = ()
    message: str = ""


@dataclass(frozen=True, slots=True)
class OffsetGroupsAnswer:
    """The groups with offsets on the partition asked (read up to its HW), or an error."""

    request_id: int
    error: ErrorCode
    group_ids: frozenset[str] = frozenset()
    message: str = ""


@dataclass(frozen=True, slots=True)
class GroupsLoaded:
    """Every group stored in the partition, replayed to the HW in leader epoch `leader_epoch`, or an error."""

    request_id: int
    error: ErrorCode
    leader_epoch: int = NO_EPOCH
    groups: tuple[tuple[str, GroupMetadata], ...] = ()
    message: str = ""


CoordinatorRequest = ProduceOffsets | ListLatest | ReadOffsets
CoordinatorAnswer = CommitAnswer | FetchAnswer | GroupsLoaded | OffsetGroupsAnswer
LoadWaiter = FetchOffsets | LoadGroups | ListOffsetGroups | WriteGroupMetadata  # the last: a group's tombstone


@dataclass(frozen=True, slots=True)
class CoordinatorReady:
    """The owner performs `requests` (answering each with its token) and sends `answers`."""

    requests: tuple[CoordinatorRequest, ...] = ()
    answers: tuple[CoordinatorAnswer, ...] = ()


# -- the core ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Replay:
    """One partition as read so far by its leader in `leader_epoch`."""

    leader_epoch: int
    next_offset: int = 0
    offsets: dict[tuple[str, str, int], tuple[int, str, int]] = field(default_factory=dict)
    groups: dict[str, GroupMetadata] = field(default_factory=dict)


@dataclass(slots=True)
class _Load:
    """A load of one partition in progress: the fetches waiting for it, each with the number of
    reads issued when it joined (it is answered only by a later read)."""

    partition: int
    waiters: list[tuple[LoadWaiter, int]]
    replay: _Replay | None = None
    reads_issued: int = 0


@dataclass(slots=True)
class _Output:
    requests: list[CoordinatorRequest] = field(default_factory=list)
    answers: list[CoordinatorAnswer] = field(default_factory=list)


class GroupCoordinator:
    """The coordinator role of one broker process. One owner, no locks."""

    def __init__(self) -> None:
        self._tokens = itertools.count(1)
        self._replays: dict[int, _Replay] = {}
        self._loads: dict[int, _Load] = {}  # by partition
        self._load_of: dict[int, _Load] = {}  # by the token of its request in flight
        self._commits: dict[int, CommitOffsets | WriteGroupMetadata | DeleteOffsets] = {}  # by its produce's token
        # a group tombstone's request id -> the group's offsets being committed when it joined its load
        self._committing: dict[int, set[tuple[str, int]]] = {}

    def handle(self, event: CoordinatorEvent) -> CoordinatorReady:
        out = _Output()
        if isinstance(event, CommitOffsets):
            self._on_commit(event, out)
        elif isinstance(event, WriteGroupMetadata) and event.value is None:
            self._on_delete_group(event, out)
        elif isinstance(event, WriteGroupMetadata):
            self._on_write_group(event, out)
        elif isinstance(event, DeleteOffsets):
            self._on_delete_offsets(event, out)
        elif isinstance(event, FetchOffsets | LoadGroups | ListOffsetGroups):
            self._on_fetch(event, out)
        elif isinstance(event, Produced):
            self._on_produced(event, out)
        elif isinstance(event, LatestListed):
            self._on_latest(event, out)
        else:
            self._on_read(event, out)
        return CoordinatorReady(tuple(out.requests), tuple(out.answers))

    # -- commits -------------------------------------------------------------------------------------

    def _on_commit(self, event: CommitOffsets, out: _Output) -> None:
        if not event.offsets:
            out.answers.append(CommitAnswer(event.request_id, ErrorCode.NONE))
            return
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(event.group_id, entry.topic, entry.partition),
             encode_value(entry.offset, entry.metadata, event.timestamp_ms, entry.leader_epoch))
            for entry in event.offsets]
        self._produce(event, records, out)

    def _on_write_group(self, event: WriteGroupMetadata, out: _Output) -> None:
        """Through the commits' produce path: one writer per partition, one mapping of its errors,
        and the records sit where the replay that loads them reads."""
        assert event.value is not None, "a group's tombstone deletes its offsets too: _on_delete_group"
        self._produce(event, [(encode_group_key(event.group_id), encode_group_value(event.value, event.timestamp_ms))],
                      out)

    def _on_delete_group(self, event: WriteGroupMetadata, out: _Output) -> None:
        """Wait for the replay to reach the HW (the group's acknowledged commits are in it then).
        A commit produced and not yet answered may be missing from it: its keys are noted now (the
        membership core refuses the group's commits from now on, so no other can come)."""
        self._committing[event.request_id] = {
            (entry.topic, entry.partition) for commit in self._commits.values()
            if isinstance(commit, CommitOffsets) and commit.group_id == event.group_id for entry in commit.offsets}
        self._on_fetch(event, out)

    def _delete_group(self, event: WriteGroupMetadata, replay: _Replay, out: _Output) -> None:
        """The group's tombstone and its offsets' tombstones, in one batch: atomic in the log."""
        doomed = self._committing.pop(event.request_id) | {
            (topic, partition) for group, topic, partition in replay.offsets if group == event.group_id}
        records: list[tuple[bytes, bytes | None]] = [(encode_key(event.group_id, topic, partition), None)
                                                     for topic, partition in sorted(doomed)]
        self._produce(event, [*records, (encode_group_key(event.group_id), None)], out)

    def _on_delete_offsets(self, event: DeleteOffsets, out: _Output) -> None:
        if not event.topic_partitions:
            out.answers.append(CommitAnswer(event.request_id, ErrorCode.NONE))
            return
        self._produce(event, [(encode_key(event.group_id, topic, partition), None)
                              for topic, partition in event.topic_partitions], out)

    def _produce(self, event: CommitOffsets | WriteGroupMetadata | DeleteOffsets,
                 records: list[tuple[bytes, bytes | None]], out: _Output) -> None:
        token = next(self._tokens)
        self._commits[token] = event
        out.requests.append(ProduceOffsets(token, event.partition, build_batch(records)))

    def _on_produced(self, event: Produced, out: _Output) -> None:
        commit = self._commits.pop(event.token, None)
        if commit is not None:
            out.answers.append(CommitAnswer(commit.request_id, coordinator_error(event.error), event.message))

    # -- fetches -------------------------------------------------------------------------------------

    def _on_fetch(self, event: LoadWaiter, out: _Output) -> None:
        load = self._loads.get(event.partition)
        if load is not None:
            load.waiters.append((event, load.reads_issued))
            return
        load = self._loads[event.partition] = _Load(event.partition, [(event, 0)])
        self._request(load, None, out)

    def _on_latest(self, event: LatestListed, out: _Output) -> None:
        load = self._load_of.pop(event.token, None)
        if load is None:
            return
        if event.error != ErrorCode.NONE:
            self._fail(load, event.error, event.message, out)
            return
        replay = self._replays.get(load.partition)
        if replay is None or replay.leader_epoch != event.leader_epoch:
            replay = self._replays[load.partition] = _Replay(event.leader_epoch)
        load.replay = replay
        self._request(load, replay, out)

    def _on_read(self, event: Read, out: _Output) -> None:
        load = self._load_of.pop(event.token, None)
        if load is None:
            return
        replay = load.replay
        assert replay is not None, f"a read of {load.partition} before its latest offset"
        if event.error == ErrorCode.OFFSET_OUT_OF_RANGE and replay.next_offset < event.log_start_offset:
            replay.next_offset = event.log_start_offset
        elif event.error != ErrorCode.NONE:
            self._fail(load, event.error, "", out)
            return
        elif event.records:
            _apply(replay, event.records)
        else:
            read_index = load.reads_issued  # this was the latest read (one at a time)
            done = [waiter for waiter in load.waiters if waiter[1] < read_index]
            load.waiters = [waiter for waiter in load.waiters if waiter[1] >= read_index]
            for request, _ in done:
                if isinstance(request, LoadGroups):
                    out.answers.append(GroupsLoaded(request.request_id, ErrorCode.NONE, replay.leader_epoch,
                                                    tuple(replay.groups.items())))
                elif isinstance(request, ListOffsetGroups):
                    out.answers.append(OffsetGroupsAnswer(request.request_id, ErrorCode.NONE,
                                                          frozenset(group for group, _, _ in replay.offsets)))
                elif isinstance(request, WriteGroupMetadata):
                    self._delete_group(request, replay, out)
                else:
                    out.answers.append(FetchAnswer(request.request_id, ErrorCode.NONE,
                                                   _answer(request, replay.offsets)))
            if not load.waiters:
                del self._loads[load.partition]
                return
        self._request(load, replay, out)

    def _request(self, load: _Load, replay: _Replay | None, out: _Output) -> None:
        """The load's next request: "latest" first, then reads from where the replay stands."""
        token = next(self._tokens)
        self._load_of[token] = load
        if replay is None:
            out.requests.append(ListLatest(token, load.partition))
            return
        load.reads_issued += 1
        out.requests.append(ReadOffsets(token, load.partition, replay.next_offset, replay.leader_epoch))

    def _fail(self, load: _Load, error: ErrorCode, message: str, out: _Output) -> None:
        del self._loads[load.partition]
        code = coordinator_error(error)
        for request, _ in load.waiters:
            if isinstance(request, LoadGroups):
                out.answers.append(GroupsLoaded(request.request_id, code, message=message))
            elif isinstance(request, ListOffsetGroups):
                out.answers.append(OffsetGroupsAnswer(request.request_id, code, message=message))
            elif isinstance(request, WriteGroupMetadata):
                del self._committing[request.request_id]
                out.answers.append(CommitAnswer(request.request_id, code, message))
            else:
                out.answers.append(FetchAnswer(request.request_id, code, (), message))


def _apply(replay: _Replay, records: bytes) -> None:
    """Replay commit records; a record that does not decode as one is skipped (anyone may produce
    to the topic, and one bad record must not stop every group's fetches)."""
    for header, batch in iter_records(records):
        for record in batch:
            if record.offset < replay.next_offset or record.key is None:
                continue
            try:
                key = decode_key(record.key)
                if key is None:
                    _apply_group(replay, record.key, record.value)
                    continue
                value = None if record.value is None else decode_value(record.value)
            except (struct.error, ValueError):  # UnicodeDecodeError is a ValueError
                continue
            if value is None:
                replay.offsets.pop(key, None)
            else:
                replay.offsets[key] = value
        replay.next_offset = max(replay.next_offset, header.last_offset + 1)


def _apply_group(replay: _Replay, key: bytes, value: bytes | None) -> None:
    """A group metadata record (or a record of another kind, skipped)."""
    group_id = decode_group_key(key)
    if group_id is None:
        return
    if value is None:
        replay.groups.pop(group_id, None)
    else:
        replay.groups[group_id] = decode_group_value(value)


def _answer(request: FetchOffsets,
            offsets: dict[tuple[str, str, int], tuple[int, str, int]]) -> tuple[PartitionOffset, ...]:
    if request.topic_partitions is None:
        wanted = sorted((topic, partition) for group, topic, partition in offsets if group == request.group_id)
    else:
        wanted = list(request.topic_partitions)
    answer = []
    for topic, partition in wanted:
        offset, metadata, leader_epoch = offsets.get((request.group_id, topic, partition),
                                                     (NO_OFFSET, "", NO_EPOCH))
        answer.append(PartitionOffset(topic, partition, offset, metadata, leader_epoch))
    return tuple(answer)


def coordinator_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed offsets-topic write or read to what the group's client sees."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code == ErrorCode.OFFSET_NOT_AVAILABLE:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # a new leader's HW lags its epoch start
    if code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code
