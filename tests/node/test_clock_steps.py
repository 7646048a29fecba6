"""A wall clock that steps does not move a node's timeouts (DESIGN §2: two clocks).

Goal: Raft and the controller time elections and broker sessions on the monotonic clock. Had they
used the wall clock, a step back would freeze them (the cores never let time fall, so it would
stand still for as long as the step), and a broker that went silent would stay unfenced, leading
its partitions, for that long. Method: one node in this process (a voter and a broker) with an
injected wall clock; once the broker is unfenced the wall clock steps an hour back and the broker's
heartbeats stop; the controller must fence it within a few sessions (a bounded poll of another
component's state)."""

from __future__ import annotations

import time
from pathlib import Path

from node.config import NodeConfig
from node.node import Node
from tests.node.cluster_harness import eventually, free_port_block

HEARTBEAT_MS = 50
SESSION_MS = 300


async def test_a_wall_clock_step_back_does_not_freeze_broker_sessions(tmp_path: Path) -> None:
    port = free_port_block(1)
    offset_ms = [0]

    def wall_clock_ms() -> int:
        return time.time_ns() // 1_000_000 + offset_ms[0]

    node = Node(NodeConfig.from_properties({
        "node.id": "1", "controller.quorum.voters": f"1@127.0.0.1:{port}",
        "listeners": f"HTTP://127.0.0.1:{port}", "log.dirs": str(tmp_path / "logs"),
        "broker.heartbeat.interval.ms": str(HEARTBEAT_MS), "broker.session.timeout.ms": str(SESSION_MS),
        "controller.quorum.election.timeout.ms": "150", "controller.quorum.fetch.timeout.ms": "500",
    }), clock=wall_clock_ms)
    try:
        await node.start()
        broker = node.broker
        assert broker is not None

        async def unfenced() -> bool:
            return not broker.lifecycle.is_fenced

        await eventually(unfenced, "the broker is unfenced")
        offset_ms[0] -= 3_600_000
        await broker.lifecycle.stop()

        async def fenced() -> bool:
            registration = node.quorum.metadata.broker(1)
            return registration is not None and registration.fenced

        waited_s = await eventually(fenced, "the silent broker is fenced", timeout_s=10 * SESSION_MS / 1000)
        assert waited_s < 5 * SESSION_MS / 1000
    finally:
        await node.stop(controlled=False)
