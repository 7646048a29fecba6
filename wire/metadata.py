"""Metadata (brokers, topics, partitions and leaders as a node knows them) and DescribeReplicas (the
state of one node's replicas, what `cluster status` shows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """topics None: every topic."""

    topics: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class MetadataBroker:
    """`host`:`port` on the listener the request came in on; `listeners`: every listener the broker
    registered, by name (PLAINTEXT speaks Kafka's protocol, HTTP ours)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False
    listeners: Mapping[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class MetadataPartition:
    """One partition as the metadata says. `eligible_leader_replicas` and `last_known_elr` are
    KIP-966's (Kafka shows them in DescribeTopicPartitions): replicas outside the ISR that still
    hold every acknowledged record, and those that lost that standing by an unclean restart."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: ErrorCode = ErrorCode.NONE
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MetadataTopic:
    name: str
    error_code: ErrorCode
    topic_id: str = ""
    partitions: tuple[MetadataPartition, ...] = ()
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """`metadata_offset`: the last metadata-log offset this node applied (how fresh this is);
    addresses are those of the listener the request came in on."""

    cluster_id: str
    controller_id: int
    metadata_offset: int
    brokers: tuple[MetadataBroker, ...]
    topics: tuple[MetadataTopic, ...]


@dataclass(frozen=True, slots=True)
class DescribeReplicasRequest:
    """This node's replicas (all when `topics` is None): what `cluster status` shows per replica."""

    topics: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ReplicaState:
    topic: str
    partition: int
    role: str
    leader_id: int
    leader_epoch: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    isr: tuple[int, ...] = ()
    size_bytes: int = 0
    log_dir: str = ""  # the log dir holding it (Kafka's DescribeLogDirs)


@dataclass(frozen=True, slots=True)
class DescribeReplicasResponse:
    node_id: int
    replicas: tuple[ReplicaState, ...]
