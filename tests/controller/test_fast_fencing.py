"""Fast fencing of a dead broker (README, "Failover after kill -9"): the active controller's own probe of a
broker's inter-broker listener, refused after the broker's last heartbeat reached it, fences the
broker at once; any refusal that cannot prove the process holding the epoch is gone changes
nothing, so those keep the session-timeout path."""

from __future__ import annotations

from controller.controller_api import BrokerConnectionRefused, BrokerProbe
from controller.quorum_controller import ControllerConfig
from tests.controller.metadata_harness import Harness


def cluster() -> Harness:
    harness = Harness(0, ControllerConfig(probe_listener_name="PLAINTEXT"))
    for broker_id in (1, 2, 3):
        harness.add_broker(broker_id)
    harness.create_topic("t", assignments={0: (1, 2, 3)})
    return harness


def refused(harness: Harness, broker_id: int, attempted_ms: int, epoch: int | None = None) -> BrokerConnectionRefused:
    return BrokerConnectionRefused(broker_id, harness.broker_epochs[broker_id] if epoch is None else epoch,
                                   attempted_ms)


def test_a_probe_refused_after_the_last_heartbeat_fences_the_broker_and_moves_its_leadership() -> None:
    harness = cluster()
    harness.heartbeat_all(100)
    attempted_ms = harness.now_ms + 1
    response = harness.run(refused(harness, 1, attempted_ms), advance_ms=2)
    assert response.fenced_broker_ids == (1,)
    assert harness.committed.broker(1).fenced
    state = harness.partition("t")
    assert state.leader == 2 and 1 not in state.isr and state.leader_epoch == 1


def test_a_refusal_no_later_than_the_last_heartbeat_proves_nothing() -> None:
    """The heartbeat shows the process was alive after the attempt: the refusal may predate it."""
    harness = cluster()
    attempted_ms = harness.now_ms + 50
    harness.heartbeat_all(50)
    response = harness.run(refused(harness, 1, attempted_ms), advance_ms=1)
    assert response.fenced_broker_ids == ()
    assert harness.committed.broker(1).active
    assert harness.partition("t").leader == 1


def test_a_refusal_for_an_older_broker_epoch_is_ignored() -> None:
    """The broker registered again since: the probe was of the registration it left."""
    harness = cluster()
    old_epoch = harness.broker_epochs[1]
    harness.register(1)
    harness.heartbeat(1)
    before = harness.committed.last_applied_offset
    response = harness.run(refused(harness, 1, harness.now_ms + 1, epoch=old_epoch), advance_ms=5)
    assert response.fenced_broker_ids == ()
    assert harness.committed.last_applied_offset == before


def test_a_refusal_for_a_fenced_broker_writes_nothing() -> None:
    harness = cluster()
    harness.run(refused(harness, 1, harness.now_ms + 1), advance_ms=1)
    before = harness.committed.last_applied_offset
    response = harness.run(refused(harness, 1, harness.now_ms + 1), advance_ms=1)
    assert response.fenced_broker_ids == ()
    assert harness.committed.last_applied_offset == before


def test_a_new_controller_takes_no_refusal_from_before_its_office() -> None:
    """Taking office counts every broker as heard from now (reset_to)."""
    harness = cluster()
    attempted_ms = harness.now_ms + 1
    harness.now_ms += 10
    harness.controller.reset_to(harness.committed, harness.now_ms, harness.committed.last_applied_offset + 1)
    response = harness.run(refused(harness, 1, attempted_ms), advance_ms=1)
    assert response.fenced_broker_ids == ()


def test_probes_cover_every_unfenced_broker_on_the_inter_broker_listener_only_when_enabled() -> None:
    harness = cluster()
    harness.run(refused(harness, 3, harness.now_ms + 1), advance_ms=1)
    assert harness.controller.broker_probes() == (
        BrokerProbe(1, harness.broker_epochs[1], "broker1:9092"),
        BrokerProbe(2, harness.broker_epochs[2], "broker2:9092"),
    )
    disabled = Harness(0)
    disabled.add_broker(1)
    assert disabled.controller.broker_probes() == ()
