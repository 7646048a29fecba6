"""QuorumConfig: who the voters are and the quorum's timeouts, with Kafka's keys and defaults.

Kafka's `QuorumConfig` (raft/src/main/java/org/apache/kafka/raft/QuorumConfig.java) names:

| key                                       | field                       | Kafka default |
|-------------------------------------------|-----------------------------|---------------|
| controller.quorum.voters                  | voters                      | (required)    |
| controller.quorum.election.timeout.ms     | election_timeout_ms         | 1000          |
| controller.quorum.fetch.timeout.ms        | fetch_timeout_ms            | 2000          |
| controller.quorum.election.backoff.max.ms | election_backoff_max_ms     | 1000          |
| controller.quorum.request.timeout.ms      | request_timeout_ms          | 2000          |
| controller.quorum.retry.backoff.ms        | retry_backoff_ms            | 20            |
| controller.quorum.fetch.max.wait.ms       | fetch_max_wait_ms           | 500 (*)       |
| controller.quorum.fetch.max.bytes         | fetch_bytes_max             | 8 MiB (*)     |
| metadata.log.max.records.between.snapshots| snapshot_interval_records   | 20000 (**)    |
| controller.quorum.proposals.max           | proposals_pending_max       | 10000 (**)    |

(*) KafkaRaftClient constants, not configs in Kafka. (**) Our keys: Kafka snapshots by bytes
(`metadata.log.max.record.bytes.between.snapshots`) or time; a record count is simpler to reason
about in simulation and bounds the log just as well for small metadata records.

`controller.quorum.voters` is `id@host:port` entries separated by commas
(`1@ctrl1:9093,2@ctrl2:9093,3@ctrl3:9093`). Ids are non-negative and unique; a node whose id is
not a voter is an observer: it fetches and applies the committed log but never votes and never
counts towards a majority.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

VOTERS_KEY = "controller.quorum.voters"


class QuorumConfigError(ValueError):
    """A quorum key is unknown or its value does not parse; the message names key and value."""


@dataclass(frozen=True, slots=True)
class VoterEndpoint:
    """One `id@host:port` entry of `controller.quorum.voters`."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """The static quorum: voter ids and endpoints, timeouts (ms) and bounds. Immutable."""

    voters: Mapping[int, VoterEndpoint] = field(default_factory=dict)
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500
    fetch_bytes_max: int = 8 * 1024 * 1024
    snapshot_interval_records: int = 20_000
    proposals_pending_max: int = 10_000

    def __post_init__(self) -> None:
        if not self.voters:
            raise QuorumConfigError(f"{VOTERS_KEY} is empty; give at least one id@host:port")
        for name in ("election_timeout_ms", "fetch_timeout_ms", "request_timeout_ms", "fetch_bytes_max",
                     "snapshot_interval_records", "proposals_pending_max"):
            if getattr(self, name) < 1:
                raise QuorumConfigError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("election_backoff_max_ms", "retry_backoff_ms", "fetch_max_wait_ms"):
            if getattr(self, name) < 0:
                raise QuorumConfigError(f"{name}={getattr(self, name)} must be >= 0")
        if self.fetch_max_wait_ms >= self.request_timeout_ms:
            # Kafka's rule for replica.fetch.wait.max.ms and replica.socket.timeout.ms: a parked fetch
            # must be answered before the follower gives up on it, or no fetch ever completes.
            raise QuorumConfigError(
                f"fetch_max_wait_ms={self.fetch_max_wait_ms} must be below request_timeout_ms="
                f"{self.request_timeout_ms}; lower controller.quorum.fetch.max.wait.ms"
            )

    @property
    def voter_ids(self) -> frozenset[int]:
        return frozenset(self.voters)

    @property
    def majority(self) -> int:
        """How many voters make a majority: floor(n / 2) + 1."""
        return len(self.voters) // 2 + 1

    def is_voter(self, node_id: int) -> bool:
        return node_id in self.voters

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], base: QuorumConfig | None = None) -> QuorumConfig:
        """Build from Kafka-style keys over `base` (or the defaults); unknown keys are errors."""
        changes: dict[str, Any] = {}
        for key, raw in properties.items():
            parser = _PARSERS.get(key)
            if parser is None:
                raise QuorumConfigError(f"unknown quorum config {key!r}; known keys: {', '.join(sorted(_PARSERS))}")
            name, parse = parser
            changes[name] = parse(key, raw)
        if base is None:
            if "voters" not in changes:
                raise QuorumConfigError(f"{VOTERS_KEY} is required, e.g. 1@ctrl1:9093,2@ctrl2:9093,3@ctrl3:9093")
            return cls(**changes)
        return dataclasses.replace(base, **changes)


def parse_voters(text: str) -> dict[int, VoterEndpoint]:
    """Parse `1@host:9093,2@host:9094` into {id: endpoint}, in the order given."""
    voters: dict[int, VoterEndpoint] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        endpoint = _parse_voter(entry)
        if endpoint.node_id in voters:
            raise QuorumConfigError(f"{VOTERS_KEY}: voter id {endpoint.node_id} appears twice in {text!r}")
        voters[endpoint.node_id] = endpoint
    if not voters:
        raise QuorumConfigError(f"{VOTERS_KEY}={text!r} names no voter; use id@host:port,...")
    return voters


def _parse_voter(entry: str) -> VoterEndpoint:
    node_text, at, address = entry.partition("@")
    host, colon, port_text = address.rpartition(":")
    if not at or not colon or not host or not node_text.isdigit() or not port_text.isdigit():
        raise QuorumConfigError(f"{VOTERS_KEY}: {entry!r} is not id@host:port (e.g. 1@ctrl1:9093)")
    port = int(port_text)
    if not 0 < port < 65536:
        raise QuorumConfigError(f"{VOTERS_KEY}: port {port} of {entry!r} is outside 1..65535")
    return VoterEndpoint(int(node_text), host.strip("[]"), port)


def _integer(key: str, raw: Any) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise QuorumConfigError(f"{key}={raw!r} is not an integer") from None


def _voters(key: str, raw: Any) -> dict[int, VoterEndpoint]:
    return parse_voters(str(raw))


_PARSERS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    VOTERS_KEY: ("voters", _voters),
    "controller.quorum.election.timeout.ms": ("election_timeout_ms", _integer),
    "controller.quorum.fetch.timeout.ms": ("fetch_timeout_ms", _integer),
    "controller.quorum.election.backoff.max.ms": ("election_backoff_max_ms", _integer),
    "controller.quorum.request.timeout.ms": ("request_timeout_ms", _integer),
    "controller.quorum.retry.backoff.ms": ("retry_backoff_ms", _integer),
    "controller.quorum.fetch.max.wait.ms": ("fetch_max_wait_ms", _integer),
    "controller.quorum.fetch.max.bytes": ("fetch_bytes_max", _integer),
    "metadata.log.max.records.between.snapshots": ("snapshot_interval_records", _integer),
    "controller.quorum.proposals.max": ("proposals_pending_max", _integer),
}
