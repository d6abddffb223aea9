"""The frontier: per-server URL queues and the choice of which server to connect to next.

Scheduling is two-level (SPEC §3): a server is chosen first, then up to `P` of its URLs are
fetched over one keep-alive connection. At most one connection per server is open, and a
server is only eligible once its rate controller allows the next request.
"""

from __future__ import annotations

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
    busy: bool = False
    robots: RobotsRules | None = None
    # Set after a failure (robots.txt unreachable, a retry's backoff or Retry-After): no new
    # request to this server before then.
    paused_until: float = 0.0
    robots_failures: int = 0
    refused: str | None = None  # why the address guard refused this server, once known
    scheme: str = "http"  # taken from the first URL queued for it

    def ready_at(self) -> float:
        return max(self.controller.earliest_next(), self.paused_until)


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

    def queued(self) -> int:
        return sum(len(self.servers[h].queue) for h in self._turns)

    def acquire(self, now: float) -> Server | None:
        """Take the next server that is idle, has URLs and may be contacted now."""
        for host in self._turns:
            server = self.servers[host]
            if not server.busy and server.queue and server.ready_at() <= now:
                server.busy = True
                # Its turn is used: it goes to the back of the line.
                del self._turns[host]
                self._turns[host] = None
                return server
        return None

    def release(self, server: Server) -> None:
        server.busy = False
        if not server.queue:
            self._turns.pop(server.host, None)

    def next_ready_time(self) -> float | None:
        """Earliest time an idle server with URLs becomes eligible, for the workers' sleep."""
        times = [
            self.servers[h].ready_at()
            for h in self._turns
            if not self.servers[h].busy and self.servers[h].queue
        ]
        return min(times, default=None)
