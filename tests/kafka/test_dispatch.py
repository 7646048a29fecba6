"""node/kafka/dispatch.py without a node: a handler that fails, or answers with values that do not
build, is answered UNKNOWN_SERVER_ERROR in the API's format (the connection stays usable)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.describe_cluster.v0.response import DescribeClusterResponse
from kio.schema.errors import ErrorCode as KioErrorCode

from node.kafka import dispatch
from node.kafka.apis import KafkaApi, RequestContext
from node.kafka.frames import parse
from tests.kafka.wire import read_response, request_frame


async def failing(context: RequestContext, request: Any) -> dict[str, Any]:
    raise RuntimeError("a bug")


async def unbuildable(context: RequestContext, request: Any) -> dict[str, Any]:
    return {"error_code": 0, "brokers": [{"no such field": 1}]}


@pytest.mark.parametrize("handler", [failing, unbuildable])
async def test_a_failing_handler_is_answered_unknown_server_error(monkeypatch: pytest.MonkeyPatch, handler) -> None:
    monkeypatch.setitem(dispatch.SERVED, 60, KafkaApi(60, 0, 2, handler))
    frame = parse(request_frame(DescribeClusterRequest(include_cluster_authorized_operations=False), 9)[4:])
    node = SimpleNamespace(config=SimpleNamespace(node_id=1))
    answer = await dispatch.answer(frame, RequestContext(node, "PLAINTEXT", "c", None, 0))  # type: ignore[arg-type]
    assert answer is not None
    correlation, response = read_response(answer[4:], DescribeClusterResponse)
    assert (correlation, response.error_code, response.brokers) == (9, KioErrorCode.unknown_server_error, ())
