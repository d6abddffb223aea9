"""What the parts of a node share, under one lock: its servers (the frontier), its page
budget, its counters, and the rules that decide which URLs it queues.

The parts read this state freely but change it only through the methods below, so each rule
(a new URL costs one page of budget, a URL taken but never requested gets it back, every URL
settled counts once) is written in one place.

The lock is a condition over a reentrant lock (`threading.Condition`'s default): a method that
takes the lock itself may also be called by a part that holds it already, inside a larger step
that must happen at once. Methods marked "Under the lock" do not take it: they are only ever
steps of such a larger one.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter

from crawler.cluster.status import Counters
from crawler.fetching.fetcher import ServerSession
from crawler.node.settings import NodeSettings
from crawler.ratecontrol import make_host_controller
from crawler.scheduling.frontier import Frontier
from crawler.scheduling.quality import make_quality_model
from crawler.scheduling.server import ServerState
from crawler.scheduling.urlqueue import UrlTask
from crawler.scope.limits import UrlLimits
from crawler.scope.rules import ScopeRules
from crawler.scope.traps import ParamStripper

UNLIMITED = 1 << 62


class NodeCore:
    """Not a component of its own: the state the node's components (fetch loop, handover,
    discovery, recorder, metrics, control API) share, and what they do with it."""

    def __init__(self, settings: NodeSettings) -> None:
        self.node_id = settings.node_id
        self.crawl_id = settings.crawl_id
        self.config = config = settings.config
        # A copy of its own: its refusal counts are this node's.
        self.scope = (
            dataclasses.replace(settings.scope, refused=Counter())
            if settings.scope is not None
            else ScopeRules.of_servers(settings.scope_hosts)
        )
        self.max_depth = config.limits.max_depth
        self.lock = threading.Condition()
        self.frontier = Frontier(config.scheduling)
        self.limits = UrlLimits(config.limits)
        self.strip_params = ParamStripper(config.limits.strip_params)
        self.revisits = settings.revisits
        self._quality = make_quality_model(config.scheduling.policy, config.scheduling.quality_file)
        # This node's connections to each server: (host, lane), lane 1 beside lane 0 only
        # where two requests may be in flight.
        self._sessions: dict[tuple[str, int], ServerSession] = {}
        # New URLs it may still start: the driver grants pages (--max-pages) and takes back
        # what an idle node holds; without --max-pages it never runs out.
        self._unlimited = settings.page_budget is None
        self._budget = UNLIMITED if settings.page_budget is None else settings.page_budget
        self._active = 0  # connections open
        self._stopping = False
        self._failure: str | None = None
        self._answered: set[str] = set()  # servers that answered since the last metrics tick
        self._counters = Counters()

    # ---- what the parts read ------------------------------------------------------------------

    @property
    def servers(self) -> dict[str, ServerState]:
        """The servers this node owns: only it may connect to them."""
        return self.frontier.servers

    @property
    def budget(self) -> int:
        """Pages it may still start (UNLIMITED without --max-pages)."""
        return self._budget

    @property
    def active(self) -> int:
        """Connections open."""
        return self._active

    @property
    def stopping(self) -> bool:
        """The deadline, the end of the crawl or a halt: no new request starts."""
        return self._stopping

    @property
    def failure(self) -> str | None:
        """The first bug that killed one of its threads."""
        return self._failure

    @property
    def counters(self) -> Counters:
        """A copy of its counts: they move only through the methods below."""
        return dataclasses.replace(self._counters)

    # ---- servers and connections --------------------------------------------------------------

    def own(self, server: ServerState) -> None:
        """Take a server, new or arrived from another node. Under the lock."""
        if server.controller is None:  # new, or rebuilt from the output by crawler.cluster.recovery
            server.controller = make_host_controller(
                self.config.rate_control, self.config.retry, time.monotonic()
            )
        self.frontier.add_server(server)

    def disown(self, servers: list[ServerState], now: float) -> None:
        """Let idle servers go to another node, whole. Under the lock."""
        for server in servers:
            # Idle: its heap entries go stale and no worker takes it again.
            self.frontier.remove(server)
            for lane in (0, 1):
                if (session := self._sessions.pop((server.host, lane), None)) is not None:
                    session.close()  # its connections go with it
            server.depart(now)
        if servers:
            self._counters.activity += 1

    def open_connection(self, now: float) -> ServerState | None:
        """The best server ready for a connection, taken until `close_connection`; None when
        none is, or while the page budget is spent (then only a grant brings work, even to a
        server with retries due). Under the lock."""
        server = self.frontier.acquire(now) if self._budget > 0 else None
        if server is not None:
            self._active += 1
        return server

    def close_connection(self, server: ServerState) -> None:
        """A worker let go of the server: other workers may take it again. Under the lock."""
        self.frontier.release(server)
        self._active -= 1

    def session(self, server: ServerState, lane: int = 0) -> ServerSession:
        """This node's connection to a server, made on first use: lane 0 the worker's, lane 1
        its second lane's, to the address lane 0 is pinned to. Without the lock: only the
        worker holding the server uses them (the frontier gives a server to one at a time)."""
        if (session := self._sessions.get((server.host, lane))) is None:
            session = self._sessions[(server.host, lane)] = ServerSession(self.config.fetch)
        if lane:
            session.pin(self.session(server).pinned_address)
        return session

    def close_sessions(self) -> None:
        """Close every connection: the node's workers have stopped."""
        for session in self._sessions.values():
            session.close()

    # ---- URLs -----------------------------------------------------------------------------------

    def score(self, url: str) -> float:
        """A URL's rank in the scheduler: its revisit priority in a recrawl, else its quality."""
        if self.revisits is not None:
            return self.revisits.priority(url)
        return self._quality.score(url)

    def observe_page(self, url: str, links: list[str]) -> None:
        """Every in-scope link of a page, seen or not: the graph page quality is computed on."""
        self._quality.observe_page(url, links)

    def queue(self, server: ServerState, task: UrlTask) -> None:
        """Queue a new URL of an owned server, seen from now on. Under the lock."""
        server.seen.add(task.url)
        self.frontier.push(server.host, task, scheme=task.url.split(":", 1)[0])

    def queue_retry(self, server: ServerState, task: UrlTask) -> None:
        """Queue a URL for its next try (a resumed crawl's), seen from now on. Under the
        lock."""
        server.seen.add(task.url)
        self.frontier.push_retry(server.host, task, scheme=task.url.split(":", 1)[0])

    # ---- the page budget: a URL's first try costs one page, its retries none --------------------

    def take_task(self, server: ServerState, now: float) -> UrlTask | None:
        """The server's next URL due: a retry, or a new URL while the budget lasts, which takes
        one page of it. Under the lock."""
        task = server.next_task(now, new_allowed=self._budget > 0)
        if task is not None and task.attempt == 1:
            self._budget -= 1
        return task

    def put_back(self, server: ServerState, task: UrlTask) -> None:
        """A URL taken but not requested yet (its server must wait) goes back to the front of
        its queue, and its page back to the budget."""
        with self.lock:
            server.put_back(task)
            self.refund_budget([task])

    def refund_budget(self, tasks: list[UrlTask]) -> None:
        """URLs taken but never requested (put back, or refused just before their request)
        give back the pages they took: those of their first tries, retries took none."""
        with self.lock:
            self._budget += sum(task.attempt == 1 for task in tasks)

    def grant(self, pages: int) -> None:
        """More pages to start (the driver shares out --max-pages): wakes the idle workers."""
        with self.lock:
            self._budget += pages
            self.lock.notify_all()

    def reclaim(self) -> int:
        """Hand back the pages not started, leaving none (nothing to hand back without
        --max-pages)."""
        with self.lock:
            if self._unlimited:
                return 0
            unused, self._budget = self._budget, 0
            return unused

    # ---- counts -------------------------------------------------------------------------------

    def count_fetched(self, page: bool) -> None:
        """A URL's last try came to an end (`page`: an HTML page was kept)."""
        with self.lock:
            self._counters.urls_done += 1
            self._counters.pages += page

    def count_unfetched(self, urls: int) -> None:
        """URLs recorded as never fetched (refused, skipped, the deadline): done."""
        with self.lock:
            self._counters.urls_done += urls
            self._counters.activity += 1

    def count_fetch_rows(self, rows: int) -> None:
        """Rows written to the fetches dataset, one per attempt or URL not fetched."""
        with self.lock:
            self._counters.fetches += rows

    def server_answered(self, host: str) -> None:
        """The metrics report the server's controller trace at their next tick. Under the
        lock."""
        self._answered.add(host)

    def take_answered(self) -> list[str]:
        """The servers that answered since the last call, sorted. Under the lock."""
        answered = sorted(self._answered)
        self._answered.clear()
        return answered

    def changed(self) -> None:
        """What the node holds changed: wake the workers, tell the coordinator. Under the lock."""
        self._counters.activity += 1
        self.lock.notify_all()

    # ---- the end --------------------------------------------------------------------------------

    def stop(self) -> None:
        """No new request from now on: wakes every waiting thread to see it."""
        with self.lock:
            self._stopping = True
            self.lock.notify_all()

    def record_failure(self, failure: str) -> None:
        """A bug killed one of its threads; the first one is what `status()` reports."""
        with self.lock:
            if self._failure is None:
                self._failure = failure
