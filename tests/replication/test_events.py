"""The partition core's events (replication/events.py): what the broker core builds from them."""

from __future__ import annotations

import dataclasses

from replication.events import ConsumerFetch, FollowerFetch


def test_a_renumbered_fetch_keeps_every_other_field() -> None:
    """`renumbered` builds the event by hand (on every read): it must agree with
    `dataclasses.replace`, so a field added to a fetch is not dropped on the way to the core."""
    fetches = (ConsumerFetch(5, 2, 3, 4, True), FollowerFetch(1, 2, 3, 4, 5, 6, 7, 8))
    for fetch in fetches:
        assert fetch.renumbered(11, 12) == dataclasses.replace(fetch, request_id=11, max_bytes=12)
        values = [getattr(fetch, field.name) for field in dataclasses.fields(fetch)]
        assert len(set(values)) == len(values), "distinct values, so a field swapped shows"
