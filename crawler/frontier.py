"""The frontier: per-server URL queues and the choice of which server to connect to next.

Scheduling is two-level (SPEC §3): a server is chosen first, then up to `P` of its URLs are
fetched over one keep-alive connection. At most one connection per server is open, and a
server is only eligible once its rate controller allows the next request.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field

from crawler.politeness import RobotsRules
from crawler.ratecontrol import HostRateController


@dataclass
class UrlTask:
    url: str
    depth: int
    attempt: int = 1


@dataclass
class Server:
    """Everything the node knows about one server it owns."""

    host: str
    controller: HostRateController
    requests_per_connection: int
    queue: deque[UrlTask] = field(default_factory=deque)
    # URLs waiting for a retry, by the time they may go again: (not_before, order, task).
    retries: list[tuple[float, int, UrlTask]] = field(default_factory=list)
    busy: bool = False
    robots: RobotsRules | None = None
    # While its robots.txt is unreachable, no request to this server before this time.
    paused_until: float = 0.0
    robots_failures: int = 0
    refused: str | None = None  # why the address guard refused this server, once known
    scheme: str = "http"  # taken from the first URL queued for it

    def ready_at(self) -> float:
        ready = max(self.controller.earliest_next(), self.paused_until)
        if not self.queue and self.retries:
            ready = max(ready, self.retries[0][0])
        return ready

    def pending(self) -> int:
        return len(self.queue) + len(self.retries)

    def next_task(self, now: float, new_allowed: bool) -> UrlTask | None:
        """A retry that is due first, else the next new URL if `new_allowed` (page budget)."""
        if self.retries and self.retries[0][0] <= now:
            return heapq.heappop(self.retries)[2]
        if self.queue and new_allowed:
            return self.queue.popleft()
        return None

    def retry_later(self, task: UrlTask, not_before: float) -> None:
        heapq.heappush(self.retries, (not_before, next(_retry_order), task))

    def put_back(self, task: UrlTask) -> None:
        """Return a task taken but not fetched, to be the next one fetched."""
        if task.attempt == 1:
            self.queue.appendleft(task)
        else:
            self.retry_later(task, 0.0)

    def drain(self) -> list[UrlTask]:
        tasks = list(self.queue) + [entry[2] for entry in self.retries]
        self.queue.clear()
        self.retries.clear()
        return tasks


_retry_order = itertools.count()  # breaks ties in the retry heap without comparing tasks


class Frontier:
    """Breadth-first two-level frontier: servers round-robin, URLs FIFO within a server.

    Not thread-safe on its own: the node serializes calls under its lock.
    """

    def __init__(self) -> None:
        self.servers: dict[str, Server] = {}
        # Servers with queued URLs, in the order they get their turn.
        self._turns: dict[str, None] = {}

    def add_server(self, server: Server) -> None:
        self.servers[server.host] = server

    def push(self, host: str, task: UrlTask, scheme: str) -> None:
        server = self.servers[host]
        if not server.queue and not server.robots:
            server.scheme = scheme
        server.queue.append(task)
        self._turns.setdefault(host, None)

    def push_retry(self, host: str, task: UrlTask, scheme: str) -> None:
        """Queue a URL that was tried before (a resumed crawl's unfinished retries)."""
        server = self.servers[host]
        if not server.pending() and not server.robots:
            server.scheme = scheme
        server.retry_later(task, 0.0)
        self._turns.setdefault(host, None)

    def queued(self) -> int:
        return sum(self.servers[h].pending() for h in self._turns)

    def acquire(self, now: float) -> Server | None:
        """Take the next server that is idle, has URLs and may be contacted now."""
        for host in self._turns:
            server = self.servers[host]
            if not server.busy and server.pending() and server.ready_at() <= now:
                server.busy = True
                # Its turn is used: it goes to the back of the line.
                del self._turns[host]
                self._turns[host] = None
                return server
        return None

    def release(self, server: Server) -> None:
        server.busy = False
        if not server.pending():
            self._turns.pop(server.host, None)

    def next_ready_time(self) -> float | None:
        """Earliest time an idle server with URLs becomes eligible, for the workers' sleep."""
        times = [
            self.servers[h].ready_at()
            for h in self._turns
            if not self.servers[h].busy and self.servers[h].pending()
        ]
        return min(times, default=None)
