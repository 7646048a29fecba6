"""What a Kafka API handler is: the types the area modules (metadata, produce, ...) share.

A handler takes the decoded request (kio's entity of the version the client sent) and answers with
plain values (node/kafka/entities.py builds the response entity of that version), or None for a
request Kafka answers with nothing (a Produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from node.node import Node


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asks and how: the node serving it, the listener, the client's id and host, the version."""

    node: Node
    listener: str
    client_id: str | None
    client_host: str | None
    api_version: int


Handler = Callable[[RequestContext, Any], Awaitable[Mapping[str, Any] | None]]


class CloseConnection(Exception):
    """Kafka closes the connection instead of answering: an acks=0 Produce that failed (the
    producer, which expects no answer, learns of the failure so and refreshes its metadata)."""


@dataclass(frozen=True, slots=True)
class KafkaApi:
    """An API key, the versions of it we serve (advertised in ApiVersions) and its handler."""

    key: int
    min_version: int
    max_version: int
    handle: Handler
