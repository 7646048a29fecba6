"""KIP-392 replica selection on a leader: which replica a consumer in a given rack should read from.

Kafka's RackAwareReplicaSelector: a consumer that names its rack is sent to a live in-sync replica in
that rack (first in ISR order), unless the leader itself is in that rack (then it reads here, as the
selector prefers the leader). A replica that is not an ISR member may lag; a fenced or shutting-down
one may not serve; so neither is chosen.
"""

from __future__ import annotations

from replication.broker_ready import NO_PREFERRED_READ_REPLICA
from replication.metadata_view import MetadataView


def preferred_read_replica(metadata: MetadataView, broker_id: int, broker_rack: str | None,
                           isr: tuple[int, ...], rack_id: str) -> int:
    """The replica a consumer in `rack_id` should fetch from, or NO_PREFERRED_READ_REPLICA (here)."""
    if not rack_id or broker_rack == rack_id:
        return NO_PREFERRED_READ_REPLICA
    for replica in isr:
        broker = metadata.broker(replica)
        if replica != broker_id and broker is not None and broker.active and broker.rack == rack_id:
            return replica
    return NO_PREFERRED_READ_REPLICA
