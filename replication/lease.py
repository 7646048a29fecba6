"""BrokerLease: until when this broker may act as a partition leader (not in Kafka).

The lifecycle core grants it from the heartbeats the controller answers unfenced and says why it
is safe (controller/broker_lifecycle.py, "The lease"); the broker core (`ReplicaManager`) keeps the
one object of its process, and every partition core reads it. A leader without a lease refuses
what only a leader does (produce, follower fetches, OffsetsForLeaderEpoch, DeleteRecords, reads
that require the leader) with NOT_LEADER_OR_FOLLOWER: the controller may have moved its leadership
while it could not hear about it, and a follower it answered might truncate what the new leader
committed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class BrokerLease:
    """`until_ms`: monotonic time the lease holds to (inclusive); -1 while there is none."""

    until_ms: int = -1

    def holds(self, now_ms: int) -> bool:
        return now_ms <= self.until_ms
