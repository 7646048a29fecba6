"""Kafka's topic admin: CreateTopics (key 19), DeleteTopics (20), CreatePartitions (37).

Each request becomes the node's own topic-admin request (the controller's shapes), which the node
runs on the active controller as the HTTP API's does (node/node.py, CONTROLLER_ADMIN_APIS); the
controller validates names, counts, replication factors, assignments and configs with Kafka's
named errors. The edge refuses only what the internal shapes cannot carry: a null config value
(INVALID_CONFIG, as Kafka's ControllerApis), a partition or config given twice, a DeleteTopics
entry naming both or neither of name and id (INVALID_REQUEST). A request timeout of 0 or less
waits `request.timeout.ms`: KRaft's controller applies a create whatever the caller's deadline,
so an answer REQUEST_TIMED_OUT would only hide the outcome.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from node.kafka.apis import KafkaApi, RequestContext
from node.kafka.configs import topic_config_entries
from node.kafka.entities import milliseconds, topic_id_text
from storage.config import LogConfig
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.sentinels import NO_VALUE
from wire.topics import (
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)

if TYPE_CHECKING:
    from node.config import NodeConfig


def _timeout_ms(context: RequestContext, request: Any) -> int:
    timeout_ms = milliseconds(request.timeout)
    return timeout_ms if timeout_ms > 0 else context.node.config.request_timeout_ms


async def handle_create_topics(context: RequestContext, request: Any) -> Mapping[str, Any]:
    edge_errors: dict[int, tuple[ErrorCode, str]] = {}
    creatable = []
    for position, topic in enumerate(request.topics):
        translated = _creatable(topic)
        if isinstance(translated, tuple):
            edge_errors[position] = translated
        else:
            creatable.append(translated)
    answers = iter(())
    if creatable:
        internal = CreateTopicsRequest(tuple(creatable), request.validate_only, _timeout_ms(context, request))
        response = await context.node.dispatch(Api.CREATE_TOPICS, internal, context.listener, context.client_host)
        answers = iter(response.topics)
    results = []
    for position, topic in enumerate(request.topics):
        if position in edge_errors:
            code, message = edge_errors[position]
            results.append({"name": topic.name, "topic_id": None, "error_code": code, "error_message": message,
                            "configs": None})
            continue
        results.append(_created(next(answers), context.node.config))
    return {"throttle_time": 0, "topics": results}


def _creatable(topic: Any) -> CreatableTopic | tuple[ErrorCode, str]:
    """The internal topic to create, or the edge's refusal."""
    configs: dict[str, str] = {}
    for config in topic.configs:
        if config.value is None:
            return ErrorCode.INVALID_CONFIG, f"config {config.name} of {topic.name!r} has no value; give one or omit it"
        if config.name in configs:
            return ErrorCode.INVALID_CONFIG, f"config {config.name} of {topic.name!r} is given twice"
        configs[config.name] = config.value
    if not topic.assignments:
        return CreatableTopic(topic.name, topic.num_partitions, topic.replication_factor, None, configs)
    indices = Counter(assignment.partition_index for assignment in topic.assignments)
    repeated = sorted(index for index, count in indices.items() if count > 1)
    if repeated:
        return ErrorCode.INVALID_REQUEST, f"{topic.name!r}: partitions {repeated} are assigned twice"
    assignments = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
    # Kafka sends -1 for both with an assignment; the controller refuses other values as ambiguous.
    return CreatableTopic(topic.name, topic.num_partitions, topic.replication_factor, assignments, configs)


def _created(result: CreatableTopicResult, config: NodeConfig) -> dict[str, Any]:
    """A CreatableTopicResult in Kafka's terms; on success its configs as DescribeConfigs shows them (v5+)."""
    created = result.error_code == ErrorCode.NONE
    effective = LogConfig.from_properties(result.configs, base=config.log_config()).to_properties() if created else {}
    return {
        "name": result.name,
        "topic_id": result.topic_id or None,
        "error_code": result.error_code,
        "error_message": result.error_message,
        "num_partitions": result.num_partitions if created else NO_VALUE,
        "replication_factor": result.replication_factor if created else NO_VALUE,
        "configs": topic_config_entries(effective, result.configs, config, None, False) if created else None,
    }


async def handle_delete_topics(context: RequestContext, request: Any) -> Mapping[str, Any]:
    names: list[str] = []
    topic_ids: list[str] = []
    refused = []
    if context.api_version < 6:
        names = list(request.topic_names)
    else:
        for state in request.topics:
            topic_id = topic_id_text(state.topic_id)
            if (state.name is None) == (topic_id == ""):
                refused.append({"name": state.name, "topic_id": state.topic_id, "error_code": ErrorCode.INVALID_REQUEST,
                                "error_message": "give a topic's name or its id, exactly one of them"})
            elif state.name is not None:
                names.append(state.name)
            else:
                topic_ids.append(topic_id)
    results = []
    if names or topic_ids:
        internal = DeleteTopicsRequest(tuple(names), tuple(topic_ids), _timeout_ms(context, request))
        response = await context.node.dispatch(Api.DELETE_TOPICS, internal, context.listener, context.client_host)
        results = [{"name": r.name, "topic_id": r.topic_id or None, "error_code": r.error_code,
                    "error_message": r.error_message} for r in response.topics]
    return {"throttle_time": 0, "responses": results + refused}


async def handle_create_partitions(context: RequestContext, request: Any) -> Mapping[str, Any]:
    topics = tuple(
        CreatePartitionsTopic(topic.name, topic.count, None if topic.assignments is None
                              else tuple(tuple(assignment.broker_ids) for assignment in topic.assignments))
        for topic in request.topics)
    results = []
    if topics:
        internal = CreatePartitionsRequest(topics, request.validate_only, _timeout_ms(context, request))
        response = await context.node.dispatch(Api.CREATE_PARTITIONS, internal, context.listener, context.client_host)
        results = [{"name": r.name, "error_code": r.error_code, "error_message": r.error_message}
                   for r in response.results]
    return {"throttle_time": 0, "results": results}


# Kafka 4's schemas start CreateTopics at v2 and DeleteTopics at v1 (KIP-896 removed older ones).
APIS = (
    KafkaApi(19, 2, 7, handle_create_topics),
    KafkaApi(20, 1, 6, handle_delete_topics),
    KafkaApi(37, 0, 3, handle_create_partitions),
)
