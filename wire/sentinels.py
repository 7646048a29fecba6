"""Kafka's sentinel values on the wire: "no leader", "no epoch", the special ListOffsets timestamps.

Each is defined here once; every layer reads the same names (DESIGN §1).
"""

from __future__ import annotations

NO_LEADER = -1
"""The leader of a partition that has none (offline), as Kafka's `LeaderConstants.NO_LEADER`;
a follower told it stops fetching."""

NO_EPOCH = -1
"""An epoch field left unset (Kafka's -1, e.g. `currentLeaderEpoch`): no fencing check."""

UNDEFINED_EPOCH = -1
"""Kafka's `OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH`: no epoch at or below the one asked for."""

UNDEFINED_EPOCH_OFFSET = -1
"""Kafka's `OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET`: the end offset of an unknown epoch."""

CONSUMER_REPLICA_ID = -1
"""The `replica_id` of a consumer's fetch (Kafka's `FetchRequest.CONSUMER_REPLICA_ID`); a follower
sends its broker id."""

# Special timestamps of ListOffsets (Kafka's `ListOffsetsRequest` constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734: the record with the largest timestamp

NO_VALUE = -1
"""Kafka's "use the default" for `num_partitions` and `replication_factor`, and "unknown" elsewhere."""
