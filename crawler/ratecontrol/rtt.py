"""docs/rate-control.md: the RTT-driven concurrency law, per server (mode "rtt") and node-wide."""

from __future__ import annotations

from crawler.fetching.politeness import RetrySettings
from crawler.ratecontrol.band import RTTBand
from crawler.ratecontrol.paced import PacedController
from crawler.ratecontrol.response_kind import ResponseKind
from crawler.ratecontrol.settings import RateControlSettings


class ConcurrencyCap:
    """MaxRequestCount, moved by the measured RTT.

    Per page response with RTT R (after the band rolled over): if R < S_min or R < RTT_MIN the
    cap rises by INCREASE, elif R > S_max or R > RTT_MAX it falls by DECREASE, clamped to
    [min_cap, max_cap]. In the first interval there is no band and only the absolute
    thresholds act. Bans and errors lower the cap (`lower`): a server that refuses work is
    saturated whatever its RTT says; they do not feed S.
    """

    def __init__(
        self, settings: RateControlSettings, now: float, initial: int, min_cap: int, max_cap: int
    ) -> None:
        self.settings = settings
        self.band = RTTBand(settings.rtt_alpha, settings.rtt_interval_s, now)
        self.cap = initial
        self.min_cap = min_cap
        self.max_cap = max_cap

    def on_rtt(self, now: float, rtt_s: float) -> int:
        """The step for one page response; returns the new cap."""
        law = self.settings.rtt
        band = self.band
        band.roll(now)  # the band compared against is the previous interval's
        if (band.low is not None and rtt_s < band.low) or rtt_s < law.rtt_min_s:
            self.cap = min(self.max_cap, self.cap + law.increase)
        elif (band.high is not None and rtt_s > band.high) or rtt_s > law.rtt_max_s:
            self.cap = max(self.min_cap, self.cap - law.decrease)
        band.observe(now, rtt_s)
        return self.cap

    def lower(self) -> int:
        """A ban or an error; returns the new cap."""
        self.cap = max(self.min_cap, self.cap - self.settings.rtt.decrease)
        return self.cap


class RTTConcurrencyController(PacedController):
    """`ConcurrencyCap` per host, as a duty cycle.

    One host gets one connection (docs/scheduling.md), so at most one of its requests is ever in
    flight and the cap cannot be a number of parallel requests. It is read as a duty cycle
    instead: the host's connection is kept busy cap/max_cap of the time, i.e. delay =
    SRTT * max_cap / cap. At max_cap requests go back to back; each DECREASE stretches the
    delay, each INCREASE shortens it, in steps of 1/max_cap of the connection's throughput.
    Before the first RTT is known the delay is initial_delay_s. (Node-wide, the same law
    bounds the requests actually in flight: `crawler.ratecontrol.inflight`.)
    """

    def __init__(self, settings: RateControlSettings, retry: RetrySettings, now: float) -> None:
        super().__init__(settings, retry, now)
        law = settings.rtt
        self.limit = ConcurrencyCap(settings, now, law.initial_cap, law.min_cap, law.max_cap)
        self.rtt = self.limit.band  # the law's S and band are the ones traced

    @property
    def cap(self) -> int:
        return self.limit.cap

    @property
    def delay_s(self) -> float:
        cfg = self.settings
        if self.rtt.srtt is None:
            return cfg.initial_delay_s
        delay = self.rtt.srtt * cfg.rtt.max_cap / self.cap
        return min(cfg.max_delay_s, max(cfg.min_delay_s, delay))

    def on_rtt(self, now: float, rtt_s: float) -> int:
        """The docs/rate-control.md step for one response; returns the new cap."""
        return self.limit.on_rtt(now, rtt_s)

    def _observe_rtt(self, now: float, rtt_s: float) -> None:
        self.limit.on_rtt(now, rtt_s)

    def _on_outcome(self, now: float, outcome: ResponseKind) -> None:
        if outcome is not ResponseKind.PAGE:
            self.limit.lower()

    def concurrency_cap(self) -> int | None:
        return self.cap
