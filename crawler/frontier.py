"""The frontier: per-server URL queues and the choice of which server to connect to next.

Scheduling is two-level (SPEC §3): a server is chosen first, then up to `P(s,i)` of its URLs
are fetched over one keep-alive connection. At most one connection per server is open, and an
open connection is never taken back (non-preemptive). Politeness wins over ranking: a server is
only eligible once its rate controller allows the next request (`Server.ready_at`).

The server choice costs O(log servers), not a scan: idle servers with URLs wait in a heap keyed
by the time they become eligible, and move to a heap keyed by the policy's score once that time
has passed. A server whose score or readiness changes gets a new entry; the old one is left in
the heap and skipped when it surfaces (lazy invalidation: each entry carries the server's
version at the time it was pushed), and a heap is rebuilt when stale entries outnumber the
servers. A server's own score changes only when its queue grows (it is idle then, and is
re-entered at once) or while it is busy (it is re-entered on release). The one exception: a
server not measured yet is costed with the node-wide means, which move as other servers are
measured; its entry keeps the value from when it was ranked, until its next change.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from crawler.politeness import RobotsRules
from crawler.ratecontrol import HostRateController
from crawler.scheduling import (
    DEFAULT_ESTIMATE_WEIGHT,
    DEFAULT_KEEPALIVE_SPEEDUP,
    ConnectionStats,
    StatsPrior,
    make_policy,
)
from crawler.traps import url_family


@dataclass(slots=True)
class UrlTask:
    url: str
    depth: int
    attempt: int = 1
    quality: float = 0.0  # fixed when the URL was discovered (SPEC §3)
    host_depth: int = 0  # links from where the crawl entered the URL's server
    urgent: bool = False  # goes before its server's round of families (a recrawl's changed URL)


class UrlQueue(Protocol):
    """A server's queue of new URLs (retries wait apart, by time)."""

    def __len__(self) -> int: ...
    def push(self, task: UrlTask) -> None: ...
    def push_front(self, task: UrlTask) -> None: ...
    def pop(self) -> UrlTask: ...
    def drain(self) -> list[UrlTask]: ...
    def drain_family(self, family: str) -> list[UrlTask]: ...
    def set_head_size(self, size: int) -> None: ...
    def best_quality(self) -> float: ...
    def top_quality_sum(self) -> float: ...


class FifoUrls:
    """First in, first out: breadth-first and performance-first, which ignore quality."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[UrlTask] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def push(self, task: UrlTask) -> None:
        self._items.append(task)

    def push_front(self, task: UrlTask) -> None:
        self._items.appendleft(task)

    def pop(self) -> UrlTask:
        return self._items.popleft()

    def drain(self) -> list[UrlTask]:
        tasks = list(self._items)
        self._items.clear()
        return tasks

    # The FIFO policies rank servers without looking at URL quality.
    def set_head_size(self, size: int) -> None:
        pass

    def best_quality(self) -> float:
        return 0.0

    def top_quality_sum(self) -> float:
        return 0.0


# (-quality, order, task): tuples compare in C, and the order (unique) keeps equal qualities
# first in, first out and never lets the comparison reach the task.
_Entry = tuple[float, int, UrlTask]


class QualityUrls:
    """Best quality first, ties in arrival order.

    The best `head_size` entries are kept in a sorted list and the rest in a heap, and the sum
    of the head's qualities is kept up to date: crawl-capability needs the sum of the next
    P(s,i) qualities every time a server is ranked, which this makes O(1) to read and
    O(P + log n) to maintain, where `heapq.nlargest` would cost O(n) per ranking. The sum is
    updated by adding and subtracting; its rounding error is below 1e-15 of the largest quality
    the head ever held, far below any difference that matters for ranking.
    """

    __slots__ = ("_head", "_tail", "_head_size", "_head_sum", "_order", "_front")

    def __init__(self, head_size: int = 1) -> None:
        self._head: list[_Entry] = []  # sorted, best first; full before the tail gets any
        self._tail: list[_Entry] = []  # heap of the rest
        self._head_size = max(1, head_size)
        self._head_sum = 0.0
        self._order = 0
        self._front = 0  # put-back entries count down, so they precede equal qualities

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)

    def push(self, task: UrlTask) -> None:
        self._order += 1
        self._insert((-task.quality, self._order, task))

    def push_front(self, task: UrlTask) -> None:
        self._front -= 1
        self._insert((-task.quality, self._front, task))

    def _insert(self, entry: _Entry) -> None:
        head = self._head
        if len(head) < self._head_size:
            insort(head, entry)
            self._head_sum -= entry[0]
        elif entry < head[-1]:
            insort(head, entry)
            worst = head.pop()
            self._head_sum += worst[0] - entry[0]
            heapq.heappush(self._tail, worst)
        else:
            heapq.heappush(self._tail, entry)

    def pop(self) -> UrlTask:
        entry = self._head.pop(0)  # O(P) memmove of pointers: cheap next to a heap pop
        self._head_sum += entry[0]
        if self._tail:
            # The tail's best is worse than everything left in the head: it goes last.
            refill = heapq.heappop(self._tail)
            self._head.append(refill)
            self._head_sum -= refill[0]
        if not self._head:
            self._head_sum = 0.0  # drop the rounding residue
        return entry[2]

    def drain(self) -> list[UrlTask]:
        tasks = [entry[2] for entry in self._head] + [entry[2] for entry in self._tail]
        self._head.clear()
        self._tail.clear()
        self._head_sum = 0.0
        return tasks

    def set_head_size(self, size: int) -> None:
        self._head_size = size = max(1, size)
        head = self._head
        while len(head) > size:
            worst = head.pop()
            self._head_sum += worst[0]
            heapq.heappush(self._tail, worst)
        while len(head) < size and self._tail:
            refill = heapq.heappop(self._tail)
            head.append(refill)
            self._head_sum -= refill[0]

    def best_quality(self) -> float:
        return -self._head[0][0] if self._head else 0.0

    def top_quality_sum(self) -> float:
        return self._head_sum

    def head_qualities(self) -> list[float]:
        """The qualities of the head, best first."""
        return [-entry[0] for entry in self._head]


_URGENT = "!urgent"  # the key of urgent URLs; every real family starts with "/"


class FairUrls:
    """A server's queue: round-robin between its URL families (crawler.traps.url_family),
    each family's URLs in the policy's order (best quality first, or first in, first out).

    So no family starves the others: a link from the front page waits for at most one URL of
    each other family, however many URLs a calendar or a page of 100,000 links queued before
    it. A family joins the round at the back when it gets its first URL; a URL put back goes
    first again. For ranking the server, the queue reports the qualities of the URLs it will
    really give next: the head of the family whose turn it is (quality-first), or the sum over
    the next `head_size` URLs of the round (crawl-capability, computed when asked after a
    change, O(head_size)). Urgent URLs (a recrawl's URLs whose sitemap says they changed) go
    before the round, in the policy's order.
    """

    __slots__ = ("_families", "_turns", "_make", "_quality", "_head_size", "_size", "_sum")

    def __init__(self, quality_ordered: bool, head_size: int = 1) -> None:
        self._families: dict[str, FifoUrls | QualityUrls] = {}
        self._turns: deque[str] = deque()  # families with URLs, the one whose turn it is first
        self._quality = quality_ordered
        self._make: Callable[[], FifoUrls | QualityUrls] = (
            (lambda: QualityUrls(self._head_size)) if quality_ordered else FifoUrls
        )
        self._head_size = max(1, head_size)
        self._size = 0
        self._sum: float | None = None  # top_quality_sum, None once stale

    def __len__(self) -> int:
        return self._size

    def _family_queue(self, family: str) -> FifoUrls | QualityUrls:
        queue = self._families.get(family)
        if queue is None:
            queue = self._families[family] = self._make()
        return queue

    def push(self, task: UrlTask) -> None:
        family = _URGENT if task.urgent else url_family(task.url)
        queue = self._family_queue(family)
        if not queue and family is not _URGENT:
            self._turns.append(family)
        queue.push(task)
        self._size += 1
        self._sum = None

    def push_front(self, task: UrlTask) -> None:
        family = _URGENT if task.urgent else url_family(task.url)
        queue = self._family_queue(family)
        if family is not _URGENT:
            if queue:
                self._turns.remove(family)  # rare (a URL put back): O(families) is fine
            self._turns.appendleft(family)
        queue.push_front(task)
        self._size += 1
        self._sum = None

    def pop(self) -> UrlTask:
        urgent = self._families.get(_URGENT)
        if urgent:
            family, queue = _URGENT, urgent
        else:
            family = self._turns[0]
            queue = self._families[family]
        task = queue.pop()
        if queue:
            if family is not _URGENT:
                self._turns.rotate(-1)
        else:
            if family is not _URGENT:
                self._turns.popleft()
            del self._families[family]
        self._size -= 1
        self._sum = None
        return task

    def drain(self) -> list[UrlTask]:
        tasks = [task for queue in self._families.values() for task in queue.drain()]
        self._families.clear()
        self._turns.clear()
        self._size = 0
        self._sum = None
        return tasks

    def drain_family(self, family: str) -> list[UrlTask]:
        """Take out every URL of one family (it kept failing)."""
        queue = self._families.pop(family, None)
        if queue is None:
            return []
        self._turns.remove(family)
        tasks = queue.drain()
        self._size -= len(tasks)
        self._sum = None
        return tasks

    def set_head_size(self, size: int) -> None:
        size = max(1, size)
        if size != self._head_size:
            self._head_size = size
            for queue in self._families.values():
                queue.set_head_size(size)
            self._sum = None

    def best_quality(self) -> float:
        urgent = self._families.get(_URGENT)
        if urgent:
            return urgent.best_quality()
        return self._families[self._turns[0]].best_quality() if self._turns else 0.0

    def top_quality_sum(self) -> float:
        if not self._quality:
            return 0.0
        if self._sum is None:
            families = self._families
            heads = [families[family].head_qualities() for family in self._turns]  # type: ignore[union-attr]
            urgent = families[_URGENT].head_qualities() if _URGENT in families else []  # type: ignore[union-attr]
            total = sum(urgent[: self._head_size])
            left, depth = self._head_size - min(self._head_size, len(urgent)), 0
            while left and heads:
                heads = [head for head in heads if depth < len(head)]
                for head in heads[:left]:
                    total += head[depth]
                left -= min(left, len(heads))
                depth += 1
            self._sum = total
        return self._sum


class _Tally:
    """URLs queued in the whole frontier, kept by the servers as they change (O(1) status)."""

    __slots__ = ("urls",)

    def __init__(self) -> None:
        self.urls = 0


# Where an idle server's live heap entry is.
_NONE, _WAITING, _READY = range(3)


@dataclass
class Server:
    """Everything the node knows about one server it owns."""

    host: str
    controller: HostRateController
    requests_per_connection: int  # for a new server; what it allows is learned in `stats`
    queue: UrlQueue = field(default_factory=lambda: FairUrls(quality_ordered=False))
    # URLs waiting for a retry, by the time they may go again: (not_before, order, task).
    retries: list[tuple[float, int, UrlTask]] = field(default_factory=list)
    busy: bool = False
    robots: RobotsRules | None = None
    # While its robots.txt is unreachable, no request to this server before this time.
    paused_until: float = 0.0
    robots_failures: int = 0
    refused: str | None = None  # why the address guard refused this server, once known
    scheme: str = "http"  # taken from the first URL queued for it
    stats: ConnectionStats = field(init=False)
    batch: int = 0  # P(s,i) of the connection open now: URLs it may fetch
    # Scheduling bookkeeping, owned by the Frontier.
    tally: _Tally = field(default_factory=_Tally, repr=False)
    version: int = 0  # of the server's one live heap entry; older entries are stale
    placed: int = _NONE
    turn: int = 0  # when it got in line: breadth-first order, and the tie-break of the others
    score: float = 0.0  # in the ready heap
    wait_until: float = 0.0  # in the waiting heap

    def __post_init__(self) -> None:
        self.stats = ConnectionStats(StatsPrior(), self.requests_per_connection)

    def ready_at(self) -> float:
        ready = max(self.controller.earliest_next(), self.paused_until)
        if not self.queue and self.retries:
            ready = max(ready, self.retries[0][0])
        return ready

    def pending(self) -> int:
        return len(self.queue) + len(self.retries)

    def best_quality(self) -> float:
        return self.queue.best_quality()

    def top_quality_sum(self) -> float:
        return self.queue.top_quality_sum()

    def next_task(self, now: float, new_allowed: bool) -> UrlTask | None:
        """A retry that is due first, else the next new URL if `new_allowed` (page budget)."""
        if self.retries and self.retries[0][0] <= now:
            self.tally.urls -= 1
            return heapq.heappop(self.retries)[2]
        if self.queue and new_allowed:
            self.tally.urls -= 1
            return self.queue.pop()
        return None

    def retry_later(self, task: UrlTask, not_before: float) -> None:
        self.tally.urls += 1
        heapq.heappush(self.retries, (not_before, next(_retry_order), task))

    def put_back(self, task: UrlTask) -> None:
        """Return a task taken but not fetched, to be the next one fetched."""
        if task.attempt == 1:
            self.tally.urls += 1
            self.queue.push_front(task)
        else:
            self.retry_later(task, 0.0)

    def drain(self) -> list[UrlTask]:
        tasks = self.queue.drain() + [entry[2] for entry in self.retries]
        self.retries.clear()
        self.tally.urls -= len(tasks)
        return tasks

    def drain_family(self, family: str) -> list[UrlTask]:
        """Take out the queued new URLs of one URL family (retries stay: each is checked when
        it is due)."""
        tasks = self.queue.drain_family(family)
        self.tally.urls -= len(tasks)
        return tasks


_retry_order = itertools.count()  # breaks ties in the retry heap without comparing tasks


class Frontier:
    """Two-level frontier under one of the SPEC §3 policies (`crawler.scheduling.POLICIES`).

    Not thread-safe on its own: the node serializes calls under its lock. The node changes an
    acquired (busy) server directly (`next_task`, `retry_later`, `put_back`, `drain`, its stats
    and controller); the frontier ranks it again on `release`.
    """

    def __init__(
        self,
        policy: str = "capability",
        keepalive_speedup: float = DEFAULT_KEEPALIVE_SPEEDUP,
        estimate_weight: float = DEFAULT_ESTIMATE_WEIGHT,
    ) -> None:
        self.policy = make_policy(policy)
        self.prior = StatsPrior()
        self.servers: dict[str, Server] = {}
        self._keepalive_speedup = keepalive_speedup
        self._estimate_weight = estimate_weight
        self._tally = _Tally()
        self._ready: list[tuple[float, int, int, str]] = []  # (-score, turn, version, host)
        self._waiting: list[tuple[float, int, str]] = []  # (ready_at, version, host)
        self._turns = itertools.count()

    def add_server(self, server: Server) -> None:
        server.stats = ConnectionStats(
            self.prior,
            server.requests_per_connection,
            self._keepalive_speedup,
            self._estimate_weight,
        )
        tasks = server.queue.drain()
        server.queue = FairUrls(self.policy.quality_ordered_urls, self.policy.head_size(server))
        for task in tasks:
            server.queue.push(task)
        server.tally = self._tally
        self._tally.urls += server.pending()
        self.servers[server.host] = server
        self._requeue(server)

    def push(self, host: str, task: UrlTask, scheme: str) -> None:
        server = self.servers[host]
        if not server.pending() and not server.robots:
            server.scheme = scheme
        self._tally.urls += 1
        server.queue.push(task)
        self._requeue(server)

    def push_retry(self, host: str, task: UrlTask, scheme: str) -> None:
        """Queue a URL that was tried before (a resumed crawl's unfinished retries)."""
        server = self.servers[host]
        if not server.pending() and not server.robots:
            server.scheme = scheme
        server.retry_later(task, 0.0)
        self._requeue(server)

    def queued(self) -> int:
        return self._tally.urls

    def acquire(self, now: float) -> Server | None:
        """Open a connection: the best-ranked idle server with URLs that may be contacted now.
        Sets `server.batch` to P(s,i)."""
        self._promote(now)
        while self._ready:
            _, _, version, host = heapq.heappop(self._ready)
            server = self.servers[host]
            if version != server.version:
                continue  # stale entry
            ready_at = server.ready_at()
            if ready_at > now:
                # Readiness only moves while a server is busy, so this is a safeguard: should
                # a pause arrive meanwhile, politeness still wins over ranking.
                self._wait(server, ready_at)
                continue
            server.busy = True
            server.placed = _NONE
            server.version += 1
            server.stats.connections += 1
            server.batch = server.stats.planned_requests(server.pending())
            return server
        return None

    def release(self, server: Server) -> None:
        """The connection is closed: the server gets back in line (at the back) if it has
        URLs left, ranked with what this connection taught its stats."""
        server.busy = False
        server.batch = 0
        server.queue.set_head_size(self.policy.head_size(server))
        self._requeue(server)

    def next_ready_time(self) -> float | None:
        """Earliest time an idle server with URLs becomes eligible (-inf: one is already),
        for the workers' sleep; None if no idle server has URLs."""
        while self._ready and self._ready[0][2] != self.servers[self._ready[0][3]].version:
            heapq.heappop(self._ready)
        if self._ready:
            return float("-inf")
        while self._waiting and self._waiting[0][1] != self.servers[self._waiting[0][2]].version:
            heapq.heappop(self._waiting)
        return self._waiting[0][0] if self._waiting else None

    # ---- heaps -------------------------------------------------------------------------------

    def _requeue(self, server: Server) -> None:
        """Bring an idle server's heap entry up to date after a change."""
        if server.busy:
            return
        if not server.pending():
            server.placed = _NONE
            server.version += 1
        elif server.placed == _NONE:
            server.turn = next(self._turns)
            self._wait(server, server.ready_at())
        elif server.placed == _READY:
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
            server = self.servers[host]
            if version == server.version:
                self._make_ready(server, self.policy.score(server))

    def _make_ready(self, server: Server, score: float) -> None:
        server.version += 1
        server.placed = _READY
        server.score = score
        heapq.heappush(self._ready, (-score, server.turn, server.version, server.host))
        if len(self._ready) > self._heap_limit():
            self._ready = [e for e in self._ready if e[2] == self.servers[e[3]].version]
            heapq.heapify(self._ready)

    def _wait(self, server: Server, ready_at: float) -> None:
        server.version += 1
        server.placed = _WAITING
        server.wait_until = ready_at
        heapq.heappush(self._waiting, (ready_at, server.version, server.host))
        if len(self._waiting) > self._heap_limit():
            self._waiting = [e for e in self._waiting if e[1] == self.servers[e[2]].version]
            heapq.heapify(self._waiting)

    def _heap_limit(self) -> int:
        # Each server has at most one live entry: past this, most entries are stale.
        return 2 * len(self.servers) + 64
