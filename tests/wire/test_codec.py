"""wire/codec.py: every request and response shape round-trips, and every kind of
malformed input is refused with a ProtocolError that names the field.

Method: hypothesis draws values of each dataclass from its own type hints (so a new field is
covered without editing this file); malformed inputs are made from a valid encoding by one
change each (a field removed, retyped, added, or pushed out of range).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.api import REQUESTS, RESPONSES, Api
from wire.codec import INT64_MAX, ProtocolError, decode, encode, pack, unpack
from wire.error_codes import ErrorCode

SHAPES = sorted({*REQUESTS.values(), *RESPONSES.values()}, key=lambda cls: cls.__name__)
SCALARS: dict[Any, st.SearchStrategy] = {
    int: st.integers(-(2**63), 2**63 - 1),
    str: st.text(max_size=8),
    bytes: st.binary(max_size=16),
    bool: st.booleans(),
    float: st.floats(allow_nan=False),
}


def strategy_for(hint: Any) -> st.SearchStrategy:
    """Values of `hint` (a dataclass, union, tuple, mapping, enum or scalar)."""
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return st.builds(hint, **{f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(hint)})
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(st.none() if option is type(None) else strategy_for(option)
                           for option in typing.get_args(hint)))
    if origin is tuple:
        args = typing.get_args(hint)
        if args[-1] is not Ellipsis:
            return st.tuples(*(strategy_for(arg) for arg in args))
        return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
    if origin in (Mapping, dict):
        key, value = typing.get_args(hint)
        return st.dictionaries(strategy_for(key), strategy_for(value), max_size=3)
    if hint is Any:
        return st.one_of(st.integers(-100, 100), st.text(max_size=4), st.none())
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(list(hint))
    return SCALARS[hint]


@pytest.mark.parametrize("cls", SHAPES, ids=lambda cls: cls.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_shape_round_trips(cls: type, data: st.DataObject) -> None:
    message = data.draw(strategy_for(cls))
    assert unpack(cls, pack(message)) == message


def test_every_api_has_a_request_and_a_response_shape() -> None:
    assert set(REQUESTS) == set(Api)
    assert set(RESPONSES) == set(Api)


def required_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def minimal(cls: type) -> dict[str, Any]:
    """The smallest valid encoding of `cls`: its required fields, each with a drawn-free value."""
    hints = typing.get_type_hints(cls)
    return {f.name: encode(example_of(hints[f.name])) for f in required_fields(cls)}


def example_of(hint: Any) -> Any:
    if dataclasses.is_dataclass(hint):
        return decode(hint, minimal(hint))
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return None if type(None) in typing.get_args(hint) else example_of(typing.get_args(hint)[0])
    if origin is tuple:
        return ()
    if origin in (Mapping, dict):
        return {}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return next(iter(hint))
    return {int: 1, str: "s", bytes: b"b", bool: True, float: 1.0}.get(hint)


FIELDS = [(cls, f) for cls in SHAPES for f in dataclasses.fields(cls)]


@pytest.mark.parametrize(("cls", "field"), FIELDS, ids=lambda x: getattr(x, "__name__", getattr(x, "name", "")))
def test_a_mistyped_field_is_refused_by_name(cls: type, field: dataclasses.Field) -> None:
    data = minimal(cls)
    data[field.name] = 1.5  # no field of the protocol is a float
    with pytest.raises(ProtocolError, match=rf"{cls.__name__}\.{field.name}"):
        unpack(cls, msgpack.packb(data))


@pytest.mark.parametrize("cls", [cls for cls in SHAPES if required_fields(cls)], ids=lambda cls: cls.__name__)
def test_a_missing_required_field_is_refused_by_name(cls: type) -> None:
    for field in required_fields(cls):
        data = minimal(cls)
        del data[field.name]
        with pytest.raises(ProtocolError, match=rf"missing the required field '{field.name}'"):
            unpack(cls, msgpack.packb(data))


@pytest.mark.parametrize("cls", SHAPES, ids=lambda cls: cls.__name__)
def test_an_unknown_field_is_refused_by_name(cls: type) -> None:
    data = {**minimal(cls), "surprise": 1}
    with pytest.raises(ProtocolError, match="unknown fields \\['surprise'\\]"):
        unpack(cls, msgpack.packb(data))


@pytest.mark.parametrize(("cls", "field"), [
    (cls, f) for cls, f in FIELDS if typing.get_type_hints(cls)[f.name] is int
], ids=lambda x: getattr(x, "__name__", getattr(x, "name", "")))
def test_an_integer_out_of_the_64_bit_range_is_refused_by_name(cls: type, field: dataclasses.Field) -> None:
    data = {**minimal(cls), field.name: INT64_MAX + 1}
    with pytest.raises(ProtocolError, match=rf"{cls.__name__}\.{field.name} is out of the 64-bit range"):
        unpack(cls, msgpack.packb(data))


@pytest.mark.parametrize("body", [b"", b"\xc1", b"\x92\x01", msgpack.packb({"a": 1}) + b"\x00"])
def test_bytes_that_are_not_one_msgpack_value_are_refused(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        unpack(REQUESTS[Api.METADATA], body)


def test_an_unknown_error_code_is_refused_by_name() -> None:
    data = {"partitions": [{"topic": "t", "partition": 0, "error_code": 9999}]}
    with pytest.raises(ProtocolError, match=r"ProduceResponse\.partitions\[0\]\.error_code: 9999 is not a known"):
        unpack(RESPONSES[Api.PRODUCE], msgpack.packb(data))


def test_nested_errors_name_the_path() -> None:
    data = {"acks": 1, "timeout_ms": 10, "partitions": [{"topic": "t", "partition": "zero", "records": b""}]}
    with pytest.raises(ProtocolError, match=r"ProduceRequest\.partitions\[0\]\.partition must be an integer"):
        unpack(REQUESTS[Api.PRODUCE], msgpack.packb(data))


def test_a_protocol_error_is_an_invalid_request_by_default() -> None:
    assert ProtocolError("x").code is ErrorCode.INVALID_REQUEST


def test_fixed_length_tuples_check_each_item_and_the_length() -> None:
    cls = REQUESTS[Api.OFFSET_FETCH]
    assert unpack(cls, msgpack.packb({"group_id": "g", "partitions": [["t", 0]]})).partitions == (("t", 0),)
    with pytest.raises(ProtocolError, match=r"OffsetFetchRequest\.partitions\[0\] must have 2 items, not 3"):
        unpack(cls, msgpack.packb({"group_id": "g", "partitions": [["t", 0, 1]]}))
    with pytest.raises(ProtocolError, match=r"OffsetFetchRequest\.partitions\[0\]\[1\] must be an integer"):
        unpack(cls, msgpack.packb({"group_id": "g", "partitions": [["t", "0"]]}))
