"""The broker lifecycle core: registration (what it claims), heartbeats and fencing, re-registration,
lost answers, controlled shutdown. Method: synchronous, hand-made answers and times; each test
reads the requests the core asks to send."""

from __future__ import annotations

from typing import Any

from controller.broker_lifecycle import (
    BeginControlledShutdown,
    BrokerLifecycle,
    BrokerLifecycleConfig,
    BrokerState,
    ControllerAnswer,
    LifecycleReady,
    LifecycleTick,
    MetadataApplied,
    ShutdownOutcome,
    StartLifecycle,
    StopLifecycle,
)
from wire.broker_lifecycle import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ReplicaLogInfo,
)
from wire.error_codes import ErrorCode

CONFIG = BrokerLifecycleConfig(broker_id=4, endpoints=(("PLAINTEXT", "h:1"),), rack="r", log_dirs=("dir-a",),
                               heartbeat_interval_ms=100, session_timeout_ms=1_000, request_timeout_ms=300)


def started(previous_broker_epoch: int = -1) -> tuple[BrokerLifecycle, LifecycleReady]:
    core = BrokerLifecycle(CONFIG, 0)
    return core, core.handle(StartLifecycle("incarnation-1", previous_broker_epoch), 0)


def request_of(ready: LifecycleReady) -> tuple[int, Any]:
    assert ready.request is not None, ready
    return ready.request


def registered(epoch: int = 10) -> tuple[BrokerLifecycle, LifecycleReady]:
    core, ready = started()
    request_id, _ = request_of(ready)
    ready = core.handle(ControllerAnswer(request_id, BrokerRegistrationResponse(ErrorCode.NONE, None, epoch)), 5)
    return core, ready


def test_registration_claims_the_markers_epoch_and_the_directory_ids() -> None:
    _, ready = started(previous_broker_epoch=7)
    _, request = request_of(ready)
    assert request == BrokerRegistrationRequest(4, "incarnation-1", {"PLAINTEXT": "h:1"}, "r", ("dir-a",), 7)


def test_a_registration_heartbeats_at_once_asking_to_stay_fenced_until_caught_up() -> None:
    core, ready = registered(epoch=10)
    assert ready.registered == 10 and core.broker_epoch == 10
    _, heartbeat = request_of(ready)
    assert heartbeat == BrokerHeartbeatRequest(4, 10, -1, want_fence=True)
    assert core.previous_broker_epoch == 10, "a process that registers again has lost nothing it wrote"


def test_caught_up_asks_to_be_unfenced_at_once_and_reports_offline_log_ends() -> None:
    core, ready = registered()
    request_id, _ = request_of(ready)
    core.handle(ControllerAnswer(request_id, BrokerHeartbeatResponse(ErrorCode.NONE, None, False, True)), 6)
    ends = (ReplicaLogInfo("t", 0, 3, 2, 40),)
    ready = core.handle(MetadataApplied(12, caught_up=True, offline_log_ends=ends), 7)
    _, heartbeat = request_of(ready)
    assert heartbeat == BrokerHeartbeatRequest(4, 10, 12, want_fence=False, replica_log_info=ends)
    ready = core.handle(ControllerAnswer(ready.request[0], BrokerHeartbeatResponse(ErrorCode.NONE, None, True,
                                                                                   False)), 8)
    assert ready.unfenced and ready.state == BrokerState.RUNNING
    assert not core.is_fenced(8)
    assert core.is_fenced(8 + CONFIG.session_timeout_ms + 1), "no unfenced answer within a session"


def test_heartbeats_every_interval_one_in_flight() -> None:
    core, ready = registered()
    request_id, _ = request_of(ready)
    assert core.handle(LifecycleTick(), 50).request is None, "one request in flight"
    ready = core.handle(ControllerAnswer(request_id, BrokerHeartbeatResponse(ErrorCode.NONE)), 60)
    assert ready.request is None and ready.next_tick_ms == 105
    assert request_of(core.handle(LifecycleTick(), 105))[1].broker_epoch == 10


def test_a_lost_answer_is_given_up_at_the_request_timeout_and_a_late_one_ignored() -> None:
    core, ready = registered()
    request_id, _ = request_of(ready)
    ready = core.handle(LifecycleTick(), 5 + CONFIG.request_timeout_ms)
    new_id, _ = request_of(ready)
    assert new_id != request_id
    late = core.handle(ControllerAnswer(request_id, BrokerHeartbeatResponse(ErrorCode.STALE_BROKER_EPOCH)), 400)
    assert core.broker_epoch == 10 and late.request is None, "a late answer changes nothing"


def test_stale_broker_epoch_registers_again_at_once() -> None:
    core, ready = registered()
    request_id, _ = request_of(ready)
    ready = core.handle(ControllerAnswer(request_id, BrokerHeartbeatResponse(ErrorCode.STALE_BROKER_EPOCH)), 6)
    _, request = request_of(ready)
    assert isinstance(request, BrokerRegistrationRequest) and request.previous_broker_epoch == 10
    assert ready.notices and "registering again" in ready.notices[0][1]


def test_refused_registration_is_retried_every_interval_and_noticed() -> None:
    core, ready = started()
    request_id, _ = request_of(ready)
    refusal = BrokerRegistrationResponse(ErrorCode.DUPLICATE_BROKER_REGISTRATION, "another process")
    ready = core.handle(ControllerAnswer(request_id, refusal), 3)
    assert ready.request is None and ready.notices[0][0] == "warning"
    assert isinstance(request_of(core.handle(LifecycleTick(), 100))[1], BrokerRegistrationRequest)


def test_controlled_shutdown_asks_until_handed_over() -> None:
    core, ready = registered()
    request_id, _ = request_of(ready)
    core.handle(ControllerAnswer(request_id, BrokerHeartbeatResponse(ErrorCode.NONE, None, True, False)), 6)
    ready = core.handle(BeginControlledShutdown(5_000), 10)
    request_id, request = request_of(ready)
    assert request == ControlledShutdownRequest(4, 10, -1)
    ready = core.handle(ControllerAnswer(request_id, BrokerHeartbeatResponse(ErrorCode.NONE, None, True, False)), 12)
    assert ready.shutdown is None and ready.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
    ready = core.handle(MetadataApplied(20, caught_up=True), 13)
    request_id, _ = request_of(ready)
    done = BrokerHeartbeatResponse(ErrorCode.NONE, None, True, True, should_shut_down=True)
    ready = core.handle(ControllerAnswer(request_id, done), 14)
    assert ready.shutdown == ShutdownOutcome.HANDED_OVER and ready.state == BrokerState.SHUTTING_DOWN
    assert ready.next_tick_ms is None


def test_controlled_shutdown_gives_up_without_a_controller_for_a_session() -> None:
    core, _ = registered()
    ready = core.handle(BeginControlledShutdown(60_000), 10)
    outcome = None
    for now_ms in range(10, 10 + 2 * CONFIG.session_timeout_ms, 100):
        ready = core.handle(LifecycleTick(), now_ms)
        if ready.shutdown is not None:
            outcome = ready.shutdown
            break
    assert outcome == ShutdownOutcome.NO_CONTROLLER
    assert now_ms - 10 >= CONFIG.session_timeout_ms


def test_an_unregistered_broker_has_nothing_to_hand_over_and_stop_ends_heartbeats() -> None:
    core, _ = started()
    assert core.handle(BeginControlledShutdown(1_000), 1).shutdown == ShutdownOutcome.UNKNOWN
    core, ready = registered()
    ready = core.handle(StopLifecycle(), 9)
    assert ready.state == BrokerState.SHUTTING_DOWN and ready.next_tick_ms is None
    assert core.handle(LifecycleTick(), 10_000).request is None


def test_the_lease_to_lead_runs_a_session_from_sending_the_last_heartbeat_answered_unfenced() -> None:
    core, ready = registered()
    request_id, _ = request_of(ready)
    core.handle(ControllerAnswer(request_id, BrokerHeartbeatResponse(ErrorCode.NONE, None, False, True)), 6)
    ready = core.handle(MetadataApplied(12, caught_up=True), 7)
    assert ready.lease_until_ms == -1, "fenced: no lease"
    unfenced = BrokerHeartbeatResponse(ErrorCode.NONE, None, True, False)
    ready = core.handle(ControllerAnswer(request_of(ready)[0], unfenced), 250)
    assert ready.lease_until_ms == 7 + CONFIG.session_timeout_ms, "from the send: the controller heard it no earlier"
    lost = request_of(ready)[0]  # sent at 250, never answered
    ready = core.handle(LifecycleTick(), 250 + CONFIG.request_timeout_ms)
    assert ready.lease_until_ms == 7 + CONFIG.session_timeout_ms, "a lost answer renews nothing"
    fenced = BrokerHeartbeatResponse(ErrorCode.NONE, None, True, True)
    ready = core.handle(ControllerAnswer(request_of(ready)[0], fenced), 600)
    assert ready.lease_until_ms == -1 and core.is_fenced(600), "fenced by the controller: the lease ends at once"
    assert core.handle(ControllerAnswer(lost, unfenced), 601).lease_until_ms == -1, "a late answer is ignored"


def test_a_controlled_shutdown_keeps_the_lease_until_the_handover() -> None:
    core, ready = registered()
    core.handle(ControllerAnswer(request_of(ready)[0], BrokerHeartbeatResponse(ErrorCode.NONE, None, True, False)), 6)
    ready = core.handle(BeginControlledShutdown(5_000), 20)
    assert ready.lease_until_ms == 5 + CONFIG.session_timeout_ms, "it leads until the controller moves leadership"
    request_id, request = request_of(ready)
    assert isinstance(request, ControlledShutdownRequest)
    ready = core.handle(ControllerAnswer(request_id, BrokerHeartbeatResponse(ErrorCode.NONE, None, True, False)), 30)
    assert ready.lease_until_ms == 20 + CONFIG.session_timeout_ms
    done = BrokerHeartbeatResponse(ErrorCode.NONE, None, True, True, should_shut_down=True)
    ready = core.handle(ControllerAnswer(request_of(core.handle(LifecycleTick(), 120))[0], done), 130)
    assert ready.shutdown == ShutdownOutcome.HANDED_OVER and ready.lease_until_ms == -1
