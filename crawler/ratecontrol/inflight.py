"""docs/rate-control.md's MaxRequestCount for a whole node (mode "rtt")."""

from __future__ import annotations

from crawler.ratecontrol.response_kind import ResponseKind, classify
from crawler.ratecontrol.rtt import ConcurrencyCap
from crawler.ratecontrol.settings import RateControlSettings


class InFlightLimit:
    """The requests in flight at once, over all of the node's connections, never exceed a
    `ConcurrencyCap` fed with every response of the node, between `[rate_control.rtt] min_cap`
    and the node's connection count. The node's workers wait for a free slot before sending."""

    def __init__(self, settings: RateControlSettings, max_connections: int, now: float) -> None:
        initial = min(settings.rtt.initial_cap, max_connections)
        self.law = ConcurrencyCap(
            settings, now, initial, min(settings.rtt.min_cap, initial), max_connections
        )
        self.in_flight = 0

    @property
    def cap(self) -> int:
        return self.law.cap

    def may_start(self) -> bool:
        return self.in_flight < self.cap

    def start(self) -> None:
        self.in_flight += 1

    def finish(self, now: float, rtt_s: float, status: int | None) -> None:
        """A request ended (status None: no answer); its RTT moves the cap."""
        self.in_flight -= 1
        if classify(status) is ResponseKind.PAGE:
            self.law.on_rtt(now, rtt_s)
        else:
            self.law.lower()


def make_in_flight_limit(
    settings: RateControlSettings, max_connections: int, now: float
) -> InFlightLimit | None:
    """The node-wide in-flight limit of mode "rtt"; the other modes pace each host only."""
    return InFlightLimit(settings, max_connections, now) if settings.mode == "rtt" else None
