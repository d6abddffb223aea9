"""How many requests a server had at once, from its log: for the tests that bound the requests
in flight (per node in mode "rtt", per server with two lanes)."""

from __future__ import annotations

from collections.abc import Iterable


def most_at_once(spans: Iterable[tuple[float, float]]) -> int:
    """The most (arrival, departure) spans that overlap at one time; an answer that leaves at
    the moment the next request arrives does not overlap it."""
    events = sorted(
        [event for arrived, left in spans for event in ((arrived, 1), (left, -1))],
        key=lambda event: (event[0], event[1]),
    )
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most
