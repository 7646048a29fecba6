"""Kafka's config APIs: DescribeConfigs (key 32), AlterConfigs (33), IncrementalAlterConfigs (44).

Topic configs are the node's: DescribeConfigs of a topic is the HTTP API's DESCRIBE_CONFIGS (its
overrides and every key's effective value), and both alter APIs become the controller's
IncrementalAlterConfigs (legacy AlterConfigs with `replace`: the given keys are the topic's whole
set of overrides, Kafka's full-replace semantics). A BROKER resource named by this node's id is
described with the node's effective config (`NodeConfig.broker_configs`; read only: Tributary has
no dynamic broker configs, so altering one is the controller's INVALID_REQUEST); named "" it is
the cluster-wide dynamic defaults, which are none; another broker's id is INVALID_REQUEST, as
Kafka's ConfigHelper answers (clients send a broker resource to that broker).

Sources follow Kafka's DescribeConfigsResponse.ConfigSource: a topic override is
DYNAMIC_TOPIC_CONFIG, a broker key given in the node's properties STATIC_BROKER_CONFIG, the rest
DEFAULT_CONFIG; with `include_synonyms` a topic key lists its override, its broker key and
Kafka's default, in that order of precedence (KIP-226).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from node.config import TOPIC_DEFAULT_SYNONYMS
from node.kafka.apis import KafkaApi, RequestContext
from storage.config import LogConfig
from wire.api import Api
from wire.configs import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    IncrementalAlterConfigsRequest,
)
from wire.configs import DescribeConfigsRequest as InternalDescribeConfigs
from wire.error_codes import ErrorCode

if TYPE_CHECKING:
    from node.config import NodeConfig


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids (those Tributary has)."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


_BROKER_KEY_OF = {topic_key: broker_key for broker_key, topic_key in TOPIC_DEFAULT_SYNONYMS.items()}
_KAFKA_DEFAULTS = LogConfig().to_properties()


def topic_config_entries(effective: Mapping[str, str], overrides: Mapping[str, str], config: NodeConfig,
                         keys: tuple[str, ...] | None, include_synonyms: bool) -> list[dict[str, Any]]:
    """A topic's config entries (only `keys` when given), in Kafka's DescribeConfigs terms."""
    entries = []
    broker_values = config.broker_configs()
    for key, value in effective.items():
        if keys is not None and key not in keys:
            continue
        synonyms = []
        if key in overrides:
            synonyms.append((key, overrides[key], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        broker_key = _BROKER_KEY_OF.get(key)
        if broker_key is not None and config.set_in_file(broker_key):
            synonyms.append((broker_key, broker_values[broker_key], ConfigSource.STATIC_BROKER_CONFIG))
        synonyms.append((broker_key or key, _KAFKA_DEFAULTS.get(key, value), ConfigSource.DEFAULT_CONFIG))
        entries.append(_entry(key, value, synonyms[0][2], False, synonyms if include_synonyms else []))
    return entries


def _broker_entries(config: NodeConfig, keys: tuple[str, ...] | None) -> list[dict[str, Any]]:
    return [_entry(key, value, ConfigSource.STATIC_BROKER_CONFIG if config.set_in_file(key)
                   else ConfigSource.DEFAULT_CONFIG, True, [])
            for key, value in config.broker_configs().items() if keys is None or key in keys]


def _entry(name: str, value: str, source: ConfigSource, read_only: bool,
           synonyms: list[tuple[str, str, ConfigSource]]) -> dict[str, Any]:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source, "is_sensitive": False,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms], "documentation": None}


async def handle_describe_configs(context: RequestContext, request: Any) -> Mapping[str, Any]:
    node = context.node
    topics = tuple(r.resource_name for r in request.resources if r.resource_type == ConfigResourceType.TOPIC)
    described = {}
    if topics:
        answer = await node.dispatch(Api.DESCRIBE_CONFIGS, InternalDescribeConfigs(topics), context.listener,
                                     context.client_host)
        described = {result.topic: result for result in answer.results}
    results = []
    for resource in request.resources:
        keys = None if resource.configuration_keys is None else tuple(resource.configuration_keys)
        # Kafka: an empty key list means every key, as null does.
        keys = keys or None
        code, message, entries = ErrorCode.NONE, None, []
        if resource.resource_type == ConfigResourceType.TOPIC:
            topic = described[resource.resource_name]
            code, message = topic.error_code, topic.error_message or None
            if code == ErrorCode.NONE:
                entries = topic_config_entries(topic.configs, topic.overrides, node.config, keys,
                                               request.include_synonyms)
        elif resource.resource_type == ConfigResourceType.BROKER:
            if resource.resource_name == str(node.config.node_id):
                entries = _broker_entries(node.config, keys)
            elif resource.resource_name:
                code = ErrorCode.INVALID_REQUEST
                message = (f"broker {resource.resource_name!r}: this is broker {node.config.node_id}; send a "
                           "broker's DescribeConfigs to that broker, or use \"\" for the cluster-wide defaults")
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"resource type {resource.resource_type} has no configs here"
        results.append({"error_code": code, "error_message": message, "resource_type": resource.resource_type,
                        "resource_name": resource.resource_name, "configs": entries})
    return {"throttle_time": 0, "results": results}


async def handle_alter_configs(context: RequestContext, request: Any) -> Mapping[str, Any]:
    """Legacy AlterConfigs: each resource's configs replace all of its overrides."""
    return await _alter(context, request, replace=True)


async def handle_incremental_alter_configs(context: RequestContext, request: Any) -> Mapping[str, Any]:
    return await _alter(context, request, replace=False)


async def _alter(context: RequestContext, request: Any, replace: bool) -> Mapping[str, Any]:
    refused: dict[int, str] = {}
    resources = []
    for position, resource in enumerate(request.resources):
        translated = _resource(resource, replace)
        if isinstance(translated, str):
            refused[position] = translated
        else:
            resources.append(translated)
    answers = iter(())
    if resources:
        internal = IncrementalAlterConfigsRequest(tuple(resources), request.validate_only)
        response = await context.node.dispatch(Api.INCREMENTAL_ALTER_CONFIGS, internal, context.listener,
                                               context.client_host)
        answers = iter(response.responses)
    results = []
    for position, resource in enumerate(request.resources):
        if position in refused:
            code, message = ErrorCode.INVALID_REQUEST, refused[position]
        else:
            answer = next(answers)
            code, message = answer.error_code, answer.error_message
        results.append({"error_code": code, "error_message": message, "resource_type": resource.resource_type,
                        "resource_name": resource.resource_name})
    return {"throttle_time": 0, "responses": results}


def _resource(resource: Any, replace: bool) -> AlterConfigsResource | str:
    """The internal resource, or why the edge refuses it (INVALID_REQUEST)."""
    if resource.resource_type not in tuple(ConfigResourceType):
        return f"resource type {resource.resource_type} has no configs here; alter TOPIC configs"
    ops = []
    for config in resource.configs:
        operation = AlterConfigOp.SET if replace else config.config_operation
        if operation not in tuple(AlterConfigOp):
            return f"config operation {operation} of {config.name} is not SET (0), DELETE (1), APPEND (2), SUBTRACT (3)"
        ops.append(AlterableConfig(config.name, AlterConfigOp(operation), config.value))
    return AlterConfigsResource(ConfigResourceType(resource.resource_type), resource.resource_name, tuple(ops),
                                replace)


# DescribeConfigs v0 is gone from Kafka 4's schemas (KIP-896); v1 added synonyms, v3 types and docs.
APIS = (
    KafkaApi(32, 1, 4, handle_describe_configs),
    KafkaApi(33, 0, 2, handle_alter_configs),
    KafkaApi(44, 0, 1, handle_incremental_alter_configs),
)
