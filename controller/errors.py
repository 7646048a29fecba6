"""Exceptions of the metadata state machine. These are programmer errors and corrupt input at the
I/O edge, never the expected failures of a request: those are `ErrorCode` values in a response.

A record that fails to decode or that does not fit the state it is applied to means the metadata
log is corrupt or the active controller proposed something it should not have; every node would
hit the same record, so the state machine stops with the record's offset rather than guess.
"""

from __future__ import annotations


class MetadataError(Exception):
    """Base class of the metadata state machine's exceptions."""


class MetadataRecordError(MetadataError):
    """Bytes are not a well-formed metadata record or snapshot: unknown type tag, version, arity or field type."""


class MetadataApplyError(MetadataError):
    """A well-formed record contradicts the state: an unknown topic id, a stale broker epoch, a duplicate name."""
