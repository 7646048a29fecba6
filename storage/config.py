"""LogConfig: a topic's storage settings, with Kafka's keys, defaults and bounds.

Dotted keys (`segment.bytes`) stop here: the rest of the code reads `LogConfig.segment_bytes`.
`LogConfig.from_properties` validates every key and value and raises `InvalidConfigError`
with a message that names the key, the bad value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class TimestampType(Enum):
    """`message.timestamp.type`: who sets a record's timestamp."""

    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


class CleanupPolicy(Enum):
    DELETE = "delete"
    COMPACT = "compact"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-log settings. Field names are Kafka's keys in snake_case; defaults are Kafka's."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    cleanup_policy: frozenset[CleanupPolicy] = frozenset({CleanupPolicy.DELETE})
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    delete_retention_ms: int = 24 * 3600 * 1000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    max_message_bytes: int = 1024 * 1024 + 12
    # Ours, not Kafka's: how far a produced batch's compressed records may expand (`decompress`).
    max_decompressed_batch_bytes: int = 8 * 1024 * 1024
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    @property
    def compact(self) -> bool:
        return CleanupPolicy.COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return CleanupPolicy.DELETE in self.cleanup_policy

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka-style keys (`{"segment.bytes": "1048576"}`) over `base` or defaults."""
        changes: dict[str, Any] = {}
        for key, raw in properties.items():
            spec = _SPECS.get(key)
            if spec is None:
                known = ", ".join(sorted(_SPECS))
                raise InvalidConfigError(f"unknown log config {key!r}; known keys: {known}")
            changes[key.replace(".", "_")] = spec(key, raw)
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """The inverse of `from_properties`, as strings (what `describe configs` shows)."""
        out: dict[str, str] = {}
        for key in _SPECS:
            value = getattr(self, key.replace(".", "_"))
            if isinstance(value, frozenset):
                out[key] = ",".join(sorted(policy.value for policy in value))
            elif isinstance(value, Enum):
                out[key] = value.value
            elif isinstance(value, bool):
                out[key] = str(value).lower()
            else:
                out[key] = str(value)
        return out


def _integer(minimum: int, maximum: int = LONG_MAX) -> Callable[[str, Any], int]:
    def parse(key: str, raw: Any) -> int:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise InvalidConfigError(f"{key}={raw!r} is not an integer")
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"{key}={raw!r} is not an integer") from None
        if not minimum <= value <= maximum:
            raise InvalidConfigError(f"{key}={value} is outside [{minimum}, {maximum}]")
        return value

    return parse


def _ratio(key: str, raw: Any) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"{key}={raw!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise InvalidConfigError(f"{key}={value} is outside [0.0, 1.0]")
    return value


def _boolean(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigError(f"{key}={raw!r} must be true or false")
    return text == "true"


def _cleanup_policy(key: str, raw: Any) -> frozenset[CleanupPolicy]:
    names = [part.strip() for part in str(raw).split(",") if part.strip()]
    allowed = {policy.value: policy for policy in CleanupPolicy}
    bad = [name for name in names if name not in allowed]
    if bad or not names:
        raise InvalidConfigError(f"{key}={raw!r}: use delete, compact or delete,compact")
    return frozenset(allowed[name] for name in names)


def _timestamp_type(key: str, raw: Any) -> TimestampType:
    for kind in TimestampType:
        if kind.value == raw or kind == raw:
            return kind
    raise InvalidConfigError(f"{key}={raw!r}: use CreateTime or LogAppendTime")


# Bounds are Kafka's (LogConfig.java): a segment must hold at least one minimal batch,
# an index at least one entry.
_SPECS: dict[str, Callable[[str, Any], Any]] = {
    "segment.bytes": _integer(14, INT_MAX),
    "segment.ms": _integer(1),
    "segment.index.bytes": _integer(12, INT_MAX),
    "index.interval.bytes": _integer(0, INT_MAX),
    "retention.ms": _integer(-1),
    "retention.bytes": _integer(-1),
    "cleanup.policy": _cleanup_policy,
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _integer(0),
    "delete.retention.ms": _integer(0),
    "file.delete.delay.ms": _integer(0),
    "flush.messages": _integer(1),
    "flush.ms": _integer(0),
    "message.timestamp.type": _timestamp_type,
    "max.message.bytes": _integer(0, INT_MAX),
    "max.decompressed.batch.bytes": _integer(0, INT_MAX),
    "min.insync.replicas": _integer(1, INT_MAX),
    "unclean.leader.election.enable": _boolean,
}
