"""MetadataView: the part of the cluster metadata the broker core reads, as structural types.

The controller's `ClusterMetadata` (controller/metadata.py) satisfies these protocols; the broker
core (`replica_manager.py`) is written against them so that `replication/` does not import
`controller/` (DESIGN §1 layering: both sit on `storage/` only). Nothing here mutates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol


class PartitionStateView(Protocol):
    """One partition's replication state as the controller committed it."""

    @property
    def replicas(self) -> tuple[int, ...]: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def partition_epoch(self) -> int: ...
    @property
    def elr(self) -> tuple[int, ...]: ...


class BrokerView(Protocol):
    """A registered broker: its broker epoch (the offset of its latest registration: a new process
    registers anew), where it listens, its rack, and whether it may serve (unfenced, not shutting
    down)."""

    @property
    def broker_epoch(self) -> int: ...
    @property
    def endpoints(self) -> Mapping[str, str]: ...
    @property
    def rack(self) -> str | None: ...
    @property
    def active(self) -> bool: ...


class MetadataView(Protocol):
    """The metadata as of `metadata_offset` (the last applied record's offset)."""

    @property
    def metadata_offset(self) -> int: ...

    def all_partitions(self) -> Iterable[tuple[str, int, PartitionStateView]]: ...
    def topic_name(self, topic_id: str) -> str | None: ...
    def topic_id(self, name: str) -> str | None: ...
    def partition(self, topic_id: str, index: int) -> PartitionStateView | None: ...
    def topic_configs(self, name: str) -> Mapping[str, str]: ...
    def broker(self, broker_id: int) -> BrokerView | None: ...
