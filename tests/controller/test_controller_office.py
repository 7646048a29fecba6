"""ControllerOffice: when the office is taken and left, which calls wait for it, one Raft batch per
result, answers only after commit, and the ControllerTick cadence.

Method: the office is driven by hand-made events and explicit `now_ms`, with no Raft: a `Log`
stands in for the metadata log as the office sees it (proposals append at its end; `commit`
applies a batch to the committed metadata and completes it), and each test reports Raft's state
to the office as the node's driver would after every step.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from controller.controller_office import (
    CALLS_AWAITING_OFFICE_MAX,
    NEVER_MS,
    ControllerCall,
    ControllerOffice,
    LeftOffice,
    OfficeReady,
    OfficeTick,
    RaftStepped,
    Shutdown,
    TookOffice,
)
from controller.error_responses import is_not_controller
from controller.metadata import ClusterMetadata
from controller.metadata_records import FenceBroker, RegisterBroker, decode_record
from controller.quorum_controller import ControllerConfig
from controller.raft_messages import ProposalCompletion, ProposeBatch, RaftError, Role
from wire.broker_lifecycle import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from wire.error_codes import ErrorCode
from wire.topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse

NODE_ID = 1
TICK_INTERVAL_MS = 100
SESSION_MS = 1_000


def registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(broker_id, f"incarnation-{broker_id}", {"PLAINTEXT": f"broker{broker_id}:9092"})


class Log:
    """The metadata log as the office sees it, and the committed metadata it applies to."""

    def __init__(self, epoch: int = 1, log_end_offset: int = 1) -> None:
        self.committed = ClusterMetadata()
        self.office = ControllerOffice(NODE_ID, self.committed, random.Random(7),
                                       ControllerConfig(broker_session_timeout_ms=SESSION_MS), TICK_INTERVAL_MS)
        self.role = Role.LEADER
        self.epoch = epoch
        self.leader_id: int | None = NODE_ID
        self.applied_offset = 0
        self.log_end_offset = log_end_offset  # offset 0: the leader's LeaderChange record
        self.batches: dict[int, tuple[int, ProposeBatch]] = {}  # proposal id -> (base offset, batch)
        self.answers: dict[object, Any] = {}
        self.now_ms = 1_000

    def handle(self, event: Any) -> OfficeReady:
        """One event to the office; its answers are kept; a proposal is appended and reported at once."""
        ready = self.office.handle(event, self.now_ms)
        for answer in ready.answers:
            assert answer.token not in self.answers, f"{answer.token} answered twice"
            self.answers[answer.token] = answer.response
        return ready

    def stepped(self, *completions: ProposalCompletion) -> OfficeReady:
        return self.handle(RaftStepped(self.role, self.epoch, self.leader_id, self.applied_offset,
                                       self.log_end_offset, completions))

    def append(self, ready: OfficeReady) -> OfficeReady:
        """Raft takes the proposal at the log end; the driver reports the step."""
        assert ready.propose is not None, ready
        self.batches[ready.propose.proposal_id] = (self.log_end_offset, ready.propose)
        self.log_end_offset += len(ready.propose.records)
        return self.stepped()

    def append_all(self, ready: OfficeReady) -> OfficeReady:
        while ready.propose is not None:
            ready = self.append(ready)
        return ready

    def call(self, token: object, request: Any) -> OfficeReady:
        """A call, and whatever it proposes appended."""
        return self.append_all(self.handle(ControllerCall(token, request)))

    def commit(self, proposal_id: int) -> OfficeReady:
        """The batch commits and this node applies it; Raft completes the proposal."""
        base_offset, batch = self.batches.pop(proposal_id)
        for position, data in enumerate(batch.records):
            self.committed.apply(base_offset + position, self.epoch, data)
        self.applied_offset = base_offset + len(batch.records)
        return self.stepped(ProposalCompletion(proposal_id, RaftError.NONE, base_offset, self.epoch))

    def apply_all(self) -> OfficeReady:
        """Raft commits every entry of the log (none proposed by this office: earlier epochs')."""
        assert not self.batches, self.batches
        self.applied_offset = self.log_end_offset
        return self.stepped()

    def in_office(self) -> Log:
        ready = self.apply_all()
        assert ready.changes == (TookOffice(self.epoch, self.log_end_offset),)
        return self


def records_of(batch: ProposeBatch) -> list[Any]:
    return [decode_record(data) for data in batch.records]


def test_a_leader_takes_office_only_once_its_whole_log_is_applied() -> None:
    log = Log(log_end_offset=5)
    log.applied_offset = 4  # the LeaderChange at 4 is not applied yet
    ready = log.stepped()
    assert ready.changes == () and not log.office.in_office and ready.next_tick_ms == NEVER_MS
    ready = log.handle(ControllerCall("early", registration(1)))
    assert ready.propose is None and log.answers == {}  # waits for the office

    log.applied_offset = 5
    ready = log.stepped()
    assert ready.changes == (TookOffice(epoch=1, next_offset=5),)
    assert log.office.office_epoch == 1
    assert ready.propose is not None  # the waiting call runs at once, its records at the log end
    (record,) = records_of(ready.propose)
    assert isinstance(record, RegisterBroker) and record.broker_id == 1
    log.append(ready)
    log.commit(0)
    assert log.answers["early"].broker_epoch == 5  # its offset: the log end when office was taken


def test_a_follower_answers_not_controller_naming_the_leader_it_knows() -> None:
    log = Log()
    log.role, log.epoch, log.leader_id = Role.FOLLOWER, 2, 3
    log.stepped()
    log.handle(ControllerCall("call", CreateTopicsRequest((CreatableTopic("a", 1, 1), CreatableTopic("b", 1, 1)))))
    response = log.answers["call"]
    assert isinstance(response, CreateTopicsResponse)
    assert [topic.error_code for topic in response.topics] == [ErrorCode.NOT_CONTROLLER] * 2
    assert "knows of 3" in (response.topics[0].error_message or "")


def test_waiting_for_office_is_bounded_and_ends_not_controller_when_leadership_is_lost() -> None:
    log = Log(log_end_offset=3)
    log.stepped()  # leads, LeaderChange not applied
    for token in range(CALLS_AWAITING_OFFICE_MAX):
        log.handle(ControllerCall(token, registration(1)))
    assert log.answers == {}
    log.handle(ControllerCall("one too many", registration(2)))
    assert list(log.answers) == ["one too many"] and is_not_controller(log.answers["one too many"])

    log.role, log.leader_id = Role.UNATTACHED, None
    log.stepped()
    assert len(log.answers) == CALLS_AWAITING_OFFICE_MAX + 1
    assert all(is_not_controller(response) for response in log.answers.values())
    log.role, log.epoch, log.leader_id, log.applied_offset = Role.LEADER, 2, NODE_ID, 3
    assert log.stepped().propose is None  # in office again, and nothing was left waiting


def test_each_result_is_one_batch_answered_only_after_it_commits() -> None:
    log = Log().in_office()
    request = CreateTopicsRequest((CreatableTopic("orders", 3, 1),))
    log.call("broker", registration(1))
    log.commit(0)
    log.call("heartbeat", BrokerHeartbeatRequest(1, 1, 1))
    log.commit(1)  # unfenced
    ready = log.handle(ControllerCall("create", request))
    assert ready.propose is not None and len(ready.propose.records) == 4  # Topic + 3 Partitions: ONE batch
    log.append(ready)
    assert "create" not in log.answers

    log.handle(ControllerCall("again", request))  # no records: it exists in the uncommitted metadata
    assert "again" not in log.answers, "decided on records not yet committed: it waits for them"
    log.commit(2)
    assert log.answers["create"].topics[0].error_code is ErrorCode.NONE
    assert log.answers["again"].topics[0].error_code is ErrorCode.TOPIC_ALREADY_EXISTS
    log.handle(ControllerCall("third", request))  # nothing pending: answered at once
    assert log.answers["third"].topics[0].error_code is ErrorCode.TOPIC_ALREADY_EXISTS


def test_an_answer_decided_on_records_a_failover_loses_is_not_controller_instead() -> None:
    """Goal: no answer rests on metadata that never commits (replication sim seed 170: an
    INVALID_UPDATE_VERSION from a partition epoch that was lost with the controller left the
    leader waiting for metadata that never came). Method: a topic is proposed, a second creation
    of it is decided ("already exists") without records, then the office is lost before commit."""
    log = Log().in_office()
    log.call("broker", registration(1))
    log.commit(0)
    log.call("heartbeat", BrokerHeartbeatRequest(1, 1, 1))
    log.commit(1)
    request = CreateTopicsRequest((CreatableTopic("orders", 1, 1),))
    log.call("create", request)
    log.handle(ControllerCall("again", request))
    assert "again" not in log.answers
    log.role, log.leader_id = Role.FOLLOWER, 2
    log.stepped()
    assert is_not_controller(log.answers["create"]) and is_not_controller(log.answers["again"])


def test_results_are_proposed_one_per_ready_in_order_each_at_its_base_offset() -> None:
    log = Log(log_end_offset=2)
    log.stepped()
    for broker_id in (1, 2, 3):
        log.handle(ControllerCall(broker_id, registration(broker_id)))
    ready = log.apply_all()  # takes office: three results, three batches
    proposed = []
    while ready.propose is not None:
        proposed.append((log.log_end_offset, records_of(ready.propose)[0].broker_id))
        ready = log.append(ready)
    assert proposed == [(2, 1), (3, 2), (4, 3)]
    for proposal_id in (0, 1, 2):
        log.commit(proposal_id)
    assert [log.answers[broker_id].broker_epoch for broker_id in (1, 2, 3)] == [2, 3, 4]


def test_a_refused_proposal_ends_the_office_and_answers_what_is_pending() -> None:
    log = Log().in_office()
    log.call("first", registration(1))
    log.call("second", registration(2))
    # Raft refuses the first (the leader's queue is full); the second was appended behind it.
    ready = log.stepped(ProposalCompletion(0, RaftError.THROTTLING_QUOTA_EXCEEDED))
    assert ready.changes == (LeftOffice(1, "the metadata log refused a proposal (THROTTLING_QUOTA_EXCEEDED)"),)
    assert log.answers["first"].error_code is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert log.answers["second"].error_code is ErrorCode.NOT_CONTROLLER
    assert "may still take effect" in log.answers["second"].error_message
    assert ready.next_tick_ms == NEVER_MS

    log.handle(ControllerCall("meanwhile", registration(3)))  # still leading: waits for the office again
    assert "meanwhile" not in log.answers
    log.batches.clear()
    ready = log.apply_all()
    assert ready.changes == (TookOffice(1, log.log_end_offset),)  # rebuilt from committed state
    assert ready.propose is not None


def test_an_epoch_change_ends_the_office_and_a_late_commit_answers_nobody() -> None:
    log = Log().in_office()
    log.call("pending", registration(1))
    log.epoch = 2  # Raft lost and won again between two steps
    ready = log.stepped()
    assert ready.changes == (LeftOffice(1, f"node {NODE_ID} no longer leads the quorum in epoch 1"),)
    assert is_not_controller(log.answers.pop("pending"))
    log.commit(0)  # committed after all, under the next epoch: answered already
    assert log.answers == {}


def test_losing_leadership_answers_in_flight_proposals_not_controller() -> None:
    log = Log().in_office()
    log.call("pending", registration(1))
    log.role, log.leader_id = Role.FOLLOWER, 2
    ready = log.stepped()
    assert isinstance(ready.changes[0], LeftOffice) and not log.office.in_office
    assert isinstance(log.answers["pending"], BrokerRegistrationResponse)
    assert is_not_controller(log.answers["pending"])


def test_a_result_that_would_not_land_at_its_base_offset_ends_the_office() -> None:
    log = Log(log_end_offset=2)
    log.stepped()
    log.handle(ControllerCall("first", registration(1)))
    log.handle(ControllerCall("second", registration(2)))
    ready = log.apply_all()
    assert ready.propose is not None
    ready = log.stepped()  # the first batch did not reach the log end (the log end did not move)
    assert ready.propose is None
    assert ready.changes == (LeftOffice(1, "a controller result for offset 3 would land at 2"),)
    assert is_not_controller(log.answers["first"]) and is_not_controller(log.answers["second"])


def test_the_office_ticks_every_interval_while_in_office_and_never_outside() -> None:
    log = Log().in_office()
    assert log.office.next_tick_ms == log.now_ms + TICK_INTERVAL_MS
    log.call("register", registration(1))
    log.commit(0)
    log.call("heartbeat", BrokerHeartbeatRequest(1, 1, 1))
    log.commit(1)
    assert isinstance(log.answers["heartbeat"], BrokerHeartbeatResponse) and not log.answers["heartbeat"].is_fenced

    log.now_ms += TICK_INTERVAL_MS - 1
    assert log.handle(OfficeTick()).propose is None  # early: nothing runs, the deadline stays
    assert log.office.next_tick_ms == log.now_ms + 1
    log.now_ms += 1
    ready = log.handle(OfficeTick())
    assert ready.propose is None and ready.next_tick_ms == log.now_ms + TICK_INTERVAL_MS  # nobody silent yet
    log.now_ms += SESSION_MS
    ready = log.handle(OfficeTick())  # broker 1 has been silent for the session timeout
    assert ready.propose is not None and FenceBroker(1, 1) in records_of(ready.propose)
    assert ready.next_tick_ms == log.now_ms + TICK_INTERVAL_MS
    answered = dict(log.answers)
    log.append(ready)
    log.commit(2)
    assert log.answers == answered  # a tick answers nobody
    log.role = Role.UNATTACHED
    assert log.stepped().next_tick_ms == NEVER_MS


def test_shutdown_answers_everything_pending_and_every_later_call() -> None:
    log = Log(log_end_offset=3)
    log.stepped()
    log.handle(ControllerCall("waiting", registration(1)))
    ready = log.handle(Shutdown())
    assert ready.changes == () and "stopping" in log.answers["waiting"].error_message
    log.handle(ControllerCall("late", registration(2)))
    assert "is stopping" in log.answers["late"].error_message
    log.applied_offset = 3
    assert log.stepped().changes == ()  # a stopped node never takes office


def test_an_event_between_a_proposal_and_its_raft_step_is_a_driver_bug() -> None:
    log = Log().in_office()
    assert log.handle(ControllerCall("call", registration(1))).propose is not None
    with pytest.raises(AssertionError, match="before the RaftStepped of proposal 0"):
        log.handle(OfficeTick())
