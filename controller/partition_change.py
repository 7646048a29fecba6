"""The next state of one partition: ISR, Eligible Leader Replicas and leader (Kafka's PartitionChangeBuilder).

Every partition change the controller makes (a broker fenced, shutting down or registering again,
an AlterPartition, an election for an offline partition) goes through `partition_change`, so the
rules live in one place. Given the current registration and the target ISR:

1. ELR (KIP-966). When the target ISR has min.insync.replicas members the ELR and the last known
   ELR are empty. Otherwise the ELR is (current ISR + current ELR) - target ISR - replicas that
   registered after an unclean shutdown, and the last known ELR is (current ISR + ELR + last known
   ELR) - target ISR - target ELR: the replicas that lost eligibility by an unclean shutdown.
   Why an ELR member is complete: it left the ISR while the ISR was already below
   min.insync.replicas, and from then on the leader holds the high watermark
   (`replication/partition.py::_maybe_increment_leader_high_watermark`), so no record was
   acknowledged that it lacks. (Before its removal committed, the leader still counted it in the
   maximal ISR, so the HW waited for it then too.) A replica that restarted without a clean
   shutdown may have lost its unflushed tail, so it leaves the ELR.
2. Leader. The current leader if it stays in the ISR and is acceptable (registered, unfenced, not
   shutting down, not being removed); else the first acceptable ISR member in replica order; else,
   with an empty ISR, the first acceptable ELR member, which leads with the ISR to itself and leaves
   the ELR; else, with the ISR and the ELR both empty, the recovery leader the caller names for the
   target last known ELR (see `QuorumController._recovery_leader`: once every replica has reported,
   the most complete member, or a replica whose log surely extends it);
   else, with `unclean.leader.election.enable`, the first acceptable replica (data may be lost, the
   user chose it). A recovery or unclean election resets the ISR to the leader and empties the ELR
   and the last known ELR, as Kafka's unclean election does.
3. After an election from the ELR the ISR has one member; if that already meets min.insync.replicas
   the ELR is emptied then and there. Kafka waits for the next change, but the new leader advances
   the HW at once, so the other ELR members stop being complete at once.

Kafka 4.x elects the "last known leader" when the ISR and the ELR are both empty; that may be the
very broker that lost its tail, so we elect only from reports of every replica's log instead.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from controller.metadata import PartitionRegistration
from controller.metadata_records import PartitionChange
from wire.sentinels import NO_LEADER


def partition_change(
    topic_id: str,
    index: int,
    state: PartitionRegistration,
    target_isr: tuple[int, ...],
    min_isr: int,
    acceptable: Callable[[int], bool],
    unclean_shutdown: Collection[int] = (),
    unclean_election: bool = False,
    recovery_leader: Callable[[tuple[int, ...]], int] = lambda last_known_elr: NO_LEADER,
) -> PartitionChange | None:
    """The change that moves `state` to `target_isr` with the ELR and leader of the module
    docstring, or None if nothing changes. `target_isr` must be in replica order."""
    assert min_isr >= 1, f"min_isr={min_isr}"
    assert set(target_isr) <= set(state.replicas), f"target ISR {target_isr} outside {state.replicas}"
    replicas = state.replicas
    isr = target_isr
    elr, last_known_elr = _target_elr(state, isr, min_isr, unclean_shutdown)
    leader = state.leader if state.leader in isr and acceptable(state.leader) else _first(isr, acceptable)
    if leader == NO_LEADER and not isr:
        leader = _first(elr, acceptable)
        if leader != NO_LEADER:
            isr = (leader,)
            elr = tuple(replica for replica in elr if replica != leader)
        elif not elr:
            leader = recovery_leader(last_known_elr)
            if leader != NO_LEADER:
                isr, elr, last_known_elr = (leader,), (), ()
    if leader == NO_LEADER and unclean_election:
        leader = _first(replicas, acceptable)
        if leader != NO_LEADER:
            isr, elr, last_known_elr = (leader,), (), ()
    if len(isr) >= min_isr:
        elr, last_known_elr = (), ()
    if (isr, leader, elr, last_known_elr) == (state.isr, state.leader, state.elr, state.last_known_elr):
        return None
    return PartitionChange(
        topic_id,
        index,
        isr=None if isr == state.isr else isr,
        leader=None if leader == state.leader else leader,
        elr=None if elr == state.elr else elr,
        last_known_elr=None if last_known_elr == state.last_known_elr else last_known_elr,
    )


def _target_elr(
    state: PartitionRegistration, isr: tuple[int, ...], min_isr: int, unclean_shutdown: Collection[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Kafka's maybePopulateTargetElr: (ELR, last known ELR) for the target ISR, in replica order."""
    if len(isr) >= min_isr:
        return (), ()
    candidates = set(state.isr) | set(state.elr)
    elr = tuple(
        replica for replica in state.replicas
        if replica in candidates and replica not in isr and replica not in unclean_shutdown
    )
    known = candidates | set(state.last_known_elr)
    last_known_elr = tuple(
        replica for replica in state.replicas if replica in known and replica not in isr and replica not in elr
    )
    return elr, last_known_elr


def _first(candidates: tuple[int, ...], acceptable: Callable[[int], bool]) -> int:
    return next((replica for replica in candidates if acceptable(replica)), NO_LEADER)
