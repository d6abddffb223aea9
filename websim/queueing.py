"""Servers that never say no but slow down under load: a queueing model of response time.

Most of the web has no rate limiter: a server that gets more requests than it can serve
answers every one of them, later. websim's degrading hosts model that as an M/M/1 queue: one
request is worked on at a time, at `capacity_rps` requests per second (service time
s = 1/capacity), so at an arrival rate `rate` (utilization rho = rate/capacity) a request spends
s/(1 - rho) in the server on average. On top comes the host's network latency m, so the median
response time is

    rtt(rate) = m + s / (1 - rho)

and each response is drawn lognormal around it (the web's `latency_sigma`, as for every host).
The arrival rate is what the host itself sees: the rate of the requests that reached it, averaged
over about the last `ARRIVAL_WINDOW_S` (the crawler's own load stands in for the shared queue
it adds to). At rho >= 1 the queue grows without bound; the model caps rho at
`MAX_UTILIZATION`, where a response takes 50 service times and a client's timeout decides.

The ground truth a benchmark needs (`unloaded_rtt_s`, `rate_at_inflation`) is exact for the
median, since the lognormal draw keeps the median.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ARRIVAL_WINDOW_S = 1.0
MAX_UTILIZATION = 0.98


@dataclass(frozen=True)
class QueueingModel:
    """The median response time of a degrading host as a function of its arrival rate."""

    latency_s: float  # network latency m (median), paid whatever the load
    capacity_rps: float  # requests per second the server completes when busy (1 / service time)

    @property
    def service_s(self) -> float:
        return 1.0 / self.capacity_rps

    def median_rtt_s(self, rate_rps: float) -> float:
        rho = min(MAX_UTILIZATION, max(0.0, rate_rps) / self.capacity_rps)
        return self.latency_s + self.service_s / (1.0 - rho)

    @property
    def unloaded_rtt_s(self) -> float:
        return self.median_rtt_s(0.0)

    def rate_at_inflation(self, factor: float) -> float:
        """The arrival rate at which the median response time is `factor` x the unloaded one,
        e.g. 2.0: where it doubles. Solves m + s/(1 - rho) = factor * (m + s) for rho."""
        if factor <= 1.0:
            return 0.0
        queue_s = factor * self.unloaded_rtt_s - self.latency_s  # s / (1 - rho)
        return self.capacity_rps * (1.0 - self.service_s / queue_s)


class ArrivalRate:
    """Requests per second seen by a host: the instantaneous rate 1/gap of each arrival,
    averaged over time (weight 1 - exp(-gap / window_s)), so a steady stream of `r` requests
    per second reads exactly `r`, the past fades within a few windows, and the first request
    meets an idle host (0)."""

    def __init__(self, window_s: float = ARRIVAL_WINDOW_S) -> None:
        self.window_s = window_s
        self._rate = 0.0
        self._stamp: float | None = None

    def arrive(self, now: float) -> float:
        """Count one request arriving at `now`; the arrival rate it meets."""
        if self._stamp is not None:
            gap = max(now - self._stamp, 1e-9)
            weight = 1.0 - math.exp(-gap / self.window_s)
            self._rate = (1 - weight) * self._rate + weight / gap
        self._stamp = now
        return self._rate
