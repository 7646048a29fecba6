"""Kafka messages as kio's entities (dataclasses generated from Kafka's own JSON schema files).

A handler answers with plain values: a mapping per entity, sequences for arrays, ints for int
fields, durations and timestamps in milliseconds, our `ErrorCode` (or an int) for error codes,
topic ids as Kafka's base64 text. `build` makes the entity of the version the client asked for:
fields that version lacks are dropped, fields the handler leaves out take the schema's default.
`filled` makes a whole answer of one error code (every error_code field, empty arrays): how an
API or version we do not serve, or a failed handler, is still answered in the client's format.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import functools
import types
import uuid
from collections.abc import Mapping
from enum import IntEnum
from typing import Any, Union, get_args, get_origin

from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.primitive import i32Timedelta, i64Timedelta

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kafka_type: str | None
    entity: type | None  # the nested entity class, for a nested entity or an array of them
    array: bool
    optional: bool
    default: Any  # dataclasses.MISSING when the schema gives none


@functools.cache
def _plan(cls: type) -> tuple[_Field, ...]:
    plan = []
    for field in dataclasses.fields(cls):
        annotation, array, optional = field.type, False, False
        if get_origin(annotation) in (Union, types.UnionType):  # a nullable array or value
            members = [member for member in get_args(annotation) if member is not type(None)]
            optional, annotation = True, members[0]
        if get_origin(annotation) is tuple:
            annotation, array = get_args(annotation)[0], True
        entity = annotation if dataclasses.is_dataclass(annotation) else None
        default = field.default
        if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        plan.append(_Field(field.name, field.metadata.get("kafka_type"), entity, array, optional, default))  # type: ignore[arg-type]
    return tuple(plan)


def build(cls: type, values: Mapping[str, Any]) -> Any:
    """`cls` (a kio entity) from `values`; keys the version lacks are ignored."""
    arguments = {}
    for field in _plan(cls):
        if field.name in values:
            arguments[field.name] = _convert(field, values[field.name])
        elif field.default is dataclasses.MISSING:
            raise KeyError(f"{cls.__module__}.{cls.__name__}: no value for {field.name}")
    return cls(**arguments)


def filled(cls: type, code: int) -> Any:
    """`cls` with every error_code field `code`, arrays empty, the rest their default or zero."""
    arguments = {}
    for field in _plan(cls):
        if field.kafka_type == "error_code":
            arguments[field.name] = KioErrorCode(int(code))
        elif field.array:
            arguments[field.name] = ()
        elif field.default is not dataclasses.MISSING:
            continue
        elif field.entity is not None:
            arguments[field.name] = None if field.optional else filled(field.entity, code)
        elif field.optional:
            arguments[field.name] = None
        else:
            arguments[field.name] = _convert(field, _ZERO.get(field.kafka_type, 0))
    return cls(**arguments)


_ZERO = {"string": "", "bool": False, "bytes": b"", "records": b"", "uuid": None, "float64": 0.0}


def _convert(field: _Field, value: Any) -> Any:
    if field.array:
        return tuple(_convert_one(field, item) for item in value)
    return _convert_one(field, value)


def _convert_one(field: _Field, value: Any) -> Any:
    if value is None:
        return None
    if field.entity is not None:
        return value if isinstance(value, field.entity) else build(field.entity, value)
    match field.kafka_type:
        case "error_code":
            return KioErrorCode(int(value))
        case "timedelta_i32":
            return i32Timedelta.parse(datetime.timedelta(milliseconds=value))
        case "timedelta_i64":
            return i64Timedelta.parse(datetime.timedelta(milliseconds=value))
        case "datetime_i64":
            return None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)
        case "uuid":
            return topic_uuid(value) if isinstance(value, str) else value
    return int(value) if isinstance(value, IntEnum) else value


def milliseconds(value: datetime.timedelta | datetime.datetime | None, none: int = -1) -> int:
    """A request's duration or timestamp field in milliseconds (`none` for a null timestamp)."""
    if value is None:
        return none
    if isinstance(value, datetime.datetime):
        return round((value - _EPOCH).total_seconds() * 1000)
    return round(value.total_seconds() * 1000)


def topic_uuid(topic_id: str) -> uuid.UUID | None:
    """Kafka's topic id text (base64url of 16 bytes, as our metadata keeps it) as a UUID; "" is none."""
    if not topic_id:
        return None
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


def topic_id_text(value: uuid.UUID | None) -> str:
    if value is None or value.int == 0:
        return ""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")
