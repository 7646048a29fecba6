"""SimBroker: one simulated broker — its log directory, its current incarnation, its broker core.

The broker is the node's own broker core (`replication.replica_manager.ReplicaManager`: metadata to
roles, requests, the delayed fetch, the replica fetch sessions and their backoff, AlterPartition
proposals) and its own lifecycle core (`controller.broker_lifecycle.BrokerLifecycle`: registration,
heartbeats). This module only carries their Readies over the simulated network, in the order each
fixes, as `node/broker.py` and `node/lifecycle.py` carry them over HTTP. What is still simulated
here is the metadata long poll and the log tasks' cadence (`duty`).

An incarnation is what a process holds: a `LogManager` opened from the directory (recovery after a
crash), a broker core, its registration (broker epoch), the requests in flight. A crash drops the
incarnation and cuts the files (`disk.crash`); a restart opens a new one from what is left and
registers again with a new incarnation id, as `node/lifecycle.py` does: with the directory id of its
meta.properties (KIP-858) and the broker epoch of its clean-shutdown marker (-1 after a crash,
KIP-966); heartbeats carry the core's `offline_log_ends`. A pause keeps the incarnation and holds
its events. Correlation ids grow across incarnations: an answer to a request of the previous
process must never be taken for the answer to one of the new process (a new process has new
connections).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from controller.broker_lifecycle import (
    BrokerLifecycle,
    BrokerLifecycleConfig,
    LifecycleEvent,
    LifecycleTick,
    MetadataApplied,
    StartLifecycle,
)
from controller.broker_lifecycle import ControllerAnswer as LifecycleAnswer
from controller.error_responses import is_not_controller
from controller.metadata import ClusterMetadata
from node.lifecycle import replica_log_info
from replication.broker_events import (
    AlterPartitionAnswer,
    ClientRequest,
    LeaseChanged,
    MetadataChanged,
    ReplicaFetchAnswer,
    replica_fetch_request,
)
from replication.broker_ready import BrokerReady, ClientAnswer
from replication.config import ReplicaManagerConfig, ReplicationConfig
from replication.events import ConsumerFetch, DeleteRecords, ListOffsets, ProduceRequest, RunRetention, Tick
from replication.group_coordinator import (
    OFFSETS_TOPIC,
    CoordinatorEvent,
    GroupCoordinator,
    LatestListed,
    ListLatest,
    Produced,
    ProduceOffsets,
    Read,
    ReadOffsets,
)
from replication.partition import Partition
from replication.ready import FetchResult, ListOffsetsResult, ProduceResult
from replication.replica_manager import ReplicaManager
from storage import meta_properties
from storage.config import LogConfig
from storage.log_manager import LogManager
from tests.sim.kernel.disk import DiskModel
from tests.sim.replication import disk
from tests.sim.replication.controller import CLUSTER_ID, LISTENER, endpoints, incarnation_id
from tests.sim.replication.messages import (
    ClientDeleteRecords,
    ClientFetch,
    ClientFetchAnswer,
    ClientGroupAnswer,
    ClientGroupRequest,
    ClientProduce,
    ClientProduceAnswer,
    ControllerAnswer,
    ControllerRequest,
    Message,
    MetadataAnswer,
    MetadataFetch,
    ReplicaFetchMessage,
    ReplicaFetchReply,
)
from tests.sim.replication.options import ReplicationSimOptions
from tests.sim.replication.quorum import CONTROLLER_IDS
from wire.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from wire.error_codes import ErrorCode
from wire.sentinels import LATEST_TIMESTAMP
from wire.topic_partition import TopicPartition

WALL_START_MS = 1_700_000_000_000  # the simulated wall clocks' base (simulated time 0)


class Services(Protocol):
    """What a broker needs from the simulator."""

    now_ms: int
    options: ReplicationSimOptions
    disk_model: DiskModel
    replication_config: ReplicationConfig

    def log_config_of(self, topic: str) -> LogConfig: ...
    def send(self, message: Message) -> None: ...
    def schedule_broker_tick(self, broker: SimBroker, at_ms: int) -> None: ...
    def schedule_lifecycle_tick(self, broker: SimBroker, at_ms: int) -> None: ...
    def opened(self, broker: SimBroker) -> None: ...
    def observe(self, broker: SimBroker, ready: BrokerReady) -> None: ...
    def acked(self, broker: SimBroker, topic_partition: TopicPartition, client_request_id: int) -> None: ...
    def halted(self, broker: SimBroker, reason: str) -> None: ...
    def fsynced(self, broker: SimBroker) -> None: ...
    def trace(self, line: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Pending:
    """A client request the core is answering: who asked, and how to answer."""

    kind: str  # "produce", "consume", "replica", "delete"
    source: int
    topic_partition: TopicPartition | None
    client_request_id: int = -1
    acks: int = 1
    records: bytes = b""
    incarnation: int = 0  # of a replica fetch's follower: the reply goes to that process only


class SimBroker:
    def __init__(self, broker_id: int, root: Path, services: Services) -> None:
        self.broker_id = broker_id
        self.directory = root / f"broker-{broker_id}"
        self.services = services
        self.incarnation = 0
        self.up = False
        self.paused_until_ms = -1
        self.held: list[Message] = []
        self.manager: LogManager | None = None
        self.core: ReplicaManager | None = None
        self.disk = disk.BrokerDisk(services.disk_model, self.directory)
        self.next_id = 1
        self.wall_offset_ms = 0  # the machine's wall clock is off by this much (a clock step); outlives processes

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, now_ms: int) -> None:
        """Open a new incarnation from the directory; its lifecycle core registers it."""
        assert not self.up, f"broker {self.broker_id} is already up"
        self.incarnation += 1
        self.up = True
        self.paused_until_ms = -1
        self.held = []
        self.disk.opened()
        self.log_dirs = self.claim_log_dirs()
        self.manager = LogManager([self.directory], self.services.log_config_of, self.wall_clock_ms)
        self.services.opened(self)
        options = self.services.options
        config = ReplicaManagerConfig(
            broker_id=self.broker_id,
            inter_broker_listener_name=LISTENER,
            replication=self.services.replication_config,
            replica_fetch_wait_max_ms=options.fetch_max_wait_ms,
            replica_fetch_min_bytes=1,
            replica_fetch_backoff_ms=options.fetch_backoff_ms,
            replica_socket_timeout_ms=options.request_timeout_ms,
            metadata_partitions_per_call=options.metadata_partitions_per_call,
            metadata_log_creations_per_call=options.metadata_log_creations_per_call,
        )
        self.core = ReplicaManager(config, self.manager, now_ms)
        self.coordinator = GroupCoordinator()
        self.group_sources: dict[int, int] = {}  # the group client's request id -> who asked
        self.pending: dict[int, Pending] = {}
        self.controller_requests: dict[int, tuple[Any, Any]] = {}
        self.metadata: ClusterMetadata | None = None
        self.controller_hint = CONTROLLER_IDS[self.broker_id % len(CONTROLLER_IDS)]
        self.lifecycle_correlation_id = -1
        self.metadata_offset = -1
        self.reported_caught_up = False
        self.metadata_correlation_id = -1
        self.metadata_sent_ms = -1
        self.next_checkpoint_ms = now_ms
        self.next_retention_ms = now_ms
        self.tick_at_ms: int | None = None
        self.lifecycle_tick_at_ms: int | None = None
        self.lease_until_ms = -1
        lifecycle_config = BrokerLifecycleConfig(
            broker_id=self.broker_id, endpoints=tuple(endpoints(self.broker_id).items()), rack=None,
            log_dirs=self.log_dirs, heartbeat_interval_ms=options.heartbeat_interval_ms,
            session_timeout_ms=options.session_timeout_ms, request_timeout_ms=options.request_timeout_ms,
        )
        self.lifecycle = BrokerLifecycle(lifecycle_config, now_ms)
        self.lifecycle_step(StartLifecycle(incarnation_id(self.broker_id, self.incarnation),
                                           self.manager.previous_broker_epoch))

    @property
    def wall_clock_ms(self) -> int:
        """This machine's wall clock: the simulated time on the run's wall-clock base, off by the
        steps it took. Only storage reads it (DESIGN §2); every timeout runs on `now_ms`."""
        return WALL_START_MS + self.services.now_ms + self.wall_offset_ms

    def wipe(self) -> dict[TopicPartition, tuple[int, int]]:
        """The broker lost power and its disk is replaced: down, with nothing on disk. Returns the
        offsets each partition held, all lost."""
        assert self.up and self.manager is not None, f"broker {self.broker_id} is already down"
        lost = self.disk.wipe(self.manager)
        self.up = False
        self.manager = None
        self.core = None
        self.held = []
        self.paused_until_ms = -1
        return lost

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch

    @property
    def partitions(self) -> dict[TopicPartition, Partition]:
        """The partition cores of this incarnation (empty while down)."""
        if not self.up or self.core is None:
            return {}
        return {topic_partition: hosted.partition for topic_partition, hosted in self.core.hosted.items()}

    def claim_log_dirs(self) -> tuple[str, ...]:
        """`meta_properties.ensure` of the log dir, as a node starts: its directory id."""
        claimed = meta_properties.ensure(self.directory, self.broker_id, CLUSTER_ID, random.Random(self.broker_id))
        assert claimed.directory_id is not None
        return (claimed.directory_id,)

    def halt(self) -> None:
        """The process exits at once (`node.broker.halt`): not a power loss, so what it wrote stays
        in the page cache; no clean-shutdown marker, no checkpoint."""
        assert self.up and self.manager is not None, f"broker {self.broker_id} is already down"
        for _, log in self.manager:
            log.close_handlers()
        self.up = False
        self.manager = None
        self.core = None
        self.held = []
        self.paused_until_ms = -1

    def crash(self, rng: random.Random, tear_probability: float) -> tuple[dict[TopicPartition, int], list[str]]:
        assert self.up and self.manager is not None, f"broker {self.broker_id} is already down"
        lost, cuts = self.disk.crash(self.manager, rng, tear_probability)
        self.up = False
        self.manager = None
        self.core = None
        self.held = []
        self.paused_until_ms = -1
        return lost, cuts

    def close(self) -> None:
        if self.up and self.manager is not None:
            for _, log in self.manager:
                log.close()
        self.up = False

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    # -- the broker core ---------------------------------------------------------------------------

    def step(self, event: object) -> BrokerReady:
        """One event for the core; the disk model and the checker see every partition step before
        the Ready is carried out (its answers must not reach anyone before the checker has seen the
        log), then the Ready goes out in its documented order. The disk model saw the fsyncs itself;
        a call that fsynced is a slow one when the disk is slow (`Services.fsynced`)."""
        assert self.core is not None
        fsyncs = self.disk.model.fsync_count
        ready = self.core.handle(event, self.services.now_ms, self.wall_clock_ms)
        self.services.observe(self, ready)
        if ready.log_dir_failure is not None:
            self.services.halted(self, ready.log_dir_failure)
            return ready
        for send in ready.alter_partitions:
            data = send.proposal.as_data(send.topic_id, send.topic_partition.partition)
            self._send_controller(AlterPartitionRequest(self.broker_id, send.broker_epoch, (data,)), send.request_id)
        for answer in ready.answers:
            if not self.up:
                return ready  # a request of the coordinator, stepped while answering, halted the broker
            self._answer(answer)
        for fetch in ready.fetches:
            self.services.send(Message(self.broker_id, fetch.leader_id, ReplicaFetchMessage(fetch, self.incarnation)))
        if ready.next_tick_ms is not None and ready.next_tick_ms != self.tick_at_ms:
            self.tick_at_ms = ready.next_tick_ms
            self.services.schedule_broker_tick(self, ready.next_tick_ms)
        if self.disk.model.fsync_count != fsyncs:
            self.services.fsynced(self)
        return ready

    def tick(self, at_ms: int) -> None:
        if self.tick_at_ms == at_ms:
            self.tick_at_ms = None
            ready = self.step(Tick())
            if ready.caught_up and not self.reported_caught_up and self.up and self.metadata is not None:
                self._report_metadata(self.metadata, True)  # the last partitions of a large change

    def _answer(self, answer: ClientAnswer) -> None:
        pending = self.pending.pop(answer.request_id)
        send = self.services.send
        if pending.kind == "replica":
            body: Any = ReplicaFetchReply(ReplicaFetchAnswer.of(pending.client_request_id, answer),
                                          pending.incarnation)
            send(Message(self.broker_id, pending.source, body))
            return
        if pending.kind == "delete":
            return
        if pending.kind == "coordinator":
            self._coordinate(coordinator_answer(pending.client_request_id, answer.parts[0].result))
            return
        assert pending.topic_partition is not None
        result = answer.parts[0].result
        if pending.kind == "produce":
            assert isinstance(result, ProduceResult), result
            if pending.acks == -1 and result.error == ErrorCode.NONE:
                self.services.acked(self, pending.topic_partition, pending.client_request_id)
            body = ClientProduceAnswer(pending.topic_partition, replace_id(result, pending.client_request_id))
        else:
            body = ClientFetchAnswer(pending.topic_partition, self.broker_id,
                                     replace_id(result, pending.client_request_id))
        send(Message(self.broker_id, pending.source, body))

    # -- metadata and the controller ---------------------------------------------------------------

    def lifecycle_step(self, event: LifecycleEvent) -> None:
        """One event for the lifecycle core (the node's), then what its Ready asks, in order."""
        ready = self.lifecycle.handle(event, self.services.now_ms)
        if ready.request is not None:
            request_id, request = ready.request
            self._send_controller(request, ("lifecycle", request_id))
        if ready.next_tick_ms is not None and ready.next_tick_ms != self.lifecycle_tick_at_ms:
            self.lifecycle_tick_at_ms = ready.next_tick_ms
            self.services.schedule_lifecycle_tick(self, ready.next_tick_ms)
        if ready.lease_until_ms != self.lease_until_ms and self.core is not None:
            self.lease_until_ms = ready.lease_until_ms
            self.step(LeaseChanged(ready.lease_until_ms))
            if not self.up:
                return  # halted
        if ready.registered is not None and self.metadata is not None:
            self._apply_metadata(self.metadata)  # as node/broker.py does on a registration

    def lifecycle_tick(self, at_ms: int) -> None:
        if self.lifecycle_tick_at_ms == at_ms:
            self.lifecycle_tick_at_ms = None
            self.lifecycle_step(LifecycleTick())

    def duty(self) -> None:
        """The broker's periodic work: the metadata long poll, checkpoints, the leaders' retention."""
        now_ms = self.services.now_ms
        options = self.services.options
        if self.metadata_sent_ms < 0 or now_ms - self.metadata_sent_ms > (
            options.metadata_max_wait_ms + options.request_timeout_ms
        ):
            self._fetch_metadata()
        if now_ms >= self.next_checkpoint_ms and self.manager is not None:
            self.next_checkpoint_ms = now_ms + options.checkpoint_interval_ms
            fsyncs = self.disk.model.fsync_count
            self.manager.checkpoint()
            self.manager.delete_expired_files(self.wall_clock_ms)
            if self.disk.model.fsync_count != fsyncs:
                self.services.fsynced(self)
        if now_ms >= self.next_retention_ms:
            self.next_retention_ms = now_ms + options.retention_interval_ms
            self.step(RunRetention())

    def _fetch_metadata(self) -> None:
        if self.metadata_sent_ms >= 0:
            self._next_controller()  # the last long poll went unanswered: ask another node
        self.metadata_correlation_id = self._id()
        self.metadata_sent_ms = self.services.now_ms
        body = MetadataFetch(self.broker_id, self.metadata_correlation_id, self.metadata_offset)
        self.services.send(Message(self.broker_id, self.controller_hint, body))

    def _send_controller(self, request: Any, context: Any) -> None:
        """To the controller node this broker believes active (the node's controller channel would
        know it from its Raft state; a broker here learns it from answers)."""
        correlation_id = self._id()
        if isinstance(context, tuple) and context[0] == "lifecycle":
            if self.controller_requests.pop(self.lifecycle_correlation_id, None) is not None:
                self._next_controller()  # the lifecycle gave up an unanswered request: ask another node
            self.lifecycle_correlation_id = correlation_id
        self.controller_requests[correlation_id] = (request, context)
        self.services.send(Message(self.broker_id, self.controller_hint, ControllerRequest(correlation_id, request)))

    def _next_controller(self) -> None:
        index = CONTROLLER_IDS.index(self.controller_hint)
        self.controller_hint = CONTROLLER_IDS[(index + 1) % len(CONTROLLER_IDS)]

    def on_controller_answer(self, answer: ControllerAnswer) -> None:
        entry = self.controller_requests.pop(answer.correlation_id, None)
        if entry is None:
            return  # a duplicate
        _, context = entry
        response = answer.response
        if is_not_controller(response):
            self._next_controller()
        if isinstance(context, tuple) and context[0] == "lifecycle":
            self.lifecycle_step(LifecycleAnswer(context[1], response))
        elif isinstance(response, AlterPartitionResponse):
            result = response.partitions[0] if response.partitions else None
            if response.error_code != ErrorCode.NONE or result is None:
                event = AlterPartitionAnswer(context, response.error_code)
            else:
                event = AlterPartitionAnswer(context, result.error_code, result.leader_id, result.leader_epoch,
                                             result.partition_epoch, result.isr)
            self.step(event)

    def on_metadata(self, answer: MetadataAnswer) -> None:
        """Give the core metadata newer than what this incarnation has; then fetch again (one long
        poll at a time). The core applies it once it includes this broker's registration."""
        if answer.correlation_id != self.metadata_correlation_id:
            return  # late or duplicated
        if answer.leader_id >= 0:
            self.controller_hint = answer.leader_id
        self.metadata_sent_ms = -1
        self._fetch_metadata()
        if answer.metadata.metadata_offset <= self.metadata_offset:
            return
        self.metadata = answer.metadata
        self._apply_metadata(answer.metadata)

    def _apply_metadata(self, metadata: ClusterMetadata) -> None:
        """The broker core applies it (once it includes the registration); the lifecycle hears of it."""
        assert self.core is not None
        ready = self.step(MetadataChanged(metadata, self.broker_epoch))
        if not self.up:
            return  # halted
        self._report_metadata(metadata, ready.caught_up)

    def _report_metadata(self, metadata: ClusterMetadata, caught_up: bool) -> None:
        """As node/broker.py: the lifecycle hears how far the core applied the metadata."""
        assert self.core is not None
        self.reported_caught_up = caught_up
        if caught_up:
            self.metadata_offset = metadata.metadata_offset
        self.lifecycle_step(MetadataApplied(metadata.metadata_offset, caught_up,
                                            replica_log_info(self.core.offline_log_ends())))

    # -- replica fetching --------------------------------------------------------------------------

    def on_replica_fetch(self, source: int, body: ReplicaFetchMessage) -> None:
        """A follower's fetch, on this (maybe) leader."""
        request_id = self._id()
        self.pending[request_id] = Pending("replica", source, None, body.send.request_id, incarnation=body.incarnation)
        self.step(replica_fetch_request(body.send, request_id))

    def on_replica_fetch_answer(self, body: ReplicaFetchReply) -> None:
        if body.incarnation == self.incarnation:
            self.step(body.answer)

    # -- clients -----------------------------------------------------------------------------------

    def on_client(self, source: int, body: Any) -> None:
        if isinstance(body, ClientGroupRequest):
            self.group_sources[body.request.request_id] = source
            self._coordinate(body.request)
            return
        topic_partition = body.topic_partition
        request_id = self._id()
        if isinstance(body, ClientProduce):
            self.pending[request_id] = Pending("produce", source, topic_partition, body.request.request_id,
                                               body.request.acks, body.request.records)
            self.step(ClientRequest(request_id, ((topic_partition, body.request),)))
        elif isinstance(body, ClientFetch):
            self.pending[request_id] = Pending("consume", source, topic_partition, body.request.request_id)
            self.step(ClientRequest(request_id, ((topic_partition, body.request),), body.wait))
        elif isinstance(body, ClientDeleteRecords):
            self.pending[request_id] = Pending("delete", source, topic_partition)
            self.step(ClientRequest(request_id, ((topic_partition, DeleteRecords(0, body.offset, 200)),)))


    # -- the group coordinator ---------------------------------------------------------------------

    def _coordinate(self, event: CoordinatorEvent) -> None:
        """One event for the coordinator core, then what its Ready asks: answers to the group's client,
        requests to this broker's core (as the node carries them out on its broker)."""
        ready = self.coordinator.handle(event)
        for answer in ready.answers:
            source = self.group_sources.pop(answer.request_id, None)
            if source is not None:
                self.services.send(Message(self.broker_id, source, ClientGroupAnswer(answer)))
        for request in ready.requests:
            if not self.up:
                return
            request_id = self._id()
            topic_partition = TopicPartition(OFFSETS_TOPIC, request.partition)
            self.pending[request_id] = Pending("coordinator", self.broker_id, topic_partition, request.token)
            part: Any
            if isinstance(request, ProduceOffsets):
                part = ProduceRequest(0, request.records, -1, self.services.options.produce_timeout_ms)
            elif isinstance(request, ListLatest):
                part = ListOffsets(0, LATEST_TIMESTAMP)
            else:
                assert isinstance(request, ReadOffsets), request
                part = ConsumerFetch(0, request.offset, 1 << 20, request.leader_epoch, require_leader=True)
            self.step(ClientRequest(request_id, ((topic_partition, part),)))


def coordinator_answer(token: int, result: Any) -> CoordinatorEvent:
    """The broker core's answer to one of the coordinator's requests, as the coordinator's event."""
    if isinstance(result, ProduceResult):
        return Produced(token, result.error, result.error_message)
    if isinstance(result, ListOffsetsResult):
        return LatestListed(token, result.error, result.leader_epoch, result.error_message)
    assert isinstance(result, FetchResult), result
    return Read(token, result.error, result.records, result.log_start_offset)


def replace_id(result: Any, request_id: int) -> Any:
    """The completion as the client knows it: with its own request id."""
    return replace(result, request_id=request_id)
