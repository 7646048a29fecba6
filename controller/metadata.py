"""ClusterMetadata: the cluster-metadata state machine that every node builds from the metadata log.

Theory of operation. The Raft quorum replicates the `__cluster_metadata` log; each entry is one
msgpack record of `controller.metadata_records`. Every node (controllers and brokers alike)
applies committed entries in offset order, `apply(offset, epoch, data)`, and so every node ends in
the same state: `apply` is a pure function of (state, offset, record) and draws nothing (topic ids
and replica placements were drawn by the active controller and travel inside the records).
`snapshot()` writes the whole state as deterministic msgpack bytes (equal states give equal bytes)
and `restore(offset, data)` loads it, which is how Raft bounds the log and how a node far behind
catches up. `last_applied_offset` (= `metadata_offset` for readers) says how fresh a copy is.

State. Brokers by id (`BrokerRegistration`: epoch, endpoints, rack, log dir ids, fenced, in
controlled shutdown); topics by id and by name; each topic's partitions (`PartitionRegistration`:
replicas, ISR, leader, leader epoch, partition epoch, ELR, last known ELR) and its config
overrides (Kafka keys, string values).

Apply rules. A record that does not fit the state (unknown topic id, stale broker epoch, an ISR
outside the replicas, ...) raises `MetadataApplyError` before anything changes: it can only come
from a corrupt log or a controller bug, and every node would reach the same verdict. `apply`
checks structure; the cluster-level invariants (a fenced broker leads nothing, ...) are checked by
`check_invariants`, which the simulator runs after every step, and across time by
`MetadataHistory` (epochs never fall; one leader per leader epoch).

Owner: the node's metadata driver (one per node), or the active controller for its speculative
copy (`QuorumController`). Not thread-safe; one owner.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import msgpack

from controller.errors import MetadataApplyError, MetadataRecordError
from controller.metadata_records import (
    BrokerRegistrationChange,
    ConfigChange,
    FenceBroker,
    MetadataRecord,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    check_wire_type,
    decode_record,
    to_wire,
    unpack,
)
from storage.config import LogConfig
from storage.errors import InvalidConfigError
from wire.alter_partition import EpochLineage
from wire.sentinels import NO_LEADER

SNAPSHOT_VERSION = 5  # 1: brokers: log_dirs (KIP-858), partitions: elr, last_known_elr (KIP-966); 2: log_start_offset;
# 3: brokers: fenced_offset; 4: the next producer id; 5: partitions: epoch_lineage
TOPIC_NAME_LENGTH_MAX = 249
_TOPIC_NAME_PATTERN = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: Any) -> str | None:
    """Why `name` is not a legal topic name (Kafka's `Topic.validate`), or None if it is legal."""
    if not isinstance(name, str) or not name:
        return "a topic name must be a non-empty string"
    if name in (".", ".."):
        return f"topic name {name!r} is reserved; '.' and '..' are not allowed"
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return f"topic name is {len(name)} characters long; at most {TOPIC_NAME_LENGTH_MAX} are allowed"
    if not _TOPIC_NAME_PATTERN.fullmatch(name):
        return f"topic name {name!r} may only contain ASCII letters, digits, '.', '_' and '-'"
    return None


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker as the metadata log describes it.

    `broker_epoch` is the offset of its latest `RegisterBroker` record; requests from the broker
    carry it, and one from an older process (a lower epoch) is refused. A broker is an eligible
    leader and ISR member only while `active`: unfenced and not in controlled shutdown. `log_dirs`
    are the directory ids (KIP-858) of its log dirs as of that registration. `fenced_offset` is the
    offset of the record that fenced it last (its registration, or a `FenceBroker`): it is unfenced
    only once it has applied the metadata up to there, so it has seen every leadership that moved
    away from it while it was fenced (-1 in a snapshot older than version 3).
    """

    broker_id: int
    incarnation_id: str
    broker_epoch: int
    endpoints: Mapping[str, str]
    rack: str | None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    log_dirs: tuple[str, ...] = ()
    fenced_offset: int = -1

    @property
    def active(self) -> bool:
        """May lead partitions and join ISRs (Kafka's `ClusterControlManager.isActive`)."""
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's replication state.

    `replicas` is the assignment, first element the preferred leader. `isr` is kept in replica
    order and is a subset of `replicas`; it may be empty (KIP-966: the last ISR member leaves it
    like any other, into the ELR). `leader` is an ISR member or -1 (offline). `leader_epoch` grows by
    one whenever the leader changes (to -1 as well); `partition_epoch` grows by one on every
    change, and is the version an AlterPartition request must name.

    `elr` (Eligible Leader Replicas, KIP-966) are replicas outside the ISR that still hold every
    record acknowledged while they were in it: they left the ISR when it was already below
    min.insync.replicas, and from then on the leader holds the high watermark, so nothing was
    acknowledged without them. Empty while the ISR has min.insync.replicas members; disjoint from
    the ISR; a replica leaves it when it registers after an unclean shutdown. `last_known_elr`
    (Kafka's LastKnownElr) are the replicas that left the ELR that way: they once held every
    acknowledged record but may have lost a tail. Both in replica order. `log_start_offset` (ours,
    not Kafka's) is the largest log start offset the replicas reported to the recovery election
    that chose the current leader (0 otherwise): every offset below it was used by records deleted
    after they were committed, so that leader raises its own log start to it and never serves those
    offsets again (`QuorumController._recovery_leader`). It holds for that leader epoch only: the
    next leader change clears it, so a later history (every disk wiped, offsets used again) is
    never cut by an old election's offset. `epoch_lineage` (ours) is the newest leader epoch's
    lineage the controller recorded (None before any): a leader moves its HW only once its own is
    recorded (`replication.leader.Leader`), so every committed record lies on the history that
    epoch's leader continued, and the recovery election reads it (`QuorumController._recovery_leader`).
    It stays through leader changes until the next leader's is recorded.
    """

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    log_start_offset: int = 0
    epoch_lineage: EpochLineage | None = None

    def merge(self, change: PartitionChange) -> PartitionRegistration:
        """The registration after `change`: a present leader bumps leader_epoch, any change partition_epoch."""
        assert not change.is_empty, f"empty change {change}"
        leader_epoch = self.leader_epoch if change.leader is None else self.leader_epoch + 1
        return PartitionRegistration(
            replicas=self.replicas,
            isr=self.isr if change.isr is None else change.isr,
            leader=self.leader if change.leader is None else change.leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            elr=self.elr if change.elr is None else change.elr,
            last_known_elr=self.last_known_elr if change.last_known_elr is None else change.last_known_elr,
            # For the leader elected with it only: any other leader change clears it.
            log_start_offset=(self.log_start_offset if change.leader is None
                              else change.log_start_offset or 0),
            epoch_lineage=self.epoch_lineage if change.epoch_lineage is None else _lineage(change.epoch_lineage),
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic as readers see it: its partitions in order and its config overrides."""

    name: str
    topic_id: str
    configs: Mapping[str, str]
    partitions: tuple[PartitionRegistration, ...]


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """An immutable copy of the metadata at `metadata_offset`, for brokers, clients and tools."""

    metadata_offset: int
    brokers: tuple[BrokerRegistration, ...]
    topics: tuple[TopicImage, ...]

    def topic(self, name: str) -> TopicImage | None:
        return next((topic for topic in self.topics if topic.name == name), None)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return next((broker for broker in self.brokers if broker.broker_id == broker_id), None)


class ClusterMetadata:
    """The replicated cluster state; implements Raft's `StateMachine` (`apply`, `snapshot`, `restore`).

    Invariant kept by `apply`: topic names and ids map one to one; a topic's partitions are
    numbered 0..n-1; each partition's ISR, ELR and last known ELR are disjoint subsets of its
    replicas and its leader is an ISR member or -1; epochs never fall. `last_applied_offset` is -1
    before the first record.
    """

    def __init__(self) -> None:
        self.last_applied_offset = -1
        self._brokers: dict[int, BrokerRegistration] = {}
        self._topic_names: dict[str, str] = {}  # topic id -> name
        self._topic_ids: dict[str, str] = {}  # name -> topic id
        self._partitions: dict[str, dict[int, PartitionRegistration]] = {}  # topic id -> index -> state
        self._configs: dict[str, dict[str, str]] = {}  # topic name -> key -> value
        self._leaderless: set[tuple[str, int]] = set()  # derived: partitions with leader -1
        self.next_producer_id = 0  # the first producer id not yet given to a broker (ProducerIds)

    # ---- StateMachine --------------------------------------------------------------------------

    def apply(self, offset: int, epoch: int, data: bytes) -> None:
        """Apply one committed record (msgpack bytes) found at `offset`, written in Raft epoch `epoch`."""
        assert epoch >= 0, f"epoch={epoch} offset={offset}"
        self.apply_record(offset, decode_record(data))

    def apply_record(self, offset: int, record: MetadataRecord) -> None:
        """Apply an already decoded record at `offset` (the active controller's speculative path)."""
        assert offset > self.last_applied_offset, f"offset={offset} last_applied_offset={self.last_applied_offset}"
        handler = _APPLY.get(type(record))
        assert handler is not None, f"not a metadata record: {record!r}"
        try:
            handler(self, offset, record)
        except MetadataApplyError as error:
            raise MetadataApplyError(f"record at offset {offset}: {error}") from None
        self.last_applied_offset = offset

    def snapshot(self) -> bytes:
        """The whole state as msgpack; equal states give equal bytes. The offset is not included."""
        brokers = [
            [getattr(broker, name) if name != "endpoints" else to_wire(broker.endpoints) for name, _ in _BROKER_FIELDS]
            for _, broker in sorted(self._brokers.items())
        ]
        topics = []
        for topic_id, name in sorted(self._topic_names.items()):
            partitions = [
                [list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch, list(p.elr),
                 list(p.last_known_elr), p.log_start_offset,
                 [] if p.epoch_lineage is None else list(p.epoch_lineage.as_record())]
                for _, p in sorted(self._partitions[topic_id].items())
            ]
            topics.append([topic_id, name, to_wire(self._configs[name]), partitions])
        return msgpack.packb([SNAPSHOT_VERSION, brokers, topics, self.next_producer_id], use_bin_type=True)

    def restore(self, offset: int, data: bytes) -> None:
        """Replace the whole state by the snapshot `data`, taken after applying `offset`."""
        assert offset >= -1, f"offset={offset}"
        loaded = _load_snapshot(data)
        loaded.last_applied_offset = offset
        self._assign(loaded)

    def copy(self) -> ClusterMetadata:
        """An independent copy (registrations are immutable, so only the containers are copied)."""
        other = ClusterMetadata()
        other._assign(self)
        return other

    def _assign(self, source: ClusterMetadata) -> None:
        self.last_applied_offset = source.last_applied_offset
        self._brokers = dict(source._brokers)
        self._topic_names = dict(source._topic_names)
        self._topic_ids = dict(source._topic_ids)
        self._partitions = {topic_id: dict(parts) for topic_id, parts in source._partitions.items()}
        self._configs = {name: dict(configs) for name, configs in source._configs.items()}
        self._leaderless = set(source._leaderless)
        self.next_producer_id = source.next_producer_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterMetadata):
            return NotImplemented
        return (
            self.last_applied_offset == other.last_applied_offset
            and self._brokers == other._brokers
            and self._topic_names == other._topic_names
            and self._partitions == other._partitions
            and self._configs == other._configs
            and self.next_producer_id == other.next_producer_id
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"ClusterMetadata(offset={self.last_applied_offset}, brokers={len(self._brokers)}, "
            f"topics={len(self._topic_names)})"
        )

    # ---- reads ---------------------------------------------------------------------------------

    @property
    def metadata_offset(self) -> int:
        """The offset of the last record applied; readers compare it to tell how fresh this copy is."""
        return self.last_applied_offset

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def brokers(self) -> list[BrokerRegistration]:
        """Every registered broker, by id."""
        return [broker for _, broker in sorted(self._brokers.items())]

    def topic_id(self, name: str) -> str | None:
        return self._topic_ids.get(name)

    def topic_name(self, topic_id: str) -> str | None:
        return self._topic_names.get(topic_id)

    def topic_names(self) -> list[str]:
        return sorted(self._topic_ids)

    def topic_ids(self) -> list[str]:
        return sorted(self._topic_names)

    def partition(self, topic_id: str, partition: int) -> PartitionRegistration | None:
        parts = self._partitions.get(topic_id)
        return None if parts is None else parts.get(partition)

    def partitions(self, topic_id: str) -> tuple[PartitionRegistration, ...]:
        """The topic's partitions in index order (empty for an unknown topic)."""
        parts = self._partitions.get(topic_id, {})
        return tuple(parts[index] for index in range(len(parts)))

    def all_partitions(self) -> Iterator[tuple[str, int, PartitionRegistration]]:
        """(topic id, index, state) of every partition, by topic id then index."""
        for topic_id in sorted(self._partitions):
            parts = self._partitions[topic_id]
            for index in range(len(parts)):
                yield topic_id, index, parts[index]

    def leaderless_partitions(self) -> list[tuple[str, int]]:
        """(topic id, index) of every partition whose leader is -1, sorted."""
        return sorted(self._leaderless)

    def topic_configs(self, name: str) -> dict[str, str]:
        """The topic's config overrides (a copy); empty for an unknown topic."""
        return dict(self._configs.get(name, {}))

    def log_config(self, name: str) -> LogConfig:
        """The topic's effective `LogConfig`: Kafka defaults under its overrides."""
        return LogConfig.from_properties(self._configs.get(name, {}))

    def image(self) -> MetadataImage:
        """An immutable read view of everything, tagged with `metadata_offset`."""
        topics = tuple(
            TopicImage(name, topic_id, dict(self._configs[name]), self.partitions(topic_id))
            for name, topic_id in sorted(self._topic_ids.items())
        )
        return MetadataImage(self.last_applied_offset, tuple(self.brokers()), topics)

    # ---- apply, one function per record type ---------------------------------------------------

    def _apply_register_broker(self, offset: int, record: RegisterBroker) -> None:
        if record.broker_id < 0:
            raise MetadataApplyError(f"broker id {record.broker_id} is negative")
        self._brokers[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            broker_epoch=offset,
            endpoints=dict(record.endpoints),
            rack=record.rack,
            log_dirs=record.log_dirs,
            fenced_offset=offset,
        )

    def _registered(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        broker = self._brokers.get(broker_id)
        if broker is None:
            raise MetadataApplyError(f"broker {broker_id} is not registered")
        if broker.broker_epoch != broker_epoch:
            raise MetadataApplyError(f"broker {broker_id} has epoch {broker.broker_epoch}, not {broker_epoch}")
        return broker

    def _apply_fence_broker(self, offset: int, record: FenceBroker) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch)
        self._brokers[record.broker_id] = replace(broker, fenced=True, fenced_offset=offset)

    def _apply_unfence_broker(self, offset: int, record: UnfenceBroker) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch)
        self._brokers[record.broker_id] = replace(broker, fenced=False, in_controlled_shutdown=False)

    def _apply_broker_registration_change(self, offset: int, record: BrokerRegistrationChange) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch)
        self._brokers[record.broker_id] = replace(broker, in_controlled_shutdown=record.in_controlled_shutdown)

    def _apply_producer_ids(self, offset: int, record: ProducerIds) -> None:
        self._registered(record.broker_id, record.broker_epoch)
        if record.next_producer_id <= self.next_producer_id:
            raise MetadataApplyError(f"next producer id {record.next_producer_id} is not above "
                                     f"{self.next_producer_id}: producer ids would be given twice")
        self.next_producer_id = record.next_producer_id

    def _apply_topic(self, offset: int, record: Topic) -> None:
        error = topic_name_error(record.name)
        if error is not None:
            raise MetadataApplyError(error)
        if record.name in self._topic_ids:
            raise MetadataApplyError(f"topic {record.name!r} already exists")
        if record.topic_id in self._topic_names or not record.topic_id:
            raise MetadataApplyError(f"topic id {record.topic_id!r} is empty or taken")
        self._topic_names[record.topic_id] = record.name
        self._topic_ids[record.name] = record.topic_id
        self._partitions[record.topic_id] = {}
        self._configs[record.name] = dict(record.configs)

    def _apply_partition(self, offset: int, record: Partition) -> None:
        parts = self._partitions.get(record.topic_id)
        if parts is None:
            raise MetadataApplyError(f"partition {record.partition} of unknown topic id {record.topic_id}")
        if record.partition != len(parts):
            raise MetadataApplyError(f"partition {record.partition} of {record.topic_id}: next index is {len(parts)}")
        state = PartitionRegistration(
            record.replicas, record.isr, record.leader, record.leader_epoch, record.partition_epoch, record.elr,
            record.last_known_elr, record.log_start_offset, _lineage(record.epoch_lineage),
        )
        self._check_partition(state, f"{record.topic_id}-{record.partition}")
        if state.leader_epoch < 0 or state.partition_epoch < 0:
            raise MetadataApplyError(f"{record.topic_id}-{record.partition}: negative epoch in {state}")
        self._set_partition(record.topic_id, record.partition, state)

    def _apply_partition_change(self, offset: int, record: PartitionChange) -> None:
        where = f"{record.topic_id}-{record.partition}"
        current = self.partition(record.topic_id, record.partition)
        if current is None:
            raise MetadataApplyError(f"change of unknown partition {where}")
        if record.is_empty:
            raise MetadataApplyError(f"change of {where} changes nothing")
        if record.epoch_lineage == ():
            raise MetadataApplyError(f"change of {where} removes its epoch lineage; a change only records a newer one")
        state = current.merge(record)
        self._check_partition(state, where)
        self._set_partition(record.topic_id, record.partition, state)

    def _check_partition(self, state: PartitionRegistration, where: str) -> None:
        if not state.replicas or len(set(state.replicas)) != len(state.replicas):
            raise MetadataApplyError(f"{where}: replicas {state.replicas} are empty or repeat a broker")
        if state.log_start_offset < 0:
            raise MetadataApplyError(f"{where}: log_start_offset {state.log_start_offset} is negative")
        for name, members in (("ISR", state.isr), ("ELR", state.elr), ("last known ELR", state.last_known_elr)):
            if len(set(members)) != len(members) or not set(members) <= set(state.replicas):
                raise MetadataApplyError(f"{where}: {name} {members} repeats or is outside {state.replicas}")
        if set(state.elr) & set(state.isr) or set(state.last_known_elr) & (set(state.isr) | set(state.elr)):
            raise MetadataApplyError(
                f"{where}: ISR {state.isr}, ELR {state.elr} and last known ELR {state.last_known_elr} overlap"
            )
        lineage = state.epoch_lineage
        if lineage is not None and not (-1 <= lineage.previous_epoch < lineage.leader_epoch <= state.leader_epoch
                                        and lineage.start_offset >= 0):
            raise MetadataApplyError(f"{where}: {lineage} is not an earlier or the current leader epoch's")
        if state.leader != NO_LEADER and state.leader not in state.isr:
            raise MetadataApplyError(f"{where}: leader {state.leader} is not in ISR {state.isr}")
        if state.leader != NO_LEADER and state.leader not in self._brokers:
            raise MetadataApplyError(f"{where}: leader {state.leader} is not a registered broker")

    def _set_partition(self, topic_id: str, index: int, state: PartitionRegistration) -> None:
        self._partitions[topic_id][index] = state
        if state.leader == NO_LEADER:
            self._leaderless.add((topic_id, index))
        else:
            self._leaderless.discard((topic_id, index))

    def _apply_config_change(self, offset: int, record: ConfigChange) -> None:
        configs = self._configs.get(record.topic_name)
        if configs is None:
            raise MetadataApplyError(f"config change {record.key} of unknown topic {record.topic_name!r}")
        if record.value is None:
            configs.pop(record.key, None)
        else:
            configs[record.key] = record.value

    def _apply_remove_topic(self, offset: int, record: RemoveTopic) -> None:
        name = self._topic_names.get(record.topic_id)
        if name is None:
            raise MetadataApplyError(f"removal of unknown topic id {record.topic_id}")
        for index in self._partitions.pop(record.topic_id):
            self._leaderless.discard((record.topic_id, index))
        del self._topic_names[record.topic_id]
        del self._topic_ids[name]
        del self._configs[name]


_APPLY = {
    RegisterBroker: ClusterMetadata._apply_register_broker,
    FenceBroker: ClusterMetadata._apply_fence_broker,
    UnfenceBroker: ClusterMetadata._apply_unfence_broker,
    BrokerRegistrationChange: ClusterMetadata._apply_broker_registration_change,
    Topic: ClusterMetadata._apply_topic,
    Partition: ClusterMetadata._apply_partition,
    PartitionChange: ClusterMetadata._apply_partition_change,
    ConfigChange: ClusterMetadata._apply_config_change,
    RemoveTopic: ClusterMetadata._apply_remove_topic,
    ProducerIds: ClusterMetadata._apply_producer_ids,
}


def _lineage(values: tuple[int, ...]) -> EpochLineage | None:
    """A record's `epoch_lineage` (`EpochLineage.as_record()`, () for none) as the registration keeps it."""
    if not values:
        return None
    if len(values) != 3:
        raise MetadataApplyError(f"epoch_lineage {values} is not (leader epoch, previous epoch, start offset)")
    return EpochLineage(*values)


def _load_snapshot(data: bytes) -> ClusterMetadata:
    """Parse and check a snapshot; raises `MetadataRecordError` if it is malformed or inconsistent."""
    value = unpack(data, what="metadata snapshot")
    check_wire_type(value, tuple[Any, ...], "snapshot")
    if len(value) not in (3, 4) or value[0] not in _SNAPSHOT_FIELD_COUNTS or (len(value) == 4) != (value[0] >= 4):
        raise MetadataRecordError(f"snapshot must be [version 0..{SNAPSHOT_VERSION}, brokers, topics] "
                                  "(and the next producer id from version 4)")
    version, brokers, topics, *rest = value
    broker_count, partition_count = _SNAPSHOT_FIELD_COUNTS[version]
    loaded = ClusterMetadata()
    check_wire_type(brokers, tuple[tuple[Any, ...], ...], "snapshot brokers")
    for entry in brokers:
        _broker_from_snapshot(loaded, entry, _BROKER_FIELDS[:broker_count])
    check_wire_type(topics, tuple[tuple[Any, ...], ...], "snapshot topics")
    for entry in topics:
        _topic_from_snapshot(loaded, entry, _PARTITION_FIELDS[:partition_count])
    for next_producer_id in rest:
        check_wire_type(next_producer_id, int, "snapshot next_producer_id")
        if next_producer_id < 0:
            raise MetadataRecordError(f"snapshot next_producer_id {next_producer_id} is negative")
        loaded.next_producer_id = next_producer_id
    return loaded


_BROKER_FIELDS: list[tuple[str, Any]] = [
    ("broker_id", int),
    ("incarnation_id", str),
    ("broker_epoch", int),
    ("endpoints", dict[str, str]),
    ("rack", str | None),
    ("fenced", bool),
    ("in_controlled_shutdown", bool),
    ("log_dirs", tuple[str, ...]),
    ("fenced_offset", int),
]
_TOPIC_FIELDS: list[tuple[str, Any]] = [
    ("topic_id", str),
    ("name", str),
    ("configs", dict[str, str]),
    ("partitions", tuple[Any, ...]),
]
_PARTITION_FIELDS: list[tuple[str, Any]] = [
    ("replicas", tuple[int, ...]),
    ("isr", tuple[int, ...]),
    ("leader", int),
    ("leader_epoch", int),
    ("partition_epoch", int),
    ("elr", tuple[int, ...]),
    ("last_known_elr", tuple[int, ...]),
    ("log_start_offset", int),
    ("epoch_lineage", tuple[int, ...]),
]
_SNAPSHOT_FIELD_COUNTS = {0: (7, 5), 1: (8, 7), 2: (8, 8), 3: (len(_BROKER_FIELDS), 8), 4: (len(_BROKER_FIELDS), 8),
                          5: (len(_BROKER_FIELDS), len(_PARTITION_FIELDS))}
"""Per snapshot version, how many broker and partition fields it has (later fields take defaults)."""


def _check_fields(entry: tuple[Any, ...], fields: list[tuple[str, Any]], what: str) -> None:
    if len(entry) != len(fields):
        raise MetadataRecordError(f"snapshot {what} has {len(entry)} fields, expected {len(fields)}")
    for (name, hint), value in zip(fields, entry, strict=True):
        check_wire_type(value, hint, f"snapshot {what}.{name}")


def _broker_from_snapshot(loaded: ClusterMetadata, entry: tuple[Any, ...], fields: list[tuple[str, Any]]) -> None:
    _check_fields(entry, fields, "broker")
    broker = BrokerRegistration(*entry)
    if broker.broker_id in loaded._brokers or broker.broker_id < 0:
        raise MetadataRecordError(f"snapshot broker id {broker.broker_id} is negative or repeated")
    loaded._brokers[broker.broker_id] = broker


def _topic_from_snapshot(loaded: ClusterMetadata, entry: tuple[Any, ...], fields: list[tuple[str, Any]]) -> None:
    _check_fields(entry, _TOPIC_FIELDS, "topic")
    topic_id, name, configs, partitions = entry
    try:
        loaded._apply_topic(-1, Topic(name, topic_id, configs))
        for index, values in enumerate(partitions):
            check_wire_type(values, tuple[Any, ...], f"snapshot partition {name}-{index}")
            _check_fields(values, fields, f"partition {name}-{index}")
            loaded._apply_partition(-1, Partition(topic_id, index, *values))
    except MetadataApplyError as error:
        raise MetadataRecordError(f"snapshot is inconsistent: {error}") from None


# ---- invariants (DESIGN §6), for the simulator and tests ----------------------------------------


def check_invariants(metadata: ClusterMetadata) -> list[str]:
    """Every violated invariant of one node's metadata, as readable sentences (empty when all hold).

    Checked: names and ids map one to one; names are legal; configs parse; replicas are distinct
    registered brokers; the ISR, the ELR and the last known ELR are disjoint subsets of the replicas
    (the ISR may be empty, KIP-966); the leader is an ISR member or -1; a fenced or shutting-down
    broker leads nothing; epochs are not negative; broker epochs are offsets already applied.
    Every prefix of a controller's record batch passes too (a topic may have fewer partitions than
    created), so the checker may run after any applied record, although Raft commits and applies a
    controller's batch whole (`ProposeBatch`).
    """
    problems: list[str] = []
    for broker in metadata.brokers():
        if not 0 <= broker.broker_epoch <= metadata.last_applied_offset:
            problems.append(f"broker {broker.broker_id} epoch {broker.broker_epoch} is not an applied offset")
    for name in metadata.topic_names():
        topic_id = metadata.topic_id(name)
        assert topic_id is not None
        if metadata.topic_name(topic_id) != name:
            problems.append(f"topic {name!r} -> id {topic_id} -> name {metadata.topic_name(topic_id)!r}")
        if (error := topic_name_error(name)) is not None:
            problems.append(error)
        try:
            LogConfig.from_properties(metadata.topic_configs(name))
        except InvalidConfigError as error:
            problems.append(f"topic {name!r} has an invalid config: {error}")
    for topic_id, index, state in metadata.all_partitions():
        problems += _partition_problems(metadata, f"{metadata.topic_name(topic_id)}-{index}", state)
    return problems


def _partition_problems(metadata: ClusterMetadata, where: str, state: PartitionRegistration) -> list[str]:
    problems: list[str] = []
    if len(set(state.replicas)) != len(state.replicas) or not state.replicas:
        problems.append(f"{where}: replicas {state.replicas} are empty or repeat a broker")
    unknown = [replica for replica in state.replicas if metadata.broker(replica) is None]
    if unknown:
        problems.append(f"{where}: replicas {unknown} are not registered brokers")
    for name, members in (("ISR", state.isr), ("ELR", state.elr), ("last known ELR", state.last_known_elr)):
        if len(set(members)) != len(members) or not set(members) <= set(state.replicas):
            problems.append(f"{where}: {name} {members} repeats or is not a subset of replicas {state.replicas}")
    if set(state.elr) & set(state.isr):
        problems.append(f"{where}: ELR {state.elr} overlaps ISR {state.isr}")
    if set(state.last_known_elr) & (set(state.isr) | set(state.elr)):
        problems.append(f"{where}: last known ELR {state.last_known_elr} overlaps ISR {state.isr} or ELR {state.elr}")
    if state.leader != NO_LEADER and state.leader not in state.isr:
        problems.append(f"{where}: leader {state.leader} is not in ISR {state.isr}")
    leader = metadata.broker(state.leader)
    if state.leader != NO_LEADER and (leader is None or not leader.active):
        problems.append(f"{where}: leader {state.leader} is not an active broker ({leader})")
    if state.leader_epoch < 0 or state.partition_epoch < 0:
        problems.append(f"{where}: negative epoch in {state}")
    return problems


class MetadataHistory:
    """Invariants across time and nodes, fed committed metadata after every simulation step.

    Per observer (a node): each partition's leader_epoch and partition_epoch never decrease.
    Across all observers and all time: one leader per (partition, leader_epoch), and one
    registration per (partition, partition_epoch), the metadata form of state-machine safety.
    Feed only committed state: a controller's speculative copy may be rolled back legitimately.
    Call `forget(observer)` when a node restarts and replays from an older snapshot.
    """

    def __init__(self) -> None:
        self._epochs: dict[Hashable, dict[tuple[str, int], tuple[int, int]]] = {}
        self._leaders: dict[tuple[str, int, int], int] = {}
        self._states: dict[tuple[str, int, int], PartitionRegistration] = {}

    def forget(self, observer: Hashable) -> None:
        self._epochs.pop(observer, None)

    def observe(self, observer: Hashable, metadata: ClusterMetadata) -> list[str]:
        """Record `observer`'s current metadata; return the violations it reveals."""
        problems: list[str] = []
        seen = self._epochs.setdefault(observer, {})
        for topic_id, index, state in metadata.all_partitions():
            where = f"{topic_id}-{index}"
            before = seen.get((topic_id, index))
            if before is not None and (state.leader_epoch < before[0] or state.partition_epoch < before[1]):
                problems.append(f"{observer}: {where} epochs fell from {before} to {state}")
            seen[(topic_id, index)] = (state.leader_epoch, state.partition_epoch)
            leader = self._leaders.setdefault((topic_id, index, state.leader_epoch), state.leader)
            if leader != state.leader:
                problems.append(
                    f"{observer}: {where} leader epoch {state.leader_epoch} has leaders {leader} and {state.leader}"
                )
            known = self._states.setdefault((topic_id, index, state.partition_epoch), state)
            if known != state:
                problems.append(f"{observer}: {where} partition epoch {state.partition_epoch} is {known} and {state}")
        return problems
