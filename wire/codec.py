"""The HTTP API's codec: frozen dataclasses to and from msgpack, checked field by field.

`encode` turns a shape into plain msgpack data; `decode(cls, data)` checks data against `cls`'s type
hints, field by field, and raises `ProtocolError` naming the field. Integers are Kafka's int64 at
most. The same codec carries the node-to-node messages whose shapes the cores define (Raft messages,
controller requests, in an `Envelope`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgpack

from wire.error_codes import ErrorCode

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
T = TypeVar("T")


class ProtocolError(Exception):
    """A request or response that does not fit its shape: `code` is what the sender is told."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


def pack(message: Any) -> bytes:
    """A dataclass (or plain data) as msgpack bytes."""
    return msgpack.packb(encode(message), use_bin_type=True)


def unpack(cls: type[T], body: bytes, max_list_length: int = -1) -> T:
    """msgpack bytes as a `cls`; ProtocolError names what is wrong. A list or map longer than
    `max_list_length` (-1: as long as the body allows) is refused before it is built."""
    try:
        data = msgpack.unpackb(body, raw=False, strict_map_key=False, max_array_len=max_list_length,
                               max_map_len=max_list_length)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        # TypeError: a map key msgpack cannot hash (a map or an array)
        raise ProtocolError(f"the body is not valid msgpack ({error}); send one msgpack map") from None
    return decode(cls, data)


# Types msgpack takes as they are: `encode` and the dataclass encoders pass them through untouched.
_PLAIN_TYPES = frozenset({int, str, bytes, bool, float, type(None)})


def encode(value: Any) -> Any:
    """Plain msgpack data for a dataclass, enum, tuple, mapping or scalar."""
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return value
    return _encoder_for(kind)(value)


@functools.cache
def _encoder_for(kind: type) -> Callable[[Any], Any]:
    """The encoder of values of type `kind`, built once per type (a dataclass's field names are
    looked up once, not per message)."""
    if dataclasses.is_dataclass(kind):
        names = tuple(f.name for f in _fields(kind))

        def encode_dataclass(value: Any) -> dict[str, Any]:
            data = {}
            for name in names:
                item = getattr(value, name)
                data[name] = item if type(item) in _PLAIN_TYPES else encode(item)
            return data

        return encode_dataclass
    if issubclass(kind, enum.Enum):
        return _enum_value
    if issubclass(kind, (tuple, list)):
        return _encode_items
    if issubclass(kind, Mapping):
        return _encode_mapping
    if issubclass(kind, memoryview):
        return bytes
    return _unchanged


def _enum_value(value: enum.Enum) -> Any:
    return value.value


def _encode_items(value: tuple | list) -> list[Any]:
    return [encode(item) for item in value]


def _encode_mapping(value: Mapping) -> dict[Any, Any]:
    return {encode(key): encode(item) for key, item in value.items()}


def _unchanged(value: Any) -> Any:
    return value


def decode(cls: type[T], data: Any) -> T:
    """`data` checked against `cls` (a dataclass) and built into one.

    Two decoders with one meaning: a fast one compiled once per class, which only says whether
    the data fits, and the field-by-field walk below, which names what does not. Data the fast
    one refuses is walked again, so every error message comes from the walk."""
    fast = _fast_decoder(cls)
    if fast is not None:
        try:
            return fast(data)
        except _Misfit:
            pass
    return _decode(cls, data, cls.__name__)


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cls)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(hint: Any, data: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, data, where)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode(option, data, where)
            except ProtocolError as error:
                errors.append(str(error))
        raise ProtocolError("; ".join(errors))
    if origin is tuple or origin is list:
        if not isinstance(data, (list, tuple)):
            raise ProtocolError(f"{where} must be an array, not {type(data).__name__}")
        args = typing.get_args(hint)
        if origin is tuple and args[-1] is not Ellipsis:  # a fixed-length tuple such as tuple[str, int]
            if len(data) != len(args):
                raise ProtocolError(f"{where} must have {len(args)} items, not {len(data)}")
            pairs = enumerate(zip(args, data, strict=True))
            return tuple(_decode(item, value, f"{where}[{i}]") for i, (item, value) in pairs)
        items = [_decode(args[0], value, f"{where}[{i}]") for i, value in enumerate(data)]
        return tuple(items) if origin is tuple else items
    if origin in (Mapping, dict):
        if not isinstance(data, dict):
            raise ProtocolError(f"{where} must be a map, not {type(data).__name__}")
        key_hint, value_hint = typing.get_args(hint)
        return {
            _decode(key_hint, key, f"{where} key"): _decode(value_hint, value, f"{where}[{key!r}]")
            for key, value in data.items()
        }
    if hint is Any:
        return data
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(data)
        except ValueError:
            raise ProtocolError(f"{where}: {data!r} is not a known {hint.__name__}") from None
    if hint is int:
        if type(data) is not int:
            raise ProtocolError(f"{where} must be an integer, not {type(data).__name__}")
        if not INT64_MIN <= data <= INT64_MAX:
            raise ProtocolError(f"{where} is out of the 64-bit range")
        return data
    if hint is float:
        if type(data) not in (int, float):
            raise ProtocolError(f"{where} must be a number, not {type(data).__name__}")
        return float(data)
    if hint in (str, bool, bytes):
        if type(data) is not hint:
            raise ProtocolError(f"{where} must be {hint.__name__}, not {type(data).__name__}")
        return data
    raise TypeError(f"no decoder for {hint!r} at {where}")


def _decode_dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ProtocolError(f"{where} must be a map, not {type(data).__name__}")
    hints = _hints(cls)
    known = {f.name for f in _fields(cls)}
    unknown = [key for key in data if key not in known]
    if unknown:
        raise ProtocolError(f"{where} has unknown fields {sorted(map(str, unknown))}; known: {sorted(known)}")
    values = {}
    for f in _fields(cls):
        if f.name in data:
            values[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ProtocolError(f"{where} is missing the required field {f.name!r}")
    return cls(**values)


class _Misfit(Exception):
    """The fast decoder's refusal: no message, the walk (`_decode`) finds and names the fault."""


FastDecoder = Callable[[Any], Any]


@functools.cache
def _fast_decoder(hint: Any) -> FastDecoder | None:
    """A decoder for `hint` that accepts exactly what `_decode` accepts and builds the same value,
    but raises `_Misfit` instead of naming the fault; None for a hint it does not know (the walk
    then decodes alone). Built once per hint: the type hints are read here, not per message."""
    try:
        return _compile(hint)
    except TypeError:
        return None


def _compile(hint: Any) -> FastDecoder:
    if dataclasses.is_dataclass(hint):
        return _compile_dataclass(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _compile_union(hint)
    if origin is tuple or origin is list:
        return _compile_sequence(hint, origin)
    if origin in (Mapping, dict):
        key_hint, value_hint = typing.get_args(hint)
        return _compile_mapping(_compile(key_hint), _compile(value_hint))
    if hint is Any:
        return _unchanged
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _compile_enum(hint)
    if hint is int:
        return _decode_int
    if hint is float:
        return _decode_float
    if hint in (str, bool, bytes):
        return _compile_exact(hint)
    raise TypeError(f"no decoder for {hint!r}")


def _compile_dataclass(cls: type) -> FastDecoder:
    hints = _hints(cls)
    fields = tuple(
        (f.name, _compile(hints[f.name]), f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in _fields(cls)
    )
    known = frozenset(name for name, _, _ in fields)

    def decode_dataclass(data: Any) -> Any:
        if not isinstance(data, dict) or not known.issuperset(data):
            raise _Misfit
        values = {}
        for name, decode_field, required in fields:
            if name in data:
                values[name] = decode_field(data[name])
            elif required:
                raise _Misfit
        return cls(**values)

    return decode_dataclass


def _compile_union(hint: Any) -> FastDecoder:
    options = typing.get_args(hint)
    nullable = type(None) in options
    decoders = tuple(_compile(option) for option in options if option is not type(None))

    def decode_union(data: Any) -> Any:
        if data is None and nullable:
            return None
        for decode_option in decoders:
            try:
                return decode_option(data)
            except _Misfit:
                pass
        raise _Misfit

    return decode_union


def _compile_sequence(hint: Any, origin: type) -> FastDecoder:
    args = typing.get_args(hint)
    if origin is tuple and args[-1] is not Ellipsis:
        items = tuple(_compile(arg) for arg in args)

        def decode_fixed_tuple(data: Any) -> tuple:
            if not isinstance(data, (list, tuple)) or len(data) != len(items):
                raise _Misfit
            return tuple(decode_item(value) for decode_item, value in zip(items, data, strict=True))

        return decode_fixed_tuple
    decode_item = _compile(args[0])

    def decode_sequence(data: Any) -> tuple | list:
        if not isinstance(data, (list, tuple)):
            raise _Misfit
        decoded = [decode_item(value) for value in data]
        return tuple(decoded) if origin is tuple else decoded

    return decode_sequence


def _compile_mapping(decode_key: FastDecoder, decode_value: FastDecoder) -> FastDecoder:
    def decode_mapping(data: Any) -> dict:
        if not isinstance(data, dict):
            raise _Misfit
        return {decode_key(key): decode_value(value) for key, value in data.items()}

    return decode_mapping


def _compile_enum(cls: type[enum.Enum]) -> FastDecoder:
    def decode_enum(data: Any) -> enum.Enum:
        try:
            return cls(data)
        except ValueError:
            raise _Misfit from None

    return decode_enum


def _decode_int(data: Any) -> int:
    if type(data) is not int or not INT64_MIN <= data <= INT64_MAX:
        raise _Misfit
    return data


def _decode_float(data: Any) -> float:
    if type(data) not in (int, float):
        raise _Misfit
    return float(data)


def _compile_exact(kind: type) -> FastDecoder:
    def decode_exact(data: Any) -> Any:
        if type(data) is not kind:
            raise _Misfit
        return data

    return decode_exact
