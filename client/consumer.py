"""Consumer: assign partitions, seek, poll; read from the leader, a follower or the nearest replica.

Theory of operation (Kafka's `Fetcher`, aiokafka's `Fetcher`): each assigned partition has a
position (the next offset to read), found on first use from the group's committed offset, else
`auto.offset.reset`. `poll` keeps at most one FetchRequest in flight per node, carrying every
partition that node serves and that has no buffered data, and returns buffered records; fetches
still in flight when a poll returns stay in flight for the next one (prefetch). An answer for a
partition whose position moved meanwhile (a seek) is dropped. `pause(partitions)` stops fetching
them and keeps what is buffered out of polls until `resume` (Kafka's KafkaConsumer.pause).
`async for record in consumer` polls underneath and hands out one record at a time; records
fetched but not yet handed out go back to the buffer before anything reads or commits positions.

Consumer groups: `subscribe(topics, listener)` makes the consumer a member of `group_id`
(client/group_member.py): its partitions are those the group's leader assigns it, and change when
members come and go. Each poll first joins again if a heartbeat said so. How depends on the
`partition_assignment_strategy` (client/assignors.py):
- eager (range, roundrobin): the partitions it had are committed (with `enable_auto_commit`) and
  handed to `listener.on_partitions_revoked`, then it joins, and the new ones go to
  `on_partitions_assigned`, read from the group's committed offsets.
- cooperative (cooperative-sticky, KIP-429): it joins in the background and polls go on reading
  its partitions meanwhile. When the join is done, only the partitions taken away are committed
  and revoked, only the added ones are assigned; if any were taken away it joins again at once,
  so that the next generation gives them to their new owner.
Partitions the group went on without this member for (its session ran out) are `lost`: handed to
`on_partitions_lost` (else `on_partitions_revoked`) without a commit, as in Kafka. Commits carry the
generation and member id, so a member that lost its partitions cannot commit over their new
owner's offsets (CommitFailedError names why). Auto-commit commits the positions every
`auto_commit_interval_ms` during polls, before a rebalance and at close, after which the member
leaves the group, unless it is static (`group_instance_id`, KIP-345: restarted with the same id it
takes its place back without a rebalance; only its session timeout removes it).
`subscribe(re.compile(...))` subscribes to the topics whose whole name matches, looked for again
every `metadata_max_age_ms`, so that a new one is picked up.

Where a partition is read from (KIP-392): `read_from="leader"`; `"follower"`: an in-sync replica
that is not the leader (the leader if there is none); `"nearest"`: the leader, with
`client_rack`, until the leader names a `preferred_read_replica`, then that replica. Errors that
mean stale metadata send the partition back to the leader after a metadata refresh.
OFFSET_OUT_OF_RANGE resets per `auto_offset_reset` (earliest / latest / none: raise) unless the
leader's range still holds the position (a follower behind its leader), which is retried.

Log truncation (KIP-320): a position remembers the leader epoch of the record before it (from the
batch header's partitionLeaderEpoch, or the committed leader epoch). When the partition's leader
epoch in the metadata moves (after a refresh, which FENCED_LEADER_EPOCH and NOT_LEADER_OR_FOLLOWER
on a fetch ask for), and for a position restored from a commit, the consumer asks the leader for
the end offset of that epoch (OffsetsForLeaderEpoch) before it fetches again. An end offset below
the position means the log was truncated under it: LogTruncationError with
`auto_offset_reset="none"`, else a warning and a seek to that end offset, as Kafka's consumer does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from client.assignors import DEFAULT_STRATEGY, strategy
from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from client.errors import LogTruncationError, TributaryError, error_for, retrying
from client.fetched_batch import ConsumerRecord, FetchedBatch, split_batches
from client.group_member import GroupMember
from client.metadata import Metadata
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import FetchPartition, FetchPartitionResponse, FetchRequest, FetchResponse
from wire.group_offsets import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from wire.log_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderPartition,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
)
from wire.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NO_EPOCH
from wire.topic_partition import TopicPartition

T = TypeVar("T")
log = logging.getLogger(__name__)
FENCED_COMMIT = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS})
READ_FROM = ("leader", "follower", "nearest")
AUTO_OFFSET_RESET = ("earliest", "latest", "none")
# Kafka's Topic.INTERNAL_TOPICS: left out of pattern subscriptions with `exclude_internal_topics`.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
ITERATION_POLL_MS = 1000  # `async for` polls this long at a time: a rebalance or an auto-commit waits no longer


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


def as_tp(item: TopicPartition | tuple[str, int]) -> TopicPartition:
    return item if isinstance(item, TopicPartition) else TopicPartition(item[0], item[1])


class Consumer:
    """Kafka's consumer settings by their names. `async with Consumer(...)` or `close()`."""

    def __init__(
        self,
        bootstrap: str,
        *,
        read_from: str = "leader",
        group_id: str | None = None,
        client_rack: str | None = None,
        auto_offset_reset: str = "latest",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52428800,
        max_partition_fetch_bytes: int = 1048576,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300000,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        partition_assignment_strategy: str | Iterable[str] = DEFAULT_STRATEGY,
        group_instance_id: str | None = None,
        metadata_max_age_ms: int = 300000,
        exclude_internal_topics: bool = True,
        connections: Connections | None = None,
    ) -> None:
        if read_from not in READ_FROM:
            raise ValueError(f"read_from={read_from!r}: use one of {', '.join(READ_FROM)}")
        if auto_offset_reset not in AUTO_OFFSET_RESET:
            raise ValueError(f"auto_offset_reset={auto_offset_reset!r}: use one of {', '.join(AUTO_OFFSET_RESET)}")
        self.read_from = read_from
        self.group_id = group_id
        self.client_rack = client_rack or ""
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.assignors = strategy(partition_assignment_strategy)
        self.group_instance_id = group_instance_id  # group.instance.id: a static member (KIP-345)
        self.metadata_max_age_ms = metadata_max_age_ms
        self.exclude_internal_topics = exclude_internal_topics
        self._pattern: re.Pattern[str] | None = None
        self._pattern_matched_at: float | None = None  # loop time of the last match against every topic
        self.member: GroupMember | None = None
        self._join: asyncio.Task[dict[str, list[int]]] | None = None  # a cooperative member's join
        self._listener: object | None = None
        self._next_auto_commit = 0.0
        self._own_connections = connections is None
        self.connections = connections or Connections()
        self.metadata = Metadata(bootstrap, self.connections, request_timeout_ms, retry_backoff_ms=retry_backoff_ms)
        self.positions: dict[TopicPartition, int | None] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._preferred: dict[TopicPartition, int] = {}
        self._buffer: dict[TopicPartition, deque[FetchedBatch]] = {}
        self._in_flight: dict[int, tuple[asyncio.Task[FetchResponse], dict[TopicPartition, int]]] = {}
        self._backoff_until: dict[TopicPartition, float] = {}
        self._paused: set[TopicPartition] = set()
        # KIP-320, per position: the leader epoch of the record before it (NO_EPOCH: unknown), the
        # leader epoch it was last known valid under, and the positions to validate before fetching.
        self._offset_epochs: dict[TopicPartition, int] = {}
        self._valid_under: dict[TopicPartition, int] = {}
        self._awaiting_validation: set[TopicPartition] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._pending: deque[tuple[FetchedBatch, ConsumerRecord]] = deque()  # fetched, not yet iterated
        self._closed = False
        self._close_signal: asyncio.Future[None] | None = None  # wakes a poll waiting when close() is called

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """`async for record in consumer`: the records of successive polls, one at a time; the loop
        ends when the consumer is closed. A record counts as consumed (its position, what
        auto-commit commits) once it is handed out, not when its batch was fetched."""
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            try:
                batches = await self._poll_batches(ITERATION_POLL_MS, None)
            except TributaryError:
                if self._closed:  # closed under a poll: its requests failed with the connections
                    raise StopAsyncIteration from None
                raise
            self._pending.extend((batch, record) for batch in batches for record in batch.consumer_records())
        batch, record = self._pending.popleft()
        self._offset_epochs[TopicPartition(batch.topic, batch.partition)] = batch.header.partition_leader_epoch
        return record

    def _unread_pending(self) -> None:
        """Put the records fetched for the iteration but not handed out back in the buffer, so that
        positions and commits are those of the records handed out."""
        batches: list[FetchedBatch] = []
        for batch, record in self._pending:
            if not batches or batches[-1].header is not batch.header:
                batches.append(dataclasses.replace(batch, start_offset=record.offset))
        self._pending.clear()
        self._unread(batches)

    async def close(self) -> None:
        """Commit (with `enable_auto_commit`), leave the group, stop fetching; a poll or an `async for`
        waiting in another task returns."""
        self._closed = True
        if self._close_signal is not None and not self._close_signal.done():
            self._close_signal.set_result(None)
        self._unread_pending()
        if self._join is not None:
            self._join.cancel()
            with contextlib.suppress(asyncio.CancelledError, TributaryError):
                await self._join
            self._join = None
        if self.member is not None:
            await self._auto_commit()
            await self.member.leave()
        tasks = [task for task, _ in self._in_flight.values()]
        if self._metadata_task is not None:
            tasks.append(self._metadata_task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, TributaryError, NodeUnavailableError,
                                     RequestRejectedError):
                await task
        self._in_flight.clear()
        self._metadata_task = None
        if self._own_connections:
            await self.connections.close()

    # -- assignment and positions -------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | re.Pattern[str] | None = None, listener: object | None = None, *,
                  pattern: re.Pattern[str] | None = None) -> None:
        """Join `group_id` for `topics`, or for the topics whose whole name matches `pattern` (a
        compiled regex, given as `topics` or `pattern=`); the group assigns the partitions (module
        docstring). `listener` may have `on_partitions_revoked(partitions)`,
        `on_partitions_assigned(partitions)` and `on_partitions_lost(partitions)`, plain or async
        (Kafka's ConsumerRebalanceListener)."""
        group = self._require_group()
        if isinstance(topics, re.Pattern):
            topics, pattern = (None, topics) if pattern is None else (topics, pattern)
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe to a list of topics or to a pattern (re.compile(...)), one of them")
        names = [] if topics is None else sorted(set(topics))
        if pattern is None and not names:
            raise ValueError("subscribe to at least one topic")
        self._pattern, self._pattern_matched_at = pattern, None
        self.metadata.add_topics(names)
        self.member = GroupMember(group, names, self.metadata, session_timeout_ms=self.session_timeout_ms,
                                  rebalance_timeout_ms=self.max_poll_interval_ms,
                                  heartbeat_interval_ms=self.heartbeat_interval_ms,
                                  retry_backoff_ms=self.retry_backoff_ms, request_timeout_ms=self.request_timeout_ms,
                                  partition_counts=self._partition_counts, assignors=self.assignors,
                                  group_instance_id=self.group_instance_id)
        self._listener = listener
        self.assign([])

    async def _maybe_match_pattern(self) -> None:
        """Kafka's subscribe(Pattern): every `metadata_max_age_ms` (and before the first join) ask for
        every topic and subscribe to those whose whole name matches (internal topics left out with
        `exclude_internal_topics`); the member joins again when that changes the subscription, so a
        new matching topic gets assigned and a deleted one leaves the assignment."""
        if self._pattern is None or self.member is None:
            return
        now = asyncio.get_running_loop().time()
        if self._pattern_matched_at is not None and now - self._pattern_matched_at < self.metadata_max_age_ms / 1000:
            return
        response = await self.metadata.refresh(all_topics=True)
        self._pattern_matched_at = now
        matched = sorted(
            topic.name for topic in response.topics
            if topic.error_code is ErrorCode.NONE and self._pattern.fullmatch(topic.name)
            and not (self.exclude_internal_topics and topic.name in INTERNAL_TOPICS)
        )
        self.metadata.add_topics(matched)
        self.member.update_topics(matched)

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        self.metadata.add_topics(topics)
        await self.metadata.refresh()
        return {topic: len(self.metadata.partitions_for(topic) or {}) for topic in topics}

    async def _rejoin_if_needed(self) -> None:
        """Hand over lost partitions, apply a finished cooperative join, join again when told to
        (the module docstring)."""
        member = self.member
        if member is None:
            return
        if member.lost:
            member.lost = False
            lost, self.positions = set(self.positions), {}
            self._buffer.clear()
            if lost:
                await _call(self._listener, "on_partitions_lost" if hasattr(self._listener, "on_partitions_lost")
                            else "on_partitions_revoked", lost)
        if self._join is not None:
            if not self._join.done():
                return
            join, self._join = self._join, None
            await self._apply_incremental(member, join.result())
        if not member.needs_join:
            return
        if member.cooperative:
            self._join = asyncio.create_task(member.join(), name=f"tributary-join-{member.group_id}")
            return
        revoked = set(self.positions)
        if revoked:
            await self._auto_commit()
            await _call(self._listener, "on_partitions_revoked", revoked)
        assignment = await member.join()
        self._assigned([TopicPartition(topic, index) for topic, indexes in assignment.items() for index in indexes])
        await _call(self._listener, "on_partitions_assigned", set(self.positions))

    async def _apply_incremental(self, member: GroupMember, assignment: dict[str, list[int]]) -> None:
        """KIP-429: give up only what the new assignment took away, take only what it added (the
        kept partitions keep their positions); having given some up, join again at once."""
        now = {TopicPartition(topic, index) for topic, indexes in assignment.items() for index in indexes}
        revoked, added = set(self.positions) - now, now - set(self.positions)
        if revoked:
            await self._auto_commit()
            await _call(self._listener, "on_partitions_revoked", revoked)
        self.assign(now)
        await _call(self._listener, "on_partitions_assigned", added)
        if revoked:
            member.needs_join = True

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        """The group's assignment: positions come from the committed offsets again (another member
        may have moved them since this one last read a partition)."""
        self.positions = {}
        self._buffer.clear()
        self.assign(partitions)

    async def _auto_commit(self) -> None:
        if self.member is None or not self.enable_auto_commit or self.member.generation_id < 0:
            return
        if any(position is not None for position in self.positions.values()):
            # Fenced or unreachable: the partitions' next owner reads from the last commit.
            with contextlib.suppress(TributaryError):
                await self.commit()

    async def _maybe_auto_commit(self) -> None:
        now = asyncio.get_running_loop().time()
        if self.member is not None and self.enable_auto_commit and now >= self._next_auto_commit:
            self._next_auto_commit = now + self.auto_commit_interval_ms / 1000
            await self._auto_commit()

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (no group rebalancing); positions are found on first poll."""
        wanted = [as_tp(item) for item in partitions]
        self._unread_pending()
        self.positions = {tp: self.positions.get(tp) for tp in wanted}
        for tp in list(self._buffer):
            if tp not in self.positions:
                del self._buffer[tp]
        self._paused &= self.positions.keys()
        self._awaiting_validation &= self.positions.keys()
        self._offset_epochs = {tp: epoch for tp, epoch in self._offset_epochs.items() if tp in self.positions}
        self._valid_under = {tp: epoch for tp, epoch in self._valid_under.items() if tp in self.positions}
        self.metadata.add_topics({tp.topic for tp in wanted})

    def assignment(self) -> set[TopicPartition]:
        return set(self.positions)

    def pause(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Stop fetching these partitions: polls return none of their records until `resume`. What
        was already fetched stays buffered for then (Kafka keeps a paused partition's fetched data);
        a rebalance that takes a partition away forgets that it was paused."""
        wanted = [as_tp(tp) for tp in partitions]
        for tp in wanted:
            self._require_assigned(tp)
        self._unread_pending()
        self._paused.update(wanted)

    def resume(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        wanted = [as_tp(tp) for tp in partitions]
        for tp in wanted:
            self._require_assigned(tp)
        self._paused.difference_update(wanted)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        tp = as_tp(tp)
        self._require_assigned(tp)
        if offset < 0:
            raise ValueError(f"seek to offset {offset}: offsets are >= 0 (use seek_to_beginning / seek_to_end)")
        self._unread_pending()
        self._set_position(tp, offset)

    def _set_position(self, tp: TopicPartition, offset: int, offset_epoch: int = NO_EPOCH,
                      validate: bool = False) -> None:
        """Move to `offset`, dropping what is buffered. `offset_epoch`: the leader epoch of the record
        before it, if known; `validate`: check it with the leader before fetching (KIP-320)."""
        self.positions[tp] = offset
        self._buffer.pop(tp, None)
        self._offset_epochs[tp] = offset_epoch
        self._valid_under.pop(tp, None)
        if validate and offset_epoch != NO_EPOCH:
            self._awaiting_validation.add(tp)
        else:
            self._awaiting_validation.discard(tp)

    async def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        tp = as_tp(tp)
        self._require_assigned(tp)
        self._unread_pending()
        await self._resolve_positions()
        position = self.positions[tp]
        assert position is not None, f"{tp} has a position after resolving"
        return position

    async def seek_to_beginning(self, *tps: TopicPartition | tuple[str, int]) -> None:
        for tp, offset in (await self._list_offsets(self._targets(tps), EARLIEST_TIMESTAMP)).items():
            self.seek(tp, offset.offset)

    async def seek_to_end(self, *tps: TopicPartition | tuple[str, int]) -> None:
        for tp, offset in (await self._list_offsets(self._targets(tps), LATEST_TIMESTAMP)).items():
            self.seek(tp, offset.offset)

    async def beginning_offsets(self, tps: Iterable[TopicPartition | tuple[str, int]]) -> dict[TopicPartition, int]:
        return {tp: found.offset for tp, found in (await self._list_offsets(
            [as_tp(tp) for tp in tps], EARLIEST_TIMESTAMP)).items()}

    async def end_offsets(self, tps: Iterable[TopicPartition | tuple[str, int]]) -> dict[TopicPartition, int]:
        return {tp: found.offset for tp, found in (await self._list_offsets(
            [as_tp(tp) for tp in tps], LATEST_TIMESTAMP)).items()}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition | tuple[str, int], int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is >= the given one (None: no such record)."""
        by_timestamp: dict[int, list[TopicPartition]] = {}
        for tp, timestamp in timestamps.items():
            if timestamp < 0:
                raise ValueError(f"timestamp {timestamp} for {tp}: use a time in ms since the epoch")
            by_timestamp.setdefault(timestamp, []).append(as_tp(tp))
        found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for timestamp, tps in by_timestamp.items():
            for tp, offset in (await self._list_offsets(tps, timestamp)).items():
                found[tp] = None if offset.offset < 0 else offset
        return found

    def _targets(self, tps: tuple[TopicPartition | tuple[str, int], ...]) -> list[TopicPartition]:
        targets = [as_tp(tp) for tp in tps] or list(self.positions)
        for tp in targets:
            self._require_assigned(tp)
        return targets

    def _require_assigned(self, tp: TopicPartition) -> None:
        if tp not in self.positions:
            raise ValueError(f"{tp} is not assigned to this consumer; call assign() with it first")

    async def _list_offsets(
        self, tps: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """ListOffsets to each partition's leader, retrying retriable errors within request.timeout.ms."""
        deadline = asyncio.get_running_loop().time() + self.request_timeout_ms / 1000
        result: dict[TopicPartition, OffsetAndTimestamp] = {}
        pending = list(tps)
        while pending:
            await self.metadata.refresh_if_stale()
            last_error: TributaryError | None = None
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                self.metadata.add_topics([tp.topic])
                leader = self.metadata.leader_for(tp)
                if leader is None:
                    # A topic unknown to the node that answered is retried like a missing leader: that
                    # node's metadata may lag a creation (a group's leader member saw the topic). Only
                    # a fresh answer names it (not one kept while a refresh waits out its backoff).
                    if (not self.metadata.stale
                            and self.metadata.topic_errors.get(tp.topic) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                        last_error = self.metadata.topic_error(tp.topic)
                    else:
                        last_error = error_for(ErrorCode.LEADER_NOT_AVAILABLE, f"{tp} has no leader now")
                    continue
                by_leader.setdefault(leader, []).append(tp)
            for leader, leader_tps in by_leader.items():
                last_error = await self._list_offsets_at(leader, leader_tps, timestamp, result) or last_error
            pending = [tp for tp in pending if tp not in result]
            if pending:
                self.metadata.invalidate()
                if asyncio.get_running_loop().time() >= deadline:
                    assert last_error is not None, "an unanswered partition has an error"
                    raise last_error
                await asyncio.sleep(self.retry_backoff_ms / 1000)
        return result

    async def _list_offsets_at(
        self, leader: int, tps: list[TopicPartition], timestamp: int, result: dict[TopicPartition, OffsetAndTimestamp]
    ) -> TributaryError | None:
        """Ask one leader; fill `result`; return the last retriable error (raise the others)."""
        request = ListOffsetsRequest(tuple(
            ListOffsetsPartition(tp.topic, tp.partition, timestamp, self._leader_epoch(tp)) for tp in tps
        ))
        try:
            response = await self.connections.call(
                self.metadata.address_of(leader) or "", Api.LIST_OFFSETS, request, ListOffsetsResponse,
                self.request_timeout_ms,
            )
        except NodeUnavailableError as error:
            return error_for(ErrorCode.NETWORK_EXCEPTION, str(error))
        except RequestRejectedError as error:
            raise error_for(error.code, error.message) from None
        last_error = None
        for p in response.partitions:
            tp = TopicPartition(p.topic, p.partition)
            if p.error_code is ErrorCode.NONE:
                result[tp] = OffsetAndTimestamp(p.offset, p.timestamp)
                continue
            error = error_for(p.error_code, p.error_message or f"listing offsets of {tp}")
            if not error.retriable:
                raise error
            last_error = error
        return last_error

    def _leader_epoch(self, tp: TopicPartition) -> int:
        info = self.metadata.partition_info(tp)
        return -1 if info is None else info.leader_epoch

    async def _resolve_positions(self) -> None:
        """Positions for partitions without one: the committed offset, else auto.offset.reset."""
        missing = [tp for tp, position in self.positions.items() if position is None]
        if not missing:
            return
        if self.group_id is not None:
            for tp, committed in (await self._committed(missing)).items():
                if committed is not None:  # KIP-320: validated first when the commit names its leader epoch
                    self._set_position(tp, *committed, validate=True)
            missing = [tp for tp in missing if self.positions[tp] is None]
        if not missing:
            return
        if self.auto_offset_reset == "none":
            raise error_for(ErrorCode.OFFSET_OUT_OF_RANGE, f"no position for {', '.join(map(str, missing))} and "
                            "auto_offset_reset='none'; seek first or choose earliest / latest")
        await self._reset_positions(missing)

    async def _reset_positions(self, tps: list[TopicPartition]) -> None:
        """Per `auto_offset_reset` (earliest or latest)."""
        timestamp = EARLIEST_TIMESTAMP if self.auto_offset_reset == "earliest" else LATEST_TIMESTAMP
        for tp, found in (await self._list_offsets(tps, timestamp)).items():
            self._set_position(tp, found.offset)

    # -- polling ------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000, max_records: int = 500) -> list[ConsumerRecord]:
        """Up to `max_records` records from any assigned partitions; [] if none came in `timeout_ms`."""
        records: list[ConsumerRecord] = []
        batches = await self.poll_batches(timeout_ms, max_records)
        for index, batch in enumerate(batches):
            decoded = batch.consumer_records()
            room = max_records - len(records)
            if len(decoded) > room:
                records.extend(decoded[:room])
                self._unread([dataclasses.replace(batch, start_offset=decoded[room].offset), *batches[index + 1 :]])
                break
            records.extend(decoded)
        return records

    def _unread(self, batches: list[FetchedBatch]) -> None:
        """Put batches back at the front of their buffers; positions return to their first record."""
        for batch in reversed(batches):
            tp = TopicPartition(batch.topic, batch.partition)
            self._buffer.setdefault(tp, deque()).appendleft(batch)
            self.positions[tp] = max(batch.start_offset, batch.base_offset)

    async def poll_batches(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[FetchedBatch]:
        """Whole fetched batches (no per-record objects). With `max_records`, batches are returned
        until that many records are reached; the rest stay buffered."""
        batches = await self._poll_batches(timeout_ms, max_records)
        for batch in batches:  # handed out: the last record's leader epoch is the position's (KIP-320)
            self._offset_epochs[TopicPartition(batch.topic, batch.partition)] = batch.header.partition_leader_epoch
        return batches

    async def _poll_batches(self, timeout_ms: int, max_records: int | None) -> list[FetchedBatch]:
        """Batches taken from the buffer, fetching more until `timeout_ms`; positions move past them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        self._unread_pending()
        await self._maybe_match_pattern()
        await self._rejoin_if_needed()
        await self._maybe_auto_commit()
        await self._resolve_positions()
        while True:
            self._check_leader_epochs()
            taken = self._take_buffered(max_records)
            if taken:
                return taken
            await self._validate_positions()
            self._send_fetches()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            tasks: list[asyncio.Future] = [task for task, _ in self._in_flight.values()]
            if self._metadata_task is not None:
                tasks.append(self._metadata_task)
            if self._join is not None:
                tasks.append(self._join)
            wait_s = remaining if tasks else min(remaining, self.retry_backoff_ms / 1000)
            if self._close_signal is None:
                self._close_signal = loop.create_future()
            done, _ = await asyncio.wait([*tasks, self._close_signal], timeout=wait_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            if self._closed:
                return []
            if self._metadata_task in done:
                self._metadata_task = None
            if self._join in done:
                await self._rejoin_if_needed()
                await self._resolve_positions()
            for node in [node for node, (task, _) in self._in_flight.items() if task in done]:
                await self._handle_fetch(node, *self._in_flight.pop(node))

    def _take_buffered(self, max_records: int | None) -> list[FetchedBatch]:
        taken: list[FetchedBatch] = []
        count = 0
        for tp, queue in self._buffer.items():
            while tp not in self._paused and queue and (max_records is None or count < max_records):
                batch = queue.popleft()
                taken.append(batch)
                count += batch.next_offset - max(batch.start_offset, batch.base_offset)
                self.positions[tp] = batch.next_offset
        return taken

    def fetch_node_for(self, tp: TopicPartition) -> int | None:
        """The node this partition's next fetch goes to (see the module docstring)."""
        info = self.metadata.partition_info(tp)
        leader = self.metadata.leader_for(tp)
        if info is None or leader is None:
            return None
        if self.read_from == "nearest":
            preferred = self._preferred.get(tp)
            return preferred if preferred in self.metadata.brokers else leader
        if self.read_from == "follower":
            followers = [n for n in info.isr if n != leader and n in self.metadata.brokers]
            if followers:
                return followers[hash(tp) % len(followers)]
        return leader

    def _send_fetches(self) -> None:
        if self.metadata.stale and self._metadata_task is None and self.metadata.may_refresh():
            self._metadata_task = asyncio.create_task(self._refresh_metadata())
        now = asyncio.get_running_loop().time()
        busy = {tp for _, tps in self._in_flight.values() for tp in tps}
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp, position in self.positions.items():
            if (position is None or tp in busy or tp in self._paused or tp in self._awaiting_validation
                    or self._buffer.get(tp) or self._backoff_until.get(tp, 0) > now):
                continue
            node = self.fetch_node_for(tp)
            if node is None:
                self.metadata.invalidate()
                continue
            if node not in self._in_flight:
                by_node.setdefault(node, {})[tp] = position
        for node, tps in by_node.items():
            request = FetchRequest(
                tuple(FetchPartition(tp.topic, tp.partition, offset, self.max_partition_fetch_bytes,
                                     self._leader_epoch(tp) if node == self.metadata.leader_for(tp) else -1)
                      for tp, offset in tps.items()),
                max_wait_ms=self.fetch_max_wait_ms, min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
                rack_id=self.client_rack if self.read_from == "nearest" else "",
            )
            address = self.metadata.address_of(node) or ""
            timeout_ms = self.request_timeout_ms + self.fetch_max_wait_ms
            task = asyncio.create_task(self.connections.call(address, Api.FETCH, request, FetchResponse, timeout_ms))
            self._in_flight[node] = (task, tps)

    async def _refresh_metadata(self) -> None:
        """In the background of a poll: a failure leaves the metadata stale, to be tried again
        after `retry.backoff.ms`."""
        with contextlib.suppress(TributaryError):
            await self.metadata.refresh()

    async def _handle_fetch(self, node: int, task: asyncio.Task[FetchResponse], tps: dict[TopicPartition, int]) -> None:
        try:
            response = task.result()
        except NodeUnavailableError:
            for tp in tps:
                self._retry_later(tp)
            return
        except RequestRejectedError as rejected:
            error = error_for(rejected.code, rejected.message)
            if not error.retriable:
                raise error from None
            for tp in tps:
                self._retry_later(tp)
            return
        for p in response.partitions:
            tp = TopicPartition(p.topic, p.partition)
            fetch_offset = tps.get(tp)
            if fetch_offset is None or self.positions.get(tp) != fetch_offset or tp in self._awaiting_validation:
                continue  # not asked for, seeked since, or the leader changed since: the answer is stale
            await self._handle_partition(node, tp, fetch_offset, p)

    async def _handle_partition(
        self, node: int, tp: TopicPartition, fetch_offset: int, p: FetchPartitionResponse
    ) -> None:
        if p.error_code is ErrorCode.NONE:
            self.high_watermarks[tp] = p.high_watermark
            if p.preferred_read_replica >= 0 and self.read_from == "nearest":
                self._preferred[tp] = p.preferred_read_replica
            batches = split_batches(tp.topic, tp.partition, p.records, fetch_offset)
            if batches:
                self._buffer.setdefault(tp, deque()).extend(batches)
            return
        if p.error_code is ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(node, tp, fetch_offset)
            return
        error = error_for(p.error_code, p.error_message or f"fetching {tp}")
        if not error.retriable:
            raise error
        self._retry_later(tp)

    def _retry_later(self, tp: TopicPartition) -> None:
        self._preferred.pop(tp, None)
        self.metadata.invalidate()
        self._backoff_until[tp] = asyncio.get_running_loop().time() + self.retry_backoff_ms / 1000

    async def _handle_out_of_range(self, node: int, tp: TopicPartition, fetch_offset: int) -> None:
        earliest = (await self._list_offsets([tp], EARLIEST_TIMESTAMP))[tp].offset
        latest = (await self._list_offsets([tp], LATEST_TIMESTAMP))[tp].offset
        if node != self.metadata.leader_for(tp) and earliest <= fetch_offset <= latest:
            self._retry_later(tp)  # the follower is behind its leader: ask the leader, after a backoff
            return
        if self.auto_offset_reset == "none":
            raise error_for(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {fetch_offset} is outside [{earliest}, {latest}] "
                            f"of {tp}; seek to {earliest} (earliest) or {latest} (latest)")
        self._set_position(tp, earliest if self.auto_offset_reset == "earliest" else latest)

    # -- log truncation (KIP-320) ----------------------------------------------------------

    def _check_leader_epochs(self) -> None:
        """A position read under another leader epoch than the metadata's now awaits validation, its
        buffered records dropped (the new leader may not have them); one with no known record
        epoch is simply taken to be valid under the new leader, as Kafka does."""
        for tp, position in self.positions.items():
            current = self._leader_epoch(tp)
            if position is None or current == NO_EPOCH or self._valid_under.get(tp) == current:
                continue
            if tp in self._valid_under and self._offset_epochs.get(tp, NO_EPOCH) != NO_EPOCH:
                self._awaiting_validation.add(tp)
                self._buffer.pop(tp, None)
            if tp not in self._awaiting_validation:
                self._valid_under[tp] = current

    async def _validate_positions(self) -> None:
        """Ask each awaiting position's leader for the end offset of the position's record epoch
        (OffsetsForLeaderEpoch, with the current leader epoch so a stale leader is fenced)."""
        now = asyncio.get_running_loop().time()
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in self._awaiting_validation:
            leader = self.metadata.leader_for(tp)
            if leader is None:
                self.metadata.invalidate()
            elif self._backoff_until.get(tp, 0) <= now:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            await self._validate_at(leader, tps)

    async def _validate_at(self, leader: int, tps: list[TopicPartition]) -> None:
        asked = {tp: (self.positions[tp], self._offset_epochs[tp], self._leader_epoch(tp)) for tp in tps}
        request = OffsetsForLeaderEpochRequest(tuple(
            OffsetForLeaderPartition(tp.topic, tp.partition, epoch, current)
            for tp, (_, epoch, current) in asked.items()
        ))
        try:
            response = await self.connections.call(self.metadata.address_of(leader) or "", Api.OFFSETS_FOR_LEADER_EPOCH,
                                                   request, OffsetsForLeaderEpochResponse, self.request_timeout_ms)
        except NodeUnavailableError:
            for tp in tps:
                self._retry_later(tp)
            return
        except RequestRejectedError as error:
            raise error_for(error.code, error.message) from None
        for p in response.partitions:
            tp = TopicPartition(p.topic, p.partition)
            if (tp not in asked or tp not in self._awaiting_validation
                    or (self.positions.get(tp), self._offset_epochs.get(tp)) != asked[tp][:2]):
                continue  # not asked, or moved since (Kafka skips a validation whose position changed)
            if p.error_code is not ErrorCode.NONE:
                error = error_for(p.error_code, p.error_message or f"validating the position of {tp}")
                if not error.retriable:
                    raise error
                self._retry_later(tp)
                continue
            position, _, current = asked[tp]
            await self._complete_validation(tp, position, current, p.leader_epoch, p.end_offset)

    async def _complete_validation(self, tp: TopicPartition, position: int, current: int, epoch: int,
                                   end_offset: int) -> None:
        """Kafka's SubscriptionState.maybeCompleteValidation: the leader's log ends, for the position's
        record epoch, at or after the position: valid. Before it: truncated there; with no epoch or
        offset: the leader keeps nothing of that epoch or earlier. Truncation raises
        LogTruncationError with auto_offset_reset="none"; otherwise the consumer goes on from the
        diverging offset (or resets, when there is none) and says so in a warning, never silently."""
        diverging = None if epoch == NO_EPOCH or end_offset < 0 else end_offset
        if diverging is not None and diverging >= position:
            self._awaiting_validation.discard(tp)
            self._valid_under[tp] = current
            return
        if self.auto_offset_reset == "none":
            raise LogTruncationError(tp, position, diverging)
        if diverging is None:
            log.warning("log truncation detected on %s at offset %d: the leader keeps no record of leader epoch %d "
                        "or earlier; resetting to the %s offset", tp, position, self._offset_epochs[tp],
                        self.auto_offset_reset)
            await self._reset_positions([tp])
            return
        log.warning("log truncation detected on %s at offset %d: the leader's log diverges at offset %d (leader "
                    "epoch %d); reading on from there", tp, position, diverging, epoch)
        self._set_position(tp, diverging, epoch)
        self._valid_under[tp] = current

    # -- committed offsets --------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition | tuple[str, int], int] | None = None) -> None:
        """Commit `offsets` (default: the current positions, with the leader epoch of the record before
        each, KIP-320's committed_leader_epoch) for `group_id`."""
        group = self._require_group()
        self._unread_pending()
        if offsets is None:
            chosen = {tp: (position, self._offset_epochs.get(tp, NO_EPOCH))
                      for tp, position in self.positions.items() if position is not None}
        else:
            chosen = {as_tp(tp): (offset, NO_EPOCH) for tp, offset in offsets.items()}
        member = self.member
        request = OffsetCommitRequest(group, tuple(
            OffsetCommitPartition(tp.topic, tp.partition, offset, committed_leader_epoch=epoch)
            for tp, (offset, epoch) in chosen.items()
        ), member.generation_id if member is not None else -1, member.member_id if member is not None else "",
            member.group_instance_id if member is not None else None)

        async def attempt() -> None:
            response = await self.metadata.request(Api.OFFSET_COMMIT, request, OffsetCommitResponse)
            for p in response.partitions:
                if p.error_code in FENCED_COMMIT and member is not None:
                    if member.generation_id == request.generation_id:  # not since joined again
                        member.needs_join = True  # Kafka's CommitFailedException: join again, then commit
                    raise error_for(p.error_code, f"group {group} rebalanced: this member's generation "
                                    f"{member.generation_id} no longer owns its partitions ({p.error_message})")
                if p.error_code is not ErrorCode.NONE:
                    raise error_for(p.error_code, p.error_message or f"committing {p.topic}-{p.partition} for {group}")

        await self._retrying(attempt)

    async def committed(
        self, tps: Iterable[TopicPartition | tuple[str, int]] | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: nothing committed); `tps` None: every partition the
        group has committed (Kafka's Admin listConsumerGroupOffsets)."""
        return {tp: None if found is None else found[0] for tp, found in (await self._committed(tps)).items()}

    async def _committed(
        self, tps: Iterable[TopicPartition | tuple[str, int]] | None
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """`committed`, with each offset's committed leader epoch (KIP-320; NO_EPOCH: none)."""
        group = self._require_group()
        wanted = [] if tps is None else [as_tp(tp) for tp in tps]
        request = OffsetFetchRequest(group, None if tps is None else tuple((tp.topic, tp.partition) for tp in wanted))

        async def attempt() -> dict[TopicPartition, tuple[int, int] | None]:
            response = await self.metadata.request(Api.OFFSET_FETCH, request, OffsetFetchResponse)
            if response.error_code is not ErrorCode.NONE:
                raise error_for(response.error_code, response.error_message or f"fetching offsets of {group}")
            found: dict[TopicPartition, tuple[int, int] | None] = dict.fromkeys(wanted)
            for p in response.partitions:
                if p.error_code is not ErrorCode.NONE:
                    raise error_for(p.error_code, f"fetching the offset of {p.topic}-{p.partition} for {group}")
                found[TopicPartition(p.topic, p.partition)] = (
                    (p.committed_offset, p.committed_leader_epoch) if p.committed_offset >= 0 else None)
            return found

        return await self._retrying(attempt)

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()` again after retriable errors, within request.timeout.ms (client/errors.py)."""
        return await retrying(attempt, self.request_timeout_ms, self.retry_backoff_ms)

    def _require_group(self) -> str:
        if self.group_id is None:
            raise ValueError("this consumer has no group_id; pass group_id=... to commit or read committed offsets")
        return self.group_id


async def _call(listener: object | None, name: str, partitions: set[TopicPartition]) -> None:
    """A rebalance listener's callback, if it has one (plain or async)."""
    callback = getattr(listener, name, None)
    if callback is not None:
        result = callback(partitions)
        if asyncio.iscoroutine(result):
            await result
