"""`NodeMetrics.observe_request` counts each (api, error) apart, with its labelled children cached."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from node.metrics import NodeMetrics, QuorumMetrics


def test_requests_are_counted_per_api_and_error_and_timed_per_api() -> None:
    metrics = NodeMetrics(None, lambda: QuorumMetrics(1, 1, 1, 0, True))
    for api, error, seconds in (("produce", "NONE", 0.0002), ("produce", "NONE", 0.002),
                                ("produce", "NOT_LEADER_OR_FOLLOWER", 0.0002), ("fetch", "NONE", 0.02)):
        metrics.observe_request(api, error, seconds)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render()[0].decode())
        for sample in family.samples
    }
    assert samples[("tributary_requests_total", (("api", "produce"), ("error", "NONE")))] == 2
    assert samples[("tributary_requests_total", (("api", "produce"), ("error", "NOT_LEADER_OR_FOLLOWER")))] == 1
    assert samples[("tributary_requests_total", (("api", "fetch"), ("error", "NONE")))] == 1
    assert samples[("tributary_request_latency_seconds_count", (("api", "produce"),))] == 3
    assert samples[("tributary_request_latency_seconds_bucket", (("api", "produce"), ("le", "0.0005")))] == 2
    assert samples[("tributary_request_latency_seconds_count", (("api", "fetch"),))] == 1
