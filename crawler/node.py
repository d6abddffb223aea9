"""A crawler node: owns whole servers, fetches their URLs, parses pages, writes Parquet.

Plain Python (threads, no Ray): the flow wraps it in a Ray actor, tests may run it directly.
Worker threads are the node's open connections; each one takes a server from the frontier,
fetches up to `P` of its URLs over that server's keep-alive session and gives it back.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from crawler.addresses import AddressGuard, AddressRefused
from crawler.archive import exchange_of
from crawler.config import CrawlConfig
from crawler.exchange import HostState, PeerLink
from crawler.fetcher import FetchResult, ServerSession
from crawler.frontier import Frontier, Server, UrlTask
from crawler.limits import DEADLINE, FAMILY_ERRORS, UrlLimits, counts_of
from crawler.links import ParsedPage, parse_html
from crawler.politeness import RetryPolicy, RobotsRules, is_retryable, parse_retry_after
from crawler.quality import make_quality_model
from crawler.ratecontrol import make_host_controller, make_in_flight_limit
from crawler.recrawl import Revisits
from crawler.sitemaps import SitemapEntry, read_sitemaps, sitemap_urls
from crawler.traps import ParamStripper, content_shape, url_family
from crawler.urls import Scope, canonical_url, host_key
from storage.schema import COMMITTED_DATASETS, DATASETS, METRICS
from storage.warc import WarcBatchWriter
from storage.writer import CommitGroupWriter, ParquetDatasetWriter

logger = logging.getLogger(__name__)
# A worker holding a server sleeps until its next request only if that is this close; a longer
# wait gives the connection slot to another server (politeness must not idle the node).
LINGER_S = 0.25
# A server taken over is not handed on again for this many heartbeats (no ping-pong).
HOST_COOLDOWN_BEATS = 8
UNLIMITED = 1 << 62


class CrawlerNode:
    def __init__(
        self,
        node_id: str,
        crawl_id: str,
        out_dir: str,
        config: CrawlConfig,
        hosts: Iterable[str],
        scope_hosts: Iterable[str],
        allow_private: bool,
        max_depth: int | None,
        page_budget: int | None = None,
        link: PeerLink | None = None,
        revisits: Revisits | None = None,
    ) -> None:
        """`link`: the connection to the other nodes through shared state (crawler/exchange.py);
        without it, URLs for servers other nodes own wait in the outbox for the driver.
        `revisits`: in a recrawl, what the earlier nights know of each URL (crawler/recrawl.py):
        the validators of its conditional GET, and its revisit priority, which ranks it in the
        scheduler where page quality would."""
        self.node_id = node_id
        self.crawl_id = crawl_id
        self.config = config
        self.scope = Scope(set(scope_hosts))
        self.max_depth = max_depth
        self._retry = RetryPolicy(config.retry, random.Random(node_id))
        # Mode "rtt": SPEC section 2's MaxRequestCount over all of this node's connections.
        self._in_flight = make_in_flight_limit(
            config.rate_control, config.max_connections, time.monotonic()
        )
        self._guard = AddressGuard(allow_private)
        self._frontier = Frontier(config.policy, config.keepalive_speedup, config.estimate_weight)
        self._quality = make_quality_model(config.policy, config.quality_file)
        self._revisits = revisits
        self._sessions: dict[str, ServerSession] = {}
        self._seen: set[str] = set()
        self._limits = UrlLimits(config)
        self._strip_params = ParamStripper(config.strip_params)
        # URL -> redirects that led to it, for the URLs queued from a Location header.
        self._redirects: dict[str, int] = {}
        self._outbox: list[tuple[str, int]] = []
        self._link = link
        self._owned: set[str] = set()  # servers this node fetches; only it may connect to them
        self._adopted: dict[str, float] = {}  # server -> when it was taken over
        self._leaving: set[str] = set()  # servers to hand over once their connection closes
        self._departed: list[HostState] = []  # servers handed over, for the link to send
        self._connections = 0  # worker threads started
        self._started = False  # no fetching before start(): the coordinator seeds or restores first
        self._lock = threading.Condition()
        self._budget = UNLIMITED if page_budget is None else page_budget
        self._active = 0
        self._stopping = False
        self._workers: list[threading.Thread] = []
        self._failure: str | None = None  # the first bug that killed one of its threads
        self._touched: set[str] = set()  # servers that answered since the last metrics tick
        self.counters = {"fetches": 0, "pages": 0, "urls_done": 0, "activity": 0}
        crawl_dir = Path(out_dir) / crawl_id
        # Fetches last: a batch counts once its fetches file exists (see CommitGroupWriter).
        self._output = CommitGroupWriter(
            {name: (crawl_dir / name, DATASETS[name]) for name in COMMITTED_DATASETS},
            prefix=node_id,
            batch_rows=config.write_batch_rows,
            interval_s=config.write_interval_s,
            archive=WarcBatchWriter(crawl_dir) if config.warc else None,
        )
        self._metrics = ParquetDatasetWriter(
            crawl_dir / "metrics",
            METRICS,
            prefix=node_id,
            batch_rows=config.write_batch_rows,
            interval_s=config.write_interval_s,
        )
        for host in hosts:
            self._add_server(host)

    def _add_server(self, host: str) -> Server:
        self._owned.add(host)
        server = self._frontier.servers.get(host)
        if server is not None:  # owned before and handed over: its frontier entry is reused
            return server
        controller = make_host_controller(
            self.config.rate_control, self.config.retry, time.monotonic()
        )
        server = Server(
            host, controller, requests_per_connection=self.config.requests_per_connection
        )
        self._frontier.add_server(server)
        return server

    def _score(self, url: str) -> float:
        """A URL's rank in the scheduler: its revisit priority in a recrawl, else its quality."""
        if self._revisits is not None:
            return self._revisits.priority(url)
        return self._quality.score(url)

    # ---- control interface, called by the driver -------------------------------------------

    def add_urls(self, items: Iterable[tuple[str, int]]) -> int:
        """Queue canonical URLs (with their depth) of servers this node owns; returns how many
        were new."""
        added = 0
        elsewhere: list[tuple[str, int]] = []
        with self._lock:
            for url, depth in items:
                if url in self._seen:
                    continue
                host = host_key(url)
                if host not in self._owned:
                    if self._link is None:
                        raise ValueError(f"node {self.node_id} does not own {host}")
                    elsewhere.append((url, depth))  # its server moved on meanwhile
                    continue
                self._seen.add(url)
                task = UrlTask(url, depth, quality=self._score(url))
                self._frontier.push(host, task, scheme=urlsplit(url).scheme)
                added += 1
            if added:
                self.counters["activity"] += 1
                self._lock.notify_all()
        if elsewhere and self._link is not None:
            self._link.forward(elsewhere)
        return added

    def restore(
        self, pending: list[tuple[str, int, int]], done: list[str], admitted: list[str]
    ) -> None:
        """Resume from a checkpoint: `done` URLs are never fetched again, `pending` ones
        (url, depth, attempt of the next try) are queued; retries go first. `admitted`: the
        URLs the first run let through crawler.limits, which count against them again."""
        for host, counts in counts_of(admitted).items():
            self._limits.restore(host, counts)
        with self._lock:
            self._seen.update(done)
            for url, depth, attempt in pending:
                self._seen.add(url)
                host = host_key(url)
                # The depth inside its server is not in the output: the crawl depth bounds it.
                task = UrlTask(url, depth, attempt, self._score(url), host_depth=depth)
                if attempt == 1:
                    self._frontier.push(host, task, scheme=urlsplit(url).scheme)
                else:
                    self._frontier.push_retry(host, task, scheme=urlsplit(url).scheme)
            self.counters["activity"] += 1
            self._lock.notify_all()

    def grant(self, pages: int) -> None:
        """Allow this node to start `pages` more URLs (the driver enforces --max-pages)."""
        with self._lock:
            self._budget += pages
            self._lock.notify_all()

    def reclaim(self) -> int:
        """Hand back the unused page budget (the driver gives it to nodes that have work)."""
        with self._lock:
            if self._budget >= UNLIMITED:
                return 0
            unused, self._budget = self._budget, 0
            return unused

    def take_outbox(self) -> list[tuple[str, int]]:
        """URLs found here for servers other nodes own, to be routed by the driver."""
        with self._lock:
            outbox, self._outbox = self._outbox, []
            return outbox

    def status(self) -> dict[str, Any]:
        with self._lock:
            status = {
                "node_id": self.node_id,
                "queued": self._frontier.queued(),
                "active": self._active,
                "budget": self._budget,
                # Work held for other nodes: the outbox, servers on their way out, or the
                # link's buffers and calls.
                "outbox": len(self._outbox)
                + len(self._departed)
                + (self._link.unsent() if self._link else 0),
                "servers": len(self._owned),
                "failure": self._failure,
                **self.counters,
            }
        if self._link is not None:
            status["link"] = self._link.stats()
        return status

    def flush(self) -> None:
        """Commit every buffered row now (a takeover reads the live nodes' output)."""
        self._output.flush()

    def export_hosts(self, want_urls: int, max_urls: int) -> list[HostState]:
        """Give up servers from the tail of the line (those served last) holding about
        `want_urls` queued URLs, and at most `max_urls` unless one server alone has more: one
        with no open connection at once, one with a connection once that closes (it closes
        after its current request), returned by a later call (the link calls every
        heartbeat). None with more queued than `want_urls` qualifies (moving it would not even
        out the load), nor one adopted within the cooldown (no ping-pong)."""
        now = time.monotonic()
        cooldown = HOST_COOLDOWN_BEATS * (self._link.settings.heartbeat_s if self._link else 0)
        with self._lock:
            states, self._departed = self._departed, []
            if want_urls <= 0 or self._stopping:
                return states
            candidates = [
                server
                for host in self._owned - self._leaving
                if 0 < (server := self._frontier.servers[host]).pending() <= want_urls
                and now - self._adopted.get(host, -cooldown) >= cooldown
            ]
            chosen: list[Server] = []
            urls = 0
            for server in sorted(candidates, key=lambda s: s.turn, reverse=True):
                if chosen and (urls + server.pending() > max_urls or urls >= want_urls):
                    break
                chosen.append(server)
                urls += server.pending()
            self._leaving.update(server.host for server in chosen if server.busy)
            states += self._export_locked([server for server in chosen if not server.busy], now)
            return states

    def _export_locked(self, servers: list[Server], now: float) -> list[HostState]:
        """Take idle servers out of this node, with all their next owner needs."""
        seen: dict[str, list[str]] = {server.host: [] for server in servers}
        if seen:
            for url in self._seen:
                # A canonical URL reads scheme://server/...: the third "/" field.
                if (host := url.split("/", 3)[2]) in seen:
                    seen[host].append(url)
        states = []
        for server in servers:
            wait_s = max(0.0, server.ready_at() - now)
            tasks = server.drain()
            redirects = {
                t.url: self._redirects.pop(t.url) for t in tasks if t.url in self._redirects
            }
            # Idle and empty now: its heap entries go stale and no worker takes it again.
            self._frontier.release(server)
            self._owned.discard(server.host)
            # Its next owner decides about its URLs now (they may even come back here).
            self._seen.difference_update(seen[server.host])
            if (session := self._sessions.pop(server.host, None)) is not None:
                session.close()  # one connection per server: ours goes
            states.append(
                HostState(
                    host=server.host,
                    scheme=server.scheme,
                    tasks=[(t.url, t.depth, t.attempt, t.quality) for t in tasks],
                    seen=seen[server.host],
                    robots=server.robots,
                    controller=server.controller,
                    robots_failures=server.robots_failures,
                    refused=server.refused,
                    wait_s=wait_s,
                    limits=self._limits.take(server.host),
                    redirects=redirects,
                )
            )
        if states:
            self.counters["activity"] += 1
        return states

    def adopt_hosts(self, states: list[HostState]) -> None:
        """Take over servers: their queues, seen URLs, robots.txt rules and rate controllers."""
        now = time.monotonic()
        with self._lock:
            for state in states:
                server = self._add_server(state.host)
                self._adopted[state.host] = now
                server.scheme = state.scheme
                if state.controller is not None:
                    server.controller = state.controller
                if state.robots is not None:
                    server.robots = state.robots
                    delay = state.robots.crawl_delay(self.config.user_agent)
                    if delay:
                        server.controller.set_floor_delay(delay)
                server.robots_failures = state.robots_failures
                server.refused = state.refused
                server.paused_until = max(server.paused_until, now + state.wait_s)
                self._limits.restore(state.host, state.limits)
                self._redirects.update(state.redirects)
                self._seen.update(state.seen)
                for url, depth, attempt, quality in state.tasks:
                    task = UrlTask(url, depth, attempt, quality, host_depth=depth)
                    if attempt == 1:
                        self._frontier.push(state.host, task, scheme=state.scheme)
                    else:
                        self._frontier.push_retry(state.host, task, scheme=state.scheme)
                for url, depth in state.inbox:
                    if url not in self._seen:
                        self._seen.add(url)
                        task = UrlTask(url, depth, quality=self._score(url), host_depth=depth)
                        self._frontier.push(state.host, task, scheme=state.scheme)
            self._ensure_workers()
            self.counters["activity"] += 1
            self._lock.notify_all()

    def start(self) -> None:
        ticker = self._thread(self._tick_metrics, f"{self.node_id}-metrics")
        ticker.start()
        self._workers.append(ticker)
        with self._lock:
            self._started = True
            self._ensure_workers()
        if self._link is not None:
            self._link.start(self)

    def _ensure_workers(self) -> None:
        """One worker per connection: as many as servers owned, up to `max_connections` (a
        node that adopts servers gets more). Under the lock."""
        if not self._started:
            return
        wanted = min(self.config.max_connections, max(1, len(self._owned)))
        while self._connections < wanted and not self._stopping:
            worker = self._thread(self._work, f"{self.node_id}-conn{self._connections}")
            worker.start()
            self._workers.append(worker)
            self._connections += 1

    def _thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread whose death by a bug shows in `status()`: a dead worker keeps its
        server taken, so the crawl would otherwise wait for it forever."""

        def run() -> None:
            try:
                target()
            except Exception as exc:
                logger.exception("%s died", name)
                with self._lock:
                    if self._failure is None:
                        self._failure = f"{name}: {type(exc).__name__}: {exc}"[:300]

        return threading.Thread(target=run, name=name, daemon=True)

    def close(self) -> dict[str, Any]:
        """Stop the workers after their current fetch, flush every file, close connections."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        for worker in self._workers:
            worker.join()
        if self._link is not None:
            self._link.stop()
        self._write_metrics()
        self._output.flush()
        self._metrics.flush()
        for session in self._sessions.values():
            session.close()
        return self.status()

    # ---- metrics -----------------------------------------------------------------------------

    def _tick_metrics(self) -> None:
        interval = self.config.metrics_interval_s
        next_tick = time.monotonic() + interval
        with self._lock:
            while not self._stopping:
                # The condition is notified on every fetch: wake-ups before the tick are ignored.
                self._lock.wait(timeout=max(0.0, next_tick - time.monotonic()))
                if not self._stopping and time.monotonic() >= next_tick:
                    self._write_metrics_locked()
                    next_tick += interval

    def _write_metrics(self) -> None:
        with self._lock:
            self._write_metrics_locked()

    def _write_metrics_locked(self) -> None:
        """One metrics row per controller trace field per server that answered since the last
        tick, and the node's own levels (long form: `metric`, `value`)."""
        now_wall = datetime.now(UTC)
        now = time.monotonic()
        rows = [
            {"host": None, "metric": name, "value": float(value)}
            for name, value in (
                ("queued", self._frontier.queued()),
                ("active_connections", self._active),
                ("servers_owned", len(self._owned)),
                *((name, self.counters[name]) for name in ("pages", "fetches", "urls_done")),
            )
        ]
        for host in sorted(self._touched):
            trace = self._frontier.servers[host].controller.trace(now)
            rows += [
                {"host": host, "metric": name, "value": float(value)}
                for name, value in trace.items()
                if value is not None
            ]
        self._touched.clear()
        if self._link is not None:
            rows += [
                {"host": None, "metric": name, "value": float(value)}
                for name, value in self._link.metric_values(self.counters["pages"]).items()
            ]
        for row in rows:
            self._metrics.write(
                {"crawl_id": self.crawl_id, "node_id": self.node_id, "time": now_wall, **row}
            )

    # ---- the fetch loop --------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                server = self._frontier.acquire(time.monotonic()) if self._budget > 0 else None
                if server is None:
                    # Without page budget only a grant (which notifies) can bring work.
                    self._lock.wait(timeout=self._idle_wait() if self._budget > 0 else 0.5)
                    continue
                self._active += 1
            try:
                self._serve(server)
            finally:
                with self._lock:
                    self._frontier.release(server)
                    if server.host in self._leaving:
                        # Its connection is closed: it can go to the node that takes it.
                        self._leaving.discard(server.host)
                        self._departed += self._export_locked([server], time.monotonic())
                    self._active -= 1
                    self.counters["activity"] += 1
                    self._lock.notify_all()

    def _idle_wait(self) -> float:
        ready = self._frontier.next_ready_time()
        if ready is None:
            return 0.5
        return min(0.5, max(0.001, ready - time.monotonic()))

    def _serve(self, server: Server) -> None:
        """One connection's worth of work on one server."""
        session = self._sessions.setdefault(server.host, ServerSession(self.config))
        if server.refused is not None or not self._address_ok(server, session):
            self._fail_queued(server, f"address_refused: {server.refused}")
            return
        if server.robots is None and not self._load_robots(server, session):
            return
        for _ in range(server.batch):
            task = self._next_task(server)
            if task is None:
                return
            if not server.robots.allowed(task.url, self.config.user_agent):
                self._refuse(task, "robots_disallowed")
                continue
            if self._limits.closed(task.url):
                self._refuse(task, f"{FAMILY_ERRORS}: {url_family(task.url)[:100]}")
                continue
            wait = server.controller.earliest_next() - time.monotonic()
            if wait > LINGER_S:
                self._put_back(server, task)
                return
            # Checked last: a URL put back above must not be counted twice. Retries were
            # admitted with their first try.
            refusal = self._limits.admit(task.url, task.host_depth) if task.attempt == 1 else None
            if refusal is not None:
                self._refuse(task, refusal)
                continue
            if wait > 0:
                time.sleep(wait)
            try:
                keep_connection = self._fetch(server, session, task)
            except Exception as exc:
                # A bug that some server's answer sets off must cost that URL, not the worker
                # thread: a dead worker keeps its server taken and the crawl never ends.
                logger.exception("fetching %s failed", task.url)
                error = f"internal_error: {type(exc).__name__}: {exc}"[:300]
                self._record_fetch(FetchResult(task.url, error=error), task)
                with self._lock:
                    self.counters["urls_done"] += 1
                return
            if not keep_connection:
                return

    def _skip_family(self, server: Server, family: str) -> None:
        """A family of the server kept failing: its queued URLs are recorded as skipped, in
        one go (a page of 100,000 dead links costs a few requests and one batch of rows)."""
        with self._lock:
            tasks = server.drain_family(family)
        self._record_skipped(tasks, f"{FAMILY_ERRORS}: {family[:100]}")

    def expire(self) -> int:
        """The deadline: stop fetching (fetches under way end first), record every URL still
        queued or waiting for a retry as `skipped: deadline` (a resumed crawl fetches them,
        see storage/checkpoint.py), commit. Returns how many URLs were left."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        for worker in self._workers:
            worker.join()
        with self._lock:
            tasks = [task for server in self._frontier.servers.values() for task in server.drain()]
        self._record_skipped(tasks, DEADLINE)
        self._output.flush()
        return len(tasks)

    def _record_skipped(self, tasks: list[UrlTask], error: str) -> None:
        """One fetches row per URL not fetched, written as one batch."""
        if not tasks:
            return
        now = datetime.now(UTC)
        rows = []
        for task in tasks:
            parts = urlsplit(task.url)
            rows.append(
                {
                    "crawl_id": self.crawl_id,
                    "url": task.url,
                    "url_host_name": parts.netloc,
                    "url_path": parts.path,
                    "fetch_time": now,
                    "error": error,
                    "node_id": self.node_id,
                    "depth": task.depth,
                    "attempt": task.attempt,
                }
            )
        self._output.record({"fetches": rows})
        with self._lock:
            for task in tasks:
                self._redirects.pop(task.url, None)
            self.counters["fetches"] += len(rows)
            self.counters["urls_done"] += len(rows)
            self.counters["activity"] += 1

    def _refuse(self, task: UrlTask, error: str) -> None:
        """Record a URL that is not fetched (robots.txt, a limit): one row, budget returned."""
        self._record_fetch(FetchResult(task.url, error=error), task)
        with self._lock:
            self._budget += 1  # nothing was fetched: the page budget is not spent
            self.counters["urls_done"] += 1
            self._redirects.pop(task.url, None)

    def _address_ok(self, server: Server, session: ServerSession) -> bool:
        try:
            session.pin(self._guard.check_url(f"{server.scheme}://{server.host}/"))
        except AddressRefused as exc:
            server.refused = str(exc)
            return False
        except OSError:
            return True  # resolution failed: each fetch records its own network error
        return True

    def _fail_queued(self, server: Server, error: str) -> None:
        """Record every URL queued for a server that cannot be crawled as failed."""
        with self._lock:
            tasks = server.drain()
        for task in tasks:
            self._record_fetch(FetchResult(task.url, error=error), task)
        with self._lock:
            self.counters["urls_done"] += len(tasks)

    def _load_robots(self, server: Server, session: ServerSession) -> bool:
        """Fetch the server's robots.txt; False while its rules are unknown."""
        robots_url = f"{server.scheme}://{server.host}/robots.txt"
        self._take_slot()
        result = session.get(robots_url)
        self._free_slot(result)
        with self._lock:
            server.stats.on_response(result.status, result.rtt_s, result.headers)
        self._record_fetch(result, UrlTask(robots_url, depth=0))
        now = time.monotonic()
        # A robots.txt that broke off midway is unknown, not short: its rules may be missing.
        status = None if result.cut_short else result.status
        rules = RobotsRules.from_response(
            status, result.body.decode("utf-8", "replace"), now, self.config.robots_retry_s
        )
        if not rules.is_unreachable:
            server.robots = rules
            delay = rules.crawl_delay(self.config.user_agent)
            if delay:
                server.controller.set_floor_delay(delay)
            if self.config.sitemaps:
                self._read_sitemaps(server, session)
            return True
        # 5xx, 429 or no answer: the rules are unknown, so nothing is fetched until they are;
        # after as many tries as a URL gets, the server's URLs are recorded as failed.
        server.robots_failures += 1
        if server.robots_failures > self.config.retry.max_retries:
            self._fail_queued(server, f"robots_unavailable: {result.error or result.status}")
        else:
            server.paused_until = rules.retry_at or now
        return False

    def _read_sitemaps(self, server: Server, session: ServerSession) -> None:
        """The server's sitemaps (crawler/sitemaps.py), fetched over its connection at its
        pace, seed its queue; the last sitemap fetch's row carries the URLs they added."""
        assert server.robots is not None
        fetched: list[FetchResult] = []

        def fetch(url: str) -> FetchResult:
            if self._stopping:  # the deadline or the end of the crawl: no more sitemaps
                return FetchResult(url, error="stopped")
            if not server.robots or not server.robots.allowed(url, self.config.user_agent):
                return FetchResult(url, error="robots_disallowed")
            wait = server.controller.earliest_next() - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            result, _ = self._paced_get(server, session, url)
            fetched.append(result)
            return result

        origin = f"{server.scheme}://{server.host}"
        entries = read_sitemaps(server.host, sitemap_urls(origin, server.robots.sitemaps), fetch)
        added = self._queue_sitemap_entries(server, entries)
        for number, result in enumerate(fetched, 1):
            last = number == len(fetched)
            self._record_fetch(result, UrlTask(result.url, depth=0), None, added if last else None)

    def _queue_sitemap_entries(
        self, server: Server, entries: list[SitemapEntry]
    ) -> list[tuple[str, int]]:
        """Queue the sitemap's new URLs of this server (depth 0: like seeds); in a recrawl,
        put the known URLs whose `lastmod` is newer than their last visit before all others
        (queued now if the budget had left them out). Returns the URLs added."""
        added: list[tuple[str, int]] = []
        raised: set[str] = set()
        with self._lock:
            for entry in entries:
                try:
                    url = self._strip_params(canonical_url(entry.url))
                except ValueError:
                    continue
                if host_key(url) != server.host:
                    continue
                boost = 0.0
                if self._revisits is not None and self._revisits.changed_since(url, entry.lastmod):
                    raised.add(url)
                    boost = 1.0
                # A known URL the recrawl did not seed (a page budget left it out) comes in only
                # when its lastmod says it changed.
                known = self._revisits is not None and self._revisits.known(url) is not None
                if url not in self._seen and (boost or not known):
                    self._seen.add(url)
                    task = UrlTask(url, 0, quality=self._score(url) + boost, urgent=bool(boost))
                    self._frontier.push(server.host, task, server.scheme)
                    added.append((url, 0))
            if raised:
                # Re-ranked in place: the server is ours (busy) and its count does not change.
                tasks = server.queue.drain()
                for task in tasks:
                    if task.url in raised:
                        task.quality = self._score(task.url) + 1.0
                        task.urgent = True
                    server.queue.push(task)
            if added:
                self.counters["activity"] += 1
                self._lock.notify_all()
        return added

    def _next_task(self, server: Server) -> UrlTask | None:
        with self._lock:
            if self._stopping or server.host in self._leaving:
                return None
            task = server.next_task(time.monotonic(), new_allowed=self._budget > 0)
            if task is not None and task.attempt == 1:
                self._budget -= 1
            return task

    def _put_back(self, server: Server, task: UrlTask) -> None:
        with self._lock:
            server.put_back(task)
            if task.attempt == 1:
                self._budget += 1

    def _take_slot(self) -> None:
        """Wait until the node's in-flight limit (mode "rtt") lets one more request go."""
        if self._in_flight is None:
            return
        with self._lock:
            while not self._in_flight.may_start() and not self._stopping:
                self._lock.wait(timeout=0.05)
            self._in_flight.start()

    def _free_slot(self, result: FetchResult) -> None:
        if self._in_flight is None:
            return
        with self._lock:
            self._in_flight.finish(time.monotonic(), result.rtt_s or 0.0, result.status)
            self._lock.notify_all()

    def _paced_get(
        self,
        server: Server,
        session: ServerSession,
        url: str,
        conditional: dict[str, str] | None = None,
    ) -> tuple[FetchResult, float | None]:
        """One request, counted by the in-flight limit and the server's rate controller (so
        the next one waits its turn); returns the result and its `Retry-After`, if any."""
        self._take_slot()
        started = time.monotonic()
        with self._lock:
            server.controller.on_request_start(started)
        result = session.get(url, conditional)
        self._free_slot(result)
        now = time.monotonic()
        retry_after = parse_retry_after(
            result.headers.get("retry-after"), time.time(), self.config.retry.retry_after_max_s
        )
        with self._lock:
            server.controller.on_response(
                now, result.rtt_s or (now - started), result.status, retry_after
            )
            server.stats.on_response(result.status, result.rtt_s, result.headers)
            self._touched.add(server.host)
        return result, retry_after

    def _fetch(self, server: Server, session: ServerSession, task: UrlTask) -> bool:
        """Fetch one URL; False when the connection should end (the server pushed back)."""
        conditional = self._revisits.conditional_headers(task.url) if self._revisits else None
        result, retry_after = self._paced_get(server, session, task.url, conditional)
        now = time.monotonic()
        retry_in = self._retry.retry_delay(task.attempt, result.status, result.error, retry_after)
        if retry_in is None and is_retryable(result.status, result.error):
            # The last try of a URL that kept failing: the row says it was given up.
            result.error = f"gave_up: {result.error or result.status} after {task.attempt} tries"
        if retry_in is None:
            # A dead link, or no answer at all (given up): what a run of dead URLs gives.
            failed = result.status in (404, 410) or (
                result.status is None and result.error is not None
            )
            if self._limits.outcome(task.url, failed or (result.error or "").startswith("gave_up")):
                self._skip_family(server, url_family(task.url))
        if result.status == 304:
            self._limits.credit(task.url)  # unchanged since an earlier crawl judged it
        elif result.status is not None and self._limits.wants_shape(task.url):
            self._limits.observe(task.url, content_shape(result.body))
        if retry_in is not None:
            self._record_fetch(result, task)
            # The URL waits; the server's own pause (Retry-After, a run of failures) is the
            # rate controller's business.
            with self._lock:
                server.retry_later(UrlTask(task.url, task.depth, task.attempt + 1), now + retry_in)
            return False
        page_row: dict[str, Any] | None = None
        discovered: list[tuple[str, int]] = []
        foreign: list[tuple[str, int]] = []
        with self._lock:
            hops = self._redirects.pop(task.url, 0)
        if result.status is not None and 300 <= result.status < 400:
            location = result.headers.get("location")
            if location and hops >= self.config.max_redirects:
                result.error = f"too_many_redirects: {hops} in a row, not to {location[:200]}"
            elif location:
                discovered = self._discover(
                    [location], task, task.depth, foreign, redirects=hops + 1
                )
        elif result.status == 200 and result.error is None and result.is_html:
            body, encoding = result.html_source()
            parsed = parse_html(body, result.url, encoding)
            page_row = self._page_row(result, task, parsed)
            discovered = self._discover(parsed.links, task, task.depth + 1, foreign, canonical=True)
        self._record_fetch(result, task, page_row, discovered)
        # Sent only once their `discovered` rows are recorded: a takeover flushes the live
        # nodes' rows, then finds there every URL a dead node had been sent.
        self._send_foreign(foreign)
        with self._lock:
            self.counters["urls_done"] += 1
            self.counters["pages"] += page_row is not None
        return result.headers.get("connection", "").lower() != "close"

    def _page_row(self, result: FetchResult, task: UrlTask, parsed: ParsedPage) -> dict[str, Any]:
        return {
            "crawl_id": self.crawl_id,
            "url": result.url,
            "url_host_name": host_key(result.url),
            "fetch_time": datetime.now(UTC),
            "content_digest": result.digest,
            "content_length": len(result.body),
            "title": parsed.title,
            "outlink_count": len(parsed.links),
            "depth": task.depth,
            "node_id": self.node_id,
            "content": result.text,
        }

    def _discover(
        self,
        links: Iterable[str],
        source: UrlTask,
        depth: int,
        foreign: list[tuple[str, int]],
        redirects: int = 0,
        canonical: bool = False,
    ) -> list[tuple[str, int]]:
        """Queue the in-scope links of this node's servers it has not seen, and add to `foreign`
        those of other nodes' servers it has not sent yet; returns both, for the
        discovered-URL log a resumed crawl reads. `redirects`: how many redirects in a row led
        to these links (a Location header). `canonical`: the links are canonical already
        (parse_html's), which saves joining and canonicalizing them again."""
        if self.max_depth is not None and depth > self.max_depth:
            return []
        source_url = source.url
        source_host = source_url.split("/", 3)[2]
        targets: list[str] = []
        scope = self.scope.hosts
        for link in links:
            try:
                url = link if canonical else canonical_url(urljoin(source_url, link))
                url = self._strip_params(url)
            except ValueError:  # BadUrl, or what urljoin cannot parse (a Location "http://[::1")
                continue
            # A canonical URL reads scheme://server/...: the server is the third "/" field.
            if url.split("/", 3)[2] in scope:
                targets.append(url)
        # Every in-scope link, seen or not, is part of the graph page quality is computed on.
        self._quality.observe_page(source_url, targets)
        new: list[tuple[str, int]] = []
        with self._lock:
            for url in targets:
                if url in self._seen:
                    continue
                host = url.split("/", 3)[2]
                if host in self._owned:
                    self._seen.add(url)
                    # Depth inside the server: from where the crawl entered it.
                    host_depth = source.host_depth + 1 if host == source_host else 0
                    task = UrlTask(url, depth, quality=self._score(url), host_depth=host_depth)
                    self._frontier.push(host, task, scheme=urlsplit(url).scheme)
                    if redirects:
                        self._redirects[url] = redirects
                elif self._link is None:
                    # No shared filter: the node's exact set remembers foreign URLs too, so
                    # each is sent to its owner once.
                    self._seen.add(url)
                    foreign.append((url, depth))
                elif self._link.admit(url):
                    foreign.append((url, depth))
                else:
                    continue  # the dedup cache knows it was sent
                new.append((url, depth))
            if new:
                self.counters["activity"] += 1
                self._lock.notify_all()
        return new

    def _send_foreign(self, items: list[tuple[str, int]]) -> None:
        if not items:
            return
        if self._link is not None:
            self._link.send(items)
        else:
            with self._lock:
                self._outbox += items

    def _record_fetch(
        self,
        result: FetchResult,
        task: UrlTask,
        page_row: dict[str, Any] | None = None,
        discovered: list[tuple[str, int]] | None = None,
    ) -> None:
        """Write one attempt's rows; a fetch, its page and the links found on it always land in
        the same batch, so a crash never keeps a page while losing its links. A 304 stands for
        the earlier capture: its row carries that capture's digest, and the validators it
        confirmed unless it sent new ones."""
        fetch_time = datetime.now(UTC)
        earlier = self._revisits.known(result.url) if self._revisits else None
        if result.status != 304:
            earlier = None
        fetch_row = {
            "crawl_id": self.crawl_id,
            "url": result.url,
            "url_host_name": host_key(result.url),
            "url_path": urlsplit(result.url).path,
            "fetch_time": fetch_time,
            "fetch_status": result.status,
            "fetch_redirect": result.headers.get("location"),
            "error": result.error,
            "content_mime_type": result.mime_type,
            "content_charset": result.charset,
            "content_length": len(result.body) if result.status is not None else None,
            "content_digest": earlier.digest if earlier else result.digest,
            "rtt_ms": None if result.rtt_s is None else result.rtt_s * 1000.0,
            "node_id": self.node_id,
            "depth": task.depth,
            "attempt": task.attempt,
            "etag": result.headers.get("etag") or (earlier.etag if earlier else None),
            "last_modified": result.headers.get("last-modified")
            or (earlier.last_modified if earlier else None),
        }
        discovered_rows = [
            {"crawl_id": self.crawl_id, "url": url, "depth": depth, "node_id": self.node_id}
            for url, depth in discovered or []
        ]
        self._output.record(
            {
                "discovered": discovered_rows,
                "pages": [] if page_row is None else [page_row],
                "fetches": [fetch_row],
            },
            exchange_of(result, fetch_time, earlier) if self.config.warc else None,
        )
        with self._lock:
            self.counters["fetches"] += 1
