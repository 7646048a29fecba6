"""Broker cores (`ReplicaManager`) around a `QuorumController` whose records commit at once, joined in
memory: a synchronous harness for the broker core's unit tests (h11's `ConnectionPair`, for brokers).

Each broker has a LogManager on its own directory. What a core sends is queued; `pump` delivers the
queue (replica fetches to the leader's core as a `ClientRequest`, their answers back; AlterPartition
to the controller, its answer back, and the new metadata to every broker) until nothing is left,
or the given bound. Time moves only by `advance`. `answers` keeps every `ClientAnswer` by broker.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.metadata import ClusterMetadata
from controller.quorum_controller import ControllerConfig, QuorumController
from replication.broker_events import (
    AlterPartitionAnswer,
    ClientRequest,
    LeaseChanged,
    MetadataChanged,
    ReplicaFetchAnswer,
    replica_fetch_request,
)
from replication.broker_ready import AlterPartitionSend, BrokerReady, ClientAnswer, ReplicaFetchSend
from replication.config import ReplicaManagerConfig, ReplicationConfig
from replication.events import Tick
from replication.replica_manager import ReplicaManager
from storage.config import LogConfig
from storage.log_manager import LogManager
from wire.alter_partition import AlterPartitionRequest
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest
from wire.error_codes import ErrorCode
from wire.topic_partition import TopicPartition
from wire.topics import CreatableTopic, CreateTopicsRequest

LISTENER = "PLAINTEXT"
LOG_DEFAULTS = {"segment.index.bytes": "4096", "index.interval.bytes": "64"}
PUMP_ROUNDS_MAX = 1_000
LEASE_FOR_EVER_MS = 2**62


@dataclass(slots=True)
class CoreBroker:
    broker_id: int
    manager: LogManager
    core: ReplicaManager
    broker_epoch: int = -1
    readies: list[BrokerReady] = field(default_factory=list)
    answers: dict[int, ClientAnswer] = field(default_factory=dict)


class CoreCluster:
    def __init__(self, root: Path, broker_ids: tuple[int, ...] = (1, 2, 3), racks: dict[int, str] | None = None,
                 **config: Any) -> None:
        self.now_ms = 0
        self.wall_clock_ms = 1_000_000
        self.controller = QuorumController(ClusterMetadata(), random.Random(7), self.now_ms, 0,
                                           ControllerConfig(broker_session_timeout_ms=10**9))
        self.queue: deque[tuple[int, Any]] = deque()
        self.leader_requests: dict[tuple[int, int], tuple[int, int]] = {}  # (leader, id) -> (follower, send id)
        self.cut: set[int] = set()  # brokers whose replica fetches go unanswered
        self.replica_fetch_answers = 0  # leaders' answers delivered to followers
        self.next_request_id = 1_000_000
        racks = racks or {}
        replication = ReplicationConfig(replica_lag_time_max_ms=1_000, alter_partition_timeout_ms=500,
                                        ineligible_replica_backoff_ms=100)
        self.brokers: dict[int, CoreBroker] = {}
        for broker_id in broker_ids:
            manager = LogManager([root / f"broker-{broker_id}"], self._log_config, self.wall_clock_ms)
            core_config = ReplicaManagerConfig(broker_id, LISTENER, replication, racks.get(broker_id),
                                               **{"replica_fetch_backoff_ms": 50, **config})
            self.brokers[broker_id] = CoreBroker(broker_id, manager, ReplicaManager(core_config, manager, 0))
            response = self.controller.handle(BrokerRegistrationRequest(
                broker_id, f"incarnation-{broker_id}", {LISTENER: f"broker-{broker_id}:9092"}, racks.get(broker_id),
            ), self.now_ms).response
            assert response.error_code == ErrorCode.NONE, response
            self.brokers[broker_id].broker_epoch = response.broker_epoch
        for broker in self.brokers.values():
            response = self.controller.handle(BrokerHeartbeatRequest(broker.broker_id, broker.broker_epoch, 1 << 40),
                                              self.now_ms).response
            assert response.error_code == ErrorCode.NONE and not response.is_fenced, response
        self.publish()
        for broker_id in self.brokers:
            self.step(broker_id, LeaseChanged(LEASE_FOR_EVER_MS))  # the controller never fences here

    @property
    def metadata(self) -> ClusterMetadata:
        return self.controller.metadata

    def _log_config(self, topic: str) -> LogConfig:
        return LogConfig.from_properties({**LOG_DEFAULTS, **self.metadata.topic_configs(topic)})

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.manager.shutdown(self.wall_clock_ms)

    # -- driving ----------------------------------------------------------------------------------

    def step(self, broker_id: int, event: object) -> BrokerReady:
        broker = self.brokers[broker_id]
        ready = broker.core.handle(event, self.now_ms, self.wall_clock_ms)
        broker.readies.append(ready)
        for send in ready.alter_partitions:
            self.queue.append((broker_id, send))
        for answer in ready.answers:
            key = (broker_id, answer.request_id)
            if key in self.leader_requests:
                self.queue.append((broker_id, answer))
            else:
                broker.answers[answer.request_id] = answer
        for fetch in ready.fetches:
            self.queue.append((broker_id, fetch))
        return ready

    def publish(self, apply_fully: bool = True) -> None:
        """Give every broker the metadata; `apply_fully`: then the Ticks each asks for at once (a
        node's timer), until it has applied every partition."""
        for broker in self.brokers.values():
            ready = self.step(broker.broker_id, MetadataChanged(self.metadata, broker.broker_epoch))
            while apply_fully and not ready.caught_up and ready.next_tick_ms == self.now_ms:
                ready = self.step(broker.broker_id, Tick())

    def request(self, broker_id: int, request: ClientRequest) -> ClientAnswer | None:
        """Step a client request; its answer if it came at once."""
        self.step(broker_id, request)
        return self.brokers[broker_id].answers.get(request.request_id)

    def pump(self, rounds: int = PUMP_ROUNDS_MAX) -> None:
        for _ in range(rounds):
            if not self.queue:
                return
            source, item = self.queue.popleft()
            self._deliver(source, item)
        assert rounds < PUMP_ROUNDS_MAX or not self.queue, "the queue never drained"

    def advance(self, duration_ms: int) -> None:
        """Let time pass and tick every broker."""
        self.now_ms += duration_ms
        self.wall_clock_ms += duration_ms
        for broker_id in sorted(self.brokers):
            self.step(broker_id, Tick())

    def _deliver(self, source: int, item: Any) -> None:
        if isinstance(item, AlterPartitionSend):
            data = item.proposal.as_data(item.topic_id, item.topic_partition.partition)
            before = self.metadata.metadata_offset
            response = self.controller.handle(AlterPartitionRequest(source, item.broker_epoch, (data,)),
                                              self.now_ms).response
            if self.metadata.metadata_offset != before:
                self.publish()
            result = response.partitions[0] if response.partitions else None
            if response.error_code != ErrorCode.NONE or result is None:
                answer = AlterPartitionAnswer(item.request_id, response.error_code)
            else:
                answer = AlterPartitionAnswer(item.request_id, result.error_code, result.leader_id,
                                              result.leader_epoch, result.partition_epoch, result.isr)
            self.step(source, answer)
        elif isinstance(item, ReplicaFetchSend):
            if item.leader_id in self.cut or source in self.cut:
                return  # unanswered: the follower's fetch times out
            self.next_request_id += 1
            self.leader_requests[(item.leader_id, self.next_request_id)] = (source, item.request_id)
            self.step(item.leader_id, replica_fetch_request(item, self.next_request_id))
        else:
            assert isinstance(item, ClientAnswer), item
            follower, send_id = self.leader_requests.pop((source, item.request_id))
            self.replica_fetch_answers += 1
            self.step(follower, ReplicaFetchAnswer.of(send_id, item))

    # -- admin ------------------------------------------------------------------------------------

    def create_topic(self, name: str, assignments: dict[int, tuple[int, ...]], apply_fully: bool = True,
                     **configs: str) -> None:
        response = self.controller.handle(CreateTopicsRequest((CreatableTopic(name, assignments=assignments,
                                                                              configs=configs),)), self.now_ms)
        assert response.response.topics[0].error_code == ErrorCode.NONE, response
        self.publish(apply_fully)

    def partition(self, broker_id: int, topic_partition: TopicPartition) -> Any:
        return self.brokers[broker_id].core.hosted[topic_partition].partition
