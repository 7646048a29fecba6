"""LogConfig: Kafka's defaults, every key parsed from Kafka-style strings, bounds, and errors that
name the key.

Method: the defaults and bounds are copied from Kafka's LogConfig / TopicConfig documentation
(not from our code); each key is parsed from a string and from a native value, round-tripped
through to_properties, and each bad value and unknown key must raise InvalidConfigError whose
message contains the key.
"""

from __future__ import annotations

from typing import Any

import pytest

from storage.config import CleanupPolicy, LogConfig, TimestampType
from storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# Kafka's topic-level defaults (TopicConfig / LogConfig, Kafka 3.x).
KAFKA_DEFAULTS: dict[str, Any] = {
    "segment_bytes": 1073741824,  # 1 GiB
    "segment_ms": 604800000,  # 7 days
    "segment_index_bytes": 10485760,  # 10 MiB
    "index_interval_bytes": 4096,
    "retention_ms": 604800000,
    "retention_bytes": -1,
    "cleanup_policy": frozenset({CleanupPolicy.DELETE}),
    "min_cleanable_dirty_ratio": 0.5,
    "min_compaction_lag_ms": 0,
    "delete_retention_ms": 86400000,  # 1 day
    "file_delete_delay_ms": 60000,
    "flush_messages": LONG_MAX,
    "flush_ms": LONG_MAX,
    "message_timestamp_type": TimestampType.CREATE_TIME,
    "max_message_bytes": 1048588,  # 1 MiB + 12 bytes of log overhead
    "min_insync_replicas": 1,
    "unclean_leader_election_enable": False,
}
# Ours: Kafka has no bound on how far a batch's compressed records may expand.
OWN_DEFAULTS: dict[str, Any] = {"max_decompressed_batch_bytes": 8 * 1024 * 1024}


@pytest.mark.parametrize(("field", "value"), sorted((KAFKA_DEFAULTS | OWN_DEFAULTS).items()))
def test_defaults_equal_kafkas(field: str, value: Any) -> None:
    assert getattr(LogConfig(), field) == value
    assert getattr(LogConfig.from_properties({}), field) == value


def test_every_key_has_a_default_checked_here() -> None:
    assert set(LogConfig().to_properties()) == {field.replace("_", ".") for field in KAFKA_DEFAULTS | OWN_DEFAULTS}


PARSED: list[tuple[str, Any, Any]] = [
    ("segment.bytes", "1048576", 1048576),
    ("segment.ms", "3600000", 3600000),
    ("segment.index.bytes", "4096", 4096),
    ("index.interval.bytes", "0", 0),
    ("retention.ms", "-1", -1),
    ("retention.bytes", "1073741824", 1073741824),
    ("cleanup.policy", "compact", frozenset({CleanupPolicy.COMPACT})),
    ("cleanup.policy", "compact,delete", frozenset({CleanupPolicy.COMPACT, CleanupPolicy.DELETE})),
    ("cleanup.policy", "delete, compact", frozenset({CleanupPolicy.COMPACT, CleanupPolicy.DELETE})),
    ("min.cleanable.dirty.ratio", "0.25", 0.25),
    ("min.compaction.lag.ms", "1000", 1000),
    ("delete.retention.ms", "0", 0),
    ("file.delete.delay.ms", "0", 0),
    ("flush.messages", "1", 1),
    ("flush.ms", "1000", 1000),
    ("message.timestamp.type", "LogAppendTime", TimestampType.LOG_APPEND_TIME),
    ("message.timestamp.type", "CreateTime", TimestampType.CREATE_TIME),
    ("max.message.bytes", "2097152", 2097152),
    ("max.decompressed.batch.bytes", "1048576", 1048576),
    ("min.insync.replicas", "2", 2),
    ("unclean.leader.election.enable", "true", True),
    ("unclean.leader.election.enable", "FALSE", False),
    # Native values, as a Python caller passes them.
    ("segment.bytes", 5000, 5000),
    ("min.cleanable.dirty.ratio", 1, 1.0),
    ("unclean.leader.election.enable", True, True),
]


@pytest.mark.parametrize(("key", "raw", "value"), PARSED)
def test_each_key_is_parsed(key: str, raw: Any, value: Any) -> None:
    config = LogConfig.from_properties({key: raw})
    assert getattr(config, key.replace(".", "_")) == value
    # Nothing else changed.
    others = {field: getattr(LogConfig(), field) for field in KAFKA_DEFAULTS if field != key.replace(".", "_")}
    assert {field: getattr(config, field) for field in others} == others
    # to_properties round-trips.
    assert LogConfig.from_properties(config.to_properties()) == config


def test_cleanup_policy_properties() -> None:
    assert LogConfig.from_properties({"cleanup.policy": "compact"}).compact
    assert not LogConfig.from_properties({"cleanup.policy": "compact"}).delete
    both = LogConfig.from_properties({"cleanup.policy": "delete,compact"})
    assert both.compact and both.delete
    assert LogConfig().delete and not LogConfig().compact


def test_from_properties_builds_over_a_base() -> None:
    base = LogConfig.from_properties({"segment.bytes": "1000", "retention.ms": "5"})
    config = LogConfig.from_properties({"retention.ms": "7"}, base=base)
    assert (config.segment_bytes, config.retention_ms) == (1000, 7)
    assert base.retention_ms == 5


BOUNDS_OK: list[tuple[str, Any]] = [
    ("segment.bytes", 14),  # Kafka: at least LegacyRecord.RECORD_OVERHEAD_V0
    ("segment.bytes", INT_MAX),
    ("segment.ms", 1),
    ("index.interval.bytes", 0),
    ("retention.ms", -1),
    ("retention.bytes", -1),
    ("min.cleanable.dirty.ratio", 0),
    ("min.cleanable.dirty.ratio", 1),
    ("min.compaction.lag.ms", 0),
    ("delete.retention.ms", 0),
    ("file.delete.delay.ms", 0),
    ("flush.messages", 1),
    ("flush.ms", 0),
    ("flush.ms", LONG_MAX),
    ("max.message.bytes", 0),
    ("min.insync.replicas", 1),
]


@pytest.mark.parametrize(("key", "raw"), BOUNDS_OK)
def test_values_on_kafkas_bounds_are_accepted(key: str, raw: Any) -> None:
    assert getattr(LogConfig.from_properties({key: raw}), key.replace(".", "_")) == raw


BAD_VALUES: list[tuple[str, Any]] = [
    ("segment.bytes", "13"),
    ("segment.bytes", str(INT_MAX + 1)),  # an int in Kafka
    ("segment.bytes", "1GB"),
    ("segment.bytes", ""),
    ("segment.bytes", None),
    ("segment.ms", "0"),
    ("segment.index.bytes", "-1"),
    ("index.interval.bytes", "-1"),
    ("retention.ms", "-2"),
    ("retention.bytes", "-2"),
    ("retention.bytes", "ten"),
    ("cleanup.policy", "remove"),
    ("cleanup.policy", "delete,remove"),
    ("cleanup.policy", ""),
    ("min.cleanable.dirty.ratio", "1.5"),
    ("min.cleanable.dirty.ratio", "-0.1"),
    ("min.cleanable.dirty.ratio", "nan"),
    ("min.cleanable.dirty.ratio", "half"),
    ("min.compaction.lag.ms", "-1"),
    ("delete.retention.ms", "-1"),
    ("file.delete.delay.ms", "-1"),
    ("flush.messages", "0"),
    ("flush.ms", "-1"),
    ("flush.ms", str(LONG_MAX + 1)),
    ("message.timestamp.type", "createtime"),
    ("message.timestamp.type", "WallClock"),
    ("max.message.bytes", "-1"),
    ("max.decompressed.batch.bytes", "-1"),
    ("min.insync.replicas", "0"),
    ("unclean.leader.election.enable", "yes"),
    ("unclean.leader.election.enable", "1"),
    ("segment.ms", "1.5"),
    ("segment.ms", 1.5),  # a float is not an integer: truncating it would hide a mistake
]


@pytest.mark.parametrize(("key", "raw"), BAD_VALUES)
def test_bad_values_raise_invalid_config_naming_the_key(key: str, raw: Any) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        LogConfig.from_properties({key: raw})
    assert key in str(raised.value)
    assert raised.value.error_name == "INVALID_CONFIG"


@pytest.mark.parametrize("key", ["segment.size", "retention.hours", "log.retention.ms", "SEGMENT.BYTES", ""])
def test_unknown_keys_raise_invalid_config_naming_the_key(key: str) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        LogConfig.from_properties({"segment.bytes": "1000", key: "1"})
    assert repr(key) in str(raised.value)
    assert raised.value.error_name == "INVALID_CONFIG"


def test_a_bad_value_among_good_ones_changes_nothing() -> None:
    base = LogConfig.from_properties({"segment.bytes": "1000"})
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties({"retention.ms": "5", "segment.ms": "0"}, base=base)
    assert base == LogConfig.from_properties({"segment.bytes": "1000"})
