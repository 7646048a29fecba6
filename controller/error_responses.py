"""Error answers to controller requests, in each response's own error fields.

A controller request that is not handled (NOT_CONTROLLER, a refused proposal, a timeout at the
edge) is answered with the response type of its request, carrying the error code in every error
field it has: per topic, per config resource, or once. `is_not_controller` reads that back, so a
forwarding node (or the simulator's client) knows to retry at the controller it learns of next.
Shared by the controller's office (controller/controller_office.py) and the node's controller
channel (node/controller_channel.py).
"""

from __future__ import annotations

from typing import Any

from controller.controller_api import BrokerConnectionRefused, TickResponse
from wire.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from wire.broker_lifecycle import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
)
from wire.configs import AlterConfigsResourceResult, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from wire.error_codes import ErrorCode
from wire.producer_ids import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from wire.topics import (
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)


def error_response(request: Any, code: ErrorCode, message: str) -> Any:
    """The response to `request` that carries `code` everywhere it has an error field."""
    if isinstance(request, BrokerRegistrationRequest):
        return BrokerRegistrationResponse(code, message)
    if isinstance(request, BrokerConnectionRefused):
        return TickResponse(error_code=code)  # nobody waits for it: the next probe reports again
    if isinstance(request, (BrokerHeartbeatRequest, ControlledShutdownRequest)):
        return BrokerHeartbeatResponse(code, message)
    if isinstance(request, AlterPartitionRequest):
        return AlterPartitionResponse(code, message)
    if isinstance(request, AllocateProducerIdsRequest):
        return AllocateProducerIdsResponse(code, message)
    if isinstance(request, CreateTopicsRequest):
        return CreateTopicsResponse(tuple(CreatableTopicResult(topic.name, code, message) for topic in request.topics))
    if isinstance(request, CreatePartitionsRequest):
        return CreatePartitionsResponse(tuple(CreatePartitionsTopicResult(topic.name, code, message)
                                              for topic in request.topics))
    if isinstance(request, DeleteTopicsRequest):
        return DeleteTopicsResponse(
            tuple(DeletableTopicResult(name, None, code, message) for name in request.topic_names)
            + tuple(DeletableTopicResult(None, topic_id, code, message) for topic_id in request.topic_ids)
        )
    assert isinstance(request, IncrementalAlterConfigsRequest), f"not a controller request: {request!r}"
    return IncrementalAlterConfigsResponse(tuple(
        AlterConfigsResourceResult(resource.resource_type, resource.resource_name, code, message)
        for resource in request.resources
    ))


def is_not_controller(response: Any) -> bool:
    """True if `response` says its node was not the active controller (retry elsewhere). Per-item
    responses carry the code in every item; an empty one cannot say."""
    for items_field in ("topics", "responses", "results"):
        items = getattr(response, items_field, None)
        if items is not None:
            return any(item.error_code is ErrorCode.NOT_CONTROLLER for item in items)
    return response.error_code is ErrorCode.NOT_CONTROLLER
