"""SimNetwork: decides the fate of every message — when it arrives, twice, or never.

Links are directed: a partition is a set of blocked (source, destination) pairs, so symmetric
splits, one-way cuts and isolated nodes are all the same thing. A message on a blocked link is
dropped when sent (and a message in flight when a link is cut still arrives: it was on the wire).
Otherwise it is dropped with `drop_probability`, delivered after a uniform delay (sometimes a long
one, which reorders it behind later messages), and maybe duplicated with its own delay. During
the liveness phase `faulty` is False: no drops, duplicates or long delays, no blocked links.
"""

from __future__ import annotations

import random

from tests.sim.options import FaultOptions


class SimNetwork:
    """The fate of messages (see the module docstring). State: the blocked links and whether faults
    are on; all randomness comes from the run's generator. Owner: the Simulation."""

    def __init__(self, rng: random.Random, options: FaultOptions) -> None:
        self.rng = rng
        self.options = options
        self.blocked: set[tuple[int, int]] = set()
        self.faulty = True
        self.sent_count = 0
        self.dropped_count = 0

    def delivery_times(self, source_id: int, destination_id: int, now_ms: int) -> list[int]:
        """When the copies of one message arrive (empty: dropped)."""
        self.sent_count += 1
        options = self.options
        if (source_id, destination_id) in self.blocked:
            self.dropped_count += 1
            return []
        if self.faulty and self.rng.random() < options.drop_probability:
            self.dropped_count += 1
            return []
        times = [now_ms + self._delay_ms()]
        if self.faulty and self.rng.random() < options.duplicate_probability:
            times.append(now_ms + self._delay_ms())
        return times

    def _delay_ms(self) -> int:
        options = self.options
        if self.faulty and self.rng.random() < options.long_delay_probability:
            return self.rng.randint(options.delay_max_ms, options.long_delay_max_ms)
        return self.rng.randint(options.delay_min_ms, options.delay_max_ms)

    def partition(self, node_ids: list[int]) -> str:
        """Cut some links at random; return a description for the trace."""
        kind = self.rng.choice(("split", "isolate", "one-way", "clog"))
        if kind == "split":
            shuffled = list(node_ids)
            self.rng.shuffle(shuffled)
            cut = self.rng.randint(1, len(shuffled) - 1)
            left, right = shuffled[:cut], shuffled[cut:]
            self.blocked |= {(a, b) for a in left for b in right} | {(b, a) for a in left for b in right}
            return f"split {sorted(left)} | {sorted(right)}"
        if kind == "isolate":
            node = self.rng.choice(node_ids)
            self.blocked |= {(node, other) for other in node_ids if other != node}
            self.blocked |= {(other, node) for other in node_ids if other != node}
            return f"isolate {node}"
        source, destination = self.rng.sample(node_ids, 2)
        if kind == "one-way":
            self.blocked.add((source, destination))
            return f"one-way {source}->{destination}"
        # Swizzle-clog (FoundationDB): cut every link out of one node, it still hears the others.
        self.blocked |= {(source, other) for other in node_ids if other != source}
        return f"clog {source}->*"

    def heal(self) -> None:
        self.blocked.clear()
