"""Servers that slow down because requests really wait: W workers behind one FIFO queue.

websim/queueing.py's degrading hosts compute a response time from a formula of the arrival
rate. A physical queue host does not: it has `workers` slots (1-8), each request waits in one
first-in-first-out queue until a slot is free and then holds it for a service time drawn
lognormal around `service_ms` (spread `service_sigma`), and background users who are not the
crawler arrive at random (Poisson, `background_load` of the workers' capacity) and share the
same slots. So the crawler's response time grows because its requests wait behind its own and
other users' work, in real time, as on a real server with a fixed worker pool.

Two sides here, both plain Python:

- `WorkerPool`: the slots and the queue inside websim's asyncio server (websim/server.py):
  requests and background jobs are submitted, wait for a slot, hold it for their service time
  (a timer of the event loop, so nothing blocks), and the crawler's are reported with their
  wait and service time: the server-side response time.
- `FifoQueue` and the functions below: the same queue as a discrete-event simulation
  (deterministic for a seed). It gives a benchmark the ground truth that no formula gives for
  this queue: the median response time of a lone request (`unloaded_median_s`) and the best
  polite rate (`best_polite_rate`), the highest rate at which a crawler with one request in
  flight keeps its requests' median within a factor (1.5) of that. Tests run the rate
  controller against it in-process.

"Unloaded" is the server as the crawler finds it: its background users present, the crawler
absent (a request sent alone, at a random moment). On a server already busy with other users a
lone request waits too; the crawler is polite when it adds at most half again to that.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# The best polite rate is searched over paced rates up to back to back, to this precision
# (relative), each rate's median from this many of the crawler's requests in a simulation that
# reuses the same random draws (common random numbers: the median then moves smoothly with the
# rate, and the search converges).
RATE_PRECISION = 0.01
BEST_RATE_REQUESTS = 4000
UNLOADED_PROBES = 20000


@dataclass(frozen=True)
class PhysicalQueue:
    """One server: `workers` slots behind one FIFO queue, service times lognormal with median
    `service_ms` and log spread `service_sigma`, and background users arriving as a Poisson
    stream at `background_load` of the slots' capacity (workers / mean service time)."""

    workers: int = 1
    service_ms: float = 20.0
    service_sigma: float = 0.5
    background_load: float = 0.0

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= 64:
            raise ValueError("workers must be in 1..64")
        if self.service_ms <= 0 or self.service_sigma < 0:
            raise ValueError("service_ms must be > 0 and service_sigma >= 0")
        if not 0.0 <= self.background_load < 1.0:
            raise ValueError("background_load must be in [0, 1)")

    @property
    def mean_service_s(self) -> float:
        return self.service_ms / 1000.0 * math.exp(self.service_sigma**2 / 2)

    @property
    def capacity_rps(self) -> float:
        """Requests per second the slots complete when all are busy."""
        return self.workers / self.mean_service_s

    @property
    def background_rps(self) -> float:
        return self.background_load * self.capacity_rps

    def service_s(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.service_ms / 1000.0), self.service_sigma)

    def label(self) -> str:
        return f"W={self.workers} bg={round(100 * self.background_load)}%"


# ---- in the server: real slots, real waiting ------------------------------------------------

# Called when a request leaves its slot: (seconds it waited for one, seconds it held one).
Done = Callable[[float, float], None]


class WorkerPool:
    """The slots of one physical queue host in websim's event loop (see the module notes).
    `submit` queues a request; background users arrive on their own once `start` is called.

    The queue runs on the event loop's schedule: a request starts when a slot frees at its
    scheduled time (the end of the service before it), not when the loop gets round to it,
    so a loaded machine that runs the loop late delays the answers but neither stretches the
    service times nor lets the queue build up (its dynamics are the simulation's below)."""

    def __init__(self, queue: PhysicalQueue, rng: random.Random) -> None:
        self.queue = queue
        self.rng = rng
        self.free = queue.workers
        self._waiting: deque[tuple[float, Done | None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_background: asyncio.TimerHandle | None = None
        self._background_done: Done | None = None

    def start(self, loop: asyncio.AbstractEventLoop, background_done: Done | None = None) -> None:
        """Open for requests; background users start arriving. `background_done` is called
        as each of theirs leaves its slot: Poisson arrivals see the queue as it is on
        average, so their response times are the server's unloaded ones (as the crawler
        finds it, before it adds its own)."""
        self._loop = loop
        self._background_done = background_done
        if self.queue.background_rps > 0:
            self._schedule_background(loop.time())

    def stop(self) -> None:
        if self._next_background is not None:
            self._next_background.cancel()

    def _schedule_background(self, previous: float) -> None:
        # Absolute times, so the stream keeps its rate whatever the event loop's lag.
        assert self._loop is not None
        at = previous + self.rng.expovariate(self.queue.background_rps)
        self._next_background = self._loop.call_at(at, self._background_arrives, at)

    def _background_arrives(self, at: float) -> None:
        self.submit(self._background_done, at)
        self._schedule_background(at)

    def submit(self, done: Done | None, arrived: float | None = None) -> None:
        """A request arrives (now, or at the scheduled time `arrived`); `done` is called when
        it leaves its slot."""
        assert self._loop is not None, "WorkerPool.start first"
        at = self._loop.time() if arrived is None else arrived
        self._waiting.append((at, done))
        self._dispatch(at)

    def _dispatch(self, freed_at: float) -> None:
        """Start waiting requests on the free slots, which freed at `freed_at` at the latest."""
        assert self._loop is not None
        while self.free > 0 and self._waiting:
            arrived, done = self._waiting.popleft()
            self.free -= 1
            started = max(arrived, freed_at)
            finish = started + self.queue.service_s(self.rng)
            self._loop.call_at(finish, self._finish, arrived, started, finish, done)

    def _finish(self, arrived: float, started: float, finish: float, done: Done | None) -> None:
        self.free += 1
        if done is not None:
            done(started - arrived, finish - started)
        self._dispatch(finish)


# ---- the same queue, simulated: ground truth for benchmarks and tests -----------------------


class FifoQueue:
    """The queue as a discrete-event simulation: W slots taken in arrival order (FIFO), the
    background users' Poisson arrivals drawn from `seed`, the crawler's requests sent at times
    the caller chooses (non-decreasing). Each arrival takes the slot that frees first, at its
    arrival or when that slot frees, whichever is later (Kiefer-Wolfowitz), so the crawler's
    response time is exact for any pattern of its own requests."""

    def __init__(self, queue: PhysicalQueue, seed: int = 0) -> None:
        self.queue = queue
        self._background = random.Random(seed)
        self._crawler = random.Random(seed + 1_000_003)
        self._free_at = [0.0] * queue.workers  # sorted
        self._next_background = self._draw_gap(0.0)

    def _draw_gap(self, now: float) -> float:
        rate = self.queue.background_rps
        return now + self._background.expovariate(rate) if rate > 0 else math.inf

    def _arrive(self, at: float, service: float) -> float:
        """One arrival at `at` holding a slot for `service`; returns its wait."""
        first = self._free_at.pop(0)
        start = max(at, first)
        bisect.insort(self._free_at, start + service)
        return start - at

    def _advance(self, now: float) -> None:
        while self._next_background <= now:
            at = self._next_background
            self._arrive(at, self.queue.service_s(self._background))
            self._next_background = self._draw_gap(at)

    def request(self, now: float) -> float:
        """The crawler sends a request at `now`; its response time (wait + service)."""
        self._advance(now)
        service = self.queue.service_s(self._crawler)
        return self._arrive(now, service) + service

    def probe(self, now: float) -> float:
        """The response time a request sent at `now` would have, without sending it."""
        self._advance(now)
        return max(0.0, self._free_at[0] - now) + self.queue.service_s(self._crawler)


def unloaded_median_s(queue: PhysicalQueue, seed: int = 0, probes: int = UNLOADED_PROBES) -> float:
    """The median response time of a request sent alone at a random moment (Poisson probes
    see the queue as it is on average), the background users present."""
    sim = FifoQueue(queue, seed)
    rng = random.Random(seed + 7)
    mean_gap = 10.0 * queue.mean_service_s  # far apart: the probes do not load the queue
    now = 0.0
    times = []
    for _ in range(probes):
        now += rng.expovariate(1.0 / mean_gap)
        times.append(sim.probe(now))
    return _median(times)


@dataclass(frozen=True)
class PacedRun:
    """A crawler with one request in flight, paced at `rate_rps` (or back to back)."""

    rate_rps: float  # asked for; math.inf: back to back
    achieved_rps: float  # requests over the time from the first start to the last answer
    median_s: float  # of its requests' response times at the server


def paced_run(
    queue: PhysicalQueue, rate_rps: float, seed: int = 0, requests: int = BEST_RATE_REQUESTS
) -> PacedRun:
    """The crawler sends its next request 1/rate after the last one started, or when its
    answer came if that is later (one connection, one request at a time)."""
    sim = FifoQueue(queue, seed)
    gap = 1.0 / rate_rps if rate_rps > 0 else math.inf
    # Start once the background users' queue has reached its steady state.
    now = start = 50.0 * queue.mean_service_s
    times = []
    for _ in range(requests):
        response = sim.request(now)
        times.append(response)
        done = now + response
        now = max(now + gap, done)
    return PacedRun(rate_rps, requests / (done - start), _median(times))


@dataclass(frozen=True)
class BestRate:
    """The best polite rate of a queue: the highest rate of a crawler with one request in
    flight whose median response time stays within `inflation` x the unloaded median."""

    rate_rps: float  # the achieved rate there
    unloaded_s: float
    median_s: float  # the crawler's median at that rate
    back_to_back: bool  # even requests back to back stay within it: one connection's limit


def best_polite_rate(
    queue: PhysicalQueue,
    inflation: float = 1.5,
    seed: int = 0,
    requests: int = BEST_RATE_REQUESTS,
) -> BestRate:
    unloaded = unloaded_median_s(queue, seed)
    bound = inflation * unloaded
    fastest = paced_run(queue, math.inf, seed, requests)
    if fastest.median_s <= bound:
        return BestRate(fastest.achieved_rps, unloaded, fastest.median_s, True)
    low, high = 0.0, fastest.achieved_rps
    best = PacedRun(0.0, 0.0, unloaded)
    while high - low > RATE_PRECISION * high:
        middle = (low + high) / 2
        run = paced_run(queue, middle, seed, requests)
        if run.median_s <= bound:
            low, best = middle, run
        else:
            high = middle
    return BestRate(best.achieved_rps, unloaded, best.median_s, False)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
