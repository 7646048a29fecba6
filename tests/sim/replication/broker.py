"""SimBroker: one simulated broker — its log directory, its current incarnation, its fetchers.

An incarnation is what a process holds: a `LogManager` opened from the directory (recovery after
a crash), one `Partition` core per hosted partition, its registration (broker epoch), the metadata
it has applied, one fetcher per followed partition, and the requests in flight. A crash drops the
incarnation and cuts the files (`disk.crash`); a restart opens a new one from what is left and
registers again with a new incarnation id. A pause keeps the incarnation and holds its events.

The broker does what `Ready` asks in the documented order (log changes are already done; then the
AlterPartition proposals, the completions, the next fetch, the next tick). It applies metadata only
once it has seen its own registration (KRaft brokers catch up to it before publishing), so a
restarted broker never acts on partition states older than its re-registration, which took it out
of every ISR and leadership (the controller does that first).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from controller.controller_api import (
    AlterPartitionData,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from controller.metadata_records import NO_LEADER
from replication.config import ReplicationConfig
from replication.events import (
    AlterPartitionResponse as PartitionAlterResponse,
)
from replication.events import (
    DeleteRecords,
    Event,
    FetchResponseFromLeader,
    FollowerFetch,
    MakeFollower,
    MakeLeader,
    RunRetention,
    Tick,
)
from replication.partition import Partition
from replication.partition_driver import PartitionDriver
from replication.ready import (
    AlterPartitionProposal,
    Completion,
    FetchResult,
    FollowerFetchPosition,
    ProduceResult,
    Ready,
    Truncated,
    TruncatedFully,
)
from storage.checkpoint import TopicPartition
from storage.config import LogConfig
from storage.error_codes import ErrorCode
from storage.log_manager import LogManager
from tests.sim.replication import disk
from tests.sim.replication.controller import endpoints, incarnation_id
from tests.sim.replication.messages import (
    CONTROLLER_ID,
    ClientDeleteRecords,
    ClientFetch,
    ClientFetchAnswer,
    ClientProduce,
    ClientProduceAnswer,
    ControllerAnswer,
    ControllerRequest,
    Message,
    MetadataAnswer,
    MetadataFetch,
    ReplicaFetchAnswer,
    ReplicaFetchRequest,
)
from tests.sim.replication.options import ReplicationSimOptions


class Services(Protocol):
    """What a broker needs from the simulator."""

    now_ms: int
    options: ReplicationSimOptions
    replication_config: ReplicationConfig
    log_config: LogConfig
    topic_id: str

    def send(self, message: Message) -> None: ...
    def schedule_partition_tick(self, broker: SimBroker, topic_partition: TopicPartition, at_ms: int) -> None: ...
    def observe(self, broker: SimBroker, topic_partition: TopicPartition, event: Event, ready: Ready,
                requests: dict[int, Pending]) -> None: ...
    def trace(self, line: str) -> None: ...


@dataclass(slots=True)
class Pending:
    """A request a partition core is answering: who asked, and how to answer."""

    kind: str  # "produce", "consume", "replica", "delete"
    source: int
    topic_partition: TopicPartition
    client_request_id: int = -1
    acks: int = 1
    records: bytes = b""
    correlation_id: int = -1
    position: FollowerFetchPosition | None = None


@dataclass(slots=True)
class Fetcher:
    """One followed partition's fetch in flight (one at a time, as Kafka's fetcher per partition)."""

    correlation_id: int = -1
    sent_ms: int = -1
    position: FollowerFetchPosition | None = None
    backoff_until_ms: int = 0


class SimDriver(PartitionDriver):
    """The shared driver with the simulated broker's effects."""

    def __init__(self, partition: Partition, broker: SimBroker) -> None:
        super().__init__(partition)
        self.broker = broker

    def send_alter_partition(self, proposal: AlterPartitionProposal) -> None:
        self.broker.send_alter_partition(self.partition.topic_partition, proposal)

    def complete(self, completion: Completion) -> None:
        self.broker.answer(completion)

    def fetch(self, position: FollowerFetchPosition | None) -> None:
        self.broker.maybe_fetch(self.partition.topic_partition, position)

    def schedule_tick(self, at_ms: int | None) -> None:
        broker = self.broker
        topic_partition = self.partition.topic_partition
        if at_ms is not None and broker.tick_at.get(topic_partition) != at_ms:
            broker.tick_at[topic_partition] = at_ms
            broker.services.schedule_partition_tick(broker, topic_partition, at_ms)


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
        self.partitions: dict[TopicPartition, Partition] = {}
        self.disk = disk.BrokerDisk()

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, now_ms: int, broker_epoch: int = -1) -> None:
        """Open a new incarnation from the directory; register unless `broker_epoch` is given."""
        assert not self.up, f"broker {self.broker_id} is already up"
        self.incarnation += 1
        self.up = True
        self.paused_until_ms = -1
        self.held = []
        self.manager = LogManager([self.directory], lambda topic: self.services.log_config, now_ms)
        self.disk.opened(self.manager)
        self.partitions = {}
        self.drivers: dict[TopicPartition, SimDriver] = {}
        self.applied: dict[TopicPartition, tuple[int, int]] = {}
        self.fetchers: dict[TopicPartition, Fetcher] = {}
        self.pending: dict[int, Pending] = {}
        self.controller_requests: dict[int, tuple[Any, Any]] = {}
        self.next_id = 1
        self.broker_epoch = broker_epoch
        self.metadata_offset = -1
        self.next_heartbeat_ms = now_ms
        self.metadata_correlation_id = -1
        self.metadata_sent_ms = -1
        self.next_checkpoint_ms = now_ms
        self.next_retention_ms = now_ms
        self.tick_at: dict[TopicPartition, int] = {}

    def crash(self, rng: random.Random, tear_probability: float) -> tuple[dict[TopicPartition, tuple[int, int]],
                                                                          list[str]]:
        assert self.up and self.manager is not None, f"broker {self.broker_id} is already down"
        lost, cuts = self.disk.crash(self.manager, rng, tear_probability)
        self.up = False
        self.manager = None
        self.partitions = {}
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

    # -- the partition cores -----------------------------------------------------------------------

    def step(self, topic_partition: TopicPartition, event: Event) -> Ready:
        """One event for one core; the disk model and the checker see the Ready before the driver
        performs it (its answers must not reach anyone before the checker has seen the log)."""
        driver = self.drivers[topic_partition]
        ready = driver.partition.handle(event, self.services.now_ms)
        truncated = any(isinstance(change, Truncated | TruncatedFully) for change in ready.log_changes)
        self.disk.stepped(driver.partition.log, truncated)
        self.services.observe(self, topic_partition, event, ready, self.pending)
        driver.perform(ready)
        return ready

    def partition_tick(self, topic_partition: TopicPartition, at_ms: int) -> None:
        if self.tick_at.get(topic_partition) == at_ms and topic_partition in self.partitions:
            del self.tick_at[topic_partition]
            self.step(topic_partition, Tick())

    def answer(self, completion: Completion) -> None:
        pending = self.pending.pop(completion.request_id, None)
        assert pending is not None, f"broker {self.broker_id}: completion for unknown request {completion}"
        send = self.services.send
        if pending.kind == "produce":
            result = replace(completion, request_id=pending.client_request_id)
            send(Message(self.broker_id, pending.source, ClientProduceAnswer(pending.topic_partition, result)))
        elif pending.kind == "consume":
            result = replace(completion, request_id=pending.client_request_id)
            send(Message(self.broker_id, pending.source,
                         ClientFetchAnswer(pending.topic_partition, self.broker_id, result)))
        elif pending.kind == "replica":
            assert pending.position is not None
            answer = ReplicaFetchAnswer(pending.correlation_id, pending.topic_partition, pending.position, completion)
            send(Message(self.broker_id, pending.source, answer))

    # -- metadata and the controller ---------------------------------------------------------------

    def duty(self) -> None:
        """The broker's periodic work: heartbeats or registration, metadata, checkpoints,
        retention on led partitions, fetch timeouts."""
        now_ms = self.services.now_ms
        options = self.services.options
        if now_ms >= self.next_heartbeat_ms:
            self.next_heartbeat_ms = now_ms + options.heartbeat_interval_ms
            if self.broker_epoch < 0:
                name = incarnation_id(self.broker_id, self.incarnation)
                request: Any = BrokerRegistrationRequest(self.broker_id, name, endpoints(self.broker_id))
            else:
                request = BrokerHeartbeatRequest(self.broker_id, self.broker_epoch, self.metadata_offset)
            self._send_controller(request, None)
        if self.metadata_sent_ms < 0 or now_ms - self.metadata_sent_ms > (
            options.metadata_max_wait_ms + options.request_timeout_ms
        ):
            self._fetch_metadata()
        if now_ms >= self.next_checkpoint_ms and self.manager is not None:
            self.next_checkpoint_ms = now_ms + options.checkpoint_interval_ms
            self.manager.checkpoint()
            self.manager.delete_expired_files(now_ms)
        if now_ms >= self.next_retention_ms:
            self.next_retention_ms = now_ms + options.retention_interval_ms
            for topic_partition in sorted(self.partitions):
                self.step(topic_partition, RunRetention())
        fetch_timeout_ms = options.request_timeout_ms + options.fetch_max_wait_ms
        for topic_partition, fetcher in sorted(self.fetchers.items()):
            if fetcher.sent_ms >= 0 and now_ms - fetcher.sent_ms > fetch_timeout_ms:
                fetcher.sent_ms = -1
                fetcher.correlation_id = -1
            if topic_partition in self.partitions:
                self.maybe_fetch(topic_partition, self.partitions[topic_partition].fetch_position())

    def _fetch_metadata(self) -> None:
        self.metadata_correlation_id = self._id()
        self.metadata_sent_ms = self.services.now_ms
        body = MetadataFetch(self.broker_id, self.metadata_correlation_id, self.metadata_offset)
        self.services.send(Message(self.broker_id, CONTROLLER_ID, body))

    def _send_controller(self, request: Any, context: Any) -> None:
        correlation_id = self._id()
        self.controller_requests[correlation_id] = (request, context)
        self.services.send(Message(self.broker_id, CONTROLLER_ID, ControllerRequest(correlation_id, request)))

    def send_alter_partition(self, topic_partition: TopicPartition, proposal: AlterPartitionProposal) -> None:
        data = AlterPartitionData(self.services.topic_id, topic_partition.partition, proposal.leader_epoch,
                                  proposal.partition_epoch, proposal.new_isr, proposal.new_isr_broker_epochs)
        self._send_controller(AlterPartitionRequest(self.broker_id, self.broker_epoch, (data,)),
                              (topic_partition, proposal))

    def on_controller_answer(self, answer: ControllerAnswer) -> None:
        entry = self.controller_requests.pop(answer.correlation_id, None)
        if entry is None:
            return  # a duplicate
        request, context = entry
        response = answer.response
        if isinstance(response, BrokerRegistrationResponse):
            if response.error_code == ErrorCode.NONE and request.incarnation_id == incarnation_id(
                self.broker_id, self.incarnation
            ):
                self.broker_epoch = max(self.broker_epoch, response.broker_epoch)
        elif isinstance(response, BrokerHeartbeatResponse):
            if response.error_code == ErrorCode.STALE_BROKER_EPOCH:
                self.broker_epoch = -1  # a duplicate registration moved us on: register again
        elif isinstance(response, AlterPartitionResponse):
            self._on_alter_partition_answer(context, response)

    def _on_alter_partition_answer(self, context: tuple[TopicPartition, AlterPartitionProposal],
                                   response: AlterPartitionResponse) -> None:
        topic_partition, proposal = context
        if topic_partition not in self.partitions:
            return
        if response.error_code != ErrorCode.NONE or not response.partitions:
            event = PartitionAlterResponse(proposal, response.error_code)
        else:
            result = response.partitions[0]
            event = PartitionAlterResponse(proposal, result.error_code, result.leader_id,
                                           result.leader_epoch, result.partition_epoch, result.isr)
        self.step(topic_partition, event)

    def on_metadata(self, answer: MetadataAnswer) -> None:
        """Apply partition states newer than what this incarnation has, once it has seen its own
        registration; then fetch again (one long poll at a time)."""
        if answer.correlation_id != self.metadata_correlation_id:
            return  # late or duplicated
        self._fetch_metadata()
        if self.broker_epoch < 0 or answer.offset < self.broker_epoch or answer.offset <= self.metadata_offset:
            return
        self.metadata_offset = answer.offset
        now_ms = self.services.now_ms
        assert self.manager is not None
        for topic_partition, state in sorted(answer.partitions.items()):
            if self.broker_id not in state.replicas:
                continue
            key = (state.leader_epoch, state.partition_epoch)
            if self.applied.get(topic_partition) == key:
                continue
            self.applied[topic_partition] = key
            if topic_partition not in self.partitions:
                partition = Partition(topic_partition, self.manager, self.broker_id, self.services.replication_config,
                                      now_ms)
                self.partitions[topic_partition] = partition
                self.drivers[topic_partition] = SimDriver(partition, self)
                self.fetchers[topic_partition] = Fetcher()
            if state.leader == self.broker_id:
                event: Event = MakeLeader(state.leader_epoch, state.partition_epoch, state.isr, state.replicas)
            else:
                event = MakeFollower(state.leader, state.leader_epoch, state.partition_epoch, state.isr,
                                     state.replicas)
            self.step(topic_partition, event)

    # -- replica fetching --------------------------------------------------------------------------

    def maybe_fetch(self, topic_partition: TopicPartition, position: FollowerFetchPosition | None) -> None:
        fetcher = self.fetchers.get(topic_partition)
        if fetcher is None or position is None or position.leader_id == NO_LEADER:
            return
        now_ms = self.services.now_ms
        if fetcher.sent_ms >= 0 and fetcher.position is not None and (
            fetcher.position.leader_id, fetcher.position.leader_epoch) == (position.leader_id, position.leader_epoch):
            return
        if now_ms < fetcher.backoff_until_ms:
            return
        options = self.services.options
        fetcher.correlation_id = self._id()
        fetcher.sent_ms = now_ms
        fetcher.position = position
        request = FollowerFetch.from_position(position, fetcher.correlation_id, self.broker_epoch, min_bytes=1,
                                              max_wait_ms=options.fetch_max_wait_ms)
        body = ReplicaFetchRequest(fetcher.correlation_id, topic_partition, request, position)
        self.services.send(Message(self.broker_id, position.leader_id, body))

    def on_replica_fetch(self, source: int, body: ReplicaFetchRequest) -> None:
        """A follower's fetch, on this (maybe) leader."""
        if body.topic_partition not in self.partitions:
            refused = FetchResult(body.fetch.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            answer = ReplicaFetchAnswer(body.correlation_id, body.topic_partition, body.position, refused)
            self.services.send(Message(self.broker_id, source, answer))
            return
        request_id = self._id()
        self.pending[request_id] = Pending("replica", source, body.topic_partition, correlation_id=body.correlation_id,
                                           position=body.position)
        self.step(body.topic_partition, replace(body.fetch, request_id=request_id))

    def on_replica_fetch_answer(self, body: ReplicaFetchAnswer) -> None:
        fetcher = self.fetchers.get(body.topic_partition)
        if fetcher is None or fetcher.correlation_id != body.correlation_id:
            return  # late or duplicated
        fetcher.correlation_id = -1
        fetcher.sent_ms = -1
        if body.result.error != ErrorCode.NONE:
            fetcher.backoff_until_ms = self.services.now_ms + self.services.options.fetch_backoff_ms
        self.step(body.topic_partition, FetchResponseFromLeader.from_result(body.position, body.result))

    # -- clients -----------------------------------------------------------------------------------

    def on_client(self, source: int, body: Any) -> None:
        topic_partition = body.topic_partition
        if topic_partition not in self.partitions:
            if isinstance(body, ClientProduce):
                refused = ProduceResult(body.request.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                self.services.send(Message(self.broker_id, source, ClientProduceAnswer(topic_partition, refused)))
            elif isinstance(body, ClientFetch):
                refused_fetch = FetchResult(body.request.request_id, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                self.services.send(Message(self.broker_id, source,
                                           ClientFetchAnswer(topic_partition, self.broker_id, refused_fetch)))
            return
        request_id = self._id()
        if isinstance(body, ClientProduce):
            self.pending[request_id] = Pending("produce", source, topic_partition, body.request.request_id,
                                               body.request.acks, body.request.records)
            self.step(topic_partition, replace(body.request, request_id=request_id))
        elif isinstance(body, ClientFetch):
            self.pending[request_id] = Pending("consume", source, topic_partition, body.request.request_id)
            self.step(topic_partition, replace(body.request, request_id=request_id))
        elif isinstance(body, ClientDeleteRecords):
            self.pending[request_id] = Pending("delete", source, topic_partition)
            self.step(topic_partition, DeleteRecords(request_id, body.offset, timeout_ms=200))
