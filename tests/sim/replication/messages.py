"""What travels over the simulated network: a `Message` with one of these bodies.

Broker <-> controller bodies wrap the controller's request and response dataclasses
(`wire/`) with a correlation id; broker <-> broker and client <-> broker
bodies wrap the broker core's sends, events and completions. Nothing is encoded: the simulator
tests the cores, not the wire format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller.metadata import ClusterMetadata
from controller.raft_messages import Message as RaftMessage
from replication.broker_events import FetchWait, ReplicaFetchAnswer
from replication.broker_ready import ReplicaFetchSend
from replication.events import ConsumerFetch, ProduceRequest
from replication.group_coordinator import CommitAnswer, CommitOffsets, FetchAnswer, FetchOffsets
from replication.ready import FetchResult, ProduceResult
from wire.topic_partition import TopicPartition

CONTROLLER_ID = 0  # in a scenario's cut: every controller node (tests/sim/replication/quorum.py)
PRODUCER_ID = 100
CONSUMER_ID = 101
GROUP_CLIENT_ID = 102  # the consumer group's offset commits and fetches


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
    """A copy of a controller node's applied metadata (the broker reads it, never the node's own
    object), and the active controller that node knows of (-1: none), as Kafka's metadata answers
    name the controller."""

    correlation_id: int
    metadata: ClusterMetadata
    leader_id: int = -1


@dataclass(frozen=True, slots=True)
class RaftEnvelope:
    """A Raft message between controller nodes."""

    message: RaftMessage


@dataclass(frozen=True, slots=True)
class ReplicaFetchMessage:
    """A follower core's fetch, to its leader, from the follower's `incarnation` (its connection)."""

    send: ReplicaFetchSend
    incarnation: int


@dataclass(frozen=True, slots=True)
class ReplicaFetchReply:
    """The leader core's answer, back to the follower incarnation that asked: a restarted process
    has new connections, so a reply to its previous incarnation never reaches it (both number
    their fetches from 1)."""

    answer: ReplicaFetchAnswer
    incarnation: int


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
    wait: FetchWait


@dataclass(frozen=True, slots=True)
class ClientFetchAnswer:
    topic_partition: TopicPartition
    broker_id: int
    result: FetchResult


@dataclass(frozen=True, slots=True)
class ClientDeleteRecords:
    topic_partition: TopicPartition
    offset: int


@dataclass(frozen=True, slots=True)
class ClientGroupRequest:
    """An OffsetCommit or OffsetFetch for the coordinator (request_id: the client's)."""

    request: CommitOffsets | FetchOffsets


@dataclass(frozen=True, slots=True)
class ClientGroupAnswer:
    answer: CommitAnswer | FetchAnswer
