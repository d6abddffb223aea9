"""Unit tests of crawler.ratecontrol against simulated clocks and simulated servers.

Nothing here sleeps or opens a socket: every controller takes time as an argument, and the
servers are small event simulations driven by seeded RNGs, so every number is reproducible.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

import pytest

from crawler.ratecontrol import (
    TRACE_FIELDS,
    AdaptiveRateController,
    FixedDelayController,
    HostRateController,
    PIDDelayController,
    QueueingDelay,
    RateControlConfig,
    RTTBand,
    RTTConcurrencyController,
    make_host_controller,
    make_retry_policy,
)
from websim.queueing import ArrivalRate, QueueingModel

# ---- configuration ---------------------------------------------------------------------------


def test_config_defaults_are_the_adaptive_mode() -> None:
    config = RateControlConfig.from_dict({})
    assert config.mode == "adaptive"
    assert config.target_ppm is None
    assert isinstance(make_host_controller(config, 0.0), AdaptiveRateController)


@pytest.mark.parametrize(
    ("data", "cls"),
    [
        ({"mode": "adaptive"}, AdaptiveRateController),
        ({"mode": "pid", "target_ppm": 40}, PIDDelayController),
        ({"mode": "rtt"}, RTTConcurrencyController),
        ({"mode": "fixed", "target_ppm": 30}, FixedDelayController),
        ({"mode": "fixed", "fixed_delay_s": 0.5}, FixedDelayController),
    ],
)
def test_factory_builds_each_mode(data: dict, cls: type) -> None:
    controller = make_host_controller(RateControlConfig.from_dict(data), 5.0)
    assert isinstance(controller, cls)
    assert isinstance(controller, HostRateController)
    assert controller.earliest_next() == 5.0  # a new host may be asked at once
    row = controller.trace(5.0)
    assert tuple(row) == TRACE_FIELDS


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"mod": "pid"}, "unknown key 'mod'"),
        ({"mode": "fast"}, "mode must be one of"),
        ({"mode": "pid"}, "needs target_ppm"),
        ({"mode": "fixed"}, "needs fixed_delay_s or target_ppm"),
        ({"kp": 0.05}, "kp must be < 0"),
        ({"kp": "-0.05"}, "wrong type"),
        ({"max_retries": True}, "wrong type"),
        ({"max_retries": 2.5}, "wrong type"),
        ({"rtt_max_cap": None}, "must not be null"),
        ({"target_ppm": -1}, "target_ppm must be > 0"),
        ({"min_delay_s": 5, "max_delay_s": 1}, "min_delay_s <= max_delay_s"),
        ({"window_s": float("nan")}, "finite"),
        ({"smoothing": 0}, "smoothing"),
        ({"rtt_min_cap": 5, "rtt_initial_cap": 4}, "rtt_min_cap <= rtt_initial_cap"),
        ({"ban_backoff": 1.0}, "ban_backoff"),
    ],
)
def test_config_rejects_bad_input_with_one_line(data: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match="rate_control") as info:
        RateControlConfig.from_dict(data)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_config_accepts_ints_for_floats() -> None:
    config = RateControlConfig.from_dict({"mode": "pid", "target_ppm": 40, "window_s": 5})
    assert config.window_s == 5


def test_fixed_delay_from_target_or_explicit() -> None:
    from_target = make_host_controller(RateControlConfig(mode="fixed", target_ppm=30), 0.0)
    explicit = make_host_controller(
        RateControlConfig(mode="fixed", target_ppm=30, fixed_delay_s=0.25), 0.0
    )
    assert from_target.trace(0.0)["delay_s"] == 2.0
    assert explicit.trace(0.0)["delay_s"] == 0.25


def test_retry_policy_from_config() -> None:
    config = RateControlConfig(max_retries=1, retry_after_max_s=10.0)
    policy = make_retry_policy(config, random.Random(1))
    assert policy.retry_delay(1, 429, None, 99.0) == 10.0
    assert policy.retry_delay(2, 429, None, 1.0) is None


# ---- the shared politeness layer, for every mode ---------------------------------------------

ALL_MODES = [
    {"mode": "adaptive"},
    {"mode": "pid", "target_ppm": 6000},
    {"mode": "rtt"},
    {"mode": "fixed", "fixed_delay_s": 0.01},
]


@pytest.mark.parametrize("data", ALL_MODES)
def test_crawl_delay_is_a_hard_floor(data: dict) -> None:
    controller = make_host_controller(RateControlConfig.from_dict(data), 0.0)
    controller.set_floor_delay(0.75)
    now = 0.0
    starts = []
    for _ in range(200):
        now = max(now, controller.earliest_next())
        starts.append(now)
        controller.on_request_start(now)
        now += 0.005
        controller.on_response(now, 0.005, 200, None)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) >= 0.75 - 1e-9


@pytest.mark.parametrize("data", ALL_MODES)
def test_retry_after_pauses_the_host(data: dict) -> None:
    controller = make_host_controller(RateControlConfig.from_dict(data), 0.0)
    controller.on_request_start(0.0)
    controller.on_response(0.01, 0.01, 429, 30.0)
    assert controller.earliest_next() >= 30.01
    assert controller.trace(0.02)["bans"] == 1


@pytest.mark.parametrize("data", ALL_MODES)
def test_retry_after_is_clamped(data: dict) -> None:
    config = RateControlConfig.from_dict({**data, "retry_after_max_s": 5.0})
    controller = make_host_controller(config, 0.0)
    controller.on_request_start(0.0)
    controller.on_response(0.01, 0.01, 503, 3600.0)
    assert 5.0 <= controller.earliest_next() <= 5.01 + 1.0


@pytest.mark.parametrize("data", ALL_MODES)
def test_runs_of_errors_back_off_but_one_error_does_not(data: dict) -> None:
    config = RateControlConfig.from_dict({**data, "backoff_base_s": 1.0, "backoff_cap_s": 8.0})
    controller = make_host_controller(config, 0.0)
    now = 0.0
    pauses = []
    for _ in range(6):
        now = max(now, controller.earliest_next())
        controller.on_request_start(now)
        now += 0.01
        controller.on_response(now, 0.01, None, None)
        pauses.append(controller.earliest_next() - now)
    assert pauses[0] < 1.0  # one failure is the page's problem
    assert pauses[1:] == pytest.approx([1.0, 2.0, 4.0, 8.0, 8.0], abs=1.0)
    # A page ends the run.
    now = controller.earliest_next()
    controller.on_request_start(now)
    controller.on_response(now + 0.01, 0.01, 200, None)
    controller.on_request_start(now + 2)
    controller.on_response(now + 2.01, 0.01, 500, None)
    assert controller.earliest_next() - (now + 2.01) < 1.0


@pytest.mark.parametrize("data", ALL_MODES)
def test_trace_counts_since_previous_call(data: dict) -> None:
    controller = make_host_controller(RateControlConfig.from_dict(data), 0.0)
    for i, status in enumerate([200, 404, 429, 200, None]):
        controller.on_request_start(i * 0.1)
        controller.on_response(i * 0.1 + 0.02, 0.02, status, None)
    row = controller.trace(1.0)
    assert row["pages"] == 3  # 200, 404, 200; the ban and the network error are not pages
    assert row["bans"] == 1
    assert row["srtt_ms"] == pytest.approx(20.0)
    assert row["delay_s"] is not None and row["delay_s"] >= 0
    again = controller.trace(1.1)
    assert again["pages"] == 0 and again["bans"] == 0


# ---- PID (SPEC section 1) --------------------------------------------------------------------


def p_only(**overrides: float) -> RateControlConfig:
    values = {"mode": "pid", "target_ppm": 40.0, "initial_delay_s": 1.0, "kp": -0.05}
    values.update({"ki": 0.0, "kd": 0.0, **overrides})
    return RateControlConfig.from_dict(values)


def test_pid_worked_example_exactly() -> None:
    pid = PIDDelayController(p_only(), 0.0)
    assert pid.update(100) == pytest.approx(4.0, abs=1e-12)
    assert pid.update(30) == pytest.approx(3.5, abs=1e-12)


def test_pid_counts_a_one_minute_window_through_events() -> None:
    pid = PIDDelayController(p_only(initial_delay_s=0.6), 0.0)
    # 100 pages in the first minute, each sent exactly when the controller allowed.
    for _ in range(100):
        start = pid.earliest_next()
        pid.on_request_start(start)
        pid.on_response(start + 0.001, 0.001, 200, None)
    assert pid.delay_s == 0.6  # the window is not over yet
    row = pid.trace(60.0)
    assert pid.last_n == pytest.approx(100.0)
    assert row["delay_s"] == pytest.approx(0.6 + 3.0)  # the worked example's step
    assert row["target_ppm"] == 40.0


def test_pid_scales_late_sending_out_of_the_count() -> None:
    pid = PIDDelayController(p_only(initial_delay_s=0.5), 0.0)
    # The node sends every 0.6 s although 0.5 s was allowed: 100 pages in 60 s, but only
    # 50 s of them were paced by the controller, so the controller's rate is 120/min.
    for i in range(100):
        start = i * 0.6
        pid.on_request_start(start)
        pid.on_response(start + 0.001, 0.001, 200, None)
    pid.trace(60.0)
    assert pid.last_n == pytest.approx(120.0, rel=1e-3)


def test_pid_delay_is_clamped_and_never_negative() -> None:
    pid = PIDDelayController(p_only(initial_delay_s=0.5, max_delay_s=5.0), 0.0)
    assert pid.update(0) == 0.0  # 0.5 - 0.05*40 would be -1.5
    assert pid.update(1000) == 5.0


def test_pid_stops_integrating_while_saturated() -> None:
    config = p_only(ki=-0.01, max_delay_s=5.0, initial_delay_s=5.0)
    pid = PIDDelayController(config, 0.0)
    for _ in range(50):
        assert pid.update(400) == 5.0  # far too fast, but the delay is already at its maximum
    # Without conditional integration the error sum would hold 50 * -360 and keep the delay
    # pinned for dozens of windows once the rate drops; here it leaves the bound at once.
    assert pid.update(10) == pytest.approx(5.0 - 0.05 * 30 - 0.01 * 30)


def test_pid_floor_is_crawl_delay_and_fetch_time() -> None:
    pid = PIDDelayController(p_only(initial_delay_s=2.0), 0.0)
    pid.set_floor_delay(1.5)
    pid.on_request_start(0.0)
    pid.on_response(0.3, 0.3, 200, None)
    assert pid.bounds() == (1.5, 60.0)
    assert pid.update(0) == 1.5  # a delay under the floor would only wind up


def test_pid_gains_scale_with_the_window() -> None:
    pid = PIDDelayController(p_only(window_s=6.0), 0.0)
    # kp is per minute: a 6 s window takes a tenth of the step.
    assert pid.update(100) == pytest.approx(1.0 + 0.3)


def test_pid_ignores_windows_in_which_it_did_not_pace() -> None:
    pid = PIDDelayController(p_only(window_s=10.0, initial_delay_s=2.0), 0.0)
    pid.on_request_start(0.0)
    pid.on_response(0.1, 0.1, 200, None)
    # The node sends nothing for a minute (no URLs queued): that says nothing about the
    # delay, so it must not be shortened toward zero.
    pid.on_request_start(65.0)
    pid.on_response(65.1, 0.1, 200, None)
    assert pid.delay_s == 2.0
    # A Retry-After pause is excluded too.
    pid.on_request_start(67.1)
    pid.on_response(67.2, 0.1, 429, 30.0)
    pid.trace(95.0)
    assert pid.delay_s == 2.0


def test_pid_idle_windows_are_skipped_in_constant_time() -> None:
    pid = PIDDelayController(p_only(window_s=1.0), 0.0)
    pid.on_request_start(0.0)
    pid.on_response(0.1, 0.1, 200, None)
    pid.on_request_start(1e7)  # a host idle for months: no ten million loop turns
    # Only the first window (1 page in 1 s = 60/min) moved the delay, by a 60th of a minute's
    # step; the idle ones were skipped.
    assert pid.delay_s == pytest.approx(1.0 + 0.05 * 20 / 60)


def settle_window(rates: list[float], target: float, tolerance: float = 0.05) -> int | None:
    """1-based index of the first window from which every later one is within tolerance."""
    for i in range(len(rates)):
        if all(abs(n - target) <= tolerance * target for n in rates[i:]):
            return i + 1
    return None


def assert_no_sustained_oscillation(rates: list[float], target: float) -> None:
    errors = [n - target for n in rates]
    # Oscillation shows as errors that keep flipping sign with a large amplitude.
    flips = sum(a * b < 0 for a, b in zip(errors, errors[1:], strict=False))
    assert statistics.pstdev(rates) <= 0.03 * target or flips <= len(errors) // 2
    assert max(abs(e) for e in errors) <= 0.05 * target


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("fetch_slots", [1, 2])
def test_pid_documents_run_settles_within_8_windows(fetch_slots: int, seed: int) -> None:
    """The documents' recorded run: 80 pages/min in the first window at a 3.8 s delay, target
    40. The plant gives 60*slots/max(delay, fetch) pages/min with 0.5% noise; with two fetch
    slots 40 pages/min needs a 3 s delay, which is where the documents settled (2.98 s)."""
    pid = PIDDelayController(RateControlConfig(mode="pid", target_ppm=40, initial_delay_s=3.8), 0)
    rng = random.Random(seed)
    rates = [80.0]
    for _ in range(19):
        delay = pid.update(rates[-1])
        rates.append(60 * fetch_slots / max(delay, 0.5) * (1 + rng.gauss(0, 0.005)))
    settled = settle_window(rates, 40.0)
    assert settled is not None and settled <= 8, [round(n, 1) for n in rates]
    assert_no_sustained_oscillation(rates[-10:], 40.0)
    assert pid.delay_s == pytest.approx(1.5 * fetch_slots, rel=0.05)


def simulate_pid(window_s: float, minutes: int, seed: int) -> tuple[list[float], float]:
    """One host, one connection: each request starts when the controller allows and the
    previous answer is in; fetch times are lognormal around 0.5 s. Returns pages per minute
    for each wall-clock minute, and the final delay."""
    config = RateControlConfig(mode="pid", target_ppm=40, initial_delay_s=3.8, window_s=window_s)
    pid = PIDDelayController(config, 0.0)
    rng = random.Random(seed)
    per_minute = [0] * minutes
    now = 0.0
    while True:
        start = max(pid.earliest_next(), now)
        if start >= minutes * 60:
            return [float(n) for n in per_minute], pid.delay_s
        pid.on_request_start(start)
        fetch = 0.5 * math.exp(rng.gauss(0, 0.05))
        now = start + fetch
        pid.on_response(now, fetch, 200, None)
        if now < minutes * 60:
            per_minute[int(now // 60)] += 1


@pytest.mark.parametrize("window_s", [60.0, 5.0, 1.0])
def test_pid_event_simulation_settles(window_s: float) -> None:
    """From a 3.8 s delay (16 pages/min) to 40 pages/min, with windows of any length."""
    rates, delay = simulate_pid(window_s, minutes=16, seed=3)
    settled = settle_window(rates, 40.0)
    assert settled is not None and settled <= 8, rates
    assert_no_sustained_oscillation(rates[-8:], 40.0)
    assert delay == pytest.approx(1.5, rel=0.1)


@pytest.mark.parametrize("target", [120.0, 300.0, 1200.0])
def test_pid_gains_are_scheduled_by_target(target: float) -> None:
    """The same run at 3x-30x the documents' target: the plant is that many squared times more
    sensitive, and the scheduled gains keep it as calm as at 40 pages/min."""
    config = RateControlConfig(mode="pid", target_ppm=target, initial_delay_s=1.9 * 60 / target)
    pid = PIDDelayController(config, 0)
    assert pid.kp == pytest.approx(-0.045 * (40 / target) ** 2)
    rng = random.Random(0)
    rates = [target * 2 / 1.9]
    for _ in range(19):
        delay = pid.update(rates[-1])
        rates.append(120 / max(delay, 0.001) * (1 + rng.gauss(0, 0.005)))
    settled = settle_window(rates, target)
    assert settled is not None and settled <= 8, [round(n) for n in rates]
    assert_no_sustained_oscillation(rates[-10:], target)


def test_pid_gains_as_given_without_reference() -> None:
    config = RateControlConfig(mode="pid", target_ppm=300, pid_reference_ppm=None, window_s=60)
    assert PIDDelayController(config, 0).kp == -0.045


# ---- RTT concurrency (SPEC section 2) --------------------------------------------------------


def rtt_config(**overrides: float) -> RateControlConfig:
    values = {
        "mode": "rtt",
        "rtt_alpha": 0.5,
        "rtt_interval_s": 10.0,
        "rtt_min_s": 0.001,
        "rtt_max_s": 5.0,
        "rtt_initial_cap": 10,
        "rtt_min_cap": 2,
        "rtt_max_cap": 12,
    }
    values.update(overrides)
    return RateControlConfig.from_dict(values)


def test_rtt_band_rolls_over_per_interval() -> None:
    band = RTTBand(alpha=0.5, interval_s=10.0, now=0.0)
    band.observe(1.0, 0.100)
    band.observe(2.0, 0.200)  # S = 0.15
    assert (band.low, band.high) == (None, None)  # the first interval has no band
    band.observe(11.0, 0.150)  # rolls: the band is interval 1's min and max of S
    assert (band.low, band.high) == pytest.approx((0.100, 0.150))
    assert band.srtt == pytest.approx(0.150)
    band.roll(35.0)  # interval 2 had one sample; interval 3 none: the band keeps interval 2
    assert (band.low, band.high) == pytest.approx((0.150, 0.150))
    band.roll(45.0)
    assert (band.low, band.high) == pytest.approx((0.150, 0.150))


def test_rtt_first_interval_has_no_band_only_thresholds() -> None:
    controller = RTTConcurrencyController(rtt_config(), 0.0)
    for t, rtt in [(1, 0.1), (2, 0.3), (3, 0.05), (4, 0.2)]:
        assert controller.on_rtt(t, rtt) == 10  # no band, no threshold crossed: no change


def test_rtt_band_moves_the_cap() -> None:
    controller = RTTConcurrencyController(rtt_config(), 0.0)
    controller.on_rtt(1.0, 0.100)
    controller.on_rtt(2.0, 0.200)  # interval 1: S in [0.100, 0.150]
    assert controller.on_rtt(11.0, 0.090) == 11  # below S_min: up
    assert controller.on_rtt(12.0, 0.120) == 11  # inside the band: unchanged
    assert controller.on_rtt(13.0, 0.160) == 10  # above S_max: down


def test_rtt_absolute_thresholds_force_changes() -> None:
    controller = RTTConcurrencyController(rtt_config(rtt_min_s=0.05, rtt_max_s=1.0), 0.0)
    assert controller.on_rtt(1.0, 0.01) == 11  # under RTT_MIN, even without a band
    assert controller.on_rtt(2.0, 2.0) == 10  # over RTT_MAX
    controller.on_rtt(3.0, 0.5)
    # Interval 2's band is wide; R inside it still moves the cap past the thresholds.
    assert controller.on_rtt(11.0, 0.02) == 11
    assert controller.on_rtt(12.0, 1.5) == 10


def test_rtt_cap_is_clamped() -> None:
    controller = RTTConcurrencyController(rtt_config(rtt_min_s=0.05, rtt_max_s=1.0), 0.0)
    caps = [controller.on_rtt(i * 0.1, 0.01) for i in range(10)]
    assert caps[-1] == 12 and max(caps) == 12
    caps = [controller.on_rtt(1 + i * 0.1, 3.0) for i in range(20)]
    assert caps[-1] == 2 and min(caps) == 2


def test_rtt_bans_lower_the_cap_and_do_not_feed_the_estimate() -> None:
    controller = RTTConcurrencyController(rtt_config(), 0.0)
    controller.on_request_start(0.0)
    controller.on_response(0.2, 0.2, 200, None)
    controller.on_request_start(1.0)
    controller.on_response(1.001, 0.001, 429, None)  # a cheap refusal
    assert controller.cap == 9
    assert controller.rtt.srtt == pytest.approx(0.2)
    assert controller.trace(2.0)["concurrency_cap"] == 9


def test_rtt_per_host_delay_is_a_duty_cycle() -> None:
    controller = RTTConcurrencyController(rtt_config(rtt_initial_cap=6), 0.0)
    assert controller.delay_s == 1.0  # initial_delay_s until an RTT is known
    controller.on_request_start(0.0)
    controller.on_response(0.1, 0.1, 200, None)
    assert controller.delay_s == pytest.approx(0.1 * 12 / 6)  # busy half of the time
    controller.cap = 12
    assert controller.delay_s == pytest.approx(0.1)  # back to back


# ---- adaptive --------------------------------------------------------------------------------


@dataclass
class BucketRun:
    ok_times: list[float]
    ban_times: list[float]
    elapsed_s: float
    min_gap_s: float

    @property
    def ban_share(self) -> float:
        return len(self.ban_times) / (len(self.ban_times) + len(self.ok_times))

    def rate_between(self, start: float, end: float) -> float:
        return sum(start <= t < end for t in self.ok_times) / (end - start)


def run_token_bucket(
    controller: HostRateController,
    limit_rps: float,
    latency_ms: float,
    pages: int = 2000,
    burst_s: float = 1.0,
    retry_after: bool = True,
    seed: int = 0,
    limit_after: tuple[float, float] | None = None,
) -> BucketRun:
    """A host behind a hidden token bucket (rate `limit_rps`, capacity `burst_s` seconds of
    tokens), answering 429 with Retry-After: ceil(seconds to the next token), like websim.
    Latency is lognormal (sigma 0.5) around `latency_ms`; the request reaches the bucket after
    half of it. Runs until `pages` requests succeeded; `limit_after` = (time, new limit)."""
    rng = random.Random(seed)
    capacity = max(1.0, limit_rps * burst_s)
    tokens, stamp = capacity, 0.0
    now = 0.0
    ok_times: list[float] = []
    ban_times: list[float] = []
    last_start, min_gap = None, math.inf
    mu = math.log(latency_ms / 1000)
    while len(ok_times) < pages:
        start = max(controller.earliest_next(), now)
        controller.on_request_start(start)
        if last_start is not None:
            min_gap = min(min_gap, start - last_start)
        last_start = start
        rtt = math.exp(rng.gauss(mu, 0.5))
        arrive = start + rtt / 2
        if limit_after and arrive >= limit_after[0]:
            limit_rps = limit_after[1]
            capacity = max(1.0, limit_rps * burst_s)
        tokens = min(capacity, tokens + (arrive - stamp) * limit_rps)
        stamp = arrive
        now = start + rtt
        if tokens >= 1:
            tokens -= 1
            ok_times.append(now)
            status, wait = 200, None
        else:
            ban_times.append(now)
            status = 429
            wait = float(max(1, math.ceil((1 - tokens) / limit_rps))) if retry_after else None
        controller.on_response(now, rtt, status, wait)
    return BucketRun(ok_times, ban_times, now, min_gap)


# Latencies a single sequential connection can sustain at the limit (rate * RTT well under 1).
BUCKET_CASES = [
    (5, 2),
    (5, 50),
    (10, 10),
    (10, 50),
    (20, 2),
    (20, 25),
    (35, 2),
    (35, 10),
    (50, 2),
    (50, 10),
]


@pytest.mark.parametrize(("limit", "latency_ms"), BUCKET_CASES)
def test_adaptive_converges_under_a_hidden_token_bucket(limit: float, latency_ms: float) -> None:
    controller = make_host_controller(RateControlConfig(), 0.0)
    run = run_token_bucket(controller, limit, latency_ms)
    assert run.ban_share <= 0.01
    achieved = 2000 / run.elapsed_s
    assert achieved >= 0.8 * limit
    assert run.elapsed_s <= 1.25 * 2000 / limit
    # Converged: the second half runs close to the limit (a full bucket allows a little more).
    half = run.elapsed_s / 2
    assert 0.85 * limit <= run.rate_between(half, run.elapsed_s) <= 1.1 * limit


@pytest.mark.parametrize(("limit", "latency_ms"), BUCKET_CASES)
def test_adaptive_small_host_costs_at_most_two_bans(limit: float, latency_ms: float) -> None:
    # One ban ends slow start, the next one measures the rate: a host of 300 pages (which
    # websim's Zipf sizes make common) must not pay a third.
    controller = make_host_controller(RateControlConfig(), 0.0)
    run = run_token_bucket(controller, limit, latency_ms, pages=300)
    assert len(run.ban_times) <= 2
    # The start costs a few seconds on slow-answering hosts: the ceiling holds (the connection
    # busy at most 1/6 of the time) until the unloaded RTT is learnt and the host has shown
    # it is fast.
    assert run.elapsed_s <= 1.35 * 300 / limit


def clean_responses(
    controller: AdaptiveRateController, now: float, count: int, rtt: float = 0.001
) -> float:
    """`count` 200 answers sent as soon as allowed; returns the time of the last one."""
    for _ in range(count):
        start = max(now, controller.earliest_next())
        controller.on_request_start(start)
        now = start + rtt
        controller.on_response(now, rtt, 200, None)
    return now


def ban(controller: AdaptiveRateController, now: float, start_delay: float = 0.0) -> float:
    start = max(now, controller.earliest_next()) + start_delay
    controller.on_request_start(start)
    controller.on_response(start + 0.001, 0.001, 429, 1.0)
    return start + 0.001


def test_adaptive_first_ban_backs_off_to_a_quarter() -> None:
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    now = clean_responses(controller, 0.0, 12)
    banned_at = controller.rate
    ban(controller, now)
    assert controller.rate == pytest.approx(banned_at / 4)
    # No measurement yet: the target is the fast-convergence guess below the ban rate.
    assert controller.target == pytest.approx(0.92 * 0.75 * banned_at)


def test_adaptive_second_ban_measures_the_served_rate() -> None:
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    now = ban(controller, clean_responses(controller, 0.0, 12))
    first_ban = now
    now = clean_responses(controller, now, 40)
    assert controller.rate > 10  # climbing towards the guess
    now = ban(controller, now)
    served = 40 / (now - first_ban)
    assert controller.target == pytest.approx(0.97 * served)
    assert controller.rate <= controller.target  # never above the target after a ban


def test_adaptive_idle_host_does_not_trust_the_served_rate() -> None:
    # The same run, but the node left the host idle for 5 s before the second ban: a bucket
    # refills unseen meanwhile, so the served rate says little and the ban rate decides.
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    now = ban(controller, clean_responses(controller, 0.0, 12))
    now = clean_responses(controller, now, 40)
    banned_at = 1.0 / max(controller.current_delay(), controller.rtt.srtt or 0.0)
    ban(controller, now, start_delay=5.0)
    assert controller.target == pytest.approx(0.92 * 0.75 * banned_at)


@pytest.mark.parametrize(("burst_s", "retry_after"), [(1.0, False), (3.0, True), (3.0, False)])
def test_adaptive_other_buckets_and_no_retry_after(burst_s: float, retry_after: bool) -> None:
    for limit, latency_ms in [(5, 10), (20, 10), (50, 2)]:
        controller = make_host_controller(RateControlConfig(), 0.0)
        run = run_token_bucket(
            controller, limit, latency_ms, burst_s=burst_s, retry_after=retry_after
        )
        assert run.ban_share <= 0.01, (limit, latency_ms)
        assert 2000 / run.elapsed_s >= 0.8 * limit, (limit, latency_ms)


def test_adaptive_follows_a_limit_that_drops() -> None:
    controller = make_host_controller(RateControlConfig(), 0.0)
    run = run_token_bucket(controller, 40, 5, pages=4000, limit_after=(30.0, 10.0))
    assert run.ban_share <= 0.01
    assert run.rate_between(0.0, 30.0) >= 0.8 * 40
    assert run.rate_between(60.0, run.elapsed_s) >= 0.8 * 10
    assert sum(t >= 60.0 for t in run.ban_times) <= 0.005 * len(run.ok_times)


def test_adaptive_never_beats_the_crawl_delay() -> None:
    controller = make_host_controller(RateControlConfig(), 0.0)
    controller.set_floor_delay(0.2)
    run = run_token_bucket(controller, 50, 2, pages=300)
    assert run.min_gap_s >= 0.2 - 1e-9
    assert not run.ban_times  # 5/s is under the 50/s limit


def test_adaptive_honours_retry_after() -> None:
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    controller.on_request_start(0.0)
    controller.on_response(0.01, 0.01, 503, 2.0)
    assert controller.earliest_next() >= 2.01
    assert controller.target is not None


def test_adaptive_slow_start_ignores_idle_time() -> None:
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    controller.on_request_start(0.0)
    controller.on_response(0.01, 0.01, 200, None)
    controller.on_request_start(3600.0)  # no URLs for an hour
    controller.on_response(3600.01, 0.01, 200, None)
    # Growth is per response by its own pacing (1 s at 1/s: two doublings, then 0.25 s at 4/s:
    # half a doubling), not by the hour that passed in between.
    assert controller.rate == pytest.approx(2**2.5)


def test_adaptive_slows_down_when_rtt_inflates() -> None:
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    # Learn a 5/s limit first, so the rate is set by the target and not by the fetch time.
    run = run_token_bucket(controller, 5, 20, pages=400)
    now = run.elapsed_s
    before = controller.rate
    assert 4.0 <= before <= 5.0

    def serve(seconds: float, rtt: float) -> float:
        nonlocal now
        slowest = controller.rate
        end = now + seconds
        while now < end:
            start = max(now, controller.earliest_next())
            controller.on_request_start(start)
            now = start + rtt
            controller.on_response(now, rtt, 200, None)
            slowest = min(slowest, controller.rate)
        return slowest

    # The server starts queueing: 100 ms answers, still well inside the 0.2 s delay.
    assert serve(4.0, 0.100) <= 0.8 * before * 1.001
    serve(40.0, 0.020)  # recovered: the rate comes back
    assert controller.rate >= 0.95 * before


def test_adaptive_network_errors_do_not_speed_up() -> None:
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    rate = controller.rate
    for i in range(5):
        controller.on_request_start(i * 10.0)
        controller.on_response(i * 10.0 + 5, 5.0, None, None)
    assert controller.rate == rate


# ---- adaptive on servers that slow down instead of refusing ---------------------------------


class SeveralWorkers:
    """A server with `workers` requests served at once, each in `service_s` (plus `latency_s`):
    the shape websim does not model. One connection never makes it queue, so the response
    time stays unloaded whatever the rate; only the M/M/1 reading of the ceiling's samples
    would suggest otherwise."""

    def __init__(self, latency_s: float, service_s: float) -> None:
        self.unloaded_rtt_s = latency_s + service_s

    def median_rtt_s(self, rate_rps: float) -> float:
        return self.unloaded_rtt_s


def run_degrading(
    controller: HostRateController,
    model: QueueingModel | SeveralWorkers,
    pages: int = 600,
    sigma: float = 0.25,
    seed: int = 0,
) -> tuple[list[float], float]:
    """A degrading host: response time at the arrival rate it sees (websim/queueing.py's
    `ArrivalRate`), lognormal around the model's median, never a 429. Returns the RTTs and the
    elapsed time."""
    rng = random.Random(seed)
    arrivals = ArrivalRate()
    now = 0.0
    rtts: list[float] = []
    while len(rtts) < pages:
        start = max(controller.earliest_next(), now)
        controller.on_request_start(start)
        median = model.median_rtt_s(arrivals.arrive(start))
        rtt = rng.lognormvariate(math.log(median), sigma)
        now = start + rtt
        controller.on_response(now, rtt, 200, None)
        rtts.append(rtt)
    return rtts, now


DEGRADING_SEEDS = range(6)


@pytest.mark.parametrize("capacity", [3.0, 8.0, 20.0, 40.0])
def test_adaptive_meets_the_degrading_goals(capacity: float) -> None:
    # The goals on websim's model (M/M/1, 2 ms of network latency, response times
    # lognormal sigma 0.25), 600 pages per run, over several seeds: every run's median RTT at
    # most 1.5x the unloaded one, and the crawl on average at least 80% as fast as one held at
    # the rate where the RTT reaches 1.5x (no run below 75%: the unloaded RTT learnt from 16
    # noisy samples under the ceiling sets where a run settles, 1.42x of it).
    model = QueueingModel(0.002, capacity)
    held_s = 600 / model.rate_at_inflation(1.5)
    speeds = []
    for seed in DEGRADING_SEEDS:
        controller = make_host_controller(RateControlConfig(), 0.0)
        rtts, elapsed = run_degrading(controller, model, seed=seed)
        assert statistics.median(rtts) <= 1.5 * model.unloaded_rtt_s, seed
        speeds.append(held_s / elapsed)
    assert statistics.mean(speeds) >= 0.8
    assert min(speeds) >= 0.75


@pytest.mark.parametrize("capacity", [3.0, 20.0])
def test_back_to_back_overloads_a_degrading_server(capacity: float) -> None:
    # What the delay signal prevents: requests back to back (the old adaptive default on a host
    # that never says no) settle near rate = 1/RTT(rate), about twice the unloaded RTT.
    model = QueueingModel(0.002, capacity)
    controller = FixedDelayController(RateControlConfig(), 0.0, 0.0)
    rtts, _ = run_degrading(controller, model, pages=300)
    assert statistics.median(rtts) >= 1.7 * model.unloaded_rtt_s


@pytest.mark.parametrize("service_ms", [20.0, 500.0])
def test_adaptive_goes_back_to_back_where_the_rtt_does_not_rise(service_ms: float) -> None:
    # A server with several workers: the ceiling's samples, read as M/M/1, put U up to 1/6
    # low, so the RTT reads as 1.17 U at any rate. That must not pass for queueing: slow start
    # measures the rise from the ceiling's RTT, and the rate ends at the fetch time.
    model = SeveralWorkers(0.002, service_ms / 1000)
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    rtts, _ = run_degrading(controller, model, pages=300)
    assert controller.current_delay() == pytest.approx(controller.rtt.srtt, rel=0.05)
    assert statistics.median(rtts[-100:]) <= 1.1 * model.unloaded_rtt_s


def test_queueing_delay_estimates_ignore_outliers() -> None:
    # The crawler's process descheduled on a loaded machine adds a few very slow readings;
    # the interquartile means of log RTT must not move with them.
    queueing = QueueingDelay(duty=0.2, samples=16, history=64, recent=16)
    for i in range(16):
        queueing.observe(0.050 if i % 4 else 2.0, duty=0.0)  # a quarter are stalls
    assert queueing.known
    assert queueing.unloaded_s == pytest.approx(0.050)
    assert queueing.current_s == pytest.approx(0.050)
    for _ in range(16):
        queueing.observe(0.080, duty=0.5)  # loaded: moves the current RTT only
    assert queueing.unloaded_s == pytest.approx(0.050)
    assert queueing.current_s == pytest.approx(0.080)


def test_adaptive_relearns_the_unloaded_rtt_of_a_server_that_slowed_down() -> None:
    # The server's capacity halves mid-crawl (other clients, a slower backend): U learnt before
    # is stale. The controller brakes to the ceiling's pace, where requests are unloaded
    # samples again, and settles against the new U.
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    fast, slow = QueueingModel(0.002, 20.0), QueueingModel(0.002, 10.0)
    _, now = run_degrading(controller, fast, pages=300)
    rng = random.Random(1)
    arrivals = ArrivalRate()
    rtts = []
    for _ in range(600):
        start = max(controller.earliest_next(), now)
        controller.on_request_start(start)
        rtt = rng.lognormvariate(math.log(slow.median_rtt_s(arrivals.arrive(start))), 0.25)
        now = start + rtt
        controller.on_response(now, rtt, 200, None)
        rtts.append(rtt)
    unloaded = controller.queueing.unloaded_s
    assert unloaded is not None
    assert unloaded == pytest.approx(slow.unloaded_rtt_s, rel=0.1)
    assert statistics.median(rtts[-300:]) <= 1.5 * slow.unloaded_rtt_s


def test_adaptive_ceiling_holds_until_the_host_shows_it_is_fast() -> None:
    config = RateControlConfig()
    controller = AdaptiveRateController(config, 0.0)
    now, rtt = 0.0, 0.1
    seen_fast = False
    for _ in range(200):
        start = max(now, controller.earliest_next())
        controller.on_request_start(start)
        now = start + rtt
        # Before the proof: never faster than one request per (1 + 5) RTTs.
        if not controller.proven_fast:
            assert controller.current_delay() >= (1 + config.unproven_delay_factor) * rtt - 1e-9
        controller.on_response(now, rtt, 200, None)
        seen_fast = seen_fast or controller.proven_fast
    assert seen_fast
    # An RTT that does not inflate lets the rate grow to back to back.
    assert controller.current_delay() == pytest.approx(rtt)


def test_adaptive_crawl_delay_wins_over_a_fast_host() -> None:
    controller = AdaptiveRateController(RateControlConfig(), 0.0)
    controller.set_floor_delay(2.0)
    clean_responses(controller, 0.0, 100, rtt=0.002)
    assert controller.current_delay() == pytest.approx(2.0)
