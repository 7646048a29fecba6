"""What a coordinator lists and describes of its groups: the membership core's groups merged with
those the offsets core knows only by their committed offsets.

Kafka's classic coordinator answers from the groups it has loaded: groups of members, and also
groups that only committed offsets (consumers that assign their partitions themselves, or groups
whose members all left before a failover), listed as Empty with no protocol type. A group it does
not hold is described as Dead with no members and no error (GroupCoordinator.handleDescribeGroup).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from replication.consumer_groups import GroupOverview, GroupState, GroupSummary


def dead_group(group_id: str) -> GroupSummary:
    """A group this coordinator does not hold: Dead, no members (Kafka's DeadGroup summary)."""
    return GroupSummary(group_id, GroupState.DEAD, "", "", ())


def offsets_only_group(group_id: str) -> GroupSummary:
    """A group with committed offsets and no membership: Empty, no protocol type, no members."""
    return GroupSummary(group_id, GroupState.EMPTY, "", "", ())


def merge_overviews(membership: Iterable[GroupOverview], offset_groups: Iterable[str],
                    states: Collection[GroupState]) -> tuple[GroupOverview, ...]:
    """The groups of a coordinator's partitions, by group id: those of the membership core as they
    stand, those with only offsets as Empty; only groups in `states` unless it is empty (KIP-518)."""
    overviews = {overview.group_id: overview for overview in membership}
    for group_id in offset_groups:
        overviews.setdefault(group_id, GroupOverview(group_id, "", GroupState.EMPTY))
    return tuple(overview for _, overview in sorted(overviews.items()) if not states or overview.state in states)
