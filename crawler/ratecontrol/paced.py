"""The politeness layer every controller shares; the control laws subclass `PacedController`."""

from __future__ import annotations

from abc import ABC, abstractmethod

from crawler.fetching.politeness import Backoff, RetrySettings
from crawler.ratecontrol.band import RTTBand
from crawler.ratecontrol.response_kind import ResponseKind, classify
from crawler.ratecontrol.settings import RateControlSettings


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


class PacedController(ABC):
    """The shared politeness layer: pacing from the last start, the Crawl-delay floor, pauses
    for Retry-After and for runs of failures, the RTT band and the trace counters. Subclasses
    supply the control law through `delay_s` and `_on_outcome`."""

    # Bans in a row that are answered only by the control law; later ones (without a
    # Retry-After) also pause the host with backoff. Controllers that do not slow down on a
    # ban pause at once.
    ban_grace = 0

    def __init__(self, settings: RateControlSettings, retry: RetrySettings, now: float) -> None:
        self.settings = settings
        self.rtt = RTTBand(settings.rtt_alpha, settings.rtt_interval_s, now)
        self.floor_s = 0.0
        self.last_start: float | None = None
        self.pause_until = now
        # The least network RTT seen (0 before one; see `on_network_rtt`): the network's round
        # trip to the server, a floor every page RTT pays whatever the server's load. The
        # least, as TCP keeps its minimum RTT: queues in the network only lengthen it.
        self.network_rtt_s = 0.0
        # URLs waiting for the server when the last request started (see `on_backlog`); 0
        # until the node says.
        self.backlog = 0
        # Host pauses are not jittered: one connection per host has nothing to desynchronize,
        # and a fixed schedule keeps the crawl reproducible.
        self._backoff = Backoff(retry.backoff_base_s, retry.backoff_cap_s)
        self._bad_streak = 0
        self._pages = 0
        self._bans = 0

    @property
    @abstractmethod
    def delay_s(self) -> float:
        """The control law's delay, before the Crawl-delay floor."""

    @abstractmethod
    def _on_outcome(self, now: float, outcome: ResponseKind) -> None:
        """React to a classified result (the RTT band is already updated for pages)."""

    def current_delay(self) -> float:
        return max(self.delay_s, self.floor_s)

    def earliest_next(self) -> float:
        if self.last_start is None:
            return self.pause_until
        return max(self.last_start + self.current_delay(), self.pause_until)

    def on_request_start(self, now: float) -> None:
        self.last_start = now

    def on_backlog(self, urls: int) -> None:
        self.backlog = urls

    def on_response(
        self, now: float, rtt_s: float, status: int | None, retry_after_s: float | None
    ) -> None:
        outcome = classify(status)
        if outcome is ResponseKind.PAGE:
            self._bad_streak = 0
            self._pages += 1
            # Only pages feed the RTT estimate: ban replies are usually cheap early exits and
            # errors are timeouts, neither says how fast the server serves pages.
            self._observe_rtt(now, rtt_s)
        else:
            self._bad_streak += 1
            self._bans += outcome is ResponseKind.BAN
        pause = self._pause_for(outcome, retry_after_s)
        if pause > 0:
            self.pause_until = max(self.pause_until, now + pause)
        self._on_outcome(now, outcome)

    def _observe_rtt(self, now: float, rtt_s: float) -> None:
        self.rtt.observe(now, rtt_s)

    def _pause_for(self, outcome: ResponseKind, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return retry_after_s  # clamped where the header is read (parse_retry_after)
        if outcome is ResponseKind.PAGE:
            return 0.0
        # One isolated error is usually that page's problem; a run of them is the host's.
        grace = self.ban_grace if outcome is ResponseKind.BAN else 1
        excess = self._bad_streak - grace
        return self._backoff.ceiling(excess) if excess >= 1 else 0.0

    def on_network_rtt(self, seconds: float) -> None:
        if seconds > 0 and (self.network_rtt_s == 0 or seconds < self.network_rtt_s):
            self.network_rtt_s = seconds

    def set_floor_delay(self, seconds: float) -> None:
        self.floor_s = max(0.0, seconds)

    def target_ppm(self) -> float | None:
        return None

    def concurrency_cap(self) -> int | None:
        return None

    def in_flight_limit(self) -> int:
        """Requests that may be in flight to the server at once: one, unless the law says more."""
        return 1

    def ahead_of_answers(self) -> bool:
        """Whether the pace allows the next request before the last one's answer is in (its
        delay under the smoothed RTT), or two in flight: then one connection's own handling
        of each page, between an answer and the next request, is what holds the rate."""
        srtt = self.rtt.srtt
        return self.in_flight_limit() > 1 or (srtt is not None and self.current_delay() < srtt)

    def unloaded_rtt_s(self) -> float | None:
        """The law's estimate of the server's RTT when idle, if it keeps one."""
        return None

    def trace(self, now: float) -> dict[str, float | None]:
        self.rtt.roll(now)
        row: dict[str, float | None] = {
            "delay_s": self.current_delay(),
            "concurrency_cap": self.concurrency_cap(),
            "pages": self._pages,
            "target_ppm": self.target_ppm(),
            "srtt_ms": _ms(self.rtt.srtt),
            "rtt_band_low_ms": _ms(self.rtt.low),
            "rtt_band_high_ms": _ms(self.rtt.high),
            "bans": self._bans,
            "unloaded_rtt_ms": _ms(self.unloaded_rtt_s()),
            "in_flight_limit": self.in_flight_limit(),
        }
        self._pages = self._bans = 0
        return row
