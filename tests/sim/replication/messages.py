"""What travels over the simulated network: a `Message` with one of these bodies.

Broker <-> controller bodies wrap the controller's own request and response dataclasses
(`controller/controller_api.py`) with a correlation id; broker <-> broker and client <-> broker
bodies wrap the replication core's events and completions. Nothing is encoded: the simulator tests
the cores, not the wire format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.metadata import PartitionRegistration
from replication.events import ConsumerFetch, FollowerFetch, ProduceRequest
from replication.ready import FetchResult, FollowerFetchPosition, ProduceResult
from storage.checkpoint import TopicPartition

CONTROLLER_ID = 0
PRODUCER_ID = 100
CONSUMER_ID = 101


@dataclass(frozen=True, slots=True)
class Message:
    source: int
    destination: int
    body: Any


@dataclass(frozen=True, slots=True)
class ControllerRequest:
    """A broker's request to the controller (registration, heartbeat, AlterPartition)."""

    correlation_id: int
    request: Any


@dataclass(frozen=True, slots=True)
class ControllerAnswer:
    correlation_id: int
    response: Any


@dataclass(frozen=True, slots=True)
class MetadataFetch:
    """A broker asks for the partition states newer than `offset` (KRaft brokers long-poll the
    metadata log: the controller answers when it has something newer, or after the max wait)."""

    broker_id: int
    correlation_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class MetadataAnswer:
    correlation_id: int
    offset: int
    partitions: dict[TopicPartition, PartitionRegistration]


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest:
    correlation_id: int
    topic_partition: TopicPartition
    fetch: FollowerFetch
    position: FollowerFetchPosition


@dataclass(frozen=True, slots=True)
class ReplicaFetchAnswer:
    correlation_id: int
    topic_partition: TopicPartition
    position: FollowerFetchPosition
    result: FetchResult


@dataclass(frozen=True, slots=True)
class ClientProduce:
    topic_partition: TopicPartition
    request: ProduceRequest  # request_id: the client's


@dataclass(frozen=True, slots=True)
class ClientProduceAnswer:
    topic_partition: TopicPartition
    result: ProduceResult


@dataclass(frozen=True, slots=True)
class ClientFetch:
    topic_partition: TopicPartition
    request: ConsumerFetch


@dataclass(frozen=True, slots=True)
class ClientFetchAnswer:
    topic_partition: TopicPartition
    broker_id: int
    result: FetchResult


@dataclass(frozen=True, slots=True)
class ClientDeleteRecords:
    topic_partition: TopicPartition
    offset: int
