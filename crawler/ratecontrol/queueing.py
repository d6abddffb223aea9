"""The adaptive controller's delay signal: a server's unloaded RTT and its current RTT."""

from __future__ import annotations

import math
from collections import deque


class QueueingDelay:
    """The adaptive controller's delay signal: how far a server's page RTT has risen above its
    unloaded RTT (SPEC section 2's reading of a rising RTT: queueing).

    Both estimates are interquartile means of log RTT (the mean of the middle half): logs,
    because response times are skewed; the middle half, because a few outliers (a slow page,
    the crawler's own process descheduled on a loaded machine) must not move either one, while
    averaging the middle half keeps nearly the precision of a plain mean.

    - Unloaded RTT U: over the last `history` RTTs of requests that met a connection busy at
      most `duty` of the time (rate x expected RTT), each divided by (1 + busy share): a server
      working one request at a time (M/M/1) stretches its response time by exactly that at
      such a load, one with more workers by less, so the estimate errs low, on the polite
      side. Known from `samples` of them. Refreshed whenever requests go out that slowly: after
      the host sat idle, and whenever the controller itself brakes that far, so a U learnt too
      low corrects itself (as BBR's PROBE_RTT refreshes its minimum RTT). Never below
      `floor_s`, what the caller learnt otherwise (a server whose RTT does not rise with the
      rate: the busy share did not stretch it).
    - Current RTT R: over the last `recent` page RTTs, whatever the load.
    """

    def __init__(self, duty: float, samples: int, history: int, recent: int) -> None:
        self.duty = duty
        self.samples = samples
        self._unloaded: deque[float] = deque(maxlen=history)
        self._recent: deque[float] = deque(maxlen=recent)
        self.floor_s = 0.0  # a lower bound on U the caller has learnt otherwise

    def observe(self, rtt_s: float, duty: float) -> None:
        """A page RTT, and the share of the time the connection was busy when it was sent."""
        log_rtt = math.log(max(rtt_s, 1e-6))
        if duty <= self.duty * (1 + 1e-9):
            # The worst case, one request at a time, stretched the RTT by (1 + duty): taken
            # out, so the estimate errs low (slower, more polite) on servers with more workers.
            self._unloaded.append(log_rtt - math.log1p(duty))
        self._recent.append(log_rtt)

    @property
    def known(self) -> bool:
        return len(self._unloaded) >= self.samples

    @property
    def unloaded_s(self) -> float | None:
        if not self._unloaded:
            return None
        return max(self.floor_s, math.exp(_interquartile_mean(self._unloaded)))

    @property
    def current_s(self) -> float | None:
        return math.exp(_interquartile_mean(self._recent)) if self._recent else None


def _interquartile_mean(values: deque[float]) -> float:
    ordered = sorted(values)
    cut = len(ordered) // 4
    middle = ordered[cut : len(ordered) - cut]
    return sum(middle) / len(middle)
