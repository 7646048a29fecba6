"""The answer to each Kafka request frame, from the APIs the area modules serve (`SERVED`).

An API is advertised in ApiVersions with the versions its module handles; a request for an API or
version not served is answered UNSUPPORTED_VERSION in that API's own format (never a closed
connection without an answer), and an ApiVersions request of a version newer than ours gets a v0
answer with UNSUPPORTED_VERSION and our versions, from which the client picks again (KIP-511). A
handler that fails unexpectedly (a bug) is logged and answered UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from node.kafka import (
    cluster,
    configs,
    coordinator,
    delete_records,
    fetch,
    group_admin,
    group_offsets,
    groups,
    list_offsets,
    metadata,
    produce,
    producer_ids,
    topics,
)
from node.kafka.apis import CloseConnection, KafkaApi, RequestContext
from node.kafka.entities import build, filled
from node.kafka.frames import Frame, encode, response_schema
from wire.error_codes import ErrorCode

log = logging.getLogger(__name__)

API_VERSIONS_KEY = 18


async def _api_versions(context: RequestContext, request: Any) -> Mapping[str, Any]:
    return {"error_code": ErrorCode.NONE, "api_keys": _advertised(), "throttle_time": 0}


SERVED: dict[int, KafkaApi] = {
    api.key: api for api in (
        KafkaApi(API_VERSIONS_KEY, 0, 4, _api_versions),
        *metadata.APIS,
        *topics.APIS, *configs.APIS, *cluster.APIS,
        *produce.APIS, *fetch.APIS, *list_offsets.APIS, *delete_records.APIS,
        *coordinator.APIS, *groups.APIS, *group_offsets.APIS, *group_admin.APIS, *producer_ids.APIS,
    )
}


def _advertised() -> list[dict[str, int]]:
    return [{"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
            for api in sorted(SERVED.values(), key=lambda api: api.key)]


async def answer(frame: Frame, context: RequestContext) -> bytes | None:
    """The response frame to `frame` (None: no answer, as for acks=0)."""
    api = SERVED.get(frame.api_key)
    response_type = response_schema(frame.api_key, frame.api_version)
    if api is None or not api.min_version <= frame.api_version <= api.max_version:
        return encode(frame.correlation_id, filled(response_type, ErrorCode.UNSUPPORTED_VERSION))
    try:
        values = await api.handle(context, frame.body)
        return None if values is None else encode(frame.correlation_id, build(response_type, values))
    except CloseConnection:
        raise
    except Exception:  # a bug in a handler or in building its answer
        log.exception("node %s: unexpected error answering Kafka API key %s v%s from %s", context.node.config.node_id,
                      frame.api_key, frame.api_version, context.client_id)
        return encode(frame.correlation_id, filled(response_type, ErrorCode.UNKNOWN_SERVER_ERROR))


def unsupported_api_versions(correlation_id: int) -> bytes:
    """KIP-511: an ApiVersions request newer than ours is answered in v0 with our versions."""
    response_type = response_schema(API_VERSIONS_KEY, 0)
    return encode(correlation_id, build(response_type, {"error_code": ErrorCode.UNSUPPORTED_VERSION,
                                                        "api_keys": _advertised()}))
