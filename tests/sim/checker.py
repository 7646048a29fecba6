"""SafetyChecker: Raft's safety properties, checked after every simulation step (DESIGN §6.5).

The checker watches each node's core, log and Ready from outside and keeps one canonical history:
the committed entries in offset order, as the first node to apply each offset saw it. Checks:

- Election safety: at most one node is ever leader of an epoch (over the whole run). A node whose
  disk was wiped is another leader than before the wipe: it may not lead an epoch it led before.
- Epochs and votes are durable: a node's epoch never falls, across crashes too, and its vote in
  an epoch never changes once cast (both are persisted before the messages that reveal them). A
  wiped disk (a recorded fault) takes both; election safety above is still checked over the whole
  run, across wipes: a voter without state must not vote where its lost vote could still count.
- Log matching: every batch any node ever held is recorded under (base offset, epoch) with its CRC
  and the epoch of the entry before it; two logs holding a batch at the same offset and epoch must
  agree on both, so by induction they agree on the whole prefix.
- Leader completeness: a node that becomes leader of epoch E holds every entry committed in an epoch
  before E (its entry at the last such offset has the canonical epoch, or its snapshot ends past it).
  An entry is committed in the epoch of the leader whose high watermark first passed it. Entries
  committed in E or later need not be there: a candidate of an old epoch that collected its votes
  long ago (it was paused) may still win that old epoch, and it cannot commit anything.
- State machine safety: every node applies a contiguous run of the canonical history (entries
  equal in epoch, data and kind) from its latest snapshot on; a snapshot it restores ends at a
  committed offset in the canonical epoch; with a digest-capable state machine, its state equals
  the canonical state after every apply and restore; snapshots of one offset are byte-identical.
- Commit index: within one incarnation a node's high watermark never falls; a restarted node starts
  from its durable state, where the high watermark is its latest snapshot's end offset, which
  must not exceed the high watermark it had before the crash.
- Atomic requests: a proposal's records (one controller request) are one batch and commit all
  together or not at all. Every node's high watermark sits on a batch boundary of its log, every
  committed batch is exactly the records of one proposal, and an acknowledged proposal's records
  are the committed batch at the offset it was acknowledged with.
- Metadata (with a controller spec, DESIGN §6.4): after every step that applied something, the
  node's `ClusterMetadata` passes `check_invariants` (ISR, ELR and last known ELR disjoint within the
  replicas, the ISR possibly empty (KIP-966), the leader in the ISR or -1, a fenced broker
  leads nothing, ...) and `MetadataHistory` (epochs only grow on each node; one leader per
  partition and leader epoch, one state per partition epoch, across all nodes and all time).

A violation raises `SafetyViolation` naming the property, the node and the values.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from controller.metadata import ClusterMetadata, MetadataHistory, check_invariants
from controller.raft import Raft
from controller.raft_messages import CommittedEntry, Ready, Role, SnapshotCreated
from storage.log import Log
from storage.records import iter_headers
from tests.sim.state_machines import EMPTY_DIGEST, StateMachineSpec, chain_digest


class SafetyViolation(AssertionError):
    """A Raft safety property failed; the message names it."""


@dataclass(slots=True)
class LogMirror:
    """What the checker has read of one node's log: per batch base offset, (epoch, last offset)."""

    start: int
    end: int
    truncation_count: int
    last_epoch: int
    batches: dict[int, tuple[int, int]] = field(default_factory=dict)
    ends: set[int] = field(default_factory=set)  # next offsets of the batches read: where a HW may be
    segment_base: int = -1  # the segment file that holds `end` (-1: look it up) and where in it
    position: int = 0


class SafetyChecker:
    """The properties of the module docstring over one run. State: leaders by epoch, each node's
    epoch, votes, HW and log mirror, every batch seen, the canonical history and its digests, the
    commit epoch of each offset, snapshot digests. Fed by the Simulation after every step."""

    def __init__(self, spec: StateMachineSpec) -> None:
        self.spec = spec
        self.leaders: dict[int, tuple[int, int]] = {}  # epoch -> (node, its wipes so far)
        self.wipes: dict[int, int] = {}
        self.epochs: dict[int, int] = {}
        self.votes: dict[tuple[int, int], int] = {}
        self.high_watermarks: dict[int, int] = {}
        self.canonical: list[CommittedEntry] = []
        self.digests: list[bytes] = [EMPTY_DIGEST]  # digests[end]: the state after entries below `end`
        self.expected: dict[int, int] = {}
        self.mirrors: dict[int, LogMirror] = {}
        self.batches: dict[tuple[int, int], tuple[int, int]] = {}
        self.snapshots: dict[int, bytes] = {}
        self.commit_epochs: list[int] = []  # commit_epochs[offset]: epoch of the leader that committed it
        self.checks = 0
        self.proposed: set[tuple[bytes, ...]] = set()  # the records of every proposal
        self.batch_last_offsets: dict[tuple[int, int], int] = {}  # (base offset, epoch) -> last offset
        self.grouped_end = 0  # canonical entries below it are known to form whole proposed batches
        self.metadata_history = MetadataHistory()
        self.metadata_checked_offsets: set[int] = set()

    def fail(self, prop: str, message: str) -> None:
        raise SafetyViolation(f"{prop}: {message}")

    # -- lifecycle ------------------------------------------------------------------------------

    def on_start(self, node_id: int, raft: Raft, restarted: bool) -> None:
        """A node (re)started from its disk: check what it recovered, reset per-incarnation state."""
        start = raft.log.log_start_offset
        if restarted and raft.high_watermark > self.high_watermarks.get(node_id, 0):
            self.fail("commit index", f"node {node_id} restarted with HW {raft.high_watermark} above its "
                                      f"pre-crash HW {self.high_watermarks.get(node_id)}")
        if start > len(self.canonical):
            self.fail("durability", f"node {node_id} recovered a snapshot at {start} past the committed "
                                    f"end {len(self.canonical)}")
        self.high_watermarks[node_id] = raft.high_watermark
        self.expected[node_id] = start
        self.mirrors.pop(node_id, None)
        self.metadata_history.forget(node_id)  # a fresh state machine: it restores an older snapshot
        self.after_step(node_id, raft)

    def on_wipe(self, node_id: int) -> None:
        """The node's disk was wiped: its epoch and votes went with it (leaders of past epochs stay)."""
        self.wipes[node_id] = self.wipes.get(node_id, 0) + 1
        self.epochs.pop(node_id, None)
        self.votes = {key: voted for key, voted in self.votes.items() if key[0] != node_id}

    # -- after every step ---------------------------------------------------------------------

    def after_step(self, node_id: int, raft: Raft) -> None:
        self.checks += 1
        self._check_election_state(node_id, raft)
        new_leader = raft.role is Role.LEADER and self._check_election_safety(node_id, raft.epoch)
        high_watermark = raft.high_watermark
        if high_watermark < self.high_watermarks.get(node_id, 0):
            self.fail("commit index", f"node {node_id} HW fell {self.high_watermarks[node_id]} -> {high_watermark}")
        self.high_watermarks[node_id] = high_watermark
        self._update_mirror(node_id, raft)
        mirror = self.mirrors[node_id]
        if high_watermark > mirror.start and high_watermark not in mirror.ends:
            self.fail("atomic requests", f"node {node_id} HW {high_watermark} is inside a batch of its log")
        if self.grouped_end < len(self.canonical):
            self._check_committed_batches()
        if raft.role is Role.LEADER and high_watermark > len(self.commit_epochs):
            self.commit_epochs.extend([raft.epoch] * (high_watermark - len(self.commit_epochs)))
        if new_leader:
            self._check_leader_completeness(node_id, raft)

    def _check_election_safety(self, node_id: int, epoch: int) -> bool:
        """Record the leader of `epoch` (a node, after so many wipes); True if it is new. Checked
        before the leader's log: a second leader's first entry would otherwise show as a log fault."""
        leader = (node_id, self.wipes.get(node_id, 0))
        first = self.leaders.get(epoch)
        if first is None:
            self.leaders[epoch] = leader
            return True
        if first != leader:
            self.fail("election safety", f"epoch {epoch} has leaders {first[0]} (after {first[1]} wipes) and "
                                         f"{node_id} (after {leader[1]} wipes)")
        return False

    def _check_election_state(self, node_id: int, raft: Raft) -> None:
        epoch = raft.epoch
        if epoch < self.epochs.get(node_id, 0):
            self.fail("durable epoch", f"node {node_id} epoch fell {self.epochs[node_id]} -> {epoch}")
        self.epochs[node_id] = epoch
        voted = raft.voted_id
        if voted is not None:
            earlier = self.votes.setdefault((node_id, epoch), voted)
            if earlier != voted:
                self.fail("durable vote", f"node {node_id} voted {earlier} then {voted} in epoch {epoch}")

    def _check_leader_completeness(self, node_id: int, raft: Raft) -> None:
        committed_end = min(len(self.canonical), len(self.commit_epochs))
        while committed_end > 0 and self.commit_epochs[committed_end - 1] >= raft.epoch:
            committed_end -= 1
        if committed_end == 0:
            return
        last = self.canonical[committed_end - 1]
        mirror = self.mirrors[node_id]
        if raft.log.log_end_offset < committed_end:
            self.fail("leader completeness", f"node {node_id} leads epoch {raft.epoch} with log end "
                                             f"{raft.log.log_end_offset} < committed end {committed_end}")
        if last.offset >= mirror.start:
            # The batch holding the last committed offset (a batch may hold several records).
            held = next(((epoch, base) for base, (epoch, last_offset) in mirror.batches.items()
                         if base <= last.offset <= last_offset), None)
            if held is None or held[0] != last.epoch:
                self.fail("leader completeness", f"node {node_id} leads epoch {raft.epoch} holding {held} at "
                                                 f"committed offset {last.offset} of epoch {last.epoch}")
        else:
            snapshot = raft.log.snapshots.latest_id()
            if snapshot is None or snapshot.offset < committed_end:
                self.fail("leader completeness", f"node {node_id} leads epoch {raft.epoch} from snapshot "
                                                 f"{snapshot}; committed end {committed_end} epoch {last.epoch}")

    def _update_mirror(self, node_id: int, raft: Raft) -> None:
        """Read the batches the node's log gained since the last step; record and compare them."""
        log = raft.log
        mirror = self.mirrors.get(node_id)
        if mirror is None or mirror.truncation_count != log.truncation_count:
            snapshot = log.snapshots.latest_id()
            previous_epoch = snapshot.epoch if snapshot is not None and snapshot.offset == log.log_start_offset else -1
            mirror = LogMirror(log.log_start_offset, log.log_start_offset, log.truncation_count, previous_epoch)
            self.mirrors[node_id] = mirror
        elif mirror.start != log.log_start_offset:
            mirror.start = log.log_start_offset
            mirror.batches = {base: batch for base, batch in mirror.batches.items() if base >= mirror.start}
            mirror.ends = {end for end in mirror.ends if end > mirror.start}
            if mirror.end < mirror.start:
                # Appended, committed and snapshotted within one step: those entries are in the snapshot.
                snapshot = log.snapshots.latest_id()
                assert snapshot is not None, f"node {node_id}: log start {mirror.start} without a snapshot"
                assert snapshot.offset == mirror.start, f"node {node_id}: snapshot {snapshot}, start {mirror.start}"
                mirror.end, mirror.last_epoch = mirror.start, snapshot.epoch
        end_offset = log.log_end_offset
        while mirror.end < end_offset:
            data = self._read_new_bytes(mirror, log.log)
            before = (mirror.end, mirror.position)
            for _, header in iter_headers(data):
                if header.base_offset < mirror.end:
                    mirror.position += header.size_in_bytes
                    continue
                if header.base_offset != mirror.end:
                    self.fail("log contiguity", f"node {node_id} has a batch at {header.base_offset}, "
                                                f"expected {mirror.end}")
                epoch = header.partition_leader_epoch
                key = (header.base_offset, epoch)
                value = (header.crc, mirror.last_epoch)
                known = self.batches.setdefault(key, value)
                if known != value:
                    self.fail("log matching", f"node {node_id} holds batch {key} with (crc, previous epoch) "
                                              f"{value}, another log held {known}")
                mirror.batches[header.base_offset] = (epoch, header.last_offset)
                mirror.ends.add(header.next_offset)
                self.batch_last_offsets.setdefault(key, header.last_offset)
                mirror.last_epoch = epoch
                mirror.end = header.next_offset
                mirror.position += header.size_in_bytes
            if (mirror.end, mirror.position) == before:
                self.fail("log contiguity", f"node {node_id} log ends at {end_offset} but no batch holds {before}")

    @staticmethod
    def _read_new_bytes(mirror: LogMirror, log: Log) -> bytes:
        """The segment file bytes from the mirror's position on: the new batches, read straight from
        the file (no index lookup). Moves to the next segment at the end of one; when the segment
        is gone or unknown, finds the batch holding `mirror.end` through the log."""
        segment = log.segments.get(mirror.segment_base) if mirror.segment_base >= 0 else None
        if segment is not None and mirror.position >= segment.size and segment is not log.segments.active_segment:
            segment = log.segments.higher_segment(segment.base_offset)
            mirror.position = 0
        if segment is None or mirror.position > segment.size:
            segment = log.segments.floor_segment(mirror.end)
            assert segment is not None, f"no segment holds offset {mirror.end} of {log}"
            found = segment.translate_offset(mirror.end)
            if found is None:
                segment = log.segments.higher_segment(segment.base_offset)
                assert segment is not None, f"no segment after {mirror.end} of {log}"
                mirror.position = 0
            else:
                mirror.position = found[0]
        assert segment is not None, f"no segment for {mirror.end}"
        mirror.segment_base = segment.base_offset
        return segment.read_bytes(mirror.position, segment.size - mirror.position)

    def _check_committed_batches(self) -> None:
        """Canonical entries come in whole batches, each the records of one proposal (or Raft's own
        control record). Entries whose batch no mirror has read yet wait for a later step."""
        canonical = self.canonical
        while self.grouped_end < len(canonical):
            first = canonical[self.grouped_end]
            last_offset = self.batch_last_offsets.get((first.offset, first.epoch))
            if last_offset is None or last_offset >= len(canonical):
                return
            group = canonical[first.offset : last_offset + 1]
            if any(entry.epoch != first.epoch for entry in group):
                self.fail("atomic requests", f"committed batch [{first.offset}, {last_offset}] mixes epochs")
            if not first.control and tuple(entry.data for entry in group) not in self.proposed:
                self.fail("atomic requests", f"committed batch [{first.offset}, {last_offset}] of epoch "
                                             f"{first.epoch} is not the records of one proposal")
            self.grouped_end = last_offset + 1

    def on_propose(self, records: tuple[bytes, ...]) -> None:
        """A proposal's records, about to be handed to Raft as one batch."""
        assert records, "a proposal without records"
        self.proposed.add(records)

    # -- what the node applied ----------------------------------------------------------------

    def on_ready(self, node_id: int, ready: Ready, follow_up: object, state_machine: object) -> None:
        if ready.restore is not None:
            self._check_restore(node_id, ready.restore.snapshot_id.offset, ready.restore.snapshot_id.epoch,
                                ready.restore.data)
        for entry in ready.committed:
            self._check_committed(node_id, entry)
        if (ready.restore is not None or ready.committed) and self.spec.digest is not None:
            digest = self.spec.digest(state_machine)  # type: ignore[arg-type]
            end = self.expected[node_id]
            if digest != self.digests[end]:
                self.fail("state machine safety", f"node {node_id} state after offset {end - 1} differs from "
                                                  f"the canonical history's")
        if (ready.restore is not None or ready.committed) and self.spec.controller:
            self._check_metadata(node_id, state_machine)
        if isinstance(follow_up, SnapshotCreated):
            self._check_snapshot_bytes(node_id, follow_up.snapshot_id.offset, follow_up.data)

    def _check_metadata(self, node_id: int, state_machine: object) -> None:
        """The invariants of one node's metadata, and its history. Every node that applied up to one
        offset holds the same state (the same canonical entries, checked above, applied by a pure
        `apply` on top of byte-identical snapshots), so `check_invariants` runs once per offset."""
        assert isinstance(state_machine, ClusterMetadata), type(state_machine)
        problems = self.metadata_history.observe(node_id, state_machine)
        offset = state_machine.last_applied_offset
        if offset not in self.metadata_checked_offsets:
            self.metadata_checked_offsets.add(offset)
            problems += check_invariants(state_machine)
        if problems:
            self.fail("metadata invariants", f"node {node_id} at offset {state_machine.last_applied_offset}: "
                                             + "; ".join(problems))

    def _check_restore(self, node_id: int, offset: int, epoch: int, data: bytes) -> None:
        if offset > len(self.canonical):
            self.fail("state machine safety", f"node {node_id} restores a snapshot at {offset} past the "
                                              f"committed end {len(self.canonical)}")
        if offset > 0 and self.canonical[offset - 1].epoch != epoch:
            self.fail("state machine safety", f"node {node_id} restores snapshot ({offset}, {epoch}) but "
                                              f"offset {offset - 1} was committed in epoch "
                                              f"{self.canonical[offset - 1].epoch}")
        self._check_snapshot_bytes(node_id, offset, data)
        self.expected[node_id] = offset

    def _check_snapshot_bytes(self, node_id: int, offset: int, data: bytes) -> None:
        if not self.spec.identical_snapshots:
            return
        digest = hashlib.sha256(data).digest()
        known = self.snapshots.setdefault(offset, digest)
        if known != digest:
            self.fail("state machine safety", f"node {node_id} snapshot at {offset} differs from another "
                                              f"node's snapshot at the same offset")

    def _check_committed(self, node_id: int, entry: CommittedEntry) -> None:
        expected = self.expected[node_id]
        if entry.offset != expected:
            self.fail("state machine safety", f"node {node_id} applies offset {entry.offset}, expected {expected}")
        if entry.offset < len(self.canonical):
            canonical = self.canonical[entry.offset]
            if canonical != entry:
                self.fail("state machine safety", f"node {node_id} applies {entry} where {canonical} was committed")
        elif entry.offset == len(self.canonical):
            self.canonical.append(entry)
            previous = self.digests[-1]
            self.digests.append(previous if entry.control else chain_digest(previous, entry.offset, entry.data))
        else:
            self.fail("state machine safety", f"node {node_id} applies {entry.offset} past the committed end "
                                              f"{len(self.canonical)} it could not have seen")
        self.expected[node_id] = entry.offset + 1

    def check_completion(self, node_id: int, offset: int, epoch: int, records: tuple[bytes, ...]) -> None:
        """A proposal was acknowledged: its records must be the committed batch from `offset`."""
        end = offset + len(records)
        if end > len(self.canonical):
            self.fail("acknowledged write", f"node {node_id} acknowledged [{offset}, {end}) before it was applied")
        for position, data in enumerate(records):
            committed = self.canonical[offset + position]
            if committed.epoch != epoch or committed.data != data or committed.control:
                self.fail("acknowledged write", f"node {node_id} acknowledged ({offset + position}, {epoch}, "
                                                f"{data!r}) but {committed} is committed there")
        last_offset = self.batch_last_offsets.get((offset, epoch))
        if last_offset is not None and last_offset != end - 1:
            self.fail("atomic requests", f"node {node_id} acknowledged [{offset}, {end}) but the batch there "
                                         f"ends at {last_offset}")
