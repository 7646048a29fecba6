"""Bad input never crashes the core (DESIGN §2): any request a client or a follower can send, with
any numbers and bytes, gets an answer with an error code or data, and leaves the log valid.

Method: hypothesis draws request events with arbitrary fields against a leader and a follower that
hold a few records; each must produce exactly one completion for its request id."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replication.events import (
    ConsumerFetch,
    DeleteRecords,
    FollowerFetch,
    ListOffsets,
    OffsetsForLeaderEpoch,
    ProduceRequest,
    Tick,
)
from tests.replication.harness import Broker, batch, catch_up, log_config, make_follower, make_leader

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SMALL = st.integers(min_value=-5, max_value=50)
INT = st.one_of(SMALL, I64)
RECORDS = st.one_of(st.binary(max_size=200), st.just(batch(b"ok")), st.builds(lambda b: b[:-1], st.just(batch(b"x"))))

REQUESTS = st.one_of(
    st.builds(ProduceRequest, st.just(1), RECORDS, INT, INT, INT),
    st.builds(ConsumerFetch, st.just(1), INT, INT, INT, st.booleans()),
    st.builds(FollowerFetch, st.just(1), st.sampled_from((2, 3, 9, -1)), INT, INT, INT, INT, INT, INT),
    st.builds(ListOffsets, st.just(1), INT, INT, st.booleans()),
    st.builds(OffsetsForLeaderEpoch, st.just(1), INT, INT),
    st.builds(DeleteRecords, st.just(1), INT, INT),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(REQUESTS, min_size=1, max_size=6), on_follower=st.booleans())
def test_any_request_is_answered_and_the_log_stays_valid(requests: list, on_follower: bool) -> None:
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix="tributary-replication-fuzz-", dir=shm if shm.is_dir() else None))
    try:
        leader, follower = (Broker(root, broker_id, log_config()) for broker_id in (1, 2))
        make_leader(leader, 1, isr=(1, 2))
        make_follower(follower, 1, 1, isr=(1, 2))
        leader.handle(ProduceRequest(0, batch(b"a", b"b"), 1, 10), now_ms=0)
        catch_up(leader, [follower], now_ms=0)
        target = follower if on_follower else leader
        now_ms = 1
        for number, request in enumerate(requests, start=100):
            event = dataclasses.replace(request, request_id=number)
            ready = target.handle(event, now_ms)
            answered = [c for c in ready.completions if c.request_id == number]
            parked = len(target.partition.produce_purgatory) + len(target.partition.delete_records_purgatory)
            assert len(answered) == 1 or parked, (event, ready)
            now_ms += 1_000_000
            target.handle(Tick(), now_ms)  # expires whatever was parked
            log = target.log
            assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        for broker in (leader, follower):
            broker.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
