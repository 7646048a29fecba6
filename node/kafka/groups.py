"""Kafka's classic group membership APIs: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13).

Each request becomes the node's own (client/py) and goes through `Node.dispatch`, which
routes it to the group's coordinator (node/group_membership.py and its core decide everything).
Protocol metadata and assignments are opaque bytes passed through: Kafka's ConsumerProtocol formats,
which our own client writes too, so Kafka clients and ours can share a group.

Version differences handled here:
- JoinGroup v0 has no rebalance timeout: the session timeout serves as one, as in Kafka.
- JoinGroup before v4 (KIP-394) has no MEMBER_ID_REQUIRED round: the member is admitted with the id
  the coordinator gives it, as Kafka admits it at once; the edge joins again with that id.
- JoinGroup v7+ and SyncGroup v5+ name the protocol type (and name): Kafka answers with the group's,
  which equal the member's own in any answer without error (the coordinator refuses a member whose
  protocol type the group does not run, INCONSISTENT_GROUP_PROTOCOL).
- LeaveGroup v3+ (KIP-345) batches members, by member id or by a static member's instance id, each
  answered on its own: they leave one request each, a member's own error on it, any other (the
  coordinator's) for the whole request.
An empty group id is INVALID_GROUP_ID, as Kafka's isValidGroupId refuses it for these four.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from node.kafka.entities import milliseconds
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_membership import (
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
    SyncGroupAssignment,
    SyncGroupRequest,
)

MEMBER_ERRORS = frozenset({ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID})
INVALID_GROUP_ID_MESSAGE = "the group id is empty"


async def handle_join_group(context: RequestContext, request: Any) -> Mapping[str, Any]:
    no_protocol = None if context.api_version >= 7 else ""  # nullable from v7
    if not request.group_id:
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_GROUP_ID, "member_id": request.member_id,
                "leader": "", "protocol_name": no_protocol, "members": ()}
    session_timeout_ms = milliseconds(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)  # v1+
    internal = JoinGroupRequest(
        request.group_id, session_timeout_ms, session_timeout_ms if rebalance is None else milliseconds(rebalance),
        request.member_id, request.protocol_type,
        tuple(JoinGroupProtocol(p.name, p.metadata) for p in request.protocols),
        context.client_id or "", getattr(request, "group_instance_id", None))
    answer = await _dispatch(context, Api.JOIN_GROUP, internal)
    if answer.error_code == ErrorCode.MEMBER_ID_REQUIRED and context.api_version < 4:
        answer = await _dispatch(context, Api.JOIN_GROUP, dataclasses.replace(internal, member_id=answer.member_id))
    return {
        "throttle_time": 0,
        "error_code": answer.error_code,
        "generation_id": answer.generation_id,
        "protocol_type": request.protocol_type if answer.error_code == ErrorCode.NONE else None,
        "protocol_name": answer.protocol_name if answer.error_code == ErrorCode.NONE else no_protocol,
        "leader": answer.leader,
        "member_id": answer.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": None, "metadata": m.metadata}
                    for m in answer.members],
    }


async def handle_sync_group(context: RequestContext, request: Any) -> Mapping[str, Any]:
    if not request.group_id:
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_GROUP_ID, "assignment": b""}
    answer = await _dispatch(context, Api.SYNC_GROUP, SyncGroupRequest(
        request.group_id, request.generation_id, request.member_id,
        tuple(SyncGroupAssignment(a.member_id, a.assignment) for a in request.assignments),
        getattr(request, "group_instance_id", None)))
    succeeded = answer.error_code == ErrorCode.NONE
    return {
        "throttle_time": 0,
        "error_code": answer.error_code,
        "protocol_type": getattr(request, "protocol_type", None) if succeeded else None,
        "protocol_name": getattr(request, "protocol_name", None) if succeeded else None,
        "assignment": answer.assignment,
    }


async def handle_heartbeat(context: RequestContext, request: Any) -> Mapping[str, Any]:
    if not request.group_id:
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_GROUP_ID}
    answer = await _dispatch(context, Api.HEARTBEAT, HeartbeatRequest(
        request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None)))
    return {"throttle_time": 0, "error_code": answer.error_code}


async def handle_leave_group(context: RequestContext, request: Any) -> Mapping[str, Any]:
    batched = context.api_version >= 3
    if not request.group_id:
        return {"throttle_time": 0, "error_code": ErrorCode.INVALID_GROUP_ID, "members": ()}
    if not batched:
        answer = await _dispatch(context, Api.LEAVE_GROUP,
                                 LeaveGroupRequest(request.group_id, (request.member_id,)))
        return {"throttle_time": 0, "error_code": answer.error_code}
    answers = await asyncio.gather(*(_dispatch(context, Api.LEAVE_GROUP, _leave_one(request.group_id, member))
                                     for member in request.members))
    group_error = next((answer.error_code for answer in answers
                        if answer.error_code != ErrorCode.NONE and answer.error_code not in MEMBER_ERRORS),
                       ErrorCode.NONE)
    return {
        "throttle_time": 0,
        "error_code": group_error,
        "members": [{"member_id": member.member_id, "group_instance_id": member.group_instance_id,
                     "error_code": answer.error_code if answer.error_code in MEMBER_ERRORS else ErrorCode.NONE}
                    for member, answer in zip(request.members, answers, strict=True)],
    }


def _leave_one(group_id: str, member: Any) -> LeaveGroupRequest:
    if member.group_instance_id is None:
        return LeaveGroupRequest(group_id, (member.member_id,))
    return LeaveGroupRequest(group_id, (), (LeaveGroupMember(member.group_instance_id,
                                                                               member.member_id),))


async def _dispatch(context: RequestContext, api: Api, request: Any) -> Any:
    return await context.node.dispatch(api, request, context.listener, context.client_host)


APIS = (
    KafkaApi(11, 0, 9, handle_join_group),
    KafkaApi(12, 0, 4, handle_heartbeat),
    KafkaApi(13, 0, 5, handle_leave_group),
    KafkaApi(14, 0, 5, handle_sync_group),
)
