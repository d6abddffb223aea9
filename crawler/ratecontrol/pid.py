"""The target-rate controller, a PID on the inter-request delay (mode "pid";
docs/rate-control.md)."""

from __future__ import annotations

import math

from crawler.fetching.politeness import RetrySettings
from crawler.ratecontrol.paced import PacedController
from crawler.ratecontrol.response_kind import ResponseKind
from crawler.ratecontrol.settings import RateControlSettings

# A window in which the host was under the controller's pacing for less than this share of
# the time (the rest: Retry-After pauses, or the node loop not sending although allowed) says
# little about the delay, so it does not move the delay.
PID_MIN_ACTIVE_SHARE = 0.5


class PIDDelayController(PacedController):
    """docs/rate-control.md: hold a target of `s` pages/min by moving the delay once per window,

        t_k = t_{k-1} + kp*(s - n) + ki*sum + kd*diff

    with `sum` the running sum of errors and `diff` the change of error since the last window.

    The update is in velocity form: the kp term already accumulates the error into the delay,
    so kp alone removes steady-state error (it is the integral action of a classical
    controller), kd acts on the current error (classical proportional action, damping) and ki
    is a double integral, which only adds overshoot on this static plant
    (rate = 60/max(delay, fetch time)). The defaults are therefore the classical PI pair
    kp = -0.045, kd = -0.005, ki = 0, chosen by a grid search on simulated plants (README.md,
    Rate control, has the search and its figures).

    Windows. `n` is a per-minute rate: pages * 60 / active_s, where active_s is the window
    length minus the time the host was held back by something other than this controller
    (Retry-After and backoff pauses, or the node loop sending later than allowed). A window
    with less than half its time active does not move the delay. The gains are stated per
    60-second window and scaled for other lengths so the wall-clock dynamics stay the same:
    kp by w/60 and ki by (w/60)^2 (it integrates twice). kd is scaled by w/60 as well: in a
    short window the count is dominated by quantization (0 or 1 page in a 1 s window is 0 or
    60 pages/min) and an unscaled derivative would pass that noise straight into the delay.
    Short windows (1-5 s) therefore take small steps, which already averages their noisy
    counts; `smoothing` < 1 adds an EWMA of n on top (n <- smoothing*n + (1-smoothing)*n_prev).

    Targets. Near the target s the plant is n = 60/t pages/min per fetch slot, so a change of
    delay moves n by dn/dt = -s**2/60: the loop gain grows with the square of the target, and
    gains that settle at the documents' 40 pages/min oscillate without bound from about 60
    pages/min. The gains are
    therefore stated for `reference_ppm` (40) and scaled by (40/s)**2, which leaves the
    worked example and the documents' run unchanged and gives every target the same settling.
    The steps are then small far from the target, so start at t0 = 60/s (or close): from
    1 s to a 0.2 s target takes dozens of windows.

    Anti-windup: the delay is clamped to [max(min_delay, Crawl-delay, SRTT), max_delay]
    (below the fetch time a shorter delay changes nothing, so going lower only winds up), it
    is never negative, and the error is not integrated while the delay sits on the bound it
    is pushed against (conditional integration).
    """

    def __init__(self, settings: RateControlSettings, retry: RetrySettings, now: float) -> None:
        super().__init__(settings, retry, now)
        assert settings.target_ppm is not None  # RateControlSettings requires it in mode "pid"
        self.target = settings.target_ppm
        law = settings.pid
        scale = law.window_s / 60.0
        reference = law.reference_ppm
        gain = 1.0 if reference is None else (reference / self.target) ** 2
        self.kp = law.kp * scale * gain
        self.ki = law.ki * scale * scale * gain
        self.kd = law.kd * scale * gain
        self._delay = settings.initial_delay_s
        self._error_sum = 0.0
        self._last_error: float | None = None
        self._smoothed_n: float | None = None
        self._window_start = now
        self._window_pages = 0
        self._window_idle = 0.0  # seconds of this window the controller was not pacing
        # When the controller last allowed the next request while the node had not sent it;
        # None while a request is in flight.
        self._ready_at: float | None = None
        self.last_n: float | None = None  # the last window's measured rate (pages/min)

    @property
    def delay_s(self) -> float:
        return self._delay

    def bounds(self) -> tuple[float, float]:
        low = max(self.settings.min_delay_s, self.floor_s, self.rtt.srtt or 0.0)
        return low, max(low, self.settings.max_delay_s)

    def update(self, n_ppm: float) -> float:
        """One step of the control law for a window that measured `n_ppm`; the new delay."""
        if self._smoothed_n is None:
            self._smoothed_n = n_ppm
        else:
            weight = self.settings.pid.smoothing
            self._smoothed_n = weight * n_ppm + (1 - weight) * self._smoothed_n
        error = self.target - self._smoothed_n
        low, high = self.bounds()
        # Negative gains: a negative error (too fast) pushes the delay up.
        pushed_up = error < 0
        saturated = (self._delay >= high and pushed_up) or (self._delay <= low and error > 0)
        if not saturated:
            self._error_sum += error
        diff = 0.0 if self._last_error is None else error - self._last_error
        self._last_error = error
        delay = self._delay + self.kp * error + self.ki * self._error_sum + self.kd * diff
        self._delay = min(high, max(low, delay))
        return self._delay

    def _idle_between(self, start: float, end: float) -> float:
        if self._ready_at is None:
            return 0.0
        return max(0.0, end - max(start, self._ready_at))

    def _roll(self, now: float) -> None:
        window = self.settings.pid.window_s
        while now >= self._window_start + window:
            end = self._window_start + window
            active = window - self._window_idle - self._idle_between(self._window_start, end)
            if active >= PID_MIN_ACTIVE_SHARE * window:
                self.last_n = self._window_pages * 60.0 / active
                self.update(self.last_n)
            self._window_start = end
            self._window_pages = 0
            self._window_idle = 0.0
            if self._ready_at is not None and self._ready_at <= end:
                # Idle from here to `now`: those windows would all be skipped, jump over them.
                self._window_start += window * math.floor((now - end) / window)

    def on_request_start(self, now: float) -> None:
        self._roll(now)
        self._window_idle += self._idle_between(self._window_start, now)
        self._ready_at = None
        super().on_request_start(now)

    def on_response(
        self, now: float, rtt_s: float, status: int | None, retry_after_s: float | None
    ) -> None:
        self._roll(now)
        super().on_response(now, rtt_s, status, retry_after_s)

    def _on_outcome(self, now: float, outcome: ResponseKind) -> None:
        if outcome is ResponseKind.PAGE:
            self._window_pages += 1
        # From here on, time the node lets pass beyond our own pacing is not ours to count.
        start = self.last_start if self.last_start is not None else now
        self._ready_at = max(now, start + self.current_delay())

    def target_ppm(self) -> float | None:
        return self.target

    def trace(self, now: float) -> dict[str, float | None]:
        self._roll(now)
        return super().trace(now)
