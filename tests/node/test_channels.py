"""A node talks to other nodes over one set of streams per channel, as Kafka keeps one network
client per purpose: a call that times out closes its stream with every call on it
(client/connection.py), and a Raft fetch held 2 s by a busy controller closed the stream that also
carried every replica fetch to that node, whose partitions then backed off and reopened their fetch
sessions: in a 2,000-partition failover (bench/create_bench.py --failover) acks=all writes to most of
the moved partitions waited 17-62 s. Method: a node built, not started; its channels compared."""

from __future__ import annotations

from node.config import NodeConfig
from node.node import Node


def test_replica_fetches_controller_requests_and_raft_each_have_their_own_streams() -> None:
    node = Node(NodeConfig.from_properties({"node.id": "1", "process.roles": "broker,controller",
                                            "controller.quorum.voters": "1@127.0.0.1:9192"}))
    data_plane = node.connections
    controller_channel = node.quorum._connections
    raft = node.quorum._transport._connections
    assert len({id(data_plane), id(controller_channel), id(raft)}) == 3
