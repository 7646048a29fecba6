"""Broker: the broker side of a node — the broker core on the event loop, and its I/O.

The decisions are the core's (`replication.replica_manager.ReplicaManager`: metadata to roles,
requests over partitions, the delayed fetch, replica fetch sessions and backoff, KIP-392); this
module only feeds it events and carries out its `BrokerReady` in the order that class fixes:
AlterPartition proposals go to the active controller, those of one Ready in one request (Kafka's
AlterPartitionManager batches too: a failover's new leaders, each recording its epoch's lineage, are
then one metadata commit instead of hundreds), and their answers come back one per partition;
client answers resolve the future of the request that asked; replica fetches go to the leaders'
inter-broker endpoints (one task each) and their answers, or the failure, come back; one timer
ticks the core when it asked. `BrokerLifecycleManager` registers and heartbeats; `LogTasks` runs
retention, flush, checkpoints and compaction.

One owner without a task of its own: `ReplicaManager.handle` is synchronous and the event loop runs
one callback at a time, so stepping the core from any coroutine of this broker never interleaves
two events (no lock, no queue).

Two clocks: `clock` is monotonic (every timeout, deadline and backoff of the core), `wall_clock`
only reaches storage (record and segment timestamps, retention), so a wall-clock step changes no
timeout (DESIGN §2).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable, Sequence
from typing import NoReturn

from client.connection import Connections, NodeUnavailableError, RequestRejectedError
from node.broker_settings import BrokerSettings
from node.lifecycle import BrokerLifecycleManager, Quorum
from node.log_tasks import LogTasks
from node.metrics import ReplicaMetrics
from replication.broker_events import (
    AlterPartitionAnswer,
    ClientRequest,
    FetchWait,
    LeaseChanged,
    MetadataChanged,
    ReplicaFetchAnswer,
    Shutdown,
)
from replication.broker_ready import AlterPartitionSend, BrokerReady, ClientAnswer, PartAnswer, ReplicaFetchSend
from replication.events import (
    ConsumerFetch,
    DeleteRecords,
    FollowerFetch,
    ListOffsets,
    OffsetsForLeaderEpoch,
    PartitionRequest,
    ProduceRequest,
    RunRetention,
    Tick,
)
from replication.ready import (
    DeleteRecordsResult,
    EpochEndOffset,
    FetchResult,
    ListOffsetsResult,
    OffsetsForLeaderEpochResult,
    ProduceResult,
    Role,
)
from replication.replica_manager import HostedPartition, ReplicaManager
from replication.replica_sessions import SessionFetchRef
from storage.log_manager import LogManager
from wire.alter_partition import AlterPartitionRequest
from wire.alter_partition import AlterPartitionResponse as ControllerAlterPartitionResponse
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.fetch import EpochEndOffset as WireEpochEndOffset
from wire.fetch import (
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    ForgottenPartition,
    LeaderIdAndEpoch,
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
from wire.metadata import DescribeReplicasRequest, DescribeReplicasResponse, ReplicaState
from wire.produce import ProducePartitionResponse, ProduceResponse
from wire.produce import ProduceRequest as WireProduceRequest
from wire.sentinels import CONSUMER_REPLICA_ID
from wire.topic_partition import TopicPartition

__all__ = ["Broker", "BrokerSettings"]

log = logging.getLogger(__name__)

LOG_DIR_FAILURE_EXIT_CODE = 3


def halt(message: str) -> NoReturn:
    """End the process now, as Kafka's `Exit.halt`: no controlled shutdown, no clean-shutdown
    marker, no checkpoint written from memory that the failed log dir may contradict."""
    log.critical(message)
    logging.shutdown()
    os._exit(LOG_DIR_FAILURE_EXIT_CODE)


class Broker:
    """One node's broker: started once, stopped once; one event loop, no locks."""

    def __init__(self, settings: BrokerSettings, quorum: Quorum, connections: Connections,
                 clock: Callable[[], int], wall_clock: Callable[[], int], log_manager: LogManager,
                 directory_ids: tuple[str, ...]) -> None:
        """`directory_ids`: the ids in the log dirs' meta.properties (KIP-858), for the registration."""
        self.settings = settings
        self.quorum = quorum
        self.log_manager = log_manager
        self._connections = connections
        self._clock = clock
        self._wall_clock = wall_clock
        self._request_ids = itertools.count(1)
        self._futures: dict[int, asyncio.Future[ClientAnswer]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._tick_handle: asyncio.TimerHandle | None = None
        self._tick_at_ms: int | None = None
        self._changed = asyncio.Event()
        self._stopped = False
        self._caught_up = asyncio.Event()
        self._reported_caught_up = False  # what the lifecycle last heard (`_report_metadata`)
        self._metadata_applied = asyncio.Event()  # the last metadata is applied to every partition
        self.core = ReplicaManager(settings.replica_manager_config(), log_manager, clock())
        self.lifecycle = BrokerLifecycleManager(settings, quorum, self._on_metadata, self._on_lease, directory_ids,
                                                log_manager.previous_broker_epoch, clock)
        self.log_tasks = LogTasks(settings, log_manager, self.run_retention, wall_clock)

    @property
    def hosts(self) -> dict[TopicPartition, HostedPartition]:
        return self.core.hosted

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
        return self._caught_up.is_set()

    async def wait_caught_up(self) -> None:
        await self._caught_up.wait()

    async def wait_metadata_applied(self) -> None:
        """Until the core has applied the last metadata to every partition (a large change is
        applied over several Ticks): for tests and tools that act on a change they just made."""
        await self._metadata_applied.wait()

    @property
    def is_unfenced(self) -> bool:
        """Registered and unfenced by the controller: may lead partitions and join ISRs."""
        return not self.lifecycle.is_fenced

    async def stop(self, controlled: bool) -> None:
        """Stop serving. `controlled`: first ask the controller to move leaderships away, up to
        `controlled_shutdown_timeout_ms`. Then stop the log tasks and the core (parked requests are
        answered), drop the sends in flight, and shut the LogManager down (flush, checkpoints,
        clean-shutdown marker with this process's broker epoch, which the next start registers with)."""
        if self._stopped:
            return
        if controlled:
            await self.lifecycle.controlled_shutdown(self.settings.controlled_shutdown_timeout_ms)
        else:
            await self.lifecycle.stop()
        await self.log_tasks.stop()
        self._step(Shutdown())
        self._stopped = True
        self._cancel_tick()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        assert not self._futures, f"broker {self.settings.node_id}: {len(self._futures)} requests unanswered"
        self.log_manager.shutdown(self._wall_clock(), self.lifecycle.broker_epoch)

    def _on_metadata(self) -> None:
        """The quorum's listener (and the lifecycle's, after a registration). A failure (a log dir
        that cannot be written) is logged; the next metadata change retries what is left."""
        if self._stopped:
            return
        caught_up = False
        try:
            caught_up = self._step(MetadataChanged(self.quorum.metadata, self.lifecycle.broker_epoch)).caught_up
        except Exception:
            log.exception("broker %s: applying metadata at offset %s failed", self.settings.node_id,
                          self.quorum.metadata_offset)
        self._report_metadata(caught_up)

    def _report_metadata(self, caught_up: bool) -> None:
        """Tell the lifecycle how far the core applied the metadata (a large change is caught up only
        at the Tick that applies its last partitions)."""
        self._reported_caught_up = caught_up
        if caught_up:
            self._caught_up.set()
            self._metadata_applied.set()
        else:
            self._metadata_applied.clear()
        self.lifecycle.on_metadata(self.quorum.metadata_offset, caught_up, self.core.offline_log_ends())

    def _on_lease(self, until_ms: int) -> None:
        if not self._stopped:
            self._step(LeaseChanged(until_ms))

    def run_retention(self) -> None:
        """The leaders' retention pass (LogTasks' `kafka-log-retention` job)."""
        if not self._stopped:
            self._step(RunRetention())

    async def wait_for_change(self, timeout_ms: int) -> bool:
        """Sleep until some partition's log, HW, role or epoch changes (True) or the time is up
        (False): for tools and tests that watch replication without polling."""
        self._changed.clear()
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self._changed.wait()
        except TimeoutError:
            return False
        return True

    # -- the core and its Ready ---------------------------------------------------------------------

    def _step(self, event: object) -> BrokerReady:
        ready = self.core.handle(event, self._clock(), self._wall_clock())
        self._perform(ready)
        return ready

    def _perform(self, ready: BrokerReady) -> None:
        """Carry out a Ready in the order `BrokerReady` fixes."""
        if ready.log_dir_failure is not None:
            halt(f"broker {self.settings.node_id}: halting because a log dir failed: {ready.log_dir_failure}. "
                 "The log was cut at that batch; check the disk, then restart the node: it rejoins as a follower "
                 "and fetches what was cut from the partition's other replicas")
        for deleted in ready.deleted_logs:
            log.info("broker %s: deleted the log of %s (%s)", self.settings.node_id, deleted.topic_partition,
                     deleted.reason)
        for sends in _alter_partition_requests(ready.alter_partitions):
            self._spawn(self._alter_partitions(sends), f"alter-partition-{len(sends)}")
        for answer in ready.answers:
            future = self._futures.pop(answer.request_id, None)
            assert future is not None, f"broker {self.settings.node_id}: answer to unknown request {answer.request_id}"
            if not future.done():  # the asker may have been cancelled (client gone)
                future.set_result(answer)
        for fetch in ready.fetches:
            self._spawn(self._replica_fetch(fetch), f"replica-fetch-{self.settings.node_id}-from-{fetch.leader_id}")
        self._schedule_tick(ready.next_tick_ms)
        if any(step.ready.log_changes or step.ready.high_watermark is not None for step in ready.steps):
            self._changed.set()

    def _spawn(self, coroutine: object, name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broker %s: %s failed", self.settings.node_id, task.get_name(), exc_info=task.exception())

    def _schedule_tick(self, at_ms: int | None) -> None:
        """One timer, at the time the core asked for (ticking early is harmless)."""
        if at_ms == self._tick_at_ms or self._stopped:
            return
        self._cancel_tick()
        if at_ms is None:
            return
        loop = asyncio.get_running_loop()
        delay_s = max(at_ms - self._clock(), 0) / 1000
        self._tick_at_ms = at_ms
        self._tick_handle = loop.call_at(loop.time() + delay_s, self._on_tick_timer)

    def _cancel_tick(self) -> None:
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self._tick_handle = None
        self._tick_at_ms = None

    def _on_tick_timer(self) -> None:
        self._tick_handle = None
        self._tick_at_ms = None
        if not self._stopped and self._step(Tick()).caught_up and not self._reported_caught_up:
            self._report_metadata(True)

    async def _submit(self, parts: tuple[tuple[TopicPartition, PartitionRequest], ...],
                      wait: FetchWait | None = None) -> ClientAnswer:
        """Step one client request and await the core's answer to it."""
        request_id = next(self._request_ids)
        future: asyncio.Future[ClientAnswer] = asyncio.get_running_loop().create_future()
        self._futures[request_id] = future
        try:
            self._step(ClientRequest(request_id, parts, wait))
        except BaseException:
            # A bug, or an OSError the log could not take back (a failed flush after the append, a
            # failed undo); a write the log took back is a KafkaStorageError answer. The caller's
            # request fails (500); no future may stay behind to be "unanswered" at stop.
            self._futures.pop(request_id, None)
            raise
        return await future

    # -- I/O the core asked for ---------------------------------------------------------------------

    async def _alter_partitions(self, sends: list[AlterPartitionSend]) -> None:
        """One AlterPartition request; each proposal's answer goes back to the core on its own (a
        partition the answer leaves out: the top-level error, or UNKNOWN_SERVER_ERROR)."""
        request = AlterPartitionRequest(self.settings.node_id, sends[0].broker_epoch, tuple(
            send.proposal.as_data(send.topic_id, send.topic_partition.partition) for send in sends))
        response = await self.quorum.controller_request(request, self.settings.request_timeout_ms)
        assert isinstance(response, ControllerAlterPartitionResponse), response
        results = {(result.topic_id, result.partition_index): result for result in response.partitions}
        for send in sends:
            result = results.get((send.topic_id, send.topic_partition.partition))
            if response.error_code != ErrorCode.NONE or result is None:
                error = ErrorCode.UNKNOWN_SERVER_ERROR if response.error_code == ErrorCode.NONE else response.error_code
                answer = AlterPartitionAnswer(send.request_id, error)
            else:
                answer = AlterPartitionAnswer(send.request_id, result.error_code, result.leader_id,
                                              result.leader_epoch, result.partition_epoch, result.isr)
            if self._stopped:
                return
            self._step(answer)

    async def _replica_fetch(self, send: ReplicaFetchSend) -> None:
        partitions = tuple(
            FetchPartition(
                topic=topic_partition.topic,
                partition=topic_partition.partition,
                fetch_offset=position.fetch_offset,
                partition_max_bytes=position.max_bytes,
                current_leader_epoch=position.leader_epoch,
                last_fetched_epoch=position.last_fetched_epoch,
                log_start_offset=position.log_start_offset,
            )
            for topic_partition, position in send.positions
        )
        request = FetchRequest(partitions=partitions, replica_id=self.settings.node_id,
                               broker_epoch=send.broker_epoch, max_wait_ms=send.max_wait_ms,
                               min_bytes=send.min_bytes, max_bytes=send.max_bytes,
                               cluster_id=self.settings.cluster_id, session_id=send.session_id,
                               session_epoch=send.session_epoch,
                               forgotten=tuple(ForgottenPartition(tp.topic, tp.partition) for tp in send.forgotten))
        try:
            response = await self._connections.call(send.address, Api.FETCH, request,
                                                    FetchResponse, self.core.config.replica_fetch_timeout_ms)
        except (NodeUnavailableError, RequestRejectedError) as error:
            log.info("broker %s: fetch from broker %s failed (%s); the core backs off", self.settings.node_id,
                     send.leader_id, error)
            answer = ReplicaFetchAnswer(send.request_id, error=ErrorCode.NETWORK_EXCEPTION, error_message=str(error))
        else:  # the core drops results for partitions its fetch did not hold
            answer = ReplicaFetchAnswer(send.request_id, tuple(
                (TopicPartition(part.topic, part.partition), _fetch_result(part)) for part in response.partitions
            ), response.error_code, session_id=response.session_id)
        if not self._stopped:
            self._step(answer)

    # -- client requests ----------------------------------------------------------------------------

    async def produce(self, request: WireProduceRequest) -> ProduceResponse:
        answer = await self._submit(tuple(
            (TopicPartition(part.topic, part.partition),
             ProduceRequest(0, part.records, request.acks, request.timeout_ms, part.current_leader_epoch))
            for part in request.partitions
        ))
        parts = []
        for part in answer.parts:
            result = part.result
            assert isinstance(result, ProduceResult), result
            parts.append(ProducePartitionResponse(
                part.topic_partition.topic, part.topic_partition.partition, result.error, result.error_message,
                result.base_offset, result.log_append_time_ms, result.log_start_offset,
            ))
        return ProduceResponse(tuple(parts))

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        """Consumers (replica_id -1, any replica serves up to its HW) and followers (replica_id = their
        node id, leader only); the core long-polls up to max_wait_ms for min_bytes."""
        parts: list[tuple[TopicPartition, PartitionRequest]] = []
        for part in request.partitions:
            event: ConsumerFetch | FollowerFetch
            if request.replica_id == CONSUMER_REPLICA_ID:
                event = ConsumerFetch(0, part.fetch_offset, part.partition_max_bytes, part.current_leader_epoch)
            else:
                event = FollowerFetch(request_id=0, replica_id=request.replica_id, fetch_offset=part.fetch_offset,
                                      last_fetched_epoch=part.last_fetched_epoch,
                                      log_start_offset=part.log_start_offset,
                                      current_leader_epoch=part.current_leader_epoch,
                                      max_bytes=part.partition_max_bytes, broker_epoch=request.broker_epoch)
            parts.append((TopicPartition(part.topic, part.partition), event))
        # A client waits at most its request timeout (Kafka's clients require fetch.max.wait.ms below
        # it), so a longer long poll only holds a parked-fetch slot for nothing.
        session = None
        if request.replica_id != CONSUMER_REPLICA_ID:  # KIP-227 sessions for followers (replica_sessions.py)
            session = SessionFetchRef(request.session_id, request.session_epoch, tuple(
                TopicPartition(part.topic, part.partition) for part in request.forgotten), request.broker_epoch)
        wait = FetchWait(request.replica_id, min(request.max_wait_ms, self.settings.request_timeout_ms),
                         request.min_bytes, request.max_bytes, request.rack_id, session)
        answer = await self._submit(tuple(parts), wait)
        return FetchResponse(tuple(_fetch_partition_response(part) for part in answer.parts), answer.error,
                             answer.session_id)

    async def list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        answer = await self._submit(tuple(
            (TopicPartition(part.topic, part.partition),
             ListOffsets(0, part.timestamp, part.current_leader_epoch, require_leader=not request.from_follower))
            for part in request.partitions
        ))
        parts = []
        for part in answer.parts:
            result = part.result
            assert isinstance(result, ListOffsetsResult), result
            parts.append(ListOffsetsPartitionResponse(
                part.topic_partition.topic, part.topic_partition.partition, result.error, result.error_message,
                result.timestamp, result.offset, result.leader_epoch,
            ))
        return ListOffsetsResponse(tuple(parts))

    async def offsets_for_leader_epoch(
        self, request: OffsetsForLeaderEpochRequest
    ) -> OffsetsForLeaderEpochResponse:
        answer = await self._submit(tuple(
            (TopicPartition(part.topic, part.partition),
             OffsetsForLeaderEpoch(0, part.leader_epoch, part.current_leader_epoch))
            for part in request.partitions
        ))
        parts = []
        for part in answer.parts:
            result = part.result
            assert isinstance(result, OffsetsForLeaderEpochResult), result
            parts.append(EpochEndOffsetResponse(
                part.topic_partition.topic, part.topic_partition.partition, result.error, result.error_message,
                result.leader_epoch, result.end_offset,
            ))
        return OffsetsForLeaderEpochResponse(tuple(parts))

    async def delete_records(self, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        answer = await self._submit(tuple(
            (TopicPartition(part.topic, part.partition), DeleteRecords(0, part.offset, request.timeout_ms))
            for part in request.partitions
        ))
        parts = []
        for part in answer.parts:
            result = part.result
            assert isinstance(result, DeleteRecordsResult), result
            parts.append(DeleteRecordsPartitionResponse(
                part.topic_partition.topic, part.topic_partition.partition, result.error, result.error_message,
                result.low_watermark,
            ))
        return DeleteRecordsResponse(tuple(parts))

    # -- state for tools and metrics ----------------------------------------------------------------

    def describe_replicas(self, request: DescribeReplicasRequest) -> DescribeReplicasResponse:
        replicas = []
        for topic_partition, partition in self.core.partitions():
            if request.topics is not None and topic_partition.topic not in request.topics:
                continue
            log_ = partition.log
            replicas.append(ReplicaState(
                topic=topic_partition.topic,
                partition=topic_partition.partition,
                role=partition.role.value,
                leader_id=partition.leader_id,
                leader_epoch=partition.leader_epoch,
                log_start_offset=log_.log_start_offset,
                log_end_offset=log_.log_end_offset,
                high_watermark=log_.high_watermark,
                isr=tuple(partition.isr),
                size_bytes=log_.size_in_bytes(),
                log_dir=str(self.log_manager.log_dir(topic_partition) or ""),
            ))
        return DescribeReplicasResponse(self.settings.node_id, tuple(replicas))

    def replica_metrics(self) -> list[ReplicaMetrics]:
        """Per hosted partition: LEO, HW, logStartOffset, size; on the leader also the ISR size and
        the under-replicated / under-min-ISR flags (Kafka reports those on leaders only)."""
        metrics = []
        for topic_partition, partition in self.core.partitions():
            log_ = partition.log
            is_leader = partition.role == Role.LEADER
            isr_size = len(partition.isr)
            replica_count = len(partition.state.replicas) if partition.state is not None else 0
            metrics.append(ReplicaMetrics(
                topic=topic_partition.topic,
                partition=topic_partition.partition,
                is_leader=is_leader,
                log_end_offset=log_.log_end_offset,
                high_watermark=log_.high_watermark,
                log_start_offset=log_.log_start_offset,
                isr_size=isr_size,
                under_replicated=is_leader and isr_size < replica_count,
                under_min_isr=is_leader and isr_size < partition.min_insync_replicas(),
                size_bytes=log_.size_in_bytes(),
            ))
        return metrics


def _alter_partition_requests(sends: Sequence[AlterPartitionSend]) -> list[list[AlterPartitionSend]]:
    """The proposals of one Ready as requests: one per broker epoch, none naming a partition twice
    (the controller would judge the second against the first's outcome)."""
    requests: list[list[AlterPartitionSend]] = []
    open_requests: dict[int, tuple[list[AlterPartitionSend], set[tuple[str, int]]]] = {}
    for send in sends:
        key = (send.topic_id, send.topic_partition.partition)
        request, named = open_requests.get(send.broker_epoch, (None, set()))
        if request is None or key in named:
            request, named = [], set()
            requests.append(request)
            open_requests[send.broker_epoch] = (request, named)
        request.append(send)
        named.add(key)
    return requests


def _fetch_result(answer: FetchPartitionResponse) -> FetchResult:
    """A leader's wire answer as the core's `FetchResult` (request ids do not cross the wire)."""
    diverging = answer.diverging_epoch
    return FetchResult(
        request_id=-1,
        error=answer.error_code,
        records=answer.records,
        high_watermark=answer.high_watermark,
        log_start_offset=answer.log_start_offset,
        log_end_offset=answer.log_end_offset,
        diverging_epoch=None if diverging is None else EpochEndOffset(diverging.epoch, diverging.end_offset),
        error_message=answer.error_message,
        producer_snapshot=answer.producer_snapshot,
    )


def _fetch_partition_response(part: PartAnswer) -> FetchPartitionResponse:
    result = part.result
    assert isinstance(result, FetchResult), result
    diverging = result.diverging_epoch
    leader = part.current_leader
    return FetchPartitionResponse(
        topic=part.topic_partition.topic,
        partition=part.topic_partition.partition,
        error_code=result.error,
        error_message=result.error_message,
        high_watermark=result.high_watermark,
        log_start_offset=result.log_start_offset,
        log_end_offset=result.log_end_offset,
        records=result.records,
        diverging_epoch=None if diverging is None else WireEpochEndOffset(diverging.epoch, diverging.end_offset),
        current_leader=None if leader is None else LeaderIdAndEpoch(leader.leader_id, leader.leader_epoch),
        preferred_read_replica=part.preferred_read_replica,
        producer_snapshot=result.producer_snapshot,
    )
