"""The frontier: per-server URL queues and the choice of which server to connect to next.

Scheduling is two-level (docs/scheduling.md): a server is chosen first, then up to `P(s,i)` of
its URLs are fetched over one keep-alive connection. At most one connection per server is open,
and an open connection is never taken back (non-preemptive). Politeness wins over ranking: a
server is only eligible once its rate controller allows the next request
(`ServerState.ready_at`).

The server choice costs O(log servers), not a scan: idle servers with URLs wait in a heap keyed
by the time they become eligible, and move to a heap keyed by the policy's score once that time
has passed. A server whose score or readiness changes gets a new entry; the old one is left in
the heap and skipped when it surfaces (lazy invalidation: each entry carries the server's
version at the time it was pushed), and a heap is rebuilt when stale entries outnumber the
servers. A server's own score changes only when its queue grows (it is idle then, and is
re-entered at once) or while it is busy (it is re-entered on release). The one exception: a
server not measured yet is costed with the node-wide means, which move as other servers are
measured; its entry keeps the value from when it was ranked, until its next change. Versions
come from one counter per frontier, so the entries a server left behind when it moved to
another node stay stale when it comes back.

Queues are bounded (docs/scheduling.md#bounds): `full` says when a server's queue, or the whole
node's, holds as many URLs as its settings allow; the node then records a new URL instead of
queueing it (a `skipped: queue_full` row beside its `discovered` row, which a resumed crawl
reads), so memory grows with the work done, not with the links the pages claim.
"""

from __future__ import annotations

import heapq
import itertools

from crawler.scheduling.policies import ConnectionStats, StatsPrior, make_policy
from crawler.scheduling.server import NOT_PLACED, READY, WAITING, ServerState, Tally
from crawler.scheduling.settings import SchedulingSettings
from crawler.scheduling.urlqueue import FairUrls, UrlTask
from errors import QUEUE_FULL_DETAIL, ErrorClass, FetchError

SERVER_QUEUE_FULL = FetchError(ErrorClass.SKIPPED, f"{QUEUE_FULL_DETAIL}: server")
NODE_QUEUE_FULL = FetchError(ErrorClass.SKIPPED, f"{QUEUE_FULL_DETAIL}: node")


class Frontier:
    """Two-level frontier under one of the docs/scheduling.md policies
    (`crawler.scheduling.policies.POLICIES`).

    Not thread-safe on its own: the node serializes calls under its lock. The node changes an
    acquired (busy) server directly (`next_task`, `retry_later`, `put_back`, `drain`, its stats
    and controller); the frontier ranks it again on `release`.
    """

    def __init__(self, settings: SchedulingSettings) -> None:
        self.policy = make_policy(settings.policy)
        self.prior = StatsPrior()
        self.servers: dict[str, ServerState] = {}
        self._settings = settings
        self._tally = Tally()
        self._ready: list[tuple[float, int, int, str]] = []  # (-score, turn, version, host)
        self._waiting: list[tuple[float, int, str]] = []  # (ready_at, version, host)
        self._turns = itertools.count()
        self._versions = itertools.count(1)
        # Servers holding at least half their queue bound: the only ones `has_room` checks.
        self._half = (settings.max_queued_per_server + 1) // 2
        self._crowded: set[str] = set()

    def add_server(self, server: ServerState) -> None:
        """Own a server, new or arrived from another node: ranked with this node's own
        connection timings (measured afresh), in the queue order of the policy."""
        server.busy = False
        server.placed = NOT_PLACED
        settings = self._settings
        server.stats = ConnectionStats(
            self.prior,
            settings.requests_per_connection,
            settings.keepalive_speedup,
            settings.estimate_weight,
        )
        tasks = server.queue.drain()
        server.queue = FairUrls(self.policy.quality_ordered_urls, self.policy.head_size(server))
        for task in tasks:
            server.queue.push(task)
        server.tally = self._tally
        self._tally.urls += server.pending()
        self.servers[server.host] = server
        self._count_crowded(server)
        self._requeue(server)

    def remove(self, server: ServerState) -> None:
        """Give up an idle server (it moves to another node): its heap entries go stale."""
        del self.servers[server.host]
        self._crowded.discard(server.host)
        self._tally.urls -= server.pending()
        server.placed = NOT_PLACED
        server.version = next(self._versions)

    def push(self, host: str, task: UrlTask, scheme: str) -> None:
        server = self.servers[host]
        if not server.pending() and not server.robots:
            server.scheme = scheme
        self._tally.urls += 1
        server.queue.push(task)
        self._count_crowded(server)
        self._requeue(server)

    def push_retry(self, host: str, task: UrlTask, scheme: str) -> None:
        """Queue a URL that was tried before (a resumed crawl's unfinished retries)."""
        server = self.servers[host]
        if not server.pending() and not server.robots:
            server.scheme = scheme
        server.retry_later(task, 0.0)
        self._count_crowded(server)
        self._requeue(server)

    def queued(self) -> int:
        return self._tally.urls

    def full(self, server: ServerState) -> FetchError | None:
        """Why no new URL of `server` may be queued now: its own queue (new URLs and retries)
        or the node's is at its bound (`[scheduling] max_queued_per_server`,
        `max_queued_per_node`); None while there is room."""
        if server.pending() >= self._settings.max_queued_per_server:
            return SERVER_QUEUE_FULL
        if self._tally.urls >= self._settings.max_queued_per_node:
            return NODE_QUEUE_FULL
        return None

    def server_room(self, server: ServerState) -> int:
        """How many more URLs its queue bound lets `server` queue (the node's aside)."""
        return max(0, self._settings.max_queued_per_server - server.pending())

    def node_room(self) -> int:
        """How many more URLs the node's queue bound lets it queue."""
        return max(0, self._settings.max_queued_per_node - self._tally.urls)

    def has_room(self, count: int) -> bool:
        """Whether the node and every server may queue `count` more URLs: a quick test (only
        the servers holding half their bound are looked at), true but on a crowded node."""
        if count > self.node_room() or count > self._settings.max_queued_per_server - self._half:
            return False
        servers = self.servers
        return all(self.server_room(servers[host]) >= count for host in self._crowded)

    def _count_crowded(self, server: ServerState) -> None:
        # Its queue only shrinks while it is busy, so a server is counted again on release.
        if server.pending() >= self._half:
            self._crowded.add(server.host)
        else:
            self._crowded.discard(server.host)

    def acquire(self, now: float) -> ServerState | None:
        """Open a connection: the best-ranked idle server with URLs that may be contacted now.
        Sets `server.batch` to P(s,i)."""
        self._promote(now)
        while self._ready:
            _, _, version, host = heapq.heappop(self._ready)
            server = self.servers.get(host)
            if server is None or version != server.version:
                continue  # stale entry
            ready_at = server.ready_at()
            if ready_at > now:
                # Readiness only moves while a server is busy, so this is a safeguard: should
                # a pause arrive meanwhile, politeness still wins over ranking.
                self._wait(server, ready_at)
                continue
            server.busy = True
            server.placed = NOT_PLACED
            server.version = next(self._versions)
            server.stats.connections += 1
            server.batch = server.stats.planned_requests(server.pending())
            return server
        return None

    def release(self, server: ServerState) -> None:
        """The connection is closed: the server gets back in line (at the back) if it has
        URLs left, ranked with what this connection taught its stats."""
        server.busy = False
        server.batch = 0
        server.queue.set_head_size(self.policy.head_size(server))
        self._count_crowded(server)
        self._requeue(server)

    def next_ready_time(self) -> float | None:
        """Earliest time an idle server with URLs becomes eligible (-inf: one is already),
        for the workers' sleep; None if no idle server has URLs."""
        while self._ready and not self._live(self._ready[0][3], self._ready[0][2]):
            heapq.heappop(self._ready)
        if self._ready:
            return float("-inf")
        while self._waiting and not self._live(self._waiting[0][2], self._waiting[0][1]):
            heapq.heappop(self._waiting)
        return self._waiting[0][0] if self._waiting else None

    # ---- heaps -------------------------------------------------------------------------------

    def _live(self, host: str, version: int) -> bool:
        server = self.servers.get(host)
        return server is not None and server.version == version

    def _requeue(self, server: ServerState) -> None:
        """Bring an idle server's heap entry up to date after a change."""
        if server.busy:
            return
        if not server.pending():
            server.placed = NOT_PLACED
            server.version = next(self._versions)
        elif server.placed == NOT_PLACED:
            server.turn = next(self._turns)
            self._wait(server, server.ready_at())
        elif server.placed == READY:
            score = self.policy.score(server)
            if score != server.score:
                self._make_ready(server, score)
        else:
            # URLs queued behind a pending retry make the server eligible before that retry.
            ready_at = server.ready_at()
            if ready_at < server.wait_until:
                self._wait(server, ready_at)

    def _promote(self, now: float) -> None:
        """Move the servers whose wait is over from the waiting heap to the ranked one."""
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            _, version, host = heapq.heappop(waiting)
            if self._live(host, version):
                server = self.servers[host]
                self._make_ready(server, self.policy.score(server))

    def _make_ready(self, server: ServerState, score: float) -> None:
        server.version = next(self._versions)
        server.placed = READY
        server.score = score
        heapq.heappush(self._ready, (-score, server.turn, server.version, server.host))
        if len(self._ready) > self._heap_limit():
            self._ready = [e for e in self._ready if self._live(e[3], e[2])]
            heapq.heapify(self._ready)

    def _wait(self, server: ServerState, ready_at: float) -> None:
        server.version = next(self._versions)
        server.placed = WAITING
        server.wait_until = ready_at
        heapq.heappush(self._waiting, (ready_at, server.version, server.host))
        if len(self._waiting) > self._heap_limit():
            self._waiting = [e for e in self._waiting if self._live(e[2], e[1])]
            heapq.heapify(self._waiting)

    def _heap_limit(self) -> int:
        # Each server has at most one live entry: past this, most entries are stale.
        return 2 * len(self.servers) + 64
