"""Topic configs: IncrementalAlterConfigs (answered by the active controller) and DescribeConfigs
(answered by any node from its metadata), with Kafka's field names and operation and resource ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from wire.error_codes import ErrorCode


class AlterConfigOp(IntEnum):
    """An incremental config operation (Kafka's `AlterConfigOp.OpType` ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigResourceType(IntEnum):
    """What a config belongs to (Kafka's `ConfigResource.Type` ids). Only topic configs are dynamic here."""

    TOPIC = 2
    BROKER = 4


@dataclass(frozen=True, slots=True)
class AlterableConfig:
    """One operation on one key; `value` is ignored by DELETE and required by the others."""

    name: str
    op: AlterConfigOp
    value: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    """`replace`: Kafka's legacy AlterConfigs, the ops (all SET) are the resource's whole set of
    overrides and every other override is deleted, in the same records."""

    resource_type: ConfigResourceType
    resource_name: str
    configs: tuple[AlterableConfig, ...]
    replace: bool = False


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsRequest:
    """Change configs; each resource succeeds or fails as a whole."""

    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterConfigsResourceResult:
    resource_type: ConfigResourceType
    resource_name: str
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsResponse:
    responses: tuple[AlterConfigsResourceResult, ...]


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    """Topic configs: the topic's own settings and the effective value of every key."""

    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribeConfigsResult:
    topic: str
    error_code: ErrorCode
    error_message: str = ""
    configs: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    results: tuple[DescribeConfigsResult, ...]
