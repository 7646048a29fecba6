"""`/metrics` in Prometheus text format (prometheus-client), one registry per node.

Request counters and latencies are recorded as requests are served; replica gauges (LEO, HW,
logStartOffset, ISR size, under-replicated, under-min-ISR) and quorum gauges are read from the
node's state at scrape time, so nothing is kept twice. A controller-only node has no replica part
(as Kafka's controller has no ReplicaManager metrics). Names follow Kafka's JMX metrics where one
exists (e.g. UnderReplicatedPartitions, LogEndOffset), in Prometheus style.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LOOP_LAG_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# The p99 gauge covers the last 1,000 probe wake-ups: 10 s at node/loop_lag.py's 10 ms interval.
LOOP_LAG_WINDOW = 1000


@dataclass(frozen=True, slots=True)
class ReplicaMetrics:
    """One local replica's figures at scrape time."""

    topic: str
    partition: int
    is_leader: bool
    log_end_offset: int
    high_watermark: int
    log_start_offset: int
    isr_size: int
    under_replicated: bool
    under_min_isr: bool
    size_bytes: int


@dataclass(frozen=True, slots=True)
class QuorumMetrics:
    node_id: int
    leader_id: int
    epoch: int
    metadata_offset: int
    is_active_controller: bool


class _StateCollector(Collector):
    def __init__(self, replicas: Callable[[], Iterable[ReplicaMetrics]] | None,
                 quorum: Callable[[], QuorumMetrics]) -> None:
        self._replicas = replicas
        self._quorum = quorum

    def collect(self) -> Iterator[Metric]:
        if self._replicas is not None:
            yield from self._replica_gauges(self._replicas())
        yield from self._quorum_gauges(self._quorum())

    @staticmethod
    def _replica_gauges(replicas: Iterable[ReplicaMetrics]) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        gauges = {
            "log_end_offset": GaugeMetricFamily("tributary_log_end_offset", "Log end offset (LEO)", labels=labels),
            "high_watermark": GaugeMetricFamily("tributary_high_watermark", "High watermark", labels=labels),
            "log_start_offset": GaugeMetricFamily("tributary_log_start_offset", "logStartOffset", labels=labels),
            "size_bytes": GaugeMetricFamily("tributary_log_size_bytes", "Bytes in the partition's segments",
                                            labels=labels),
            "is_leader": GaugeMetricFamily("tributary_replica_is_leader", "1 if this node leads the partition",
                                           labels=labels),
            "isr_size": GaugeMetricFamily("tributary_isr_size", "In-sync replicas (leader only)", labels=labels),
            "under_replicated": GaugeMetricFamily(
                "tributary_under_replicated", "1 if the ISR is smaller than the replica set (leader only)",
                labels=labels),
            "under_min_isr": GaugeMetricFamily(
                "tributary_under_min_isr", "1 if the ISR is smaller than min.insync.replicas (leader only)",
                labels=labels),
        }
        under_replicated = 0
        for replica in replicas:
            values = [replica.topic, str(replica.partition)]
            for name, gauge in gauges.items():
                gauge.add_metric(values, float(getattr(replica, name)))
            under_replicated += replica.is_leader and replica.under_replicated
        yield from gauges.values()
        yield GaugeMetricFamily("tributary_under_replicated_partitions",
                                "Partitions this node leads whose ISR is short (Kafka UnderReplicatedPartitions)",
                                value=under_replicated)

    @staticmethod
    def _quorum_gauges(quorum: QuorumMetrics) -> Iterator[Metric]:
        yield GaugeMetricFamily("tributary_quorum_leader_id", "Active controller id (-1: none known)",
                                value=quorum.leader_id)
        yield GaugeMetricFamily("tributary_quorum_epoch", "Raft epoch this node is in", value=quorum.epoch)
        yield GaugeMetricFamily("tributary_metadata_offset", "Last applied metadata log offset",
                                value=quorum.metadata_offset)
        yield GaugeMetricFamily("tributary_active_controller", "1 if this node is the active controller",
                                value=int(quorum.is_active_controller))


class _LoopLagCollector(Collector):
    """The p99 and maximum of the recent loop-lag samples, computed at scrape time."""

    def __init__(self, recent: deque[float]) -> None:
        self._recent = recent

    def collect(self) -> Iterator[Metric]:
        samples = sorted(self._recent)
        p99 = samples[min(len(samples) - 1, len(samples) * 99 // 100)] if samples else 0.0
        yield GaugeMetricFamily("tributary_event_loop_lag_p99_seconds",
                                f"p99 event-loop lag over the last {LOOP_LAG_WINDOW} probes", value=p99)
        yield GaugeMetricFamily("tributary_event_loop_lag_max_seconds",
                                f"Largest event-loop lag over the last {LOOP_LAG_WINDOW} probes",
                                value=samples[-1] if samples else 0.0)


class NodeMetrics:
    """The registry of one node: `observe_request` from the server, state gauges at scrape time.
    `replicas` is None on a node without a broker."""

    def __init__(self, replicas: Callable[[], Iterable[ReplicaMetrics]] | None,
                 quorum: Callable[[], QuorumMetrics]) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter("tributary_requests", "Requests served, by API and error",
                                 ["api", "error"], registry=self.registry)
        self._latency = Histogram("tributary_request_latency_seconds", "Time to answer a request, by API",
                                  ["api"], buckets=LATENCY_BUCKETS, registry=self.registry)
        # The labelled children per (api, error), looked up once: `labels()` validates and locks on
        # every call. Bounded by the APIs times the error codes.
        self._request_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        self.registry.register(_StateCollector(replicas, quorum))
        self._loop_lag = Histogram("tributary_event_loop_lag_seconds",
                                   "How late the loop-lag probe woke (time the loop ran without yielding)",
                                   buckets=LOOP_LAG_BUCKETS, registry=self.registry)
        self._loop_lag_recent: deque[float] = deque(maxlen=LOOP_LAG_WINDOW)
        self.registry.register(_LoopLagCollector(self._loop_lag_recent))

    def observe_request(self, api: str, error: str, seconds: float) -> None:
        children = self._request_children.get((api, error))
        if children is None:
            children = self._requests.labels(api, error), self._latency.labels(api)
            self._request_children[api, error] = children
        requests, latency = children
        requests.inc()
        latency.observe(seconds)

    def observe_loop_lag(self, seconds: float) -> None:
        self._loop_lag.observe(seconds)
        self._loop_lag_recent.append(seconds)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
