"""Consumer groups against three real node processes: consumers that subscribe share a topic's six
partitions, disjointly, and the group rebalances when a consumer joins, when one leaves, and when
one is killed with -9 (its own process: its session runs out); every record is processed. The CLI's
`groups list` and `groups describe` show the live group Stable, each partition with one owner. A
stable group whose coordinator is killed with -9 keeps its generation: the new coordinator loads it.
A group deleted once its consumer closed is gone with its offsets, and stays gone when its
coordinator is killed with -9 (the new one loads the tombstones)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from client.admin import Admin, NewTopic
from client.consumer import Consumer
from client.errors import TributaryError
from client.producer import Producer
from node.dev import DevCluster
from node.group_offsets import OFFSETS_TOPIC
from replication.group_coordinator import coordinator_partition
from tests.node.cluster_harness import eventually, start_cluster, stopped
from wire.error_codes import ErrorCode
from wire.group_admin import ConsumerGroupState
from wire.topic_partition import TopicPartition

TOPIC = "shared"
GROUP = "sharers"
PARTITIONS = 6
GROUP_SETTINGS = {"group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0"}
CONSUMER_SETTINGS = {"group_id": GROUP, "auto_offset_reset": "earliest", "session_timeout_ms": 2000,
                     "heartbeat_interval_ms": 200, "max_poll_interval_ms": 10000, "auto_commit_interval_ms": 200,
                     "fetch_max_wait_ms": 100}
ROOT = Path(__file__).parents[2]
# A consumer in a process of its own, to be killed with -9: it prints each value it processes.
MEMBER_PROCESS = """
import asyncio, sys
from client.consumer import Consumer
async def main():
    consumer = Consumer(sys.argv[1], **{settings})
    consumer.subscribe([{topic!r}])
    while True:
        for record in await consumer.poll(timeout_ms=200):
            print(record.value.decode(), flush=True)
asyncio.run(main())
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from stopped(start_cluster(tmp_path_factory.mktemp("groups"), **GROUP_SETTINGS))


class Member:
    """A consumer of the group, polling in a task; `seen` collects the values it processed."""

    def __init__(self, bootstrap: str, topic: str = TOPIC, **settings: object) -> None:
        self.consumer = Consumer(bootstrap, **{**CONSUMER_SETTINGS, **settings})  # type: ignore[arg-type]
        self.consumer.subscribe([topic])
        self.seen: list[bytes] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            for record in await self.consumer.poll(timeout_ms=200):
                assert record.value is not None
                self.seen.append(record.value)

    def assigned(self) -> set[TopicPartition]:
        member = self.consumer.member
        return set() if member is None or member.needs_join else self.consumer.assignment()

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.consumer.close()


async def produce(cluster: DevCluster, first: int, count: int) -> set[bytes]:
    values = {b"record-%05d" % n for n in range(first, first + count)}
    async with Producer(cluster.bootstrap) as producer:
        futures = [await producer.send(TOPIC, value, partition=int(value[7:]) % PARTITIONS) for value in sorted(values)]
        await asyncio.gather(*futures)
    return values


async def tributary(*argv: str) -> Any:
    """The `tributary` CLI in a process of its own (it runs its own event loop): its JSON output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "client.cli", *argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return json.loads(out)


async def check_the_cli_shows_the_group(cluster: DevCluster, members: list[Member]) -> None:
    """`groups list` shows the group Stable; `groups describe` each partition owned by exactly one of
    the three members, from its own host, as the members here hold them."""
    listed = await tributary("--bootstrap", cluster.bootstrap, "groups", "list", "--json")
    assert {"group": GROUP, "state": "Stable", "protocolType": "consumer"} in listed["groups"]
    described = await tributary("--bootstrap", cluster.bootstrap, "groups", "describe", "--group", GROUP, "--members",
                                "--json")
    assignments = {member["consumerId"]: {(p["topic"], p["partition"]) for p in member["assignment"]}
                   for member in described["members"]}
    assert described["state"] == "Stable" and len(assignments) == 3
    assert sorted(tp for held in assignments.values() for tp in held) == [(TOPIC, p) for p in range(PARTITIONS)]
    assert {member["host"] for member in described["members"]} == {"/127.0.0.1"}
    for member in members:
        assert member.consumer.member is not None
        assert {TopicPartition(*tp) for tp in assignments[member.consumer.member.member_id]} == member.assigned()
    offsets = await tributary("--bootstrap", cluster.bootstrap, "groups", "describe", "--group", GROUP, "--json")
    owners = {(p["topic"], p["partition"]): p["consumerId"] for p in offsets["partitions"]}
    assert owners == {tp: member for member, held in assignments.items() for tp in held}


def shares(members: list[Member]) -> bool:
    """The members hold disjoint sets of partitions that together are all six."""
    held = [member.assigned() for member in members]
    every = set().union(*held)
    return sum(map(len, held)) == len(every) == PARTITIONS and all(held)


async def test_consumers_share_the_partitions_and_rebalance_on_join_leave_and_kill(cluster: DevCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    produced = await produce(cluster, 0, 300)
    members = [Member(cluster.bootstrap), Member(cluster.bootstrap)]
    process = subprocess.Popen(
        [sys.executable, "-c", MEMBER_PROCESS.format(settings=CONSUMER_SETTINGS, topic=TOPIC), cluster.bootstrap],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    gone: list[Member] = []
    try:
        async def three_share() -> bool:  # the third member, in its process, holds the other two
            held = [member.assigned() for member in members]
            return all(len(partitions) == 2 for partitions in held) and not held[0] & held[1]

        await eventually(three_share, "two consumers here and one in its own process hold two partitions each")
        await check_the_cli_shows_the_group(cluster, members)
        produced |= await produce(cluster, 300, 300)
        process.send_signal(signal.SIGKILL)  # kill -9: no LeaveGroup, its session runs out
        process.wait(timeout=10)
        assert process.stdout is not None
        killed_seen = set(process.stdout.read().encode().split())

        async def share() -> bool:
            return shares(members)

        rebalanced_s = await eventually(share, "the two left take over the killed member's partitions")
        members.append(Member(cluster.bootstrap))
        await eventually(share, "a third member joins and gets its share")
        produced |= await produce(cluster, 600, 300)
        gone.append(members.pop(0))
        await gone[0].close()
        await eventually(share, "the others take over the partitions of a member that left")
        produced |= await produce(cluster, 900, 300)

        async def all_processed() -> bool:
            return produced <= killed_seen | {value for member in [*members, *gone] for value in member.seen}

        await eventually(all_processed, "every record was processed by some member")
        processed = sum(len(member.seen) for member in [*members, *gone]) + len(killed_seen)
        print(f"\nconsumer groups: {len(produced)} records, {processed} processed (at least once); the group "
              f"rebalanced {rebalanced_s * 1000:.0f} ms after the kill -9 of a member (session 2000 ms)")
    finally:
        if process.poll() is None:
            process.kill()
        for member in members:
            await member.close()


async def test_a_stable_group_keeps_its_generation_when_its_coordinator_is_killed(cluster: DevCluster) -> None:
    """Kafka's new coordinator loads the group from __consumer_offsets: the members' commits (fenced
    by generation and member id) go on in their generation, and their heartbeats keep them there
    past their session timeout, without a rebalance."""
    group, topic = "steady", "steady-topic"
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 2, 3)])
    members = [Member(cluster.bootstrap, topic, group_id=group) for _ in range(2)]
    killed = None
    try:
        async def stable() -> bool:
            held = [member.assigned() for member in members]
            return all(len(partitions) == 1 for partitions in held) and held[0] != held[1]

        await eventually(stable, "two members hold one partition each")
        before = [(m.consumer.member.member_id, m.consumer.member.generation_id) for m in members]  # type: ignore[union-attr]
        assert before[0][1] == before[1][1]
        async with Admin(cluster.bootstrap) as admin:
            offsets = (await admin.describe_topics([OFFSETS_TOPIC]))[OFFSETS_TOPIC]
        killed = offsets[coordinator_partition(group, len(offsets))].leader
        cluster.kill_node(killed)
        for member in members:  # answered by the new coordinator, once it has loaded the group
            await member.consumer.commit({tp: 0 for tp in member.assigned()})
        # What is tested is time passing: two session timeouts later nobody has rebalanced.
        await asyncio.sleep(2 * CONSUMER_SETTINGS["session_timeout_ms"] / 1000)  # type: ignore[operator]
        for member in members:
            await member.consumer.commit({tp: 0 for tp in member.assigned()})
        after = [(m.consumer.member.member_id, m.consumer.member.generation_id) for m in members]  # type: ignore[union-attr]
        assert after == before and all(not m.consumer.member.needs_join for m in members)  # type: ignore[union-attr]
    finally:
        for member in members:
            await member.close()
        if killed is not None:
            cluster.start_node(killed)


async def test_a_deleted_group_is_gone_with_its_offsets_and_stays_gone_after_a_coordinator_kill(
        cluster: DevCluster) -> None:
    group, topic = "erased", "erased-topic"
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 2, 3)])
    member = Member(cluster.bootstrap, topic, group_id=group)
    closed = False
    try:
        async def assigned() -> bool:
            return len(member.assigned()) == 2

        await eventually(assigned, "the member holds both partitions")
        await member.consumer.commit({TopicPartition(topic, 0): 1, TopicPartition(topic, 1): 1})
        async with Admin(cluster.bootstrap) as admin:
            partition_count = len((await admin.describe_topics([OFFSETS_TOPIC]))[OFFSETS_TOPIC])
        partition = coordinator_partition(group, partition_count)
        # A group on the same coordinator that is not deleted: listed after the failover, as loaded.
        kept = next(name for name in (f"kept-{n}" for n in range(1000))
                    if coordinator_partition(name, partition_count) == partition)
        async with Consumer(cluster.bootstrap, group_id=kept) as consumer:
            await consumer.commit({TopicPartition(topic, 0): 1})
        async with Admin(cluster.bootstrap) as admin:
            refused = await admin.delete_offsets(group, [TopicPartition(topic, 0)])
            assert refused[TopicPartition(topic, 0)] is not None
            assert refused[TopicPartition(topic, 0)].code is ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC  # type: ignore[union-attr]
            error = (await admin.delete_groups([group]))[group]
            assert error is not None and error.code is ErrorCode.NON_EMPTY_GROUP
        await member.close()
        closed = True
        deleted = await tributary("--bootstrap", cluster.bootstrap, "groups", "delete", "--group", group, "--json")
        assert deleted == {"groups": [{"group": group, "error": None, "message": None}]}
        listed = await tributary("--bootstrap", cluster.bootstrap, "groups", "list", "--json")
        assert group not in {entry["group"] for entry in listed["groups"]} and kept in {
            entry["group"] for entry in listed["groups"]}
        async with Consumer(cluster.bootstrap, group_id=group) as consumer:
            assert await consumer.committed() == {}

        async with Admin(cluster.bootstrap) as admin:
            killed = (await admin.describe_topics([OFFSETS_TOPIC]))[OFFSETS_TOPIC][partition].leader
        cluster.kill_node(killed)
        try:
            async with Admin(cluster.bootstrap, request_timeout_ms=60_000) as admin:
                # Retried while the new coordinator loads the partition's groups: what it loaded has no such group.
                again = (await admin.delete_groups([group]))[group]
                assert again is not None and again.code is ErrorCode.GROUP_ID_NOT_FOUND, "a deleted group came back"

            async def loaded_without_it() -> bool:
                try:
                    async with Admin(cluster.bootstrap, request_timeout_ms=3000) as admin:
                        names = {listing.group_id for listing in await admin.list_groups()}
                        state = (await admin.describe_groups([group]))[group].state
                except TributaryError:
                    return False  # the killed node is not fenced yet
                assert group not in names and state is ConsumerGroupState.DEAD, "a deleted group came back"
                return kept in names

            await eventually(loaded_without_it, "the new coordinator lists the groups it loaded")
            async with Consumer(cluster.bootstrap, group_id=group) as consumer:
                assert await consumer.committed() == {}, "the tombstones were loaded, not the offsets"
        finally:
            cluster.start_node(killed)
    finally:
        if not closed:
            await member.close()


# -- cooperative-sticky (KIP-429): a member joins and the others read on --------------------------

COOPERATIVE_TOPIC = "cooperative"


class CooperativeMember:
    """A cooperative-sticky member polling in a task. It records what it read, the partitions it read
    while a rebalance was in progress (its join running in the background) and what was revoked."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(bootstrap, **{**CONSUMER_SETTINGS, "group_id": "cooperators"},  # type: ignore[arg-type]
                                 partition_assignment_strategy="cooperative-sticky")
        self.seen: list[tuple[TopicPartition, int]] = []
        self.read_while_rebalancing: set[TopicPartition] = set()
        self.revoked: set[TopicPartition] = set()
        self.consumer.subscribe([COOPERATIVE_TOPIC], self)
        self.task = asyncio.create_task(self._run())

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.revoked |= partitions

    async def _run(self) -> None:
        member = self.consumer.member
        assert member is not None
        while True:
            records = await self.consumer.poll(timeout_ms=200)
            for record in records:
                tp = TopicPartition(record.topic, record.partition)
                self.seen.append((tp, record.offset))
                if member.needs_join:
                    self.read_while_rebalancing.add(tp)

    def holds(self) -> set[TopicPartition]:
        """Its partitions, once no rebalance is in progress for it."""
        member = self.consumer.member
        return set() if member is None or member.needs_join else self.consumer.assignment()

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.consumer.close()


async def produce_steadily(cluster: DevCluster, produced: list[tuple[int, int]], stop: asyncio.Event) -> None:
    """A record to every partition every 20 ms until `stop`; `produced` gets (partition, offset)."""
    async with Producer(cluster.bootstrap) as producer:
        while not stop.is_set():
            futures = [await producer.send(COOPERATIVE_TOPIC, b"v", partition=n) for n in range(PARTITIONS)]
            produced.extend((metadata.partition, metadata.offset) for metadata in await asyncio.gather(*futures))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.02)


def settled(members: list[CooperativeMember], each: int) -> bool:
    for member in members:
        if member.task.done():
            member.task.result()  # a poll that raised: say so now, not as a group that never settles
    held = [member.holds() for member in members]
    return all(len(partitions) == each for partitions in held) and len(set().union(*held)) == each * len(held)


async def test_a_cooperative_member_joins_while_the_others_read_on_what_they_keep(cluster: DevCluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(COOPERATIVE_TOPIC, PARTITIONS, 3)])
    produced: list[tuple[int, int]] = []
    stop = asyncio.Event()
    producing = asyncio.create_task(produce_steadily(cluster, produced, stop))
    members = [CooperativeMember(cluster.bootstrap), CooperativeMember(cluster.bootstrap)]
    try:
        async def two_settled() -> bool:
            return settled(members, 3)

        await eventually(two_settled, "two cooperative members hold three partitions each")
        before = [member.holds() for member in members]
        for member in members:
            member.read_while_rebalancing.clear()
            member.revoked.clear()
        members.append(CooperativeMember(cluster.bootstrap))

        async def three_settled() -> bool:
            return settled(members, 2)

        rebalance_s = await eventually(three_settled, "the third member gets its share")
        stop.set()
        await producing
        for member, held in zip(members, before, strict=False):
            kept = held & member.holds()
            assert len(kept) == 2, f"a member kept {kept} of {held}"
            assert not member.revoked & kept, "a partition that stayed was revoked"
            assert member.revoked == held - kept
            assert kept & member.read_while_rebalancing, "the member stopped reading while the group rebalanced"
            assert {tp for tp, _ in members[2].seen} & kept == set()

        async def all_read() -> bool:
            return {(tp.partition, offset) for member in members for tp, offset in member.seen} >= set(produced)

        await eventually(all_read, "every record was read")
        seen = [record for member in members for record in member.seen]
        assert len(seen) == len(set(seen)), "a record was read twice (revoked partitions are committed first)"
        print(f"\ncooperative-sticky: a third member got its share {rebalance_s * 1000:.0f} ms after subscribing; "
              f"the two others read on through the rebalance; {len(seen)} records, each read once")
    finally:
        stop.set()
        await producing
        for member in members:
            await member.close()
