"""A damaged batch in a replica's own log (bit rot): never served, and the log goes offline.

Method: brokers' cores on temp dirs; one byte of a batch's records flipped in the segment file, as
a failing disk would; hand-built fetches."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from replication.events import ConsumerFetch, FollowerFetch, ProduceRequest
from replication.ready import FetchResult, ProduceResult, TruncatedDamaged
from storage.log_manager import LogManager
from storage.records import BATCH_HEADER_SIZE, iter_headers
from tests.replication.harness import TOPIC_PARTITION, Broker, batch, catch_up, make_follower, make_leader, only
from wire.error_codes import ErrorCode

Brokers = Callable[..., list[Broker]]


def replicated(brokers: Brokers, count: int) -> list[Broker]:
    """Leader 1 and two followers holding `count` one-record batches, all committed."""
    cluster = brokers()
    make_leader(cluster[0], 1)
    for follower in cluster[1:]:
        make_follower(follower, 1, 1)
    for index in range(count):
        request = ProduceRequest(cluster[0].request_id(), batch(b"value-%d" % index), 1, 1)
        assert only(cluster[0].handle(request, 0).completions, ProduceResult).error == ErrorCode.NONE
    catch_up(cluster[0], cluster[1:], now_ms=0)
    assert cluster[0].log.high_watermark == count
    return cluster


def rot(broker: Broker, offset: int) -> None:
    """Flip one byte of the records of the batch at `offset` in the segment file (the CRC covers it)."""
    path = broker.directory / f"{TOPIC_PARTITION.topic}-{TOPIC_PARTITION.partition}" / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    position = next(position for position, header in iter_headers(data) if header.base_offset == offset)
    data[position + BATCH_HEADER_SIZE + 2] ^= 0x40
    path.write_bytes(bytes(data))


def test_a_damaged_batch_is_not_served_and_the_log_is_cut_there_and_goes_offline(brokers: Brokers) -> None:
    leader, _, _ = replicated(brokers, 3)
    rot(leader, 1)
    ready = leader.handle(ConsumerFetch(leader.request_id(), 0, 1 << 20), 0)
    result = only(ready.completions, FetchResult)
    assert (result.error, result.records) == (ErrorCode.KAFKA_STORAGE_ERROR, b"")
    assert ready.log_dir_failure is not None and "offset 1" in ready.log_dir_failure
    assert ready.log_changes[-1] == TruncatedDamaged(1, 3, ready.log_dir_failure)
    assert (leader.log.log_end_offset, leader.log.high_watermark) == (1, 1)
    produced = only(leader.handle(ProduceRequest(leader.request_id(), batch(b"later"), 1, 1), 0).completions,
                    ProduceResult)
    assert produced.error == ErrorCode.KAFKA_STORAGE_ERROR, "an offline log takes no writes"
    assert leader.log.log_end_offset == 1


def test_a_follower_is_never_sent_the_damaged_batch(brokers: Brokers) -> None:
    leader, follower, _ = replicated(brokers, 3)
    rot(leader, 2)
    fetch = FollowerFetch(leader.request_id(), replica_id=follower.broker_id, fetch_offset=2, max_bytes=1 << 20,
                          current_leader_epoch=1, last_fetched_epoch=1, log_start_offset=0)
    result = only(leader.handle(fetch, 0).completions, FetchResult)
    assert (result.error, result.records) == (ErrorCode.KAFKA_STORAGE_ERROR, b"")
    assert leader.log.log_end_offset == 2


def test_the_cut_survives_a_restart(brokers: Brokers) -> None:
    leader, _, _ = replicated(brokers, 3)
    rot(leader, 1)
    leader.handle(ConsumerFetch(leader.request_id(), 0, 1 << 20), 0)
    reopened = LogManager([leader.directory], lambda topic: leader.log_config, 0)
    log = reopened.logs[TOPIC_PARTITION]
    assert log.log_end_offset == 1
    assert [header.base_offset for _, header in iter_headers(log.read(0, 1 << 20).records)] == [0]
    reopened.shutdown(now_ms=0)


def damage(broker: Broker, offset: int, position_in_batch: int, value: bytes) -> None:
    """Overwrite bytes of the batch at `offset` in the segment file, at `position_in_batch`."""
    path = broker.directory / f"{TOPIC_PARTITION.topic}-{TOPIC_PARTITION.partition}" / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    position = next(position for position, header in iter_headers(data) if header.base_offset == offset)
    data[position + position_in_batch : position + position_in_batch + len(value)] = value
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["magic", "base offset", "leader epoch"])
def test_damage_the_crc_does_not_cover_is_found_too(brokers: Brokers, where: str) -> None:
    """A damaged magic byte stops the log's own walk; a damaged baseOffset or partitionLeaderEpoch
    (outside the CRC) shows as offsets or epochs that go back. Each cuts the log at that batch."""
    leader = replicated(brokers, 3)[0]
    if where == "magic":
        damage(leader, 2, 16, b"\x07")
    elif where == "base offset":
        damage(leader, 2, 0, (0).to_bytes(8, "big"))
    else:  # an epoch that falls needs a later one before it
        damage(leader, 1, 12, (2).to_bytes(4, "big"))
        damage(leader, 2, 12, (0).to_bytes(4, "big"))
    ready = leader.handle(ConsumerFetch(leader.request_id(), 0, 1 << 20), 0)
    result = only(ready.completions, FetchResult)
    assert result.error == ErrorCode.KAFKA_STORAGE_ERROR, result
    assert leader.log.log_end_offset == 2
