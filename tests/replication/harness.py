"""Helpers for the partition core's unit tests: brokers on temp dirs, batches, and a fetch link.

Like h11's `ConnectionPair`, `fetch_round` joins a follower core to its leader core in memory: the
follower's `Ready.fetch` position becomes a `FollowerFetch`, the leader's answer a
`FetchResponseFromLeader`. Everything is synchronous; time is the `now_ms` each call passes.
"""

from __future__ import annotations

from pathlib import Path

from replication.config import ReplicationConfig
from replication.events import Event, FetchResponseFromLeader, FollowerFetch, MakeFollower, MakeLeader
from replication.lease import BrokerLease
from replication.partition import Partition
from replication.ready import Completion, FetchResult, ProduceResult, Ready
from storage.config import LogConfig
from storage.log import Log
from storage.log_manager import LogManager
from storage.records import build_batch_from_values
from wire.topic_partition import TopicPartition

TOPIC_PARTITION = TopicPartition("orders", 0)
LEASE_FOR_EVER_MS = 2**62
REPLICAS = (1, 2, 3)
LAG_MS = 1_000
CONFIG = ReplicationConfig(replica_lag_time_max_ms=LAG_MS, alter_partition_timeout_ms=500,
                           ineligible_replica_backoff_ms=200)


def log_config(**properties: str) -> LogConfig:
    return LogConfig.from_properties({"segment.index.bytes": "4096", "index.interval.bytes": "64", **properties})


class Broker:
    """One broker's copy of the partition: a LogManager on its own directory and the core."""

    def __init__(self, root: Path, broker_id: int, config: LogConfig, now_ms: int = 0) -> None:
        self.broker_id = broker_id
        self.directory = root / f"broker-{broker_id}"
        self.log_config = config
        self.manager = LogManager([self.directory], lambda topic: config, now_ms)
        self.lease = BrokerLease(LEASE_FOR_EVER_MS)  # no controller here: the tests decide who leads
        self.partition = Partition(TOPIC_PARTITION, self.manager, broker_id, CONFIG, self.lease, now_ms, now_ms)
        self.readies: list[Ready] = []
        self.next_request_id = 1

    def handle(self, event: Event, now_ms: int) -> Ready:
        ready = self.partition.handle(event, now_ms, wall_clock_ms=now_ms)
        self.readies.append(ready)
        return ready

    def request_id(self) -> int:
        self.next_request_id += 1
        return self.next_request_id

    @property
    def log(self) -> Log:
        return self.partition.log

    def close(self) -> None:
        self.manager.shutdown(now_ms=0)


def batch(*values: bytes, timestamp_ms: int = 1_000) -> bytes:
    return build_batch_from_values(list(values), timestamp_ms=timestamp_ms)


def make_leader(broker: Broker, epoch: int, isr: tuple[int, ...] = REPLICAS, partition_epoch: int = 0,
                now_ms: int = 0) -> Ready:
    return broker.handle(MakeLeader(epoch, partition_epoch, isr, REPLICAS), now_ms)


def make_follower(broker: Broker, leader_id: int, epoch: int, isr: tuple[int, ...] = REPLICAS,
                  partition_epoch: int = 0, now_ms: int = 0) -> Ready:
    return broker.handle(MakeFollower(leader_id, epoch, partition_epoch, isr, REPLICAS), now_ms)


def fetch_round(leader: Broker, follower: Broker, now_ms: int, broker_epoch: int = -1) -> tuple[Ready, Ready]:
    """One fetch of `follower` from `leader` and its answer; returns both Readies."""
    position = follower.partition.fetch_position()
    assert position is not None, f"broker {follower.broker_id} has nothing to fetch"
    request = FollowerFetch.from_position(position, follower.request_id(), broker_epoch=broker_epoch)
    leader_ready = leader.handle(request, now_ms)
    results = [c for c in leader_ready.completions if isinstance(c, FetchResult) and c.request_id == request.request_id]
    assert len(results) == 1, leader_ready
    follower_ready = follower.handle(FetchResponseFromLeader.from_result(position, results[0]), now_ms)
    return leader_ready, follower_ready


def catch_up(leader: Broker, followers: list[Broker], now_ms: int, rounds: int = 3) -> None:
    """Fetch rounds until every follower has everything (the second round carries the HW)."""
    for _ in range(rounds):
        for follower in followers:
            fetch_round(leader, follower, now_ms)


def produce_results(ready: Ready) -> list[ProduceResult]:
    return [c for c in ready.completions if isinstance(c, ProduceResult)]


def only(completions: tuple[Completion, ...] | list, kind: type) -> object:
    found = [c for c in completions if isinstance(c, kind)]
    assert len(found) == 1, completions
    return found[0]
