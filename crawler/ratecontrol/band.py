"""docs/rate-control.md's RTT estimator and reference band."""

from __future__ import annotations

import math


class RTTBand:
    """S <- (1-a)S + aR per response, and per TIME_INTERVAL the min and max of S, which become
    the reference band [low, high] of the next interval."""

    def __init__(self, alpha: float, interval_s: float, now: float) -> None:
        self.alpha = alpha
        self.interval_s = interval_s
        self.srtt: float | None = None
        self.low: float | None = None
        self.high: float | None = None
        self._end = now + interval_s
        self._min = math.inf
        self._max = -math.inf
        self._samples = 0

    def roll(self, now: float) -> None:
        """Close the interval(s) that ended by `now`. An interval without samples keeps the old
        band: an idle host has no newer evidence about its RTT."""
        if now < self._end:
            return
        if self._samples:
            self.low, self.high = self._min, self._max
        self._min, self._max, self._samples = math.inf, -math.inf, 0
        self._end += self.interval_s * (math.floor((now - self._end) / self.interval_s) + 1)

    def observe(self, now: float, rtt_s: float) -> None:
        self.roll(now)
        # The first sample initializes S, as TCP does, instead of dragging it up from zero.
        self.srtt = (
            rtt_s if self.srtt is None else (1 - self.alpha) * self.srtt + (self.alpha * rtt_s)
        )
        self._min = min(self._min, self.srtt)
        self._max = max(self._max, self.srtt)
        self._samples += 1
