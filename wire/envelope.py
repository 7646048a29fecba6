"""The envelope of node-to-node messages whose shapes a core defines (Raft messages, controller requests)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wire.codec import ProtocolError
from wire.error_codes import ErrorCode


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message whose shape a core defines (a Raft message, a controller request): `type` is its
    class name, looked up in the receiver's table of known classes. `source_id` and
    `source_address` say who sent it and where answers go (a Raft leader learns an observer's
    address this way; voters' addresses come from `controller.quorum.voters`). `cluster_id` is the
    sender's: a node refuses a request from another cluster (INCONSISTENT_CLUSTER_ID), so a node
    pointed at the wrong voters cannot vote, lead or register there."""

    type: str
    body: Mapping[str, Any]
    source_id: int = -1
    source_address: str = ""
    cluster_id: str = ""

    def require_cluster(self, cluster_id: str) -> None:
        """ProtocolError (INCONSISTENT_CLUSTER_ID) unless this comes from a node of `cluster_id`."""
        if self.cluster_id != cluster_id:
            raise ProtocolError(f"{self.type} from node {self.source_id} of cluster {self.cluster_id!r}; this node "
                                f"is in cluster {cluster_id!r}: check controller.quorum.voters on both nodes",
                                ErrorCode.INCONSISTENT_CLUSTER_ID)
