"""Unit tests of the adaptive controller (crawler.ratecontrol.adaptive) against simulated
clocks and simulated servers: token buckets that answer 429, and servers that slow down.

Nothing here sleeps or opens a socket: every controller takes time as an argument, and the
servers are small event simulations driven by seeded RNGs, so every number is reproducible.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from dataclasses import dataclass

import pytest

from crawler.fetching.politeness import RetrySettings
from crawler.ratecontrol import (
    AdaptiveRateController,
    FixedDelayController,
    HostRateController,
    QueueingDelay,
    RateControlSettings,
    make_host_controller,
)
from crawler.ratecontrol.adaptive import BACK_TO_BACK_SHARE
from crawler.ratecontrol.settings import AdaptiveSettings
from websim.physical import FifoQueue, PhysicalQueue, unloaded_median_s
from websim.queueing import ArrivalRate, QueueingModel

RETRY = RetrySettings()

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
    half of it. As many requests in flight as the controller allows (`in_flight_limit`).
    Runs until `pages` requests succeeded; `limit_after` = (time, new limit)."""
    rng = random.Random(seed)
    capacity = max(1.0, limit_rps * burst_s)
    tokens, stamp = capacity, 0.0
    now = 0.0
    ok_times: list[float] = []
    ban_times: list[float] = []
    last_start, min_gap = None, math.inf
    mu = math.log(latency_ms / 1000)
    # (answered at, RTT, status, Retry-After) of the requests in flight
    in_flight: list[tuple[float, float, int, float | None]] = []
    while len(ok_times) < pages:
        start = math.inf
        if len(in_flight) < controller.in_flight_limit():
            start = max(controller.earliest_next(), now)
        if in_flight and in_flight[0][0] < start:
            now, rtt, status, wait = heapq.heappop(in_flight)
            (ok_times if status == 200 else ban_times).append(now)
            controller.on_response(now, rtt, status, wait)
            continue
        controller.on_request_start(start)
        now = start
        if last_start is not None:
            min_gap = min(min_gap, start - last_start)
        last_start = start
        rtt = math.exp(rng.gauss(mu, 0.5))
        arrive = start + rtt / 2
        if limit_after and arrive >= limit_after[0]:
            limit_rps = limit_after[1]
            capacity = max(1.0, limit_rps * burst_s)
        # Two in flight may reach the bucket out of order: no refill for the earlier one.
        tokens = min(capacity, tokens + max(0.0, arrive - stamp) * limit_rps)
        stamp = max(stamp, arrive)
        if tokens >= 1:
            tokens -= 1
            status, wait = 200, None
        else:
            status = 429
            wait = float(max(1, math.ceil((1 - tokens) / limit_rps))) if retry_after else None
        heapq.heappush(in_flight, (start + rtt, rtt, status, wait))
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
    controller = make_host_controller(RateControlSettings(), RETRY, 0.0)
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
    controller = make_host_controller(RateControlSettings(), RETRY, 0.0)
    run = run_token_bucket(controller, limit, latency_ms, pages=300)
    assert len(run.ban_times) <= 2
    # The start costs a few seconds on slow-answering hosts: the ceiling holds (the connection
    # busy at most 1/3 of the time) until the unloaded RTT is learnt and the host has shown
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


def test_adaptive_starts_at_the_ceiling() -> None:
    # The ceiling (busy at most 1/3 of the time) is the bound for a server not yet known, so
    # the first RTT puts the pace there at once: no climb from initial_delay_s.
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    assert controller.delay_s == 1.0  # initial_delay_s until an RTT is known
    clean_responses(controller, 0.0, 1, rtt=0.004)
    assert controller.delay_s == pytest.approx(3 * 0.004)
    # Crawl-delay still wins.
    slow = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    slow.set_floor_delay(0.5)
    clean_responses(slow, 0.0, 1, rtt=0.004)
    assert slow.current_delay() == 0.5


def test_adaptive_first_ban_at_the_ceiling_start_restarts_at_the_rate_allowed() -> None:
    # A ban at the ceiling's pace says only that the limit is below it (by up to 30x on a
    # fast server): the pace restarts at the pages served over the time until the pause ends,
    # under slow start, and no target is guessed from the ban rate.
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    now = clean_responses(controller, 0.0, 12)
    assert not controller.proven_fast
    now = ban(controller, now)  # Retry-After: 1 s
    assert controller.rate == pytest.approx(12 / (now + 1.0))
    assert controller.target is None and controller.slow_start
    # The next ban is an ordinary one: it backs off and measures the rate served since.
    now = ban(controller, clean_responses(controller, now, 20))
    assert controller.target is not None


def test_adaptive_first_ban_backs_off_to_a_quarter() -> None:
    # Once the server has shown it is fast, slow start runs above the ceiling: its first ban
    # backs off to a quarter and guesses the limit below the rate that drew it.
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    now = clean_responses(controller, 0.0, 30)
    assert controller.proven_fast and controller.slow_start
    banned_at = controller.rate
    ban(controller, now)
    assert controller.rate == pytest.approx(banned_at / 4)
    # No measurement yet: the target is the fast-convergence guess below the ban rate.
    assert controller.target == pytest.approx(0.92 * 0.75 * banned_at)


def test_adaptive_second_ban_measures_the_served_rate() -> None:
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    now = ban(controller, clean_responses(controller, 0.0, 12))
    first_ban = now
    now = clean_responses(controller, now, 40)
    assert controller.rate > 10  # climbing towards the guess
    now = ban(controller, now)
    served = 40 / (now - first_ban)
    assert controller.target == pytest.approx(0.97 * served)
    assert controller.rate <= controller.target  # never above the target after a ban


def test_adaptive_first_ban_after_gentle_growth_trusts_its_rate() -> None:
    # Past the ceiling, without slow start, the delay side raises the rate a few percent per
    # response: a ban then says the limit was crossed just now, not several times over.
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    now = clean_responses(controller, 0.0, 60, rtt=0.05)
    assert controller.proven_fast and not controller.slow_start
    banned_at = 1.0 / max(controller.current_delay(), controller.rtt.srtt or 0.0)
    rate = controller.rate
    ban(controller, now)
    assert controller.target == pytest.approx(0.92 * banned_at)
    assert controller.rate == pytest.approx(min(rate, banned_at) / 2)


def test_adaptive_idle_host_does_not_trust_the_served_rate() -> None:
    # The same run, but the node left the host idle for 5 s before the second ban: a bucket
    # refills unseen meanwhile, so the served rate says little and the ban rate decides.
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    now = ban(controller, clean_responses(controller, 0.0, 12))
    now = clean_responses(controller, now, 40)
    banned_at = 1.0 / max(controller.current_delay(), controller.rtt.srtt or 0.0)
    ban(controller, now, start_delay=5.0)
    assert controller.target == pytest.approx(0.92 * 0.75 * banned_at)


@pytest.mark.parametrize(("burst_s", "retry_after"), [(1.0, False), (3.0, True), (3.0, False)])
def test_adaptive_other_buckets_and_no_retry_after(burst_s: float, retry_after: bool) -> None:
    for limit, latency_ms in [(5, 10), (20, 10), (50, 2)]:
        controller = make_host_controller(RateControlSettings(), RETRY, 0.0)
        run = run_token_bucket(
            controller, limit, latency_ms, burst_s=burst_s, retry_after=retry_after
        )
        assert run.ban_share <= 0.01, (limit, latency_ms)
        assert 2000 / run.elapsed_s >= 0.8 * limit, (limit, latency_ms)


def test_adaptive_follows_a_limit_that_drops() -> None:
    controller = make_host_controller(RateControlSettings(), RETRY, 0.0)
    run = run_token_bucket(controller, 40, 5, pages=4000, limit_after=(30.0, 10.0))
    assert run.ban_share <= 0.01
    assert run.rate_between(0.0, 30.0) >= 0.8 * 40
    assert run.rate_between(60.0, run.elapsed_s) >= 0.8 * 10
    assert sum(t >= 60.0 for t in run.ban_times) <= 0.005 * len(run.ok_times)


def test_adaptive_never_beats_the_crawl_delay() -> None:
    controller = make_host_controller(RateControlSettings(), RETRY, 0.0)
    controller.set_floor_delay(0.2)
    run = run_token_bucket(controller, 50, 2, pages=300)
    assert run.min_gap_s >= 0.2 - 1e-9
    assert not run.ban_times  # 5/s is under the 50/s limit


def test_adaptive_honours_retry_after() -> None:
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    controller.on_request_start(0.0)
    controller.on_response(0.01, 0.01, 503, 2.0)
    assert controller.earliest_next() >= 2.01
    assert controller.target is not None


def test_adaptive_slow_start_ignores_idle_time() -> None:
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    now = clean_responses(controller, 0.0, 30)
    assert controller.proven_fast and controller.slow_start
    rate = controller.rate
    controller.on_request_start(now + 3600.0)  # no URLs for an hour
    controller.on_response(now + 3600.001, 0.001, 200, None)
    # Growth is per response by its own pacing (1/rate: that share of a doubling), not by
    # the hour that passed in between.
    assert controller.rate == pytest.approx(rate * 2.0 ** (1.0 / rate / 0.5))


def test_adaptive_slows_down_when_rtt_inflates() -> None:
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
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
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
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
    on_the_wire: bool = False,
) -> tuple[list[float], float]:
    """A degrading host: response time at the arrival rate it sees (websim/queueing.py's
    `ArrivalRate`), lognormal around the model's median, never a 429. `on_the_wire`: the
    latency is the network's, as websim's wire has it: a fixed delay the handshake shows, with
    only the time in the server spread. Returns the RTTs and the elapsed time."""
    rng = random.Random(seed)
    arrivals = ArrivalRate()
    now = 0.0
    rtts: list[float] = []
    latency = model.latency_s if isinstance(model, QueueingModel) and on_the_wire else 0.0
    if on_the_wire:
        controller.on_network_rtt(latency)
    while len(rtts) < pages:
        start = max(controller.earliest_next(), now)
        controller.on_backlog(pages - len(rtts) - 1)
        controller.on_request_start(start)
        median = model.median_rtt_s(arrivals.arrive(start)) - latency
        rtt = latency + rng.lognormvariate(math.log(median), sigma)
        now = start + rtt
        controller.on_response(now, rtt, 200, None)
        rtts.append(rtt)
    return rtts, now


DEGRADING_SEEDS = range(6)


@pytest.mark.parametrize("capacity", [3.0, 8.0, 20.0, 40.0])
def test_adaptive_meets_the_degrading_goals(capacity: float) -> None:
    # The goals on websim's model (M/M/1, 2 ms of network latency, response times
    # lognormal sigma 0.25), 600 pages per run, over several seeds: every run's median RTT at
    # most 1.5x the unloaded one, and the crawl at least 81% as fast as one held at the rate
    # where the RTT reaches 1.5x in every run, 85% on average (the start at the ceiling's pace
    # weighs most on the fastest servers; the rate step test's burst and drain cost such a
    # server 1-2 points: 0.851 against 0.866 on average at 40/s, bench/results/politeness).
    model = QueueingModel(0.002, capacity)
    held_s = 600 / model.rate_at_inflation(1.5)
    speeds = []
    for seed in DEGRADING_SEEDS:
        controller = make_host_controller(RateControlSettings(), RETRY, 0.0)
        rtts, elapsed = run_degrading(controller, model, seed=seed)
        assert statistics.median(rtts) <= 1.5 * model.unloaded_rtt_s, seed
        speeds.append(held_s / elapsed)
    assert statistics.mean(speeds) >= 0.85
    assert min(speeds) >= 0.81


@pytest.mark.parametrize("capacity", [12.0, 28.7])
def test_adaptive_errs_polite_where_latency_is_part_of_the_rtt(capacity: float) -> None:
    # websim's fastest degrading hosts: 10 ms of network latency, 11-22% of the unloaded RTT.
    # That part does not queue, so dividing the ceiling's RTTs by (1 + busy share) reads U
    # low (by about 0.4 x latency / U) and the host settles under 1.45x: slower than the
    # goal's 1.5x allows, never faster. The README's rate control section gives the figures.
    model = QueueingModel(0.010, capacity)
    for seed in DEGRADING_SEEDS:
        controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
        rtts, _ = run_degrading(controller, model, pages=300, seed=seed)
        unloaded = controller.queueing.unloaded_s
        assert unloaded is not None
        assert unloaded < model.unloaded_rtt_s, seed
        assert statistics.median(rtts) <= 1.45 * model.unloaded_rtt_s, seed


@pytest.mark.parametrize(("latency_ms", "capacity"), [(7.3, 28.8), (10.0, 28.7), (10.0, 6.0)])
def test_adaptive_takes_the_handshake_as_latency_that_does_not_queue(
    latency_ms: float, capacity: float
) -> None:
    # The same hosts with their latency on the network, where a TCP handshake shows it (the
    # first is the largest host of bench/politeness's degrading web). Taken out of the time in
    # the server, U comes out right instead of low, and the host settles just under the goal's
    # 1.5x instead of at 1.3-1.4x: 600 pages at 0.95 of the held crawl's speed on average
    # instead of 0.71-0.89 (tests/test_ratecontrol_adaptive.py's other degrading runs); at
    # least 0.89 in every run (the rate step test's burst and drain cost up to 2 points).
    model = QueueingModel(latency_ms / 1000, capacity)
    held_s = 600 / model.rate_at_inflation(1.5)
    speeds = []
    for seed in DEGRADING_SEEDS:
        controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
        rtts, elapsed = run_degrading(controller, model, seed=seed, on_the_wire=True)
        unloaded = controller.queueing.unloaded_s
        assert unloaded == pytest.approx(model.unloaded_rtt_s, rel=0.04), seed
        assert statistics.median(rtts) <= 1.5 * model.unloaded_rtt_s, seed
        speeds.append(held_s / elapsed)
    assert min(speeds) >= 0.89
    assert statistics.mean(speeds) >= 0.93


@pytest.mark.parametrize("capacity", [3.0, 8.0, 20.0, 40.0])
def test_adaptive_small_degrading_hosts_stay_under_the_goal(capacity: float) -> None:
    # Over 80 pages the start weighs most: U rests on few samples, so the setpoint sits lower
    # (by half their standard error), and the climb from the ceiling must not overshoot it.
    model = QueueingModel(0.002, capacity)
    for seed in range(8):
        controller = make_host_controller(RateControlSettings(), RETRY, 0.0)
        rtts, _ = run_degrading(controller, model, pages=80, seed=seed)
        assert statistics.median(rtts) <= 1.45 * model.unloaded_rtt_s, seed


def test_adaptive_does_not_take_a_queueing_server_with_latency_for_flat() -> None:
    # 5 ms of network latency under 34 ms of service: at the ceiling's pace the server is
    # busy only a fifth of the time, so its 1.5x rate is 1.6x the ceiling's, and the climb,
    # which R lags, can overshoot it. Read as flat there (its U raised to the ceiling's RTT),
    # it would be run at 1.7x; seeds 74 and 184 did so when the check came at twice the
    # ceiling's rate. The rate step test may give it a floor, from the line through its RTTs
    # against the rate, but that line meets rate 0 under the unloaded RTT (the polite side).
    model = QueueingModel(0.0052, 29.1)
    for seed in range(200):
        controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
        rtts, _ = run_degrading(controller, model, pages=437, seed=seed)
        assert controller.queueing.floor_s <= model.unloaded_rtt_s, seed
        assert statistics.median(rtts) <= 1.5 * model.unloaded_rtt_s, seed


def test_the_flat_check_waits_for_a_servers_averaged_arrivals() -> None:
    # websim's formula servers average their arrivals over a second: one window of R after the
    # rate stepped up, the RTT of seed 1054's 28.7/s server on the wire had risen by 0.218 U,
    # short of the check's 0.243, and the loaded RTT became U's floor, 1.20 times the truth
    # (its median 1.57x). Two windows see the rise.
    model = QueueingModel(0.010, 28.7)
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    run_degrading(controller, model, pages=600, seed=1054, on_the_wire=True)
    assert controller.queueing.floor_s <= model.unloaded_rtt_s


def test_adaptive_keeps_learning_the_unloaded_rtt() -> None:
    # Once the server has shown it queues, every page feeds U (divided by 1 + its busy
    # share): after 600 pages U rests on hundreds of samples, and the setpoint has risen to
    # within 1% of rtt_target as U's standard error shrank.
    model = QueueingModel(0.002, 8.0)
    for seed in DEGRADING_SEEDS:
        controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
        run_degrading(controller, model, seed=seed)
        assert controller.queueing.unloaded_s == pytest.approx(model.unloaded_rtt_s, rel=0.05)
        assert controller.setpoint() >= 0.99 * controller.settings.adaptive.rtt_target, seed


def test_adaptive_setpoint_stays_above_one_on_wild_early_rtts() -> None:
    # A night's recrawl: robots.txt answered in 1.4 ms, then a page in 7.8 ms. Two samples
    # that far apart put U's standard error near 0.9 (in logs); the setpoint, 1.5 less half of
    # it, fell under 1 and the next response raised ZeroDivisionError, losing its URL.
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    now = 0.0
    for rtt in (0.0014, 0.0078, 0.0014, 0.0078):
        controller.on_request_start(now)
        now += rtt
        controller.on_response(now, rtt, 200, None)
        now = max(now, controller.earliest_next())
    assert controller.queueing.unloaded_error > 0.5
    assert controller.setpoint() >= 1.25
    assert controller.rate > 0


@pytest.mark.parametrize("capacity", [3.0, 20.0])
def test_back_to_back_overloads_a_degrading_server(capacity: float) -> None:
    # What the delay signal prevents: requests back to back (the old adaptive default on a host
    # that never says no) settle near rate = 1/RTT(rate), about twice the unloaded RTT.
    model = QueueingModel(0.002, capacity)
    controller = FixedDelayController(
        RateControlSettings(mode="fixed", fixed={"delay_s": 0.0}), RETRY, 0.0
    )
    rtts, _ = run_degrading(controller, model, pages=300)
    assert statistics.median(rtts) >= 1.7 * model.unloaded_rtt_s


@pytest.mark.parametrize("service_ms", [20.0, 500.0])
def test_adaptive_goes_back_to_back_where_the_rtt_does_not_rise(service_ms: float) -> None:
    # A server with several workers: the ceiling's samples, read as M/M/1, put U up to a
    # quarter low, so the RTT reads as up to 1.37 U at any rate. That must not pass for
    # queueing: once the rate has stayed at 2.5 times the ceiling's without the RTT rising,
    # U's floor is the ceiling's RTT, and the requests go back to back: the pace at its
    # floor, a share of the typical fetch time, so that no request waits for it.
    model = SeveralWorkers(0.002, service_ms / 1000)
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    rtts, _ = run_degrading(controller, model, pages=300)
    assert controller.queueing.floor_s > 0  # the ceiling's RTT, taken as unloaded
    fetch = min(controller.rtt.srtt, controller.queueing.current_s)
    assert controller.current_delay() == pytest.approx(BACK_TO_BACK_SHARE * fetch)
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
    assert queueing.unloaded_error == 0.0  # the middle half are all 50 ms
    queueing.count_every_load()  # the server queues: loaded pages count, divided by 1 + duty
    for _ in range(64):
        queueing.observe(0.080, duty=0.6)
    assert queueing.unloaded_s == pytest.approx(0.050)


@pytest.mark.parametrize(
    ("spread", "window", "current_ms"), [(0.3, 16, 40.0), (0.5, 33, None), (0.8, 64, 20.0)]
)
def test_the_current_rtt_averages_more_pages_where_rtts_spread_wider(
    spread: float, window: int, current_ms: float | None
) -> None:
    # Other users' busy periods swing a server's RTT: R over 16 pages would cross the
    # setpoint on their swings alone. Its window grows with the square of the spread, so that
    # its error stays that of 16 pages at REFERENCE_SPREAD, up to four times as many pages.
    queueing = QueueingDelay(duty=0.2, samples=16, history=256, recent=16)
    assert queueing.recent_window == 16  # U unknown: no spread yet
    rng = random.Random(7)
    for _ in range(256):
        queueing.observe(0.020 * math.exp(rng.gauss(0.0, spread)), duty=0.0)
    assert queueing.recent_window == pytest.approx(window, abs=4)
    # Loaded pages (R only): 48 at 20 ms, then 16 at 40 ms. Over 16 pages R is the last 16's;
    # over 64 their middle half is all 20 ms.
    for rtt in [0.020] * 48 + [0.040] * 16:
        queueing.observe(rtt, duty=0.5)
    if current_ms is not None:
        assert queueing.current_s == pytest.approx(current_ms / 1000)


@pytest.mark.parametrize(("before", "after"), [(20.0, 10.0), (10.0, 20.0)])
def test_adaptive_relearns_the_unloaded_rtt_of_a_server_that_changed(
    before: float, after: float
) -> None:
    # The server's capacity halves or doubles mid-crawl (other clients, a slower or faster
    # backend): U learnt before is stale. Every page feeds U once the server has shown it
    # queues, so U follows either way, and the rate settles against the new U: under 1.5x of
    # it, and (where the server got faster) at least 80% of its new 1.5x rate.
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    old, new = QueueingModel(0.002, before), QueueingModel(0.002, after)
    _, now = run_degrading(controller, old, pages=300)
    rng = random.Random(1)
    arrivals = ArrivalRate()
    rtts, starts = [], []
    for _ in range(600):
        start = max(controller.earliest_next(), now)
        controller.on_request_start(start)
        rtt = rng.lognormvariate(math.log(new.median_rtt_s(arrivals.arrive(start))), 0.25)
        now = start + rtt
        controller.on_response(now, rtt, 200, None)
        rtts.append(rtt)
        starts.append(start)
    unloaded = controller.queueing.unloaded_s
    assert unloaded is not None
    assert unloaded == pytest.approx(new.unloaded_rtt_s, rel=0.1)
    assert statistics.median(rtts[-300:]) <= 1.5 * new.unloaded_rtt_s
    rate = 300 / (starts[-1] - starts[300])
    assert rate >= 0.8 * new.rate_at_inflation(1.5)


def test_adaptive_ceiling_holds_until_the_host_shows_it_is_fast() -> None:
    config = RateControlSettings()
    factor = config.adaptive.unproven_delay_factor
    controller = AdaptiveRateController(config, RETRY, 0.0)
    now, rtt = 0.0, 0.1
    seen_fast = False
    for _ in range(200):
        start = max(now, controller.earliest_next())
        controller.on_request_start(start)
        now = start + rtt
        # Before the proof: never faster than one request per (1 + 2) RTTs.
        if not controller.proven_fast:
            assert controller.current_delay() >= (1 + factor) * rtt - 1e-9
        controller.on_response(now, rtt, 200, None)
        seen_fast = seen_fast or controller.proven_fast
    assert seen_fast
    # An RTT that does not inflate lets the rate grow to back to back.
    assert controller.current_delay() == pytest.approx(BACK_TO_BACK_SHARE * rtt)


def test_adaptive_crawl_delay_wins_over_a_fast_host() -> None:
    controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
    controller.set_floor_delay(2.0)
    clean_responses(controller, 0.0, 100, rtt=0.002)
    assert controller.current_delay() == pytest.approx(2.0)


# ---- adaptive on physical queues: workers behind one FIFO queue, shared with other users ----


def run_physical(
    controller: HostRateController, queue: PhysicalQueue, pages: int = 600, seed: int = 0
) -> tuple[list[float], list[float]]:
    """A websim physical queue host, simulated (websim/physical.py's `FifoQueue`): every
    request waits for one of the workers, behind the background users' too. As many requests
    in flight as the controller allows (`in_flight_limit`), each started at its pace; 2 ms of
    the client's own in each RTT. Returns the response times at the server and the answers'
    times."""
    sim = FifoQueue(queue, seed)
    now = 1.0
    times: list[float] = []
    answered: list[float] = []
    in_flight: list[tuple[float, float, float]] = []  # (answered at, started at, response)
    started = 0
    while len(times) < pages:
        start = math.inf
        if len(in_flight) < controller.in_flight_limit() and started < pages:
            start = max(controller.earliest_next(), now)
        if in_flight and in_flight[0][0] < start:
            done, sent, response = heapq.heappop(in_flight)
            now = done
            controller.on_response(now, done - sent, 200, None)
            times.append(response)
            answered.append(now)
            continue
        controller.on_backlog(pages - started - 1)
        controller.on_request_start(start)
        response = sim.request(start)
        heapq.heappush(in_flight, (start + response + 0.002, start, response))
        started += 1
        now = start
    return times, answered


@pytest.mark.parametrize(("workers", "background"), [(2, 0.0), (8, 0.0), (8, 0.3)])
def test_adaptive_finds_that_a_queue_with_workers_to_spare_can_take_more(
    workers: int, background: float
) -> None:
    # The crawler's requests, one at a time, never wait behind each other on a server with
    # workers to spare: the RTT does not rise with its rate, and the polite rate is back to
    # back. The M/M/1 reading held such servers at about 1.45 times the ceiling's rate
    # (20-23/s here, where back to back is about 40/s); the rate step test finds the RTT flat
    # and lets the rate up. With hundreds of URLs waiting the test comes 8 responses after the
    # ceiling lifted, sent back to back, and is asked once more when it says nothing clear;
    # back to back paces at half the typical fetch time. The floor it gives U then lets the
    # in-flight test ask for a second request in flight, and the RTT, still flat, keeps it.
    # Over 600 pages, 8 seeds: 55/s on average, at least 49.6/s (one request in flight: 35.8/s
    # and 31/s; back to back with one is about 43/s); no median over 1.04x the unloaded one.
    queue = PhysicalQueue(workers, background_load=background)
    unloaded = unloaded_median_s(queue)
    rates = []
    for seed in range(8):
        controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
        times, answered = run_physical(controller, queue, seed=seed)
        assert statistics.median(times) <= 1.1 * unloaded, seed
        assert controller.in_flight_limit() == 2, seed
        rates.append(600 / (answered[-1] - 1.0))
    assert statistics.mean(rates) >= 50.0
    assert min(rates) >= 45.0


def test_adaptive_keeps_one_request_in_flight_on_a_server_with_one_worker() -> None:
    # One worker and no one else: the crawler's requests one at a time never wait, so its RTT
    # is flat and U gets its floor, as on a server with workers to spare; but a second request
    # in flight waits behind the first, R rises in the in-flight test, and the server keeps one.
    # Over 600 pages, 8 seeds: 36.8/s on average, medians at most 1.05x.
    queue = PhysicalQueue(1)
    unloaded = unloaded_median_s(queue)
    rates = []
    for seed in range(8):
        controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
        times, answered = run_physical(controller, queue, seed=seed)
        assert statistics.median(times) <= 1.1 * unloaded, seed
        assert controller.in_flight_limit() == 1, seed
        rates.append(600 / (answered[-1] - 1.0))
    assert statistics.mean(rates) >= 34.0


def test_a_ban_a_crawl_delay_or_the_setting_keep_one_request_in_flight() -> None:
    queue = PhysicalQueue(8)
    settings = RateControlSettings()
    controller = AdaptiveRateController(settings, RETRY, 0.0)
    run_physical(controller, queue, pages=300)
    assert controller.in_flight_limit() == 2
    controller.set_floor_delay(0.01)  # robots.txt's Crawl-delay
    assert controller.in_flight_limit() == 1
    controller.set_floor_delay(0.0)
    controller.on_request_start(100.0)
    controller.on_response(100.02, 0.02, 429, None)
    assert controller.in_flight_limit() == 1
    # The ban came at two requests per RTT: the target after it is measured from that rate,
    # not from one connection's.
    srtt = controller.rtt.srtt
    assert srtt is not None and controller.target is not None
    assert controller.target > 1.2 / srtt
    one = settings.model_copy(update={"adaptive": AdaptiveSettings(max_in_flight=1)})
    controller = AdaptiveRateController(one, RETRY, 0.0)
    run_physical(controller, queue, pages=300)
    assert controller.in_flight_limit() == 1


@pytest.mark.parametrize(
    ("workers", "most_median", "least_rate"), [(1, 1.5, 10.6), (2, 1.35, 22.6)]
)
def test_adaptive_stays_polite_on_a_queue_near_saturation(
    workers: int, most_median: float, least_rate: float
) -> None:
    # 60% of the workers' capacity taken by other users: each request of the crawler's adds
    # to their queue and waits in it. Median at most 1.5x the unloaded one (the server as the
    # crawler finds it, others' load included) in every run, 1.3x with two workers. Their busy
    # periods stop the rate step test as a rise of the crawler's own making would; the line
    # through its pages tells them apart. They swing the RTT widely (log spread 0.7-0.8 with
    # one worker), and R, averaged over up to 64 pages there instead of 16, no longer brakes
    # on each swing: 10.8/s and 22.4/s on average over the 400 pages (7.2/s and 14.2/s over 16
    # pages; back to back: 16.0 and 26.2/s), the medians at most 1.44x and 1.21x (1.3x and
    # 1.22x over 16 pages; over 30 seeds 1.44x and 1.25x). The in-flight test's burst, two
    # back to back until R rises, puts the two-worker server's at up to 1.30x. A test stopped
    # by the others' busy period whose line still gives a floor drains from the test's own rate
    # (1/R back to back), not from the ceiling's: 11.0/s and 23.3/s (10.3/s and 22.2/s draining
    # from the ceiling's), medians at most 1.49x and 1.22x. The one-worker
    # server never keeps two in flight: in seed 10 the in-flight test came in the others' busy
    # period (R twice U), and two requests' R, compared with that inflated one, rose by less
    # than the setpoint; allowed, they put the median at 1.82x. Now no test starts above the
    # setpoint.
    queue = PhysicalQueue(workers, background_load=0.6)
    unloaded = unloaded_median_s(queue)
    rates = []
    for seed in (*range(6), 10):
        controller = AdaptiveRateController(RateControlSettings(), RETRY, 0.0)
        times, answered = run_physical(controller, queue, pages=400, seed=seed)
        assert statistics.median(times) <= most_median * unloaded, seed
        assert workers > 1 or controller.in_flight_limit() == 1, seed
        if seed < 6:
            rates.append(400 / (answered[-1] - 1.0))
    assert statistics.mean(rates) >= least_rate
