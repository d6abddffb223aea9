"""Congestion control per server, the default (mode "adaptive")."""

from __future__ import annotations

import math
from collections import deque

from crawler.fetching.politeness import RetrySettings
from crawler.ratecontrol.paced import PacedController
from crawler.ratecontrol.queueing import QueueingDelay
from crawler.ratecontrol.response_kind import ResponseKind
from crawler.ratecontrol.settings import RateControlSettings

# The adaptive controller takes the rate served between two bans as the host's limit when at
# least this many pages came in between and the host was left idle (no URL queued, the node
# late) for at most this share of the time; idle time lets a token bucket refill unseen.
SERVED_MIN_PAGES = 8
SERVED_MAX_IDLE_SHARE = 0.1
# Responses in a row at the adaptive controller's ceiling, RTT below the target, with the
# unloaded RTT known, that show a host is fast (see AdaptiveRateController).
PROOF_SAMPLES = 4
# The adaptive controller's RTT estimates (see QueueingDelay): the current RTT over this many
# recent pages (a lag of about half of them), the unloaded RTT over this many unloaded ones
# (its standard error at 256 samples of spread 0.25 is 1.6%).
RECENT_SAMPLES = 16
UNLOADED_HISTORY = 256
# Responses on which the delay side braked, the ceiling lifted, that show a server queues:
# from then on every page feeds U (see AdaptiveRateController). A server with several workers
# brakes only on noise, rarely and in short runs, while one that queues brakes on about half
# of its responses once settled.
QUEUEING_BRAKES = 2 * RECENT_SAMPLES
# The flat check (see AdaptiveRateController): responses in a row sent at this multiple of
# the ceiling's rate, after which R shows whether the RTT rose with the rate. Far enough
# above the rate where a server that queues reaches the target, even with network latency
# (1.6x the ceiling's rate at 5 ms of a 40 ms RTT) and the overshoot of R's lag, that such a
# server is not read as flat: its U raised to the ceiling's RTT, it would be overrun.
FLAT_RATE_FACTOR = 2.5
# The rate step test (see `_step_test`): PROBE_AFTER responses after the ceiling lifted (a
# server with fewer pages is not worth its burst), or EARLY_PROBE_AFTER when at least
# EARLY_PROBE_BACKLOG URLs wait for the server then (the pages before the test are then mostly
# the ceiling's, far from the test's rate, and a server that does not queue runs back to back
# about 50 pages sooner; on a server of 80 pages the burst would be a fifth of its pages, and
# a formula server's median reached 1.56x, simulated). PROBE_SAMPLES responses sent back to
# back, the first PROBE_SETTLE of them left out of the fit (a queue takes time to build, one
# whose arrivals are averaged over time, as websim's formula servers, longer). The fit takes
# the line this many standard errors of its slope steeper than fitted (1.5 gave 1 of 200 runs
# of a formula server with latency a floor 0.9997 of the truth; 1.75 at most 0.987, and the
# same speed on flat servers).
PROBE_AFTER = 4 * RECENT_SAMPLES
EARLY_PROBE_AFTER = RECENT_SAMPLES // 2
EARLY_PROBE_BACKLOG = 2 * PROBE_AFTER
PROBE_SAMPLES = 4 * RECENT_SAMPLES
PROBE_SETTLE = RECENT_SAMPLES
PROBE_CONFIDENCE = 1.75
# A test stopped by a clear rise of R still fits its line, the slope this many standard errors
# steep: on a server shared with other users, their busy periods stop the test as often as the
# crawler's own rate does, and the line through the pages tells the two apart (a formula server
# whose RTT rose with the rate gets no floor). Steeper than PROBE_CONFIDENCE because such a test
# is shorter and the stop itself picks the runs whose last pages were slow (2.0 put the
# 60%-loaded one-worker queue's median at 1.36x; 2.5 keeps it at 1.28x, as before).
PROBE_STOPPED_CONFIDENCE = 2.5
# A test that gives neither a floor nor a slope this many standard errors steep (a clear rise
# of the RTT with the rate) said too little: RTTs of wide spread, or other users' busy periods.
# It is asked again PROBE_SAMPLES responses later, up to STEP_TESTS tests in all, the line
# fitted through every test's pages (a second test: 0.825 of the best polite rate on the queue
# servers against 0.802, simulated; a third or fourth added nothing and cost the formula
# servers speed, bench/results/politeness/NOTES.md, eleventh round).
RISE_EVIDENCE = 3.0
STEP_TESTS = 2
# After a test that shows the server queues, the rate goes back to this share of its rate
# before the test (as BBR drains the queue its probe built).
PROBE_DRAIN = 0.8
# The in-flight test (see `_in_flight_test`): two requests in flight for this many windows of
# R, looked at every half window; the first window lets R take in the second request's RTTs.
IN_FLIGHT_TEST_WINDOWS = 2
# ...and only on a server with at least this many URLs waiting: fewer are crawled as fast with
# one request in flight as the test would take to say.
IN_FLIGHT_MIN_BACKLOG = 4 * RECENT_SAMPLES
# The (rate, RTT) samples the fit keeps: every page's until the test ends.
FIT_SAMPLES = 256
# Requests count as unloaded up to this multiple of the ceiling's busy share: paced at the
# ceiling from one RTT estimate, a request meets the next one, which may be a little higher.
# Small: on a server with several workers, U is the ceiling's RTT divided by up to (1 + this
# times the share), which must stay well under the setpoint for the server to show it is fast.
UNLOADED_DUTY_MARGIN = 1.1
# Back to back, the pace is at most this share of the typical fetch time (see `_max_rate`).
BACK_TO_BACK_SHARE = 0.5
# The delay side's largest step, as a factor between the current rate and the rate it aims at.
MAX_RATE_ERROR = 2.0


class AdaptiveRateController(PacedController):
    """Congestion control per host; the default, because it needs no limit from the user.

    The state is a request rate r (1/delay). Two signals brake it: RTT inflation (queueing:
    a server that slows down instead of refusing, most of the web) and bans (429/503: loss).

    Delay side (`QueueingDelay`): with U the unloaded RTT and R the current RTT (interquartile
    means of log RTT), the inflation R/U is what the controller steers: to the setpoint,
    `rtt_target` (1.5, what politeness allows) less `rtt_confidence` (0.5) standard errors
    of log U, so that a host whose U rests on few samples settles lower and rises as U firms
    up (3% under 1.5 at 16 samples of spread 0.25, 0.8% at 256). Queueing under
    `rtt_noise_s` (R - U) never brakes: on fast hosts that much is the client's own
    scheduling jitter.

    - The ceiling: until the host has shown it is fast, r <= 1 / ((1 + f) * SRTT) with f =
      `unproven_delay_factor` (2): the connection is busy at most 1/(1 + f) of the time, and
      the RTTs of requests sent at most that busy, each divided by (1 + busy share), are
      unloaded ones (`QueueingDelay`); `base_samples` (16) of them make U known. Busier than
      Heritrix's default (f = 5) so that U is learnt from twice the samples in the same time.
      The host shows it is fast when, with U known, PROOF_SAMPLES responses in a row sent at
      90% of the ceiling or more kept R/U under the setpoint. Then only the signals below
      bound r. The pace starts at the ceiling as soon as the first page's RTT is known:
      climbing to it from 1/initial_delay_s would take about 2 x initial_delay_s on any host.
    - U keeps being learnt: once the delay side has braked on QUEUEING_BRAKES responses past
      the ceiling (a server that queues brakes on about half of its responses once settled,
      one with several workers only on noise), every page feeds U, divided by (1 + its busy
      share) as at the ceiling, exact for a server that works one request at a time at any
      load. Where a host settles is then set by hundreds of samples, not by the ceiling's
      few, and U follows a server that slows down or speeds up.
    - Network latency L does not queue: the server's load stretches only the time in the
      server, RTT - L. L is the least RTT the kernel measured on the connection to the host
      (`on_network_rtt`: the TCP handshake and the acknowledgements the server's kernel sends
      before the server's work, whatever its load), 0 until there is one. Every division
      above and every busy share applies to RTT - L (U = L + (RTT - L) / (1 + busy share)).
      Without it, the division read U low by up to the busy share times L, and a host whose
      RTT is a fifth network settled at 1.3x instead of the setpoint.
    - Slow start: until the first ban, r doubles every `slow_start_doubling_s` of pacing
      (per clean response, r *= 2**(delay/doubling), so idle time does not count), until R
      has risen by half the target's distance from U over its value at the ceiling (as
      HyStart ends TCP's on a rise of delay), or r has reached the rate at the setpoint that
      U and L give for one worker (`_rate_at_setpoint`): R lags the rate, and a server's
      queue takes time to build, so doubling on until R shows the rise overshoots. On a
      server that queues, the division of the ceiling's RTTs by (1 + busy share) already
      reads as that rise, and slow start ends at the ceiling.
    - Then, per clean response, r *= (rate at the target / r) ** rtt_gain, the rate at the
      target as a server working one request at a time (M/M/1, the most delay-sensitive
      kind) would have it: inflation of the time in the server I = 1/(1 - busy share), so
      the target's rate is r * busy share at the setpoint / busy share now, capped at
      MAX_RATE_ERROR times r where the RTT shows little or no inflation (multiplicative
      increase). On such a server this closes `rtt_gain` of the distance (in logs) per
      response whatever the distance, so it comes up from the ceiling fast and settles
      without oscillating: R averages RECENT_SAMPLES responses, a lag of about half of them,
      over which the steps add up to well under the distance. Per response, not per
      second, so a slow host is not outrun. After a ban the loss side below sets the pace,
      and queueing brakes only from R/U = 2 * setpoint - 1 (twice the setpoint's distance
      from U).
    - A server with several workers does not queue one request behind another: its RTT does
      not rise with the rate, and the division by (1 + busy share) put U too low. Once r has
      stayed at FLAT_RATE_FACTOR (2.5) times the ceiling's rate for 2 * RECENT_SAMPLES responses
      without R rising (as slow start measures it), the ceiling's RTT is taken as unloaded: it
      is U's floor from then on. The delay side's M/M/1 reading usually settles such a server
      near 1.45 times the ceiling's rate, where this check never looks, so PROBE_AFTER
      responses after the ceiling lifted the rate step test (`_step_test`) asks the server:
      PROBE_SAMPLES responses back to back, and a line fitted to every page's (rate, RTT) so
      far gives U at rate 0, the floor when it is above the M/M/1 reading's; a test that says
      neither (no floor, no clear rise) is asked once more. The one ceiling left is the
      start's, until the server has shown it is fast (about 20 responses).

    Loss side (token buckets answering 429/503):

    - A first ban at the ceiling's pace where the first RTT put it (before the host has
      shown it is fast) says only that the limit is below that pace, which on a fast host is
      up to 30x a limit: see `_restart_after_ceiling_ban`. The bans below come after it.
    - A ban at rate r_b pauses the host for its Retry-After (or, from the second ban in a
      row, backoff) and sets a new target T; r drops to min(r, r_b) * ban_backoff, and never
      above T. A first ban that ends slow start or comes at the ceiling's pace backs off twice
      as far (ban_backoff**2): those run past a token bucket's rate until the burst allowance
      is spent, slow start by a factor of 2**(burst seconds / doubling time), 3-4x for one
      second of burst. One that comes as the delay side's gentle growth crept over the limit
      does not, and counts as after a probe that held (below).
    - The target. A token bucket is empty at every ban, so the pages served between two bans
      over the time between them (the served rate) are a lower bound of its rate, and a tight
      one when the host was kept busy: with the bucket refilled in the pause and drained
      again, nearly every token of the interval was used. So after the second and later bans
      T = served_target_share * served rate, "measured", when at least SERVED_MIN_PAGES pages
      came in between and the host sat idle (nothing queued, the node late) for at most
      SERVED_MAX_IDLE_SHARE of the time (idle time refills the bucket unseen). After a ban
      that ends a probe from a measured target, the last target that held (see probing) is
      a floor: the served rate then also counts the time spent below the limit. Otherwise
      (the first ban, or an idle host) only the ban rate says something: T =
      ban_target_share * W with W = r_b after a probe that held or gentle growth, else
      CUBIC's "fast convergence" W = r_b * (1 + ban_backoff)/2, floored by the served rate.
    - Afterwards r approaches T from below: each clean response closes `approach_gain` of the
      gap, fast when far, cautious near it.
    - Every `probe_every` clean responses in a row, T is raised by `probe_step`, doubling the
      step each time (a convex probe in case the limit is higher or has risen); a ban resets
      the step.

    r stays within [1/max_delay, 1/max(min_delay, Crawl-delay, min(SRTT, R), the ceilings
    above)]: with requests in sequence a delay below the typical fetch time (R, about the
    median; paced at the mean SRTT every slower answer is waited for in full) gains nothing,
    and letting r run past the floor would only wind it up. Crawl-delay and Request-rate
    always win. What it achieves on simulated and websim servers is in docs/rate-control.md
    and bench/results/politeness/NOTES.md.
    """

    ban_grace = 1  # the first ban already slows down

    def __init__(self, settings: RateControlSettings, retry: RetrySettings, now: float) -> None:
        super().__init__(settings, retry, now)
        self.rate = 1.0 / settings.initial_delay_s
        self.target: float | None = None  # requests/s to settle at after a ban; None before
        self.queueing = QueueingDelay(
            UNLOADED_DUTY_MARGIN / (1.0 + settings.adaptive.unproven_delay_factor),
            settings.adaptive.base_samples,
            UNLOADED_HISTORY,
            RECENT_SAMPLES,
        )
        self.slow_start = True
        self.proven_fast = False
        # Paced at the ceiling since the first RTT, no ban yet (see _observe_rtt).
        self._at_ceiling_start = False
        self._first_start: float | None = None
        # The current RTT when the ceiling lifted: what slow start measures its rise against.
        self._ceiling_rtt: float | None = None
        # ...and the rate then, until the RTT has shown whether it rises with the rate, and
        # the responses since at twice that rate.
        self._ceiling_rate: float | None = None
        self._fast_streak = 0
        self._proof_streak = 0
        # The rate step test: responses until it starts (None: done, or not yet due), left in
        # it, the rate to go back to, and the (rate the server saw, log of the time in the
        # server) of every page until it ends, with whether it was sent in the test.
        self._probe_due: int | None = None
        self._probe_left = 0
        self._probe_from = 0.0
        self._probe_unloaded: float | None = None
        self._fit: deque[tuple[float, float, bool]] = deque(maxlen=FIT_SAMPLES)
        self._fit_open = True
        self._tests = 0  # step tests ended
        self._seen_rate = 0.0  # over the last two gaps, when the last request started
        self._brakes = 0  # responses the delay side braked on since the ceiling lifted
        # Whether the rate held at the target for `probe_every` clean responses since the
        # last ban, i.e. the target has been confirmed by experience.
        self._held = False
        self._held_target: float | None = None  # the last target that held
        # Whether the target descends from a measured served rate (by probes that held).
        self._measured = False
        self._last_ban_at: float | None = None
        self._pages_since_ban = 0
        # Seconds since the last ban that the host could have been sent a request and was not
        # (no URL queued, the node busy elsewhere), and when the current such wait began.
        self._idle_since_ban = 0.0
        self._ready_at: float | None = None
        self._rate_at_start = self.rate
        # Start-to-start gaps of the last two requests: the rate the server actually saw.
        self._last_gaps: deque[float] = deque(maxlen=2)
        self._duty_at_start = 0.0
        self._clean_streak = 0
        self._probe = settings.adaptive.probe_step
        # Two requests in flight (see `_in_flight_test`): "untested", "testing", "allowed" or
        # "refused"; the pages left in the test; R with one request in flight before it.
        self._in_flight = "untested"
        self._in_flight_left = 0
        self._in_flight_base: float | None = None

    @property
    def delay_s(self) -> float:
        return 1.0 / self.rate

    def _ceiling_delay(self) -> float:
        """The shortest delay the unknown-host ceilings allow (0 once shown fast)."""
        srtt = self.rtt.srtt
        if srtt is None or self.proven_fast:
            return 0.0
        return srtt * (1.0 + self.settings.adaptive.unproven_delay_factor)

    def _max_rate(self) -> float:
        # Back to back is a delay under the typical fetch: paced at the mean S or the median R,
        # every faster answer waits for the pace, which on RTTs of spread 0.5 costs 12-15% of
        # the rate; half of R keeps that under 2% and still bounds r (no wind-up past it).
        fetch = self.rtt.srtt or 0.0
        current = self.queueing.current_s
        if current is not None:
            fetch = min(fetch, current)
        fetch *= BACK_TO_BACK_SHARE
        fastest = max(self.settings.min_delay_s, self.floor_s, fetch, self._ceiling_delay())
        return math.inf if fastest <= 0 else 1.0 / fastest

    def _set_rate(self, rate: float) -> None:
        self.rate = min(self._max_rate(), max(1.0 / self.settings.max_delay_s, rate))

    def on_request_start(self, now: float) -> None:
        if self._first_start is None:
            self._first_start = now
        if self._ready_at is not None:
            self._idle_since_ban += max(0.0, now - self._ready_at)
            self._ready_at = None
        if self.last_start is not None:
            self._last_gaps.append(max(now - self.last_start, 1e-9))
        # The share of the time the server is busy with this connection's requests, from the
        # time in the server expected now (the RTT less the network's round trip) and the
        # rate over the last two gaps (a queue drains gradually, one long gap is not enough).
        seen_rate = len(self._last_gaps) / sum(self._last_gaps) if self._last_gaps else 0.0
        in_server = max((self.rtt.srtt or 0.0) - self.queueing.latency_s, 0.0)
        self._duty_at_start = seen_rate * in_server
        self._seen_rate = seen_rate
        super().on_request_start(now)
        # The rate the server sees: our pacing, or the fetch time over the requests in flight
        # when that is longer.
        fetch_s = (self.rtt.srtt or 0.0) / self.in_flight_limit()
        self._rate_at_start = 1.0 / max(self.current_delay(), fetch_s)

    def on_network_rtt(self, seconds: float) -> None:
        super().on_network_rtt(seconds)
        self.queueing.latency_s = self.network_rtt_s

    def on_response(
        self, now: float, rtt_s: float, status: int | None, retry_after_s: float | None
    ) -> None:
        super().on_response(now, rtt_s, status, retry_after_s)
        # From here until the next start, waiting beyond our own pacing (and pauses) is idle.
        self._ready_at = max(now, self.earliest_next())

    def _observe_rtt(self, now: float, rtt_s: float) -> None:
        # The busy share from the RTT expected before this answer: judged by its own RTT, the
        # fast answers would pass as unloaded and the slow ones not.
        self.queueing.observe(rtt_s, self._duty_at_start)
        if self._fit_open:
            in_server = math.log(max(rtt_s - self.queueing.latency_s, 1e-6))
            in_test = self._probe_left > 0
            if not in_test or PROBE_SAMPLES - self._probe_left >= PROBE_SETTLE:
                self._fit.append((self._seen_rate, in_server, in_test))
        first = self.rtt.srtt is None
        super()._observe_rtt(now, rtt_s)
        if first and self.target is None:
            # The ceiling is the politeness bound for a server not yet known (busy 1/3 of the
            # time), so it is where the pace starts once an RTT puts it somewhere: climbing to
            # it from initial_delay_s would take about 2 x initial_delay_s on any server.
            self._set_rate(math.inf)
            self._at_ceiling_start = True

    def inflation(self) -> float | None:
        """R/U, the RTT inflation (see the class notes); None until U is known."""
        unloaded, current = self.queueing.unloaded_s, self.queueing.current_s
        if not self.queueing.known or unloaded is None or current is None:
            return None
        if current - unloaded < self.settings.adaptive.rtt_noise_s:
            return 1.0
        return current / unloaded

    def setpoint(self) -> float:
        """The inflation R/U steered to: `rtt_target` less `rtt_confidence` standard errors of
        U (in logs), so a server whose U rests on few samples settles lower and rises as U
        firms up."""
        cfg = self.settings.adaptive
        margin = math.exp(-cfg.rtt_confidence * self.queueing.unloaded_error)
        # U's error is wild on a few samples or on a server whose pages differ widely in cost
        # (cached and generated): the margin takes at most half the headroom, so the setpoint
        # stays above 1 (a setpoint under 1 asks for a negative busy share).
        return max(1.0 + (cfg.rtt_target - 1.0) / 2.0, cfg.rtt_target * margin)

    def _busy_at(self, inflation: float) -> tuple[float, float] | None:
        """For a server that works one request at a time (M/M/1, the most delay-sensitive
        kind) behind the network's round trip L: the share of the time it is busy when its RTT
        is `inflation` x U (its time in the server, RTT - L, is (U - L) / (1 - busy share)),
        and U - L. None before U is known or when L is all of it (no load stretches it)."""
        unloaded = self.queueing.unloaded_s
        if unloaded is None:
            return None
        latency = min(self.queueing.latency_s, unloaded)
        in_server = unloaded - latency
        if in_server <= 0:
            return None
        return 1.0 - in_server / (inflation * unloaded - latency), in_server

    def _rate_error(self, inflation: float | None) -> float:
        """log(rate at the target / current rate) for a server that works one request at a time
        behind the network's round trip (see `_busy_at`); capped at MAX_RATE_ERROR where the
        RTT shows little or no inflation."""
        at_target = self._busy_at(self.setpoint())
        now = None if inflation is None else self._busy_at(inflation)
        if at_target is None or now is None:
            return math.log(MAX_RATE_ERROR)
        busy_target, busy_now = at_target[0], now[0]
        if busy_now * MAX_RATE_ERROR <= busy_target:
            return math.log(MAX_RATE_ERROR)
        return math.log(busy_target / busy_now)

    def _rate_at_setpoint(self) -> float:
        """The rate at which a server that works one request at a time behind the network's
        round trip would answer at the setpoint (see `_busy_at`): its busy share there over its
        time in the server. Infinite before U is known or when the network is all of it."""
        at_target = self._busy_at(self.setpoint()) if self.queueing.known else None
        if at_target is None:
            return math.inf
        busy, in_server = at_target
        return busy / in_server

    def _target_after_ban(self, now: float, overshot: bool) -> tuple[float, bool]:
        """The rate to settle at after a ban, and whether it was measured (see the class
        notes). `overshot`: False for a first ban that came as the delay side's gentle growth
        crept over the limit; the rate had held just below banned_at, as in a probe."""
        cfg = self.settings.adaptive
        banned_at = self._rate_at_start
        # The ban ends a probe, or gentle growth: the rate had held just below banned_at.
        held = self._held or (self.target is None and not overshot)
        estimate = banned_at if held else banned_at * (1.0 + cfg.ban_backoff) / 2.0
        elapsed = 0.0 if self._last_ban_at is None else now - self._last_ban_at
        if elapsed <= 0 or self._pages_since_ban < SERVED_MIN_PAGES:
            return cfg.ban_target_share * estimate, False
        served = min(banned_at, self._pages_since_ban / elapsed)
        if self._idle_since_ban > SERVED_MAX_IDLE_SHARE * elapsed:
            return cfg.ban_target_share * max(estimate, served), False
        if self._held and self._measured and self._held_target is not None:
            served = max(served, self._held_target)
        return cfg.served_target_share * served, True

    def _restart_after_ceiling_ban(self, now: float) -> None:
        """The first ban at the ceiling's pace, where the first RTT put it: that rate says only
        that the limit is below it, by up to 30x on a fast server, so no target is guessed from
        it. The pace restarts, under slow start, at the pages served from the first request to
        the end of the pause the server asked for (a token bucket's rate when its burst lasts
        as long as that pause, and slow start climbs from below if it lasts longer), and the
        next ban measures the rate served since this one, as later bans do."""
        self._at_ceiling_start = False
        first_start = now if self._first_start is None else self._first_start
        allowed_s = max(self.pause_until, now) - first_start
        if allowed_s > 0:
            self._set_rate(self._pages_since_ban / allowed_s)
        self._count_from_ban(now)

    def _count_from_ban(self, now: float) -> None:
        """The served rate the next ban measures is counted from this one."""
        self._last_ban_at = now
        self._pages_since_ban = 0
        self._idle_since_ban = 0.0

    def _on_outcome(self, now: float, outcome: ResponseKind) -> None:
        cfg = self.settings.adaptive
        if outcome is ResponseKind.BAN and self._at_ceiling_start:
            self._restart_after_ceiling_ban(now)
            return
        if outcome is ResponseKind.BAN:
            # Slow start (and the ceiling's pace, which may be far above a limit) runs past a
            # token bucket's rate until the burst is spent, by a factor of 2**(burst seconds /
            # doubling time): the first ban then backs off twice as far.
            overshot = self.slow_start or not self.proven_fast
            backoff = cfg.ban_backoff**2 if self.target is None and overshot else cfg.ban_backoff
            self.target, self._measured = self._target_after_ban(now, overshot)
            if self._in_flight != "untested":
                self._in_flight = "refused"  # the server said how fast: one at a time from now
            self.slow_start = False
            self._held = False
            self._end_step_test()
            self._count_from_ban(now)
            # Never above the new target: when the served rate showed that the limit is below
            # half the banned rate, halving alone would still be too fast.
            backed_off = min(self.rate, self._rate_at_start) * backoff
            self._set_rate(min(backed_off, self.target))
            self._clean_streak = 0
            self._probe = cfg.probe_step
            return
        if outcome is ResponseKind.ERROR:
            return  # no growth on failures; runs of them pause the host (shared layer)
        self._pages_since_ban += 1
        if self._probe_left > 0:
            self._step_test()
            return
        if self._in_flight_test():
            return
        if self._probe_due is not None:
            self._probe_due -= 1
            if self._probe_due <= 0 and self.target is None:
                self._start_step_test()
                return
        self._check_flat()
        inflation = self.inflation()
        self._check_proof(inflation)
        # The relative error, in logs: up as fast as down for the same factor off the target.
        error = self._rate_error(inflation)
        step = math.exp(cfg.rtt_gain * error)
        # Queueing above the target brakes. Once bans have given a target, the server has said
        # how fast it wants to be asked, and only strong queueing (at twice the target's
        # distance from U) brakes: on a noisy rate-limited host milder readings are mostly
        # noise.
        strong = 2.0 * self.setpoint() - 1.0
        if inflation is not None and error < 0 and (self.target is None or inflation >= strong):
            self.slow_start = False
            self._clean_streak = 0
            self._count_brake()
            self._set_rate(self.rate * step)
            return
        if self.slow_start:
            # Ends halfway to the target (as HyStart ends TCP's on the first rise of delay):
            # the RTT measured lags the rate by the samples it averages, and doubling up to the
            # target itself would overshoot it.
            if not self._rtt_rose() and self.rate < self._rate_at_setpoint():
                self._set_rate(
                    self.rate * 2.0 ** (self.current_delay() / cfg.slow_start_doubling_s)
                )
                return
            self.slow_start = False
        if self.target is None:  # no ban yet: the delay signal alone sets the pace
            self._set_rate(self.rate * step)
            return
        if self.rate < self.target:
            self._set_rate(self.rate + (self.target - self.rate) * cfg.approach_gain)
        self._clean_streak += 1
        if self._clean_streak >= cfg.probe_every:
            self._clean_streak = 0
            self._held = True
            self._held_target = self.target
            self.target *= 1.0 + self._probe
            self._probe = min(1.0, 2.0 * self._probe)

    def _count_brake(self) -> None:
        """One response the delay side braked on. Enough of them past the ceiling show that
        the server queues (unless the flat check found it does not), and from then on every
        page feeds U, each divided by (1 + its busy share) as at the ceiling, and the flat
        check is off: a server that later speeds up would pass it against a stale ceiling."""
        if not self.proven_fast or self.queueing.floor_s > 0:
            return
        self._brakes += 1
        if self._brakes == QUEUEING_BRAKES:
            self.queueing.count_every_load()
            self._ceiling_rate = None  # it queues: no flat check (see _check_flat)

    def _rtt_rose(self) -> bool:
        """Whether the RTT has risen enough to end slow start: by half the target's distance
        from U over its value when the ceiling lifted (as HyStart ends TCP's slow start on a
        rise of delay, not a level). From the ceiling's RTT, because U errs low on servers with
        more than one worker, where that RTT is still unloaded; half, because the RTT measured
        lags the rate by the samples it averages."""
        unloaded, current = self.queueing.unloaded_s, self.queueing.current_s
        if not self.queueing.known or unloaded is None or current is None:
            return False
        base = max(unloaded, self._ceiling_rtt or 0.0)
        halfway = (self.setpoint() - 1.0) / 2.0 * unloaded
        return current - base >= max(self.settings.adaptive.rtt_noise_s, halfway)

    def _check_flat(self) -> None:
        """Once the rate has stayed at FLAT_RATE_FACTOR times the ceiling's or more for
        2 * RECENT_SAMPLES responses (so that R is measured there): if the RTT did not rise
        meanwhile, the server does not queue one request behind another (it has several
        workers), so the RTTs at the ceiling were unloaded ones, and U, which took them as
        stretched by the busy share (one worker, the worst case), gets the ceiling's RTT as
        its floor."""
        if self._ceiling_rate is None:
            return
        if self._rate_at_start < FLAT_RATE_FACTOR * self._ceiling_rate:
            self._fast_streak = 0
            return
        self._fast_streak += 1
        # Two windows of R, not one: a server that averages its arrivals over a second (as
        # websim's formula servers do) shows the new rate's RTT only after the first window,
        # which read it short of a rise and took a loaded RTT for U's floor (1.2 times the
        # truth in one simulated run, tenth round).
        if self._fast_streak < 2 * RECENT_SAMPLES:
            return
        if not self._rtt_rose() and self._ceiling_rtt is not None:
            self.queueing.floor_s = self._ceiling_rtt
        self._ceiling_rate = None

    def _start_step_test(self) -> None:
        self._probe_due = None
        if self.queueing.floor_s > 0:  # the flat check found the RTT does not rise
            self._end_step_test()
            return
        self._probe_from = self.rate
        # U before the test: once every page feeds it, the test's own would pull it down.
        self._probe_unloaded = self.queueing.unloaded_s
        self._probe_left = PROBE_SAMPLES
        # Back to back: the rate one connection can reach, where the line's leverage is largest
        # and where a server that does not queue will be crawled.
        self._set_rate(math.inf)

    def _end_step_test(self) -> None:
        self._probe_due = None
        self._probe_left = 0
        self._fit_open = False
        self._fit.clear()

    def _step_test(self) -> None:
        """One response of the rate step test: PROBE_AFTER responses after the ceiling lifted,
        PROBE_SAMPLES responses sent back to back, to learn from the RTT's response to the
        crawler's own rate change how much more the server can take.

        A line fitted to every page's (rate the server saw, log of its time in the server)
        so far, from the ceiling's rate through the climb to the test's, gives the time in the
        server at rate 0: U, the slope taken PROBE_CONFIDENCE standard errors steep. On a
        server that queues behind the crawler's own requests (one worker, or websim's formula
        servers) the RTT rises with the rate, steeper and steeper, and the line's U falls under
        the M/M/1 reading's (whose division by 1 + busy share is exact there): the test
        changes nothing but a short burst (it stops once R has clearly risen, below) and a
        drain after it (PROBE_DRAIN). On one whose RTT hardly moves (several workers, or a worker
        kept busy by others: the crawler's requests, one at a time, do not wait behind each
        other) the line's U is about the RTT measured at the ceiling, above the M/M/1
        reading's by up to a third, which held such servers near 1.45 times the ceiling's
        rate, about 0.4 of what one connection could politely take: it becomes U's floor
        and the rate stays up, where only RTT inflation over it brakes, as after the flat
        check. A floor from the line is never above the truth on a server whose RTT rises
        with the rate ever more steeply (a queue's): the line through its points meets rate
        0 below the curve. A test stopped by a rise of R is fitted too, with the slope
        PROBE_STOPPED_CONFIDENCE errors steep, and drains either way: on a server shared with
        other users, their busy periods stop it as often as the crawler's rate does, and only
        the line says which (a floor from it brought the 60%-loaded one- and two-worker queues
        from 0.44 and 0.51 of back to back to 0.47 and 0.55, simulated)."""
        self._probe_left -= 1
        before, current = self._probe_unloaded, self.queueing.current_s
        # The test stops once R has risen by the setpoint's distance over its value when the
        # ceiling lifted, looked at every half of R's window (R is noisy: looked at on every
        # response, a server that does not queue behind the crawler would cross it by chance
        # over the test), or by strong queueing over U as it was (see _on_outcome) at any
        # response. Back to back, a one-worker server's RTT doubles: with the lag of R, the
        # test's burst lasts about one window of R there.
        look = self._probe_left % (RECENT_SAMPLES // 2) == 0
        risen = (
            look
            and current is not None
            and self._ceiling_rtt is not None
            and current >= self.setpoint() * self._ceiling_rtt
        )
        strong = risen or (
            before is not None
            and current is not None
            and current >= (2.0 * self.setpoint() - 1.0) * before
        )
        if not strong and self._probe_left > 0:
            return
        unloaded, rise = self._fitted_unloaded(
            PROBE_STOPPED_CONFIDENCE if strong else PROBE_CONFIDENCE
        )
        self._ceiling_rate = None  # decided here: no flat check afterwards (see _check_flat)
        self._tests += 1
        # A clear rise is a queue's, whatever the line's U: noise in the pages before the test
        # can put it above the truth (3 of 200 runs of a formula server with latency, back to
        # back, simulated).
        flat = rise < RISE_EVIDENCE
        if flat and unloaded is not None and before is not None and unloaded > before:
            self._end_step_test()
            self.queueing.floor_s = unloaded
            if strong and current is not None:
                # The line says the crawler's own rate did not raise the RTT; R rose with other
                # users' busy periods. The test's own rate (1/R back to back, R as inflated as
                # it got) was as polite as any, so the drain starts from it, not from the
                # rate before the test (the ceiling's, about a third of it), which left a
                # one-worker queue at 60% background load to climb back from 7 to 20
                # requests/s over 35 seconds (fourteenth round).
                self._set_rate(PROBE_DRAIN * max(self._probe_from, 1.0 / current))
            return
        elif flat and self._tests < STEP_TESTS:
            # Neither a floor nor a clear rise: asked again later, the line through these
            # pages and the next test's (see RISE_EVIDENCE).
            self._probe_left = 0
            self._probe_due = PROBE_SAMPLES
        else:
            self._end_step_test()
            # No floor: the RTT rose with the crawler's own rate, so the server queues, and
            # every page feeds U from now on (as after QUEUEING_BRAKES brakes): a start's U
            # that read high by chance in its 16-20 samples is corrected by the crawl, not
            # held until the brakes add up (tenth round, bench/results/politeness/NOTES.md).
            self.queueing.count_every_load()
        # Below where it was, a while: the test's burst left a queue, or raised the
        # arrival rate such a server averages, and the delay side climbs back from here
        # (against the floor, if the line gave one although R rose: other users' doing).
        self._set_rate(PROBE_DRAIN * self._probe_from)

    def in_flight_limit(self) -> int:
        """Two while the in-flight test runs or has allowed it (never after a ban or under a
        Crawl-delay), else one."""
        allowed = self._in_flight in ("testing", "allowed")
        return 2 if allowed and self.target is None and self.floor_s == 0 else 1

    def _in_flight_test(self) -> bool:
        """A second request in flight, asked of a server that showed the crawler's requests do
        not wait behind each other (U has a floor: the flat check or the step test found its RTT
        does not rise with the crawler's rate, one request at a time), whose pace asks for
        more than one connection gives (r x R > 1), and whose R/U is under the setpoint now (a
        test started in other users' busy period, R already twice U, compares the two requests'
        R with that inflated one and can allow them on a single worker). One connection back to
        back reaches only 1 / (the server's time + the client's), and on a server with several
        workers a second request is served beside the first.

        The test: back to back with two requests in flight for IN_FLIGHT_TEST_WINDOWS windows
        of R. R rising by the setpoint's distance over its value with one request in flight
        (looked at every RECENT_SAMPLES / 2 responses, as in the step test) says the two wait
        for each other (one worker, or workers kept busy by other users): back to one for the
        rest of the crawl, at PROBE_DRAIN of the rate before at most (the queue the test built
        drains first). Otherwise two stay allowed, the delay side steering the pace as before,
        until R shows strong queueing over the same reference (2 x setpoint - 1, as after a
        ban). A ban sends it back to one as well (see `_on_outcome`). True while the test runs, and
        on the response that refuses: the pace stays back to back during the test (the delay
        side would slow it to where the two requests no longer meet, and the test would see
        nothing), and the refusal sets it."""
        state = self._in_flight
        if state == "refused":
            return False
        current = self.queueing.current_s
        if state == "untested":
            if (
                self.settings.adaptive.max_in_flight > 1
                and self.queueing.floor_s > 0
                and self.target is None
                and self.floor_s == 0
                and self._probe_due is None
                and self.backlog >= IN_FLIGHT_MIN_BACKLOG
                and current is not None
                and self.rate * current > 1.0
                and (self.inflation() or 0.0) < self.setpoint()
            ):
                self._in_flight = "testing"
                self._in_flight_left = IN_FLIGHT_TEST_WINDOWS * self.queueing.recent_window
                self._in_flight_base = current
                self._probe_from = self.rate
                self._set_rate(math.inf)
                return True
            return False
        base = self._in_flight_base
        assert base is not None and current is not None
        testing = state == "testing"
        self._in_flight_left -= 1
        if self._in_flight_left % (RECENT_SAMPLES // 2) != 0:
            if testing:
                self._set_rate(math.inf)  # back to back as R's window moves
            return testing
        bound = self.setpoint() if testing else 2.0 * self.setpoint() - 1.0
        if current >= bound * base:
            self._in_flight = "refused"
            self._set_rate(min(self.rate, PROBE_DRAIN * self._probe_from))
            return True
        if testing and self._in_flight_left <= 0:
            self._in_flight = "allowed"
            return False
        if testing:
            self._set_rate(math.inf)
        return testing

    def _fitted_unloaded(self, confidence: float) -> tuple[float | None, float]:
        """U from the line through the (rate, log time in the server) samples, followed from
        the mean of the pages before the test down to rate 0 with its slope `confidence`
        standard errors steep (see `_step_test`), never less steep than flat (a time that
        falls as the rate rises is noise), and the fitted slope in standard errors (how
        clearly the RTT rose with the rate). U is None when too few samples."""
        points = [(rate, log_time) for rate, log_time, _ in self._fit]
        before = [log_time for _, log_time, in_test in self._fit if not in_test]
        if len(points) < 8 or not before:
            return None, 0.0
        n = len(points)
        mean_x = sum(x for x, _ in points) / n
        mean_y = sum(y for _, y in points) / n
        sxx = sum((x - mean_x) ** 2 for x, _ in points)
        if sxx <= 0:
            return None, 0.0
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
        intercept = mean_y - slope * mean_x
        residual = sum((y - intercept - slope * x) ** 2 for x, y in points) / (n - 2)
        # Down the line from the pages before the test to rate 0, the slope taken
        # `confidence` standard errors steep: the level of those pages is as uncertain as
        # the M/M/1 reading's of the same pages, which the setpoint's margin already covers.
        error = math.sqrt(residual / sxx)
        steep = max(slope + confidence * error, 0.0)
        rates = [rate for rate, _, in_test in self._fit if not in_test]
        level = sum(before) / len(before) - steep * sum(rates) / len(rates)
        # Points exactly on a line (RTTs that never vary): the slope is the whole evidence.
        rise = slope / error if error > 0 else (math.inf if slope > 0 else 0.0)
        return self.queueing.latency_s + math.exp(level), rise

    def _check_proof(self, inflation: float | None) -> None:
        """Count responses that show the host is fast: sent near the ceiling, RTT not inflated."""
        if self.proven_fast or inflation is None:
            return
        ceiling = self._ceiling_delay()
        near_ceiling = ceiling > 0 and 1.0 / self._rate_at_start <= ceiling / 0.9
        if near_ceiling and inflation < self.setpoint():
            self._proof_streak += 1
            self.proven_fast = self._proof_streak >= PROOF_SAMPLES
            if self.proven_fast:
                self._at_ceiling_start = False
                self._ceiling_rtt = self.queueing.current_s
                self._ceiling_rate = self._rate_at_start
                early = self.backlog >= EARLY_PROBE_BACKLOG
                self._probe_due = EARLY_PROBE_AFTER if early else PROBE_AFTER
        else:
            self._proof_streak = 0

    def unloaded_rtt_s(self) -> float | None:
        return self.queueing.unloaded_s if self.queueing.known else None

    def target_ppm(self) -> float | None:
        return None if self.target is None else 60.0 * self.target
