"""Consumer groups seen from outside, what kafka-consumer-groups.sh shows and does: ListGroups,
DescribeGroups and DeleteGroups.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from wire.error_codes import ErrorCode


class ConsumerGroupState(enum.Enum):
    """A group's state as ListGroups and DescribeGroups name it (Kafka's ConsumerGroupState)."""

    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    EMPTY = "Empty"


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    """The groups this node coordinates (as in Kafka, a client asks every broker and merges);
    `states_filter` (KIP-518): only groups in these states, every group when empty."""

    states_filter: tuple[ConsumerGroupState, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: ConsumerGroupState


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    """A retriable `error_code` (COORDINATOR_LOAD_IN_PROGRESS) says some groups may be missing."""

    error_code: ErrorCode
    groups: tuple[ListedGroup, ...] = ()
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    """Any node answers, asking each group's coordinator."""

    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedGroupMember:
    """`member_metadata`: its subscription (ConsumerProtocolSubscription) and `member_assignment`
    (ConsumerProtocolAssignment), both empty unless the group is Stable."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    """Kafka's DescribedGroup: `protocol_data` is the assignor while Stable; an unknown group is Dead
    with no members and no error. `group_state` is None in an error answer. `coordinator_id`
    (ours): the node that answered, since any node takes the request and asks the coordinator."""

    error_code: ErrorCode
    group_id: str
    group_state: ConsumerGroupState | None = None
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedGroupMember, ...] = ()
    error_message: str = ""
    coordinator_id: int = -1


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    """Any node answers, asking each group's coordinator. A group is deleted only when it has no
    members (NON_EMPTY_GROUP otherwise), with its committed offsets."""

    groups_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletableGroupResult:
    group_id: str
    error_code: ErrorCode
    error_message: str = ""  # ours: Kafka's DeleteGroups has none


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeletableGroupResult, ...]
