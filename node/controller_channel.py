"""The controller channel: controller requests between nodes, their routes and their error answers.

Kafka's forwarding (KIP-590) in our protocol. Broker requests (BrokerRegistration, BrokerHeartbeat,
ControlledShutdown, AlterPartition, AllocateProducerIds) travel in an `Envelope(type=<class name>, body)`
on their node-to-node route, and are answered with an Envelope of the response. Topic admin
requests (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs) are forwarded on their
public route, as a client would send them to the active controller (the same `wire/` shapes),
and the route's handler runs them through `QuorumService.controller_request`.

A node that is not the active controller answers NOT_CONTROLLER in the response's own error
fields (controller/error_responses.py), and the sender tries again at the controller it learns of
next. The same shapes carry this channel's own failures: a refusal, a bad answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from client.connection import Connections, RequestRejectedError
from controller.error_responses import error_response
from wire.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from wire.api import Api
from wire.broker_lifecycle import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
)
from wire.codec import ProtocolError, decode, encode
from wire.configs import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from wire.envelope import Envelope
from wire.error_codes import ErrorCode
from wire.producer_ids import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from wire.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)


@dataclass(frozen=True, slots=True)
class ControllerApi:
    """Where a controller request goes and what comes back. `wire`: forwarded in its
    public wire form on a public route (topic admin), not in an Envelope."""

    api: Api
    response_type: type
    wire: bool = False


CONTROLLER_APIS: dict[type, ControllerApi] = {
    BrokerRegistrationRequest: ControllerApi(Api.BROKER_REGISTRATION, BrokerRegistrationResponse),
    BrokerHeartbeatRequest: ControllerApi(Api.BROKER_HEARTBEAT, BrokerHeartbeatResponse),
    ControlledShutdownRequest: ControllerApi(Api.CONTROLLED_SHUTDOWN, BrokerHeartbeatResponse),
    AlterPartitionRequest: ControllerApi(Api.ALTER_PARTITION, AlterPartitionResponse),
    AllocateProducerIdsRequest: ControllerApi(Api.ALLOCATE_PRODUCER_IDS, AllocateProducerIdsResponse),
    CreateTopicsRequest: ControllerApi(Api.CREATE_TOPICS, CreateTopicsResponse, wire=True),
    DeleteTopicsRequest: ControllerApi(Api.DELETE_TOPICS, DeleteTopicsResponse, wire=True),
    CreatePartitionsRequest: ControllerApi(Api.CREATE_PARTITIONS, CreatePartitionsResponse, wire=True),
    IncrementalAlterConfigsRequest: ControllerApi(Api.INCREMENTAL_ALTER_CONFIGS, IncrementalAlterConfigsResponse,
                                                  wire=True),
}
REQUEST_TYPES: dict[str, type] = {cls.__name__: cls for cls in CONTROLLER_APIS}


def request_from_envelope(api: Api, envelope: Envelope, cluster_id: str) -> Any:
    """The controller request in `envelope`, received on `api`; ProtocolError names what is wrong
    (INCONSISTENT_CLUSTER_ID when it comes from another cluster)."""
    request_type = REQUEST_TYPES.get(envelope.type)
    if request_type is None:
        raise ProtocolError(f"Envelope.type {envelope.type!r} is not a controller request; known: "
                            f"{sorted(REQUEST_TYPES)}")
    envelope.require_cluster(cluster_id)
    if CONTROLLER_APIS[request_type].api is not api:
        raise ProtocolError(f"{envelope.type} does not go to {api.path}; send it to "
                            f"{CONTROLLER_APIS[request_type].api.path}")
    return decode(request_type, envelope.body)


async def forward(connections: Connections, address: str, request: Any, timeout_ms: int, source_id: int,
                  source_address: str, cluster_id: str) -> Any:
    """Send `request` to the node at `address` and return its response. NodeUnavailableError if it
    cannot be reached; a refusal (4xx) becomes an error response with the refusal's code."""
    route = CONTROLLER_APIS[type(request)]
    try:
        if route.wire:
            return await _forward_wire(connections, address, request, route, timeout_ms)
        envelope = Envelope(type(request).__name__, encode(request), source_id, source_address, cluster_id)
        answer = await connections.call(address, route.api, envelope, Envelope, timeout_ms)
        if answer.type != route.response_type.__name__:
            raise ProtocolError(f"the answer is a {answer.type}, expected {route.response_type.__name__}")
        return decode(route.response_type, answer.body)
    except RequestRejectedError as error:
        return error_response(request, error.code, f"{address} refused the request: {error.message}")
    except ProtocolError as error:
        return error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR, f"{address} answered badly: {error}")


async def _forward_wire(connections: Connections, address: str, request: Any, route: ControllerApi,
                        timeout_ms: int) -> Any:
    """A topic admin request on its public route (its wire shape is the controller's), with the caller's timeout."""
    if "timeout_ms" in {field.name for field in dataclasses.fields(request)}:
        request = dataclasses.replace(request, timeout_ms=timeout_ms)
    return await connections.call(address, route.api, request, route.response_type, timeout_ms)
