"""BrokerLease: until when this broker may tell followers to cut their logs (not in Kafka).

The lifecycle core grants it from the heartbeats the controller answers unfenced and says why it
is safe (controller/broker_lifecycle.py, "The lease"); the broker core (`ReplicaManager`) keeps the
one object of its process, and every partition core reads it. A leader without a lease answers a
follower fetch that would make the follower truncate (a diverging epoch, OFFSET_OUT_OF_RANGE) with
NOT_LEADER_OR_FOLLOWER: the controller may have moved its leadership while it could not hear about
it, and the new leader may have committed the records that the answer would cut. The rest of its
leadership goes on (Kafka's static stability: brokers cut off from every controller keep
replicating): its high watermark counts the ISR it last had, which holds the replica the
controller elected next, so nothing it acknowledges is missing there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class BrokerLease:
    """`until_ms`: monotonic time the lease holds to (inclusive); -1 while there is none."""

    until_ms: int = -1

    def holds(self, now_ms: int) -> bool:
        return now_ms <= self.until_ms
