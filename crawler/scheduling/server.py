"""One server's state: everything a node knows about a server it owns, in one object that moves
between nodes whole (pickled by Ray on a handover, docs/distributed.md).

A server belongs to one node at a time, and only its owner opens a connection to it; when it
moves, it takes along all its next owner needs so that nothing is lost or fetched twice and
politeness holds: its queued URLs and retries, the exact set of its URLs seen so far, its
robots.txt rules and its rate controller (what the server's limits taught it), what it used of
the page budget and trap limits (crawler.scope.limits), and the redirect hops of its queued redirect
targets. What stays behind is what belongs to the node: its connection, and its connection
timings (`stats`, measured afresh on each node's own network path).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from crawler.fetching.politeness import RobotsRules
from crawler.ratecontrol import HostRateController
from crawler.scheduling.failures import FailureLedger
from crawler.scheduling.policies import ConnectionStats
from crawler.scheduling.urlqueue import FairUrls, UrlQueue, UrlTask
from crawler.scope.limits import ServerCounts

Item = tuple[str, int]  # canonical URL, depth


class Tally:
    """URLs queued in the whole frontier, kept by the servers as they change (O(1) status)."""

    __slots__ = ("urls",)

    def __init__(self) -> None:
        self.urls = 0


# Where an idle server's live heap entry is (Frontier bookkeeping).
NOT_PLACED, WAITING, READY = range(3)


@dataclass
class ServerState:
    """Everything known about one server, owned by one node at a time."""

    host: str
    # Its rate controller, with what it learned of the server's limits. None in a state rebuilt
    # from the output (crawler.cluster.recovery): the node that takes the server makes one. Its
    # times are the owner's monotonic clock (see `depart`).
    controller: HostRateController | None = None
    scheme: str = "http"  # taken from the first URL queued for it
    queue: UrlQueue = field(default_factory=lambda: FairUrls(quality_ordered=False))
    # URLs waiting for a retry, by the time they may go again: (not_before, order, task).
    retries: list[tuple[float, int, UrlTask]] = field(default_factory=list)
    # Retries of URLs that failed on their own (crawler.scheduling.failures): the same, but
    # only when the queue has no new URL for them to wait behind.
    late: list[tuple[float, int, UrlTask]] = field(default_factory=list)
    failures: FailureLedger = field(default_factory=FailureLedger)
    seen: set[str] = field(default_factory=set)  # every URL of it known: done or queued
    redirects: dict[str, int] = field(default_factory=dict)  # queued URL -> redirects to it
    limits: ServerCounts = field(default_factory=ServerCounts)  # what it used of the limits
    robots: RobotsRules | None = None
    # While its robots.txt is unreachable, no request to this server before this time.
    paused_until: float = 0.0
    robots_failures: int = 0
    refused: str | None = None  # why the address guard refused this server, once known
    # Between owners: URLs sent to it meanwhile (the exchange's inbox, or a rebuilt state's
    # pending URLs), and how long its next owner waits before its first request.
    inbox: list[Item] = field(default_factory=list)
    wait_s: float = 0.0
    # The owner's connection to it: P(s,i) of the connection open now, and what the owner has
    # learned of its connections (set by each owner on arrival, see `Frontier.add_server`).
    busy: bool = False
    batch: int = 0
    stats: ConnectionStats = field(init=False, repr=False)
    # Scheduling bookkeeping, owned by the Frontier.
    tally: Tally = field(default_factory=Tally, repr=False)
    version: int = 0  # of the server's one live heap entry; older entries are stale
    placed: int = NOT_PLACED
    turn: int = 0  # when it got in line: breadth-first order, and the tie-break of the others
    score: float = 0.0  # in the ready heap
    wait_until: float = 0.0  # in the waiting heap

    @property
    def urls(self) -> int:
        """URLs it holds for its next owner (queued, retries, inbox)."""
        return self.pending() + len(self.inbox)

    def ready_at(self) -> float:
        assert self.controller is not None, "a server is owned with its controller"
        ready = max(self.controller.earliest_next(), self.paused_until)
        if not self.queue and (self.retries or self.late):
            due = min(heap[0][0] for heap in (self.retries, self.late) if heap)
            ready = max(ready, due)
        return ready

    def pending(self) -> int:
        return len(self.queue) + len(self.retries) + len(self.late)

    def best_quality(self) -> float:
        return self.queue.best_quality()

    def top_quality_sum(self) -> float:
        return self.queue.top_quality_sum()

    def next_task(self, now: float, new_allowed: bool) -> UrlTask | None:
        """A retry that is due first, else the next new URL if `new_allowed` (page budget),
        else a late retry that is due."""
        if self.retries and self.retries[0][0] <= now:
            self.tally.urls -= 1
            return heapq.heappop(self.retries)[2]
        if self.queue and new_allowed:
            self.tally.urls -= 1
            return self.queue.pop()
        if self.late and self.late[0][0] <= now:
            self.tally.urls -= 1
            return heapq.heappop(self.late)[2]
        return None

    def retry_later(self, task: UrlTask, not_before: float, late: bool = False) -> None:
        """`late`: the URL failed on its own; its retry waits behind the new URLs."""
        self.tally.urls += 1
        heapq.heappush(self.late if late else self.retries, (not_before, next(_retry_order), task))

    def drain_retries(self) -> list[UrlTask]:
        """Take out every URL waiting for a retry (the server's failure budget is spent)."""
        tasks = [entry[2] for heap in (self.retries, self.late) for entry in heap]
        self.retries.clear()
        self.late.clear()
        self.tally.urls -= len(tasks)
        return tasks

    def put_back(self, task: UrlTask) -> None:
        """Return a task taken but not fetched, to be the next one fetched."""
        if task.attempt == 1:
            self.tally.urls += 1
            self.queue.push_front(task)
        else:
            self.retry_later(task, 0.0)

    def drain(self) -> list[UrlTask]:
        tasks = self.queue.drain()
        self.tally.urls -= len(tasks)
        return tasks + self.drain_retries()

    def drain_family(self, family: str) -> list[UrlTask]:
        """Take out the queued new URLs of one URL family (retries stay: each is checked when
        it is due)."""
        tasks = self.queue.drain_family(family)
        self.tally.urls -= len(tasks)
        return tasks

    def depart(self, now: float) -> None:
        """Leave the owner, idle: times on the owner's monotonic clock become a wait from the
        handover (`wait_s`: politeness, when its next request is allowed), and its retries
        become due on arrival. (Its controller's own times stay: on a Ray cluster of several
        machines the next owner's first request may come early or late by the clocks'
        difference; `wait_s` is still right.)"""
        self.wait_s = max(0.0, self.ready_at() - now)
        # Negative orders, in the order they had: never equal to those the next owner's
        # process gives (a tie would compare the tasks). Sorted, so still a heap.
        for heap in (self.retries, self.late):
            ordered = sorted(heap, key=lambda entry: entry[:2])
            heap[:] = [(0.0, -1 - i, task) for i, (_, _, task) in enumerate(ordered)]
        self.tally = Tally()

    def arrive(self, now: float) -> None:
        """Join a new owner: no request before the wait it left with (which covers any pause
        it had)."""
        self.paused_until = now + self.wait_s
        self.wait_s = 0.0


_retry_order = itertools.count()  # breaks ties in the retry heap without comparing tasks
