"""Static group membership (KIP-345) from the consumer's side, against the fake node (which runs the
node's own group edge and core): a static consumer closed sends no LeaveGroup, and started again
with the same `group_instance_id` it gets its partitions back in the same generation, the other
member undisturbed; a second consumer with the same instance id fences the first."""

from __future__ import annotations

import asyncio

import pytest

from client.cli_consume import consumer_settings
from client.consumer import Consumer
from client.errors import ERRORS
from tests.client.fake_node import FakeCluster
from wire.api import Api
from wire.error_codes import ErrorCode

SETTINGS = {"group_id": "g", "session_timeout_ms": 6_000, "heartbeat_interval_ms": 50, "retry_backoff_ms": 10}


def static(cluster: FakeCluster, instance: str) -> Consumer:
    consumer = Consumer(cluster.bootstrap, group_instance_id=instance, **SETTINGS)  # type: ignore[arg-type]
    consumer.subscribe(["t"])
    return consumer


async def settled(*consumers: Consumer) -> None:
    """Poll them together until each holds its part of the group's single generation."""
    for _ in range(50):
        await asyncio.gather(*(consumer.poll(timeout_ms=10) for consumer in consumers))
        members = [consumer.member for consumer in consumers]
        if all(member is not None and not member.needs_join for member in members) \
                and len({member.generation_id for member in members if member is not None}) == 1:
            return
    raise AssertionError("the group did not settle")


async def test_a_restarted_static_consumer_gets_its_partitions_back_without_a_rebalance(
        cluster: FakeCluster) -> None:
    a, b = static(cluster, "a"), static(cluster, "b")
    await settled(a, b)
    assert a.member is not None and b.member is not None
    generation, held, b_member = a.member.generation_id, a.assignment(), b.member.member_id
    assert held and not held & b.assignment()
    await a.close()
    assert cluster.requests_of(Api.LEAVE_GROUP) == [], "a static member sends no LeaveGroup on close"
    again = static(cluster, "a")
    try:
        await settled(again, b)
        assert again.member is not None
        assert (again.assignment(), again.member.generation_id) == (held, generation)
        assert (b.member.member_id, b.member.generation_id) == (b_member, generation), "b never rebalanced"
    finally:
        await again.close()
        await b.close()


async def test_a_second_consumer_with_the_same_instance_id_fences_the_first(cluster: FakeCluster) -> None:
    first = static(cluster, "a")
    await settled(first)
    second = static(cluster, "a")
    try:
        await settled(second)
        for _ in range(200):  # the first hears of it at its next heartbeat (every 50 ms)
            if first.member is not None and first.member.needs_join:
                break
            await asyncio.sleep(0.01)
        with pytest.raises(ERRORS[ErrorCode.FENCED_INSTANCE_ID]):
            await first.poll(timeout_ms=10)
    finally:
        await first.close()
        await second.close()


def test_the_cli_takes_group_instance_id_as_a_consumer_property() -> None:
    assert consumer_settings({"group.instance.id": "host-7", "session.timeout.ms": "30000"}) == {
        "group_instance_id": "host-7", "session_timeout_ms": 30_000}
    with pytest.raises(ValueError, match="unknown consumer property"):
        consumer_settings({"group.instanceid": "x"})
