"""ReplicaState: what a partition leader knows of one follower (Kafka's Replica.scala)."""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_OFFSET = -1
"""Kafka's UnifiedLog.UnknownOffset: an offset the leader has not heard yet."""

NO_BROKER_EPOCH = -1
"""A fetch that carries no broker epoch (KIP-903 checks are then skipped)."""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """An immutable snapshot of one follower, as its leader sees it. Every fetch makes a new one.

    - `log_start_offset`: the follower's logStartOffset from its last fetch (for the low watermark
      that DeleteRecords waits on); UNKNOWN_OFFSET before the first fetch of this leadership.
    - `log_end_offset`: the follower's LEO, i.e. the fetch offset of its last accepted fetch: it
      holds every offset below it, identical to the leader's (the fetch passed the diverging-epoch
      check). UNKNOWN_OFFSET (-1) before the first fetch, which holds the HW back.
    - `last_fetch_leader_log_end_offset`: the leader's LEO when that fetch arrived.
    - `last_fetch_time_ms`: when that fetch arrived.
    - `last_caught_up_time_ms`: the last time the follower was known to hold everything the leader
      had: a fetch at the leader's LEO, or a fetch at least at the LEO the leader had at the
      previous fetch (then it was caught up as of the previous fetch's time).
    - `broker_epoch`: the follower's broker epoch from its fetches (KIP-903), NO_BROKER_EPOCH if
      unknown; a fetch from an older process (a lower epoch) is stale and refused. Every other field
      describes that process: a newer one (a fetch with a higher epoch, or a newer registration in
      the metadata) starts from `for_new_broker_epoch`, since what an older process held may have
      died with it (unflushed data lost in a crash, a wiped disk).
    """

    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int = NO_BROKER_EPOCH

    def is_caught_up(self, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        """In sync: at the leader's LEO now, or caught up within the last `replica_lag_time_max_ms`."""
        if leader_end_offset == self.log_end_offset:
            return True
        return now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms

    def is_stale_broker_epoch(self, broker_epoch: int) -> bool:
        """A fetch from an older incarnation of the follower's broker than one already seen."""
        return broker_epoch != NO_BROKER_EPOCH and broker_epoch < self.broker_epoch

    def is_older_broker_epoch(self, broker_epoch: int) -> bool:
        """This state came from a process older than the one with `broker_epoch` (both known)."""
        known = self.broker_epoch != NO_BROKER_EPOCH and broker_epoch != NO_BROKER_EPOCH
        return known and self.broker_epoch < broker_epoch

    @staticmethod
    def for_new_broker_epoch() -> ReplicaState:
        """The state of a follower whose broker came back as a new process (KIP-903, KIP-966's unclean
        shutdown): nothing its older process reported counts any more, offsets unknown until the new
        one fetches (an ISR member's unknown LEO holds the HW), never caught up (it leaves the ISR
        unless it catches up at once), broker epoch unknown until its first fetch."""
        return ReplicaState()

    def after_fetch(self, fetch_offset: int, log_start_offset: int, fetch_time_ms: int, leader_end_offset: int,
                    broker_epoch: int) -> ReplicaState:
        """The state after an accepted fetch (Kafka's Replica.updateFetchStateOrThrow). A fetch from a
        newer process of the follower's broker starts from a fresh state: the older process's
        caught-up time says nothing about the new one."""
        assert fetch_offset <= leader_end_offset, f"fetch_offset={fetch_offset} leader_end_offset={leader_end_offset}"
        if self.is_older_broker_epoch(broker_epoch):
            return ReplicaState.for_new_broker_epoch().after_fetch(fetch_offset, log_start_offset, fetch_time_ms,
                                                                   leader_end_offset, broker_epoch)
        if fetch_offset >= leader_end_offset:
            last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        else:
            last_caught_up_time_ms = self.last_caught_up_time_ms
        return ReplicaState(
            log_start_offset=log_start_offset,
            log_end_offset=fetch_offset,
            last_fetch_leader_log_end_offset=leader_end_offset,
            last_fetch_time_ms=fetch_time_ms,
            last_caught_up_time_ms=last_caught_up_time_ms,
            broker_epoch=self.broker_epoch if broker_epoch == NO_BROKER_EPOCH else broker_epoch,
        )

    @staticmethod
    def for_new_leadership(now_ms: int, in_sync: bool) -> ReplicaState:
        """A follower's state when this broker becomes leader in a new epoch (Kafka's
        resetReplicaState with isNewLeader): offsets unknown until it fetches; an ISR member counts
        as caught up now (it gets `replica.lag.time.max.ms` to fetch), any other replica as never,
        so that it does not hold the HW back."""
        return ReplicaState(last_caught_up_time_ms=now_ms if in_sync else 0)

    def for_leader_update(self, now_ms: int, in_sync: bool) -> ReplicaState:
        """The state after new metadata in the same leader epoch (Kafka's resetReplicaState without
        isNewLeader): offsets kept, caught-up time restarted for ISR members and cleared for others."""
        return ReplicaState(
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            last_fetch_leader_log_end_offset=self.last_fetch_leader_log_end_offset,
            last_fetch_time_ms=self.last_fetch_time_ms,
            last_caught_up_time_ms=now_ms if in_sync else 0,
            broker_epoch=self.broker_epoch,
        )
