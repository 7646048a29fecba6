"""Kafka's classic consumer group protocol, as a member speaks it to its coordinator: JoinGroup,
SyncGroup, Heartbeat and LeaveGroup (KIP-345 static members).
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.error_codes import ErrorCode


@dataclass(frozen=True, slots=True)
class JoinGroupProtocol:
    name: str  # an assignor: "range", "roundrobin", "cooperative-sticky"
    metadata: bytes  # Kafka's ConsumerProtocolSubscription


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: tuple[JoinGroupProtocol, ...]
    client_id: str = "tributary"
    group_instance_id: str | None = None  # group.instance.id: a static member (KIP-345)
    # Kafka's clientHost, for DescribeGroups: set by the node the client reached (its peer address)
    # and carried when that node forwards the request to the coordinator; a client's own is replaced.
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    """`members`: every member's subscription, for the leader only."""

    error_code: ErrorCode
    generation_id: int = -1
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class SyncGroupAssignment:
    member_id: str
    assignment: bytes  # Kafka's ConsumerProtocolAssignment


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[SyncGroupAssignment, ...] = ()  # the leader's
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: ErrorCode
    assignment: bytes = b""
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupMember:
    """A static member leaving by its instance id (LeaveGroup v3+, KIP-345); `member_id` "" when
    unknown (an admin removing it)."""

    group_instance_id: str
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    member_ids: tuple[str, ...]
    members: tuple[LeaveGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupResponse:
    """The answer to a Heartbeat or a LeaveGroup."""

    error_code: ErrorCode
    error_message: str = ""
