"""Test harness: an active `QuorumController` and a follower's committed `ClusterMetadata`, joined
by the record codec as Raft would join them (every record encoded, decoded and applied in order).

`commit` checks on every step that the follower ends in exactly the controller's speculative
state, that the metadata invariants hold, and that the across-time history stays consistent.
"""

from __future__ import annotations

import random
from typing import Any

from controller.metadata import ClusterMetadata, MetadataHistory, PartitionRegistration, check_invariants
from controller.metadata_records import encode_record
from controller.quorum_controller import ControllerConfig, ControllerResult, QuorumController
from wire.broker_lifecycle import BrokerHeartbeatRequest, BrokerRegistrationRequest
from wire.error_codes import ErrorCode
from wire.topics import CreatableTopic, CreateTopicsRequest

RAFT_EPOCH = 3


class Harness:
    """A controller whose every result is committed at once (unless the test says otherwise)."""

    def __init__(self, seed: int = 0, config: ControllerConfig | None = None, now_ms: int = 0) -> None:
        self.committed = ClusterMetadata()
        self.rng = random.Random(seed)
        self.controller = QuorumController(self.committed, self.rng, now_ms, 0, config)
        self.now_ms = now_ms
        self.broker_epochs: dict[int, int] = {}
        self.history = MetadataHistory()

    def commit(self, result: ControllerResult[Any]) -> Any:
        """Apply the result's records to the follower through the codec; check both sides agree."""
        assert result.base_offset > self.committed.last_applied_offset
        for position, record in enumerate(result.records):
            self.committed.apply(result.base_offset + position, RAFT_EPOCH, encode_record(record))
        assert self.committed == self.controller.metadata
        assert self.committed.snapshot() == self.controller.metadata.snapshot()
        assert check_invariants(self.committed) == []
        assert self.history.observe("follower", self.committed) == []
        return result.response

    def run(self, request: Any, advance_ms: int = 0) -> Any:
        """Handle `request` `advance_ms` later and commit what it produced."""
        self.now_ms += advance_ms
        return self.commit(self.controller.handle(request, self.now_ms))

    def tick(self, advance_ms: int = 0) -> Any:
        self.now_ms += advance_ms
        return self.commit(self.controller.tick(self.now_ms))

    def register(self, broker_id: int, rack: str | None = None, incarnation: str | None = None) -> int:
        """Register a broker (fenced) and return its epoch."""
        request = BrokerRegistrationRequest(
            broker_id, incarnation or f"incarnation-{broker_id}", {"PLAINTEXT": f"broker{broker_id}:9092"}, rack
        )
        response = self.run(request)
        assert response.error_code == ErrorCode.NONE, response
        self.broker_epochs[broker_id] = response.broker_epoch
        return response.broker_epoch

    def heartbeat(self, broker_id: int, advance_ms: int = 0, **flags: bool) -> Any:
        """A heartbeat from a broker that has applied everything committed."""
        request = BrokerHeartbeatRequest(
            broker_id, self.broker_epochs[broker_id], self.committed.last_applied_offset, **flags
        )
        return self.run(request, advance_ms)

    def add_broker(self, broker_id: int, rack: str | None = None) -> int:
        """Register a broker and unfence it with one caught-up heartbeat."""
        epoch = self.register(broker_id, rack)
        response = self.heartbeat(broker_id)
        assert response.error_code == ErrorCode.NONE and not response.is_fenced, response
        return epoch

    def heartbeat_all(self, advance_ms: int = 0, *, except_ids: tuple[int, ...] = ()) -> None:
        self.now_ms += advance_ms
        for broker in self.committed.brokers():
            if not broker.fenced and broker.broker_id not in except_ids:
                self.heartbeat(broker.broker_id)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1, **options: Any) -> str:
        """Create a topic and return its id; with `assignments=...` the counts come from the assignment."""
        if options.get("assignments") is not None:
            partitions = replication_factor = -1
        response = self.run(CreateTopicsRequest((CreatableTopic(name, partitions, replication_factor, **options),)))
        (result,) = response.topics
        assert result.error_code == ErrorCode.NONE, result
        return result.topic_id

    def partition(self, name: str, index: int = 0) -> PartitionRegistration:
        topic_id = self.committed.topic_id(name)
        assert topic_id is not None, name
        state = self.committed.partition(topic_id, index)
        assert state is not None
        return state
