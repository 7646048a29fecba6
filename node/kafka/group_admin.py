"""Kafka's group admin APIs: ListGroups (16), DescribeGroups (15), DeleteGroups (42).

Translated to the node's own requests and dispatched (node/group_queries.py, node/group_deletion.py).
ListGroups lists the groups this broker coordinates, as Kafka's brokers do (an admin client asks
every broker); its v4 state filter (KIP-518) takes Kafka's state names in any case, a name no state
has matching no group; v5's type filter (KIP-848) matches every group when it names "classic", the
only type of group here, and none otherwise. DescribeGroups goes to any broker, which asks each
group's coordinator; `authorized_operations` (v3+) is left unset, there being no ACLs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from node.kafka.apis import KafkaApi, RequestContext
from wire.api import Api
from wire.error_codes import ErrorCode
from wire.group_admin import ConsumerGroupState, DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest

CLASSIC_GROUP_TYPE = "classic"
STATES = {state.value.lower(): state for state in ConsumerGroupState}


async def handle_list_groups(context: RequestContext, request: Any) -> Mapping[str, Any]:
    wanted_states = tuple(getattr(request, "states_filter", ()))
    wanted_types = {name.lower() for name in getattr(request, "types_filter", ())}
    states = tuple(STATES[name.lower()] for name in wanted_states if name.lower() in STATES)
    if (wanted_states and not states) or (wanted_types and CLASSIC_GROUP_TYPE not in wanted_types):
        return {"throttle_time": 0, "error_code": ErrorCode.NONE, "groups": ()}
    answer = await _dispatch(context, Api.LIST_GROUPS, ListGroupsRequest(states))
    return {"throttle_time": 0, "error_code": answer.error_code, "groups": [
        {"group_id": group.group_id, "protocol_type": group.protocol_type, "group_state": group.group_state.value,
         "group_type": CLASSIC_GROUP_TYPE} for group in answer.groups]}


async def handle_describe_groups(context: RequestContext, request: Any) -> Mapping[str, Any]:
    answer = await _dispatch(context, Api.DESCRIBE_GROUPS, DescribeGroupsRequest(tuple(request.groups)))
    return {"throttle_time": 0, "groups": [{
        "error_code": group.error_code,
        "error_message": group.error_message or None,
        "group_id": group.group_id,
        "group_state": group.group_state.value if group.group_state is not None else "",
        "protocol_type": group.protocol_type,
        "protocol_data": group.protocol_data,
        "members": [{"member_id": member.member_id, "group_instance_id": member.group_instance_id,
                     "client_id": member.client_id, "client_host": member.client_host,
                     "member_metadata": member.member_metadata, "member_assignment": member.member_assignment}
                    for member in group.members],
    } for group in answer.groups]}


async def handle_delete_groups(context: RequestContext, request: Any) -> Mapping[str, Any]:
    answer = await _dispatch(context, Api.DELETE_GROUPS, DeleteGroupsRequest(tuple(request.groups_names)))
    return {"throttle_time": 0, "results": [{"group_id": result.group_id, "error_code": result.error_code}
                                            for result in answer.results]}


async def _dispatch(context: RequestContext, api: Api, request: Any) -> Any:
    return await context.node.dispatch(api, request, context.listener, context.client_host)


APIS = (
    KafkaApi(15, 0, 6, handle_describe_groups),
    KafkaApi(16, 0, 5, handle_list_groups),
    KafkaApi(42, 0, 2, handle_delete_groups),
)
