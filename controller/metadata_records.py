"""Cluster metadata records: the entries of the `__cluster_metadata` log, and their msgpack codec.

Each record is a frozen dataclass; msgpack appears only in `encode_record` / `decode_record`
(STYLE §7: msgpack at the edge). A record's wire form is one msgpack array

    [type, version, field_1, field_2, ...]

with `type` a `MetadataRecordType` (Kafka's `apiKey` numbers from `MetadataRecordType.java`, so a
dump reads like `kafka-metadata-shell`), `version` the record's latest version, and the fields in
dataclass order. Maps are written with sorted keys, so equal records encode to equal bytes. Decoding
checks the type tag, the version, the arity and every field's type, and raises `MetadataRecordError`
on any mismatch.

Versions, as Kafka's record schemas grow: a version adds fields at the end, each with a default
(`_FIELD_COUNTS`). A log written before a field existed still decodes, the field taking its
default: version 1 of `RegisterBroker` adds `log_dirs` (KIP-858), version 1 of `Partition` and
`PartitionChange` add `elr` and `last_known_elr` (KIP-966), version 2 of both `log_start_offset`
(ours: the log start a recovery election found, see `PartitionRegistration`), version 3 of both
`epoch_lineage` (ours: `EpochLineage.as_record()`, see `PartitionRegistration`).

Conventions shared by all records:
- Broker epochs are the metadata-log offset of the broker's `RegisterBroker` record (KRaft's rule),
  so the record itself does not carry one: `ClusterMetadata.apply` takes it from the offset.
- `PartitionChange` fields are `None` when unchanged (Kafka writes -2 for "no leader change").
  A present `leader` bumps the leader epoch, any change bumps the partition epoch.
- Topic ids are Kafka-style 22-character url-safe base64 UUIDs, drawn by the active controller
  when it handles the request; `apply` never draws anything, so every node ends in the same state.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Union

import msgpack

from controller.errors import MetadataRecordError


class MetadataRecordType(IntEnum):
    """The type tag of a record on the wire: Kafka's `apiKey` for the matching KRaft record."""

    REGISTER_BROKER = 0
    TOPIC = 2
    PARTITION = 3
    CONFIG_CHANGE = 4
    PARTITION_CHANGE = 5
    FENCE_BROKER = 7
    UNFENCE_BROKER = 8
    REMOVE_TOPIC = 9
    PRODUCER_IDS = 15
    BROKER_REGISTRATION_CHANGE = 17


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A broker (re)registers. It starts fenced; its broker epoch is this record's offset.

    `endpoints` maps a listener name to `host:port`; `incarnation_id` changes on every process
    start, so the controller can tell a retry from a second process with the same id. `log_dirs`
    are the directory ids of the broker's log dirs (Kafka's BrokerRegistrationRecord.LogDirs,
    KIP-858), so a later registration without one of them shows that storage was wiped or replaced.
    """

    broker_id: int
    incarnation_id: str
    endpoints: Mapping[str, str]
    rack: str | None
    log_dirs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProducerIds:
    """The controller gave broker `broker_id` (at `broker_epoch`) the producer ids below
    `next_producer_id` not yet given to anyone (Kafka's ProducerIdsRecord, KIP-730): ids are unique
    across the cluster's life, since the next block starts where this one ends."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class FenceBroker:
    """The broker (at `broker_epoch`) may lead nothing and join no ISR until it is unfenced."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBroker:
    """The broker (at `broker_epoch`) caught up with the metadata log and may lead and join ISRs."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChange:
    """The broker entered controlled shutdown: it keeps serving but is no longer eligible to lead."""

    broker_id: int
    broker_epoch: int
    in_controlled_shutdown: bool


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic is created with its validated configs (Kafka keys, string values). Partitions follow."""

    name: str
    topic_id: str
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition of an existing topic is created (or restored from a snapshot). Partitions are
    numbered 0, 1, ... in order. `elr` and `last_known_elr` are Kafka's PartitionRecord
    EligibleLeaderReplicas and LastKnownElr (KIP-966, see `PartitionRegistration`)."""

    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    log_start_offset: int = 0
    epoch_lineage: tuple[int, ...] = ()  # () for none


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """A partition's ISR, leader, ELR and/or last known ELR change; `None` means unchanged,
    `leader=-1` means no leader. An `isr` equal to the current one changes nothing but the partition
    epoch: the controller writes that to fence a rejected AlterPartition's copies (see
    `QuorumController.alter_partition`)."""

    topic_id: str
    partition: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    log_start_offset: int | None = None
    epoch_lineage: tuple[int, ...] | None = None  # a newer lineage; never ()

    @property
    def is_empty(self) -> bool:
        return (self.isr is None and self.leader is None and self.elr is None and self.last_known_elr is None
                and self.log_start_offset is None and self.epoch_lineage is None)


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One topic config key is set (`value` a string) or removed (`value=None`, back to the default)."""

    topic_name: str
    key: str
    value: str | None


@dataclass(frozen=True, slots=True)
class RemoveTopic:
    """A topic, its partitions and its configs are removed."""

    topic_id: str


MetadataRecord = Union[  # noqa: UP007 - a runtime alias, used in isinstance checks
    RegisterBroker,
    FenceBroker,
    UnfenceBroker,
    BrokerRegistrationChange,
    Topic,
    Partition,
    PartitionChange,
    ConfigChange,
    RemoveTopic,
    ProducerIds,
]

RECORD_CLASSES: dict[MetadataRecordType, type] = {
    MetadataRecordType.REGISTER_BROKER: RegisterBroker,
    MetadataRecordType.TOPIC: Topic,
    MetadataRecordType.PARTITION: Partition,
    MetadataRecordType.CONFIG_CHANGE: ConfigChange,
    MetadataRecordType.PARTITION_CHANGE: PartitionChange,
    MetadataRecordType.FENCE_BROKER: FenceBroker,
    MetadataRecordType.UNFENCE_BROKER: UnfenceBroker,
    MetadataRecordType.REMOVE_TOPIC: RemoveTopic,
    MetadataRecordType.PRODUCER_IDS: ProducerIds,
    MetadataRecordType.BROKER_REGISTRATION_CHANGE: BrokerRegistrationChange,
}
RECORD_TYPES: dict[type, MetadataRecordType] = {cls: tag for tag, cls in RECORD_CLASSES.items()}
_FIELD_COUNTS: dict[type, tuple[int, ...]] = {
    cls: (len(dataclasses.fields(cls)),) for cls in RECORD_CLASSES.values()
} | {
    RegisterBroker: (4, 5),  # v1: log_dirs (KIP-858)
    Partition: (7, 9, 10, 11),  # v1: elr, last_known_elr (KIP-966); v2: log_start_offset; v3: epoch_lineage
    PartitionChange: (4, 6, 7, 8),  # v1: elr, last_known_elr (KIP-966); v2: log_start_offset; v3: epoch_lineage
}
"""Per record class, its field count in each version (index = version); the last is written."""


def encode_record(record: MetadataRecord) -> bytes:
    """The record's wire bytes: `[type, version, *fields]`, maps with sorted keys."""
    tag = RECORD_TYPES.get(type(record))
    assert tag is not None, f"not a metadata record: {record!r}"
    fields = [to_wire(getattr(record, field.name)) for field in dataclasses.fields(record)]
    version = len(_FIELD_COUNTS[type(record)]) - 1
    return msgpack.packb([int(tag), version, *fields], use_bin_type=True)


def decode_record(data: bytes) -> MetadataRecord:
    """The record encoded in `data`; raises `MetadataRecordError` if it is not exactly one record."""
    value = unpack(data, what="metadata record")
    if not isinstance(value, tuple) or len(value) < 2:
        raise MetadataRecordError(f"a metadata record is an array [type, version, ...], not {value!r}")
    tag, version, *fields = value
    if type(tag) is not int:
        raise MetadataRecordError(f"metadata record type tag {tag!r} is not an integer")
    try:
        record_type = MetadataRecordType(tag)
    except ValueError:
        raise MetadataRecordError(f"unknown metadata record type {tag!r}") from None
    cls = RECORD_CLASSES[record_type]
    counts = _FIELD_COUNTS[cls]
    if type(version) is not int or not 0 <= version < len(counts):
        raise MetadataRecordError(
            f"{record_type.name} version {version!r} is not supported (only 0..{len(counts) - 1})"
        )
    hints = _FIELD_HINTS[cls][: counts[version]]
    if len(fields) != len(hints):
        raise MetadataRecordError(
            f"{record_type.name} version {version} has {len(fields)} fields, expected {len(hints)}"
        )
    for (name, hint), field_value in zip(hints, fields, strict=True):
        check_wire_type(field_value, hint, f"{record_type.name}.{name}")
    return cls(*fields)


def unpack(data: bytes, what: str) -> Any:
    """msgpack-decode `data` (arrays as tuples), mapping every decoder failure to `MetadataRecordError`."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise MetadataRecordError(f"{what} must be bytes, not {type(data).__name__}")
    try:
        return msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise MetadataRecordError(f"{what} is not valid msgpack: {error}") from None


def to_wire(value: Any) -> Any:
    """A field value as msgpack will write it: maps sorted by key so equal values give equal bytes."""
    if isinstance(value, Mapping):
        return {key: value[key] for key in sorted(value)}
    return value


def check_wire_type(value: Any, hint: Any, where: str) -> None:
    """Raise `MetadataRecordError` unless `value` (as msgpack decoded it) matches the type `hint`."""
    if not _matches(value, hint):
        raise MetadataRecordError(f"{where}={value!r} is not of type {_hint_name(hint)}")


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint in (int, str, bool):
        return type(value) is hint
    if origin in (Union, types.UnionType):
        return any(_matches(value, option) for option in typing.get_args(hint))
    if origin is tuple:
        element = typing.get_args(hint)[0]
        return isinstance(value, tuple) and all(_matches(item, element) for item in value)
    if origin in (Mapping, dict):
        key_hint, value_hint = typing.get_args(hint)
        return isinstance(value, dict) and all(
            _matches(key, key_hint) and _matches(item, value_hint) for key, item in value.items()
        )
    raise AssertionError(f"unsupported field type {hint!r}")


def _hint_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


_FIELD_HINTS: dict[type, list[tuple[str, Any]]] = {
    cls: [(field.name, typing.get_type_hints(cls)[field.name]) for field in dataclasses.fields(cls)]
    for cls in RECORD_CLASSES.values()
}
