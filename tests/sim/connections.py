"""SimConnections: how the connections Raft's messages travel over fail, as TCP's do (README,
"Failover after kill -9"), for every simulation that runs the quorum (tests/sim, tests/sim/replication).

A fetch or quorum probe that reaches the host of a down node is refused: the sender's transport
reports `Unreachable(refused=True)` (node/raft_transport.py), and a follower whose leader refuses
stands soon (controller/raft.py, "A refused leader"). A crash also closes the crashed node's
connections: a peer whose last fetch it took hears of the close (FIN or RST, a packet like any
other: the simulator sends it over its network, so a cut link loses it) and reports that fetch,
`Unreachable(refused=False)`; its retry is then refused. Other Raft messages to a down node are
lost (its transport reports nothing the core acts on); a cut link drops (a time-out: the fetch
timeout decides); a paused node's kernel accepts and holds. The simulators own the timing: this
class only decides.
"""

from __future__ import annotations

from controller.raft import Raft
from controller.raft_messages import FetchRequest, FetchSnapshotRequest, Message, QuorumProbeRequest, Role, Unreachable


class SimConnections:
    """The fetch each connection last delivered (see the module docstring). State: (source,
    destination) -> the correlation id of the last fetch delivered over that link's connection.
    Owner: a Simulation, which calls `arrived` as each Raft message reaches its destination's host
    and `crashed` as a node crashes."""

    def __init__(self) -> None:
        self.fetches_delivered: dict[tuple[int, int], int] = {}

    def arrived(self, message: Message, up: bool) -> Unreachable | None:
        """A Raft message reaches its destination's host (`up`: its process runs, maybe paused). The
        refusal its sender's transport reports, if the process is gone; else None, and a fetch is
        the connection's last delivered one."""
        body = message.body
        if not up:
            if isinstance(body, FetchRequest | FetchSnapshotRequest | QuorumProbeRequest):
                return Unreachable(message.destination_id, body.correlation_id, refused=True)
            return None
        if isinstance(body, FetchRequest | FetchSnapshotRequest):
            self.fetches_delivered[(message.source_id, message.destination_id)] = body.correlation_id
        return None

    def crashed(self, node_id: int) -> list[tuple[int, Unreachable]]:
        """`node_id` crashed: (peer, what its transport reports) for each peer whose last fetch the
        node took, in peer order; the node's own connections are forgotten (nobody is left to hear
        of them)."""
        closes = []
        for source_id, destination_id in sorted(self.fetches_delivered):
            if node_id not in (source_id, destination_id):
                continue
            correlation_id = self.fetches_delivered.pop((source_id, destination_id))
            if destination_id == node_id:
                closes.append((source_id, Unreachable(destination_id, correlation_id, refused=False)))
        return closes


def refused_by_leader(raft: Raft, event: Unreachable) -> bool:
    """The refusal is of a follower's fetch to its own leader (campaigns count these: each one is an
    election that does not wait out the fetch timeout)."""
    return event.refused and raft.role is Role.FOLLOWER and raft.leader_id == event.destination_id
