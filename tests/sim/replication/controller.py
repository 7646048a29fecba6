"""SimController: the real `QuorumController` without a Raft quorum under it.

Every record it produces is committed at once (its speculative metadata is the committed state),
which is what a healthy quorum looks like to brokers; the quorum itself is simulated elsewhere
(tests/sim). Leader election (ISR, then ELR, then the recovery election from reported log ends),
fencing after `broker.session.timeout.ms`, ISR and ELR removal of re-registering brokers and
AlterPartition with partition epochs are all the controller's own code.
"""

from __future__ import annotations

import random
from typing import Any

from controller.controller_api import (
    CreatableTopic,
    CreateTopicsRequest,
)
from controller.metadata import ClusterMetadata, PartitionRegistration
from controller.quorum_controller import ControllerConfig, QuorumController
from storage.checkpoint import TopicPartition
from storage.error_codes import ErrorCode

TOPIC = "orders"
LISTENER = "PLAINTEXT"
CLUSTER_ID = "replication-sim"


def endpoints(broker_id: int) -> dict[str, str]:
    return {LISTENER: f"broker-{broker_id}:9092"}


def incarnation_id(broker_id: int, incarnation: int) -> str:
    return f"broker-{broker_id}-incarnation-{incarnation}"


class SimController:
    def __init__(self, seed: int, session_timeout_ms: int, now_ms: int) -> None:
        self.controller = QuorumController(ClusterMetadata(), random.Random(seed), now_ms, 0,
                                           ControllerConfig(broker_session_timeout_ms=session_timeout_ms))

    @property
    def metadata(self) -> ClusterMetadata:
        return self.controller.metadata

    def handle(self, request: Any, now_ms: int) -> Any:
        return self.controller.handle(request, now_ms).response

    def create_topic(self, assignments: dict[int, tuple[int, ...]], configs: dict[str, str], now_ms: int) -> None:
        """Create the topic (the admin's request, answered at once)."""
        topic = CreatableTopic(TOPIC, assignments=assignments, configs=configs)
        response = self.handle(CreateTopicsRequest((topic,)), now_ms)
        assert response.topics[0].error_code == ErrorCode.NONE, response

    @property
    def topic_id(self) -> str:
        topic_id = self.metadata.topic_id(TOPIC)
        assert topic_id is not None
        return topic_id

    def partition(self, topic_partition: TopicPartition) -> PartitionRegistration:
        state = self.metadata.partition(self.topic_id, topic_partition.partition)
        assert state is not None, topic_partition
        return state

    def partitions(self) -> dict[TopicPartition, PartitionRegistration]:
        return {TopicPartition(TOPIC, index): state
                for index, state in enumerate(self.metadata.partitions(self.topic_id))}

    def is_active(self, broker_id: int) -> bool:
        broker = self.metadata.broker(broker_id)
        return broker is not None and broker.active
