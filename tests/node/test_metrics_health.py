"""`/metrics` (Prometheus text) and `/health` of a real node process."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from client.admin import Admin, NewTopic
from client.producer import Producer
from node.dev import DevCluster
from tests.node.cluster_harness import start_cluster, stopped


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("metrics"), 1))


async def write(cluster: DevCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic("measured", 2, 1, {"min.insync.replicas": "1"})])
    async with Producer(cluster.bootstrap) as producer:
        await asyncio.gather(*[await producer.send("measured", b"v", partition=0) for _ in range(5)])


def get(cluster: DevCluster, path: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(f"http://{cluster.nodes[1].address}{path}", timeout=5) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def test_metrics_show_replica_offsets_and_request_counts(node: DevCluster) -> None:
    asyncio.run(write(node))
    status, content_type, text = get(node, "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    partition0 = (("partition", "0"), ("topic", "measured"))
    assert samples[("tributary_log_end_offset", partition0)] == 5
    assert samples[("tributary_high_watermark", partition0)] == 5
    assert samples[("tributary_log_start_offset", partition0)] == 0
    assert samples[("tributary_isr_size", partition0)] == 1
    assert samples[("tributary_under_replicated", partition0)] == 0
    assert samples[("tributary_under_min_isr", partition0)] == 0
    assert samples[("tributary_log_end_offset", (("partition", "1"), ("topic", "measured")))] == 0
    assert samples[("tributary_active_controller", ())] == 1
    assert samples[("tributary_requests_total", (("api", "produce"), ("error", "NONE")))] >= 1
    assert samples[("tributary_request_latency_seconds_count", (("api", "produce"),))] >= 1
    assert samples[("tributary_event_loop_lag_seconds_count", ())] >= 1
    assert ("tributary_event_loop_lag_p99_seconds", ()) in samples


def test_health_says_why_a_node_is_healthy(node: DevCluster) -> None:
    status, content_type, text = get(node, "/health")
    body = json.loads(text)
    assert status == 200 and content_type.startswith("application/json")
    assert body["healthy"] and body["node_id"] == 1 and body["active_controller"] == 1 and body["broker_unfenced"]
