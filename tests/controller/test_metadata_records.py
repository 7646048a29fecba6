"""Metadata record codec: every record round-trips, equal records give equal bytes, and malformed
bytes are refused with `MetadataRecordError` rather than turned into a wrong record.

Method: one example per record type, a hypothesis round trip over generated records, and
hand-made malformed msgpack for each check the decoder makes.
"""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.errors import MetadataRecordError
from controller.metadata_records import (
    RECORD_CLASSES,
    BrokerRegistrationChange,
    ConfigChange,
    FenceBroker,
    MetadataRecordType,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    decode_record,
    encode_record,
)

TOPIC_ID = "ECfE0cOGu8TNYT4w2PFq3w"
EXAMPLES = [
    RegisterBroker(1, "incarnation", {"PLAINTEXT": "h:9092", "CONTROLLER": "h:9093"}, "rack-a"),
    RegisterBroker(2, "incarnation", {"PLAINTEXT": "h:9092"}, None, ("9ZxEQ-ZEQLqmP-9-dUFZ2A",)),
    FenceBroker(1, 17),
    ProducerIds(1, 17, 2000),
    UnfenceBroker(1, 17),
    BrokerRegistrationChange(1, 17, True),
    Topic("orders", TOPIC_ID, {"retention.ms": "1000"}),
    Partition(TOPIC_ID, 0, (1, 2, 3), (1, 2), 1, 0, 0),
    PartitionChange(TOPIC_ID, 0, isr=(2,), leader=2),
    PartitionChange(TOPIC_ID, 1, isr=None, leader=-1),
    PartitionChange(TOPIC_ID, 2, isr=(1, 3)),
    PartitionChange(TOPIC_ID, 2, isr=(), leader=-1, elr=(1, 3), last_known_elr=(2,)),
    Partition(TOPIC_ID, 1, (1, 2, 3), (), -1, 4, 9, (2,), (3,)),
    PartitionChange(TOPIC_ID, 1, isr=(1,), leader=1, elr=(), last_known_elr=(), log_start_offset=40),
    Partition(TOPIC_ID, 2, (1, 2, 3), (1,), 1, 5, 11, (), (), 40),
    ConfigChange("orders", "retention.ms", "5"),
    ConfigChange("orders", "retention.ms", None),
    RemoveTopic(TOPIC_ID),
]


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda record: type(record).__name__)
def test_every_record_type_round_trips(record: object) -> None:
    data = encode_record(record)
    assert decode_record(data) == record
    assert encode_record(decode_record(data)) == data


def test_every_record_class_has_an_example() -> None:
    assert {type(record) for record in EXAMPLES} == set(RECORD_CLASSES.values())


def test_type_tags_are_kafkas_api_keys_and_the_latest_version_is_written() -> None:
    assert msgpack.unpackb(encode_record(EXAMPLES[0]))[:2] == [0, 1]
    assert msgpack.unpackb(encode_record(FenceBroker(1, 17)))[:2] == [7, 0]
    assert MetadataRecordType.PARTITION_CHANGE == 5
    assert MetadataRecordType.BROKER_REGISTRATION_CHANGE == 17


def test_map_order_does_not_change_the_bytes() -> None:
    one = RegisterBroker(1, "i", {"a": "h:1", "b": "h:2"}, None)
    two = RegisterBroker(1, "i", {"b": "h:2", "a": "h:1"}, None)
    assert encode_record(one) == encode_record(two)


@pytest.mark.parametrize(
    "payload",
    [
        [99, 0, "x"],  # unknown type tag
        ["2", 0, "orders", TOPIC_ID, {}],  # tag not an integer
        [2, 1, "orders", TOPIC_ID, {}],  # unsupported version
        [5, -1, TOPIC_ID, 0, None, None],  # negative version
        [5, 1, TOPIC_ID, 0, None, None],  # version 1 without its fields
        [5, 0, TOPIC_ID, 0, None, None, None, None],  # version 0 with version 1's fields
        [5, 1, TOPIC_ID, 0, None, None, [1, "2"], None],  # ELR member not an integer
        [2, 0, "orders", TOPIC_ID],  # a field missing
        [2, 0, "orders", TOPIC_ID, {}, "extra"],  # a field too many
        [2, 0, "orders", 5, {}],  # topic id not a string
        [2, 0, "orders", TOPIC_ID, {"k": 1}],  # config value not a string
        [3, 0, TOPIC_ID, 0, [1, "2"], [1], 1, 0, 0],  # replica id not an integer
        [3, 0, TOPIC_ID, 0, [1], [1], True, 0, 0],  # a bool where an int belongs
        [7, 0, 1, None],  # epoch missing
        [17, 0, 1, 2, 1],  # an int where a bool belongs
        [2],  # too short to hold type and version
        {"type": 2},  # not an array
    ],
)
def test_malformed_records_are_refused(payload: object) -> None:
    with pytest.raises(MetadataRecordError):
        decode_record(msgpack.packb(payload))


@pytest.mark.parametrize(
    ("payload", "record"),
    [
        ([0, 0, 1, "i", {"P": "h:1"}, None], RegisterBroker(1, "i", {"P": "h:1"}, None)),
        ([3, 0, TOPIC_ID, 0, [1], [1], 1, 0, 0], Partition(TOPIC_ID, 0, (1,), (1,), 1, 0, 0)),
        ([5, 0, TOPIC_ID, 0, [2], None], PartitionChange(TOPIC_ID, 0, isr=(2,))),
        ([5, 1, TOPIC_ID, 0, [2], None, None, None], PartitionChange(TOPIC_ID, 0, isr=(2,))),
        ([3, 1, TOPIC_ID, 0, [1], [1], 1, 0, 0, [], []], Partition(TOPIC_ID, 0, (1,), (1,), 1, 0, 0)),
    ],
)
def test_records_of_an_older_version_decode_with_defaults(payload: object, record: object) -> None:
    """A log written before log_dirs (KIP-858), the ELR fields (KIP-966) and log_start_offset still
    decodes."""
    assert decode_record(msgpack.packb(payload)) == record


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x93\x01", encode_record(EXAMPLES[2]) + b"\x00"])
def test_bytes_that_are_not_one_msgpack_value_are_refused(data: bytes) -> None:
    with pytest.raises(MetadataRecordError):
        decode_record(data)


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
ids = st.integers(-1, 2**31 - 1)
epochs = st.integers(0, 2**62)
brokers = st.lists(st.integers(0, 1000), max_size=5).map(tuple)
records = st.one_of(
    st.builds(RegisterBroker, ids, names, st.dictionaries(names, names, max_size=3), st.none() | names,
              st.lists(names, max_size=3).map(tuple)),
    st.builds(FenceBroker, ids, epochs),
    st.builds(UnfenceBroker, ids, epochs),
    st.builds(BrokerRegistrationChange, ids, epochs, st.booleans()),
    st.builds(Topic, names, names, st.dictionaries(names, names, max_size=3)),
    st.builds(Partition, names, ids, brokers, brokers, ids, epochs, epochs, brokers, brokers),
    st.builds(PartitionChange, names, ids, st.none() | brokers, st.none() | ids, st.none() | brokers,
              st.none() | brokers),
    st.builds(ConfigChange, names, names, st.none() | names),
    st.builds(RemoveTopic, names),
)


@given(records)
def test_generated_records_round_trip(record: object) -> None:
    assert decode_record(encode_record(record)) == record
