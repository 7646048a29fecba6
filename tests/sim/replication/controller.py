"""ClusterView: the cluster metadata as the simulation's clients and checks read it, and the names
(topic, listener, endpoints, incarnation ids) the simulated cluster uses.

The metadata lives in the controller quorum (`quorum.py`: real Raft, office and controller on the
dedicated controller nodes). Every node applies only committed records, so each node's metadata is a
prefix of one committed history; the view reads the most advanced one among the nodes that are up
(the freshest that anyone knows), and keeps the last one it saw while every node is down.
"""

from __future__ import annotations

from controller.metadata import ClusterMetadata, PartitionRegistration
from tests.sim.replication.quorum import CONTROLLER_IDS, SimQuorum
from wire.topic_partition import TopicPartition

TOPIC = "orders"
LISTENER = "PLAINTEXT"
CLUSTER_ID = "replication-sim"


def endpoints(broker_id: int) -> dict[str, str]:
    return {LISTENER: f"broker-{broker_id}:9092"}


def incarnation_id(broker_id: int, incarnation: int) -> str:
    return f"broker-{broker_id}-incarnation-{incarnation}"


class ClusterView:
    """The freshest committed metadata of the quorum (see the module docstring)."""

    def __init__(self, quorum: SimQuorum) -> None:
        self.quorum = quorum
        self._last = ClusterMetadata()

    @property
    def metadata(self) -> ClusterMetadata:
        for node_id in CONTROLLER_IDS:
            metadata = self.quorum.metadata(node_id)
            if metadata is not None and metadata.metadata_offset > self._last.metadata_offset:
                self._last = metadata
        return self._last

    @property
    def topic_id(self) -> str:
        topic_id = self.metadata.topic_id(TOPIC)
        assert topic_id is not None, "the topic is not created yet"
        return topic_id

    def partition(self, topic_partition: TopicPartition) -> PartitionRegistration:
        metadata = self.metadata
        topic_id = metadata.topic_id(topic_partition.topic)
        assert topic_id is not None, f"{topic_partition.topic} is not created yet"
        state = metadata.partition(topic_id, topic_partition.partition)
        assert state is not None, topic_partition
        return state

    def is_active(self, broker_id: int) -> bool:
        broker = self.metadata.broker(broker_id)
        return broker is not None and broker.active
