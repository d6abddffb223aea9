"""The adaptive controller's delay signal: a server's unloaded RTT and its current RTT."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque

# The interquartile range of a normal distribution in standard deviations: the spread of log
# RTT read from its middle half, as robust to outliers as the estimates themselves.
_IQR_PER_SD = 1.349
# R is averaged over `recent` pages on a server whose RTTs spread at most this much (log RTT's
# standard deviation; about 0.3 on websim's formula servers and on its queues when no one else
# loads them), and over more, up to MAX_RECENT_FACTOR times as many, where they spread wider,
# so that R's error stays what it is over `recent` pages at this spread. A server kept busy by
# other users swings its RTT with their busy periods (a one-worker queue at 60% background
# load: spread 0.7-0.8): averaged over 16 pages, R crossed the setpoint on their swings and
# braked the crawler to a third of the rate back to back keeps polite (simulated, twelfth
# round, bench/results/politeness/NOTES.md).
REFERENCE_SPREAD = 0.35
MAX_RECENT_FACTOR = 4


class QueueingDelay:
    """The adaptive controller's delay signal: how far a server's page RTT has risen above its
    unloaded RTT (docs/rate-control.md's reading of a rising RTT: queueing).

    Both estimates are interquartile means of log RTT (the mean of the middle half): logs,
    because response times are skewed; the middle half, because a few outliers (a slow page,
    the crawler's own process descheduled on a loaded machine) must not move either one, while
    averaging the middle half keeps nearly the precision of a plain mean.

    - Unloaded RTT U: over the last `history` RTTs of requests that met a server busy at
      most `duty` of the time (rate x expected time in the server), each with its time in
      the server divided by (1 + busy share): a server working one request at a time (M/M/1)
      stretches its response time by exactly that at any load, one with more workers by
      less, so the estimate errs low, on the polite side. The time in the server is the RTT
      less `latency_s`, the network's round trip (the caller's reading of the kernel's least
      RTT on the connection, 0 until it has one): that part does not queue, and stretched
      with the rest it would put U low by up to the busy share times the latency.
      Known from `samples` of them. At first only requests sent at a low busy share count
      (where a server with more workers is misread least); once the caller has seen the server
      queue, `count_every_load` lets every page in, so that U keeps firming up over the crawl
      (its standard error shrinking as one over the root of the count) and follows a server
      that slows down or speeds up. Never below `floor_s`, what the caller learnt otherwise
      (a server whose RTT does not rise with the rate: the busy share did not stretch it).
    - Current RTT R: over the last `recent` page RTTs, whatever the load; more on a server
      whose unloaded RTTs spread wider than REFERENCE_SPREAD (see there).
    """

    def __init__(self, duty: float, samples: int, history: int, recent: int) -> None:
        self.duty = duty
        self.samples = samples
        self._unloaded: deque[float] = deque(maxlen=history)
        # The same samples kept sorted, updated per sample (a bisection and a shift in C)
        # instead of sorted afresh on every read: U is read on every response once every page
        # feeds it, and sorting `history` samples each time was half the controller's CPU.
        self._unloaded_sorted: list[float] = []
        self.recent = recent
        self._recent: deque[float] = deque(maxlen=MAX_RECENT_FACTOR * recent)
        self.floor_s = 0.0  # a lower bound on U the caller has learnt otherwise
        self.latency_s = 0.0  # the network's round trip, which does not queue
        # (interquartile mean, spread) of the log unloaded samples, None when stale.
        self._unloaded_stats: tuple[float, float] | None = None
        # R, None when stale: read several times per response by the controller.
        self._current: float | None = None

    def observe(self, rtt_s: float, duty: float) -> None:
        """A page RTT, and the share of the time the server was busy with this connection's
        requests when it was sent (rate x expected time in the server)."""
        rtt_s = max(rtt_s, 1e-6)
        if duty <= self.duty * (1 + 1e-9):
            # The worst case, one request at a time, stretched the time in the server by
            # (1 + duty): taken out, so the estimate errs low (slower, more polite) on servers
            # with more workers.
            in_server = max(rtt_s - self.latency_s, 0.0)
            sample = math.log(self.latency_s + in_server / (1.0 + duty))
            if len(self._unloaded) == self._unloaded.maxlen:
                oldest = self._unloaded[0]
                del self._unloaded_sorted[bisect.bisect_left(self._unloaded_sorted, oldest)]
            self._unloaded.append(sample)
            bisect.insort(self._unloaded_sorted, sample)
            self._unloaded_stats = None
        self._recent.append(math.log(rtt_s))
        self._current = None

    def count_every_load(self) -> None:
        """From now on every page RTT is an unloaded sample once divided by (1 + busy share):
        the caller has seen the server queue as one that works one request at a time."""
        self.duty = math.inf

    @property
    def known(self) -> bool:
        return len(self._unloaded) >= self.samples

    def _stats(self) -> tuple[float, float]:
        if self._unloaded_stats is None:
            middle = _middle_half(self._unloaded_sorted)
            spread = (middle[-1] - middle[0]) / _IQR_PER_SD
            self._unloaded_stats = (sum(middle) / len(middle), spread)
        return self._unloaded_stats

    @property
    def unloaded_s(self) -> float | None:
        if not self._unloaded:
            return None
        return max(self.floor_s, math.exp(self._stats()[0]))

    @property
    def unloaded_error(self) -> float:
        """The standard error of log U (its spread over the root of the sample count); 0
        before the first sample."""
        if not self._unloaded:
            return 0.0
        return self._stats()[1] / math.sqrt(len(self._unloaded))

    @property
    def current_s(self) -> float | None:
        if self._current is None and self._recent:
            window = self.recent_window
            latest = itertools.islice(self._recent, max(0, len(self._recent) - window), None)
            self._current = math.exp(_interquartile_mean(sorted(latest)))
        return self._current

    @property
    def recent_window(self) -> int:
        """The pages R is averaged over: `recent`, or more where the RTTs spread wider than
        REFERENCE_SPREAD (once U is known)."""
        if not self.known:
            return self.recent
        spread = self._stats()[1]
        factor = min(float(MAX_RECENT_FACTOR), max(1.0, (spread / REFERENCE_SPREAD) ** 2))
        return round(self.recent * factor)


def _middle_half(ordered: list[float]) -> list[float]:
    cut = len(ordered) // 4
    return ordered[cut : len(ordered) - cut]


def _interquartile_mean(ordered: list[float]) -> float:
    """The mean of the middle half of `ordered` (sorted)."""
    middle = _middle_half(ordered)
    return sum(middle) / len(middle)
