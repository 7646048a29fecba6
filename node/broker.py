"""Broker: the broker side of a node — the data path from HTTP requests to the partition cores.

Composition (each part in its own module): `BrokerLifecycleManager` (registration, heartbeats,
controlled shutdown), `ReplicaManager` (hosted partitions kept in step with the metadata, their
replica fetchers and AlterPartition requests), `LogTasks` (retention on leaders, flush,
checkpoints, compaction) and `PartitionWatchers` (long-poll wake-ups).

Requests: the server decodes a `client.protocol` request and awaits the matching method here,
which answers with the protocol response. Failures of one partition travel inside the answer
(UNKNOWN_TOPIC_OR_PARTITION when the metadata has no such partition, NOT_LEADER_OR_FOLLOWER with
`current_leader` when this broker cannot serve it, the core's errors otherwise); nothing raises
for a bad partition. Each partition's part goes to its core as an event with a fresh request id
and is answered by the core's completion.

Fetch is Kafka's DelayedFetch over many partitions: read every partition at once (the core never
parks the read: max_wait 0); answer if min_bytes is reached, a partition has an error or news for
a follower (the leader's HW passed the follower's), or the wait is over; otherwise sleep until a
requested partition's log, HW or role changes (`PartitionWatchers`, woken by the drivers) and read
again. Time: `clock()` is wall-clock ms (record timestamps and retention are wall-clock in Kafka);
the broker never lets it run backwards, since the cores assert that time does not fall.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from client import protocol
from client.connection import Connections
from node.broker_settings import BrokerSettings
from node.lifecycle import BrokerLifecycleManager, Quorum
from node.log_tasks import LogTasks
from node.long_poll import PartitionWatchers
from node.metrics import ReplicaMetrics
from node.partition_host import PartitionHost
from node.replica_manager import Located, ReplicaManager
from replication.events import (
    ConsumerFetch,
    DeleteRecords,
    FollowerFetch,
    ListOffsets,
    OffsetsForLeaderEpoch,
    ProduceRequest,
)
from replication.ready import (
    DeleteRecordsResult,
    FetchResult,
    ListOffsetsResult,
    OffsetsForLeaderEpochResult,
    ProduceResult,
    Role,
)
from storage.checkpoint import TopicPartition
from storage.error_codes import ErrorCode
from storage.log_manager import LogManager

__all__ = ["Broker", "BrokerSettings"]

log = logging.getLogger(__name__)

CONSUMER_REPLICA_ID = -1
NO_PREFERRED_READ_REPLICA = -1
_CURRENT_LEADER_ERRORS = frozenset(
    {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH}
)


class _PartitionAddressed(Protocol):
    """Any per-partition part of a request (they all name their topic and partition)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...


PartitionPart = TypeVar("PartitionPart", bound=_PartitionAddressed)

class Broker:
    """One node's broker: started once, stopped once; one event loop, no locks."""

    def __init__(self, settings: BrokerSettings, quorum: Quorum, connections: Connections,
                 clock: Callable[[], int], log_manager: LogManager) -> None:
        self.settings = settings
        self.quorum = quorum
        self.log_manager = log_manager
        self._clock = clock
        self._last_now_ms = clock()
        self._request_ids = itertools.count(1)
        self._stopped = False
        self._caught_up = False
        self.watchers = PartitionWatchers()
        self.lifecycle = BrokerLifecycleManager(settings, quorum, on_registered=self._on_metadata)
        self.replicas = ReplicaManager(settings, quorum, connections, log_manager, self.now_ms, self.watchers,
                                       lambda: self.lifecycle.broker_epoch)
        self.log_tasks = LogTasks(settings, log_manager, self.replicas.hosts, self.now_ms)

    def now_ms(self) -> int:
        """The clock, never lower than before."""
        self._last_now_ms = max(self._last_now_ms, self._clock())
        return self._last_now_ms

    @property
    def hosts(self) -> dict[TopicPartition, PartitionHost]:
        return self.replicas.hosts

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Follow the metadata and start registering, heartbeats and the log tasks. Returns at once:
        registration waits for an active controller in the background (`wait_unfenced`)."""
        self.quorum.add_listener(self._on_metadata)
        self.lifecycle.start()
        self.log_tasks.start()

    async def wait_unfenced(self) -> None:
        await self.lifecycle.wait_unfenced()

    @property
    def is_stopped(self) -> bool:
        return self._stopped

    @property
    def is_caught_up(self) -> bool:
        """This process has applied the metadata up to its own registration (Kafka's initial
        catch-up): until then its copy may be from before it stopped, and clients are refused."""
        return self._caught_up

    @property
    def is_unfenced(self) -> bool:
        """Registered and unfenced by the controller: may lead partitions and join ISRs."""
        return not self.lifecycle.is_fenced

    async def stop(self, controlled: bool) -> None:
        """Stop serving. `controlled`: first ask the controller to move leaderships away, up to
        `controlled_shutdown_timeout_ms`. Then stop the fetchers and log tasks, answer parked
        requests, and shut the LogManager down (flush, checkpoints, clean-shutdown marker)."""
        if self._stopped:
            return
        if controlled:
            await self.lifecycle.controlled_shutdown(self.settings.controlled_shutdown_timeout_ms)
        else:
            await self.lifecycle.stop()
        self._stopped = True
        await self.log_tasks.stop()
        await self.replicas.shutdown()
        self.log_manager.shutdown(self.now_ms())

    def _on_metadata(self) -> None:
        """The quorum's listener (and the lifecycle's, after a registration). A failure (a log dir
        that cannot be written) is logged; the next metadata change retries what is left."""
        if self._stopped:
            return
        try:
            if self.replicas.apply_metadata():
                self._caught_up = True
                self.lifecycle.set_ready_to_unfence()
        except Exception:
            log.exception("broker %s: applying metadata at offset %s failed", self.settings.node_id,
                          self.quorum.metadata_offset)
        self.lifecycle.on_metadata()

    async def wait_for_change(self, topic_partitions: Iterable[TopicPartition], timeout_ms: int) -> bool:
        """Sleep until a partition's log, HW or role changes (True) or the time is up (False)."""
        return await self.watchers.wait(topic_partitions, timeout_ms)

    # -- produce ------------------------------------------------------------------------------------

    async def produce(self, request: protocol.ProduceRequest) -> protocol.ProduceResponse:
        def event_of(part: protocol.ProducePartition) -> ProduceRequest:
            return ProduceRequest(next(self._request_ids), part.records, request.acks, request.timeout_ms,
                                  part.current_leader_epoch)

        answers = []
        for part, located, result in await self._submit_all(request.partitions, event_of):
            if result is None:
                answers.append(protocol.ProducePartitionResponse(part.topic, part.partition, located.error,
                                                                 located.message))
                continue
            assert isinstance(result, ProduceResult), result
            answers.append(protocol.ProducePartitionResponse(
                part.topic, part.partition, result.error, result.error_message, result.base_offset,
                result.log_append_time_ms, result.log_start_offset,
            ))
        return protocol.ProduceResponse(tuple(answers))

    async def _submit_all(self, parts: Sequence[PartitionPart], event_of: Callable[[PartitionPart], object]
                          ) -> list[tuple[PartitionPart, Located, object | None]]:
        """Each partition's event submitted to its host, then every result awaited in request order
        (None where this node hosts no replica to ask: `Located` says why). Submitting all before
        awaiting any lets the partitions of one request proceed together, as acks=all waits do."""
        pending = []
        for part in parts:
            located = self.replicas.locate(part.topic, part.partition)
            future = None if located.host is None else located.host.submit(event_of(part))
            pending.append((part, located, future))
        return [(part, located, None if future is None else await future) for part, located, future in pending]

    # -- fetch --------------------------------------------------------------------------------------

    async def fetch(self, request: protocol.FetchRequest) -> protocol.FetchResponse:
        """Consumers (replica_id -1, any replica serves up to its HW) and followers (replica_id = their
        node id, leader only); long-polls up to max_wait_ms for min_bytes (see the module docstring)."""
        loop = asyncio.get_running_loop()
        deadline_s = loop.time() + request.max_wait_ms / 1000
        topic_partitions = [TopicPartition(part.topic, part.partition) for part in request.partitions]
        while True:
            answers, done = self._read_fetch(request)
            remaining_ms = int((deadline_s - loop.time()) * 1000)
            if done or remaining_ms <= 0 or self._stopped:
                return protocol.FetchResponse(tuple(answers))
            await self.watchers.wait(topic_partitions, remaining_ms)

    def _read_fetch(self, request: protocol.FetchRequest) -> tuple[list[protocol.FetchPartitionResponse], bool]:
        """One read of every requested partition, and whether that answers the request."""
        answers = []
        bytes_left = request.max_bytes
        done = False
        for part in request.partitions:
            answer = self._read_partition(request, part, max(bytes_left, 0))
            bytes_left -= len(answer.records)
            news_for_follower = (request.replica_id != CONSUMER_REPLICA_ID
                                 and 0 <= part.high_watermark < answer.high_watermark)
            if (answer.error_code != ErrorCode.NONE or news_for_follower
                    or answer.preferred_read_replica != NO_PREFERRED_READ_REPLICA):
                done = True
            answers.append(answer)
        total_bytes = request.max_bytes - bytes_left
        return answers, done or total_bytes >= request.min_bytes or request.max_wait_ms <= 0

    def _read_partition(self, request: protocol.FetchRequest, part: protocol.FetchPartition,
                        bytes_left: int) -> protocol.FetchPartitionResponse:
        located = self.replicas.locate(part.topic, part.partition)
        host = located.host
        if host is None:
            return protocol.FetchPartitionResponse(part.topic, part.partition, located.error, located.message,
                                                   current_leader=located.current_leader)
        max_bytes = min(part.partition_max_bytes, bytes_left)
        request_id = next(self._request_ids)
        if request.replica_id == CONSUMER_REPLICA_ID:
            event: ConsumerFetch | FollowerFetch = ConsumerFetch(request_id, part.fetch_offset, max_bytes,
                                                                 part.current_leader_epoch)
        else:
            event = FollowerFetch(request_id=request_id, replica_id=request.replica_id,
                                  fetch_offset=part.fetch_offset, last_fetched_epoch=part.last_fetched_epoch,
                                  log_start_offset=part.log_start_offset,
                                  current_leader_epoch=part.current_leader_epoch, max_bytes=max_bytes,
                                  broker_epoch=request.broker_epoch, high_watermark=part.high_watermark)
        future = host.submit(event)
        assert future.done(), f"fetch with max_wait_ms 0 parked on {host.topic_partition}"
        result = future.result()
        assert isinstance(result, FetchResult), result
        preferred = NO_PREFERRED_READ_REPLICA
        if request.replica_id == CONSUMER_REPLICA_ID and result.error == ErrorCode.NONE:
            preferred = self._preferred_read_replica(host, request.rack_id)
        diverging = result.diverging_epoch
        return protocol.FetchPartitionResponse(
            topic=part.topic,
            partition=part.partition,
            error_code=result.error,
            error_message=result.error_message,
            high_watermark=result.high_watermark,
            log_start_offset=result.log_start_offset,
            log_end_offset=result.log_end_offset,
            # KIP-392: with a preferred replica the leader sends no records; the consumer goes there.
            records=result.records if preferred == NO_PREFERRED_READ_REPLICA else b"",
            diverging_epoch=None if diverging is None else protocol.EpochEndOffset(diverging.epoch,
                                                                                   diverging.end_offset),
            current_leader=located.current_leader if result.error in _CURRENT_LEADER_ERRORS else None,
            preferred_read_replica=preferred,
        )

    def _preferred_read_replica(self, host: PartitionHost, rack_id: str) -> int:
        """KIP-392 on the leader: a live in-sync replica in the consumer's rack (first in replica
        order), unless the leader is in that rack itself (then -1: read here, as Kafka's
        RackAwareReplicaSelector prefers the leader)."""
        partition = host.partition
        if not rack_id or partition.role != Role.LEADER or self.settings.broker_rack == rack_id:
            return NO_PREFERRED_READ_REPLICA
        metadata = self.quorum.metadata
        for replica in partition.isr:
            broker = metadata.broker(replica)
            if replica != self.settings.node_id and broker is not None and broker.active and broker.rack == rack_id:
                return replica
        return NO_PREFERRED_READ_REPLICA

    # -- offsets ------------------------------------------------------------------------------------

    async def list_offsets(self, request: protocol.ListOffsetsRequest) -> protocol.ListOffsetsResponse:
        def event_of(part: protocol.ListOffsetsPartition) -> ListOffsets:
            return ListOffsets(next(self._request_ids), part.timestamp, part.current_leader_epoch,
                               require_leader=not request.from_follower)

        answers = []
        for part, located, result in await self._submit_all(request.partitions, event_of):
            if result is None:
                answers.append(protocol.ListOffsetsPartitionResponse(part.topic, part.partition, located.error,
                                                                     located.message))
                continue
            assert isinstance(result, ListOffsetsResult), result
            answers.append(protocol.ListOffsetsPartitionResponse(
                part.topic, part.partition, result.error, result.error_message, result.timestamp, result.offset,
                result.leader_epoch,
            ))
        return protocol.ListOffsetsResponse(tuple(answers))

    async def offsets_for_leader_epoch(
        self, request: protocol.OffsetsForLeaderEpochRequest
    ) -> protocol.OffsetsForLeaderEpochResponse:
        def event_of(part: protocol.OffsetForLeaderPartition) -> OffsetsForLeaderEpoch:
            return OffsetsForLeaderEpoch(next(self._request_ids), part.leader_epoch, part.current_leader_epoch)

        answers = []
        for part, located, result in await self._submit_all(request.partitions, event_of):
            if result is None:
                answers.append(protocol.EpochEndOffsetResponse(part.topic, part.partition, located.error,
                                                               located.message))
                continue
            assert isinstance(result, OffsetsForLeaderEpochResult), result
            answers.append(protocol.EpochEndOffsetResponse(part.topic, part.partition, result.error,
                                                           result.error_message, result.leader_epoch,
                                                           result.end_offset))
        return protocol.OffsetsForLeaderEpochResponse(tuple(answers))

    async def delete_records(self, request: protocol.DeleteRecordsRequest) -> protocol.DeleteRecordsResponse:
        def event_of(part: protocol.DeleteRecordsPartition) -> DeleteRecords:
            return DeleteRecords(next(self._request_ids), part.offset, request.timeout_ms)

        answers = []
        for part, located, result in await self._submit_all(request.partitions, event_of):
            if result is None:
                answers.append(protocol.DeleteRecordsPartitionResponse(part.topic, part.partition, located.error,
                                                                       located.message))
                continue
            assert isinstance(result, DeleteRecordsResult), result
            answers.append(protocol.DeleteRecordsPartitionResponse(part.topic, part.partition, result.error,
                                                                   result.error_message, result.low_watermark))
        return protocol.DeleteRecordsResponse(tuple(answers))

    # -- state for tools and metrics ----------------------------------------------------------------

    def describe_replicas(self, request: protocol.DescribeReplicasRequest) -> protocol.DescribeReplicasResponse:
        replicas = []
        for topic_partition, host in sorted(self.hosts.items()):
            if request.topics is not None and topic_partition.topic not in request.topics:
                continue
            partition = host.partition
            log = partition.log
            replicas.append(protocol.ReplicaState(
                topic=topic_partition.topic,
                partition=topic_partition.partition,
                role=partition.role.value,
                leader_id=partition.leader_id,
                leader_epoch=partition.leader_epoch,
                log_start_offset=log.log_start_offset,
                log_end_offset=log.log_end_offset,
                high_watermark=log.high_watermark,
                isr=tuple(partition.isr),
                size_bytes=log.size_in_bytes(),
            ))
        return protocol.DescribeReplicasResponse(self.settings.node_id, tuple(replicas))

    def replica_metrics(self) -> list[ReplicaMetrics]:
        """Per hosted partition: LEO, HW, logStartOffset, size; on the leader also the ISR size and
        the under-replicated / under-min-ISR flags (Kafka reports those on leaders only)."""
        metrics = []
        for topic_partition, host in sorted(self.hosts.items()):
            partition = host.partition
            log = partition.log
            is_leader = partition.role == Role.LEADER
            isr_size = len(partition.isr)
            replica_count = len(partition.state.replicas) if partition.state is not None else 0
            metrics.append(ReplicaMetrics(
                topic=topic_partition.topic,
                partition=topic_partition.partition,
                is_leader=is_leader,
                log_end_offset=log.log_end_offset,
                high_watermark=log.high_watermark,
                log_start_offset=log.log_start_offset,
                isr_size=isr_size,
                under_replicated=is_leader and isr_size < replica_count,
                under_min_isr=is_leader and isr_size < partition.min_insync_replicas(),
                size_bytes=log.size_in_bytes(),
            ))
        return metrics
