"""A crawler node: owns whole servers, fetches their URLs, parses pages, writes Parquet.

Plain Python (threads, no Ray): the flow wraps it in a Ray actor, tests may run it directly.
This module is the node's control API, what the driver (crawler/cluster/coordinator.py) and the link
to the other nodes (crawler/cluster/peerlink.py) call; it builds the node from its parts:

- `core`: the state the parts share under one lock (servers, page budget, counters);
- `fetchloop`: the worker threads, one per connection;
- `outcome`: what a fetch comes to (retry, redirect, page and links), a pure function;
- `discovery`: where found URLs go (own queues, other nodes, sitemaps);
- `handover`: servers given to and taken from other nodes, whole;
- `recorder`: the typed rows of the output; `metrics`: the metrics dataset.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from crawler.cluster.peerlink import PeerLink
from crawler.cluster.status import NodeStatus
from crawler.content.ccindex import load_suffix_list
from crawler.node.core import NodeCore
from crawler.node.discovery import Discovery, Skipped
from crawler.node.fetchloop import FetchLoop
from crawler.node.handover import Handover
from crawler.node.metrics import NodeMetrics
from crawler.node.recorder import Recorder
from crawler.node.settings import NodeSettings
from crawler.scheduling.server import Item, ServerState
from crawler.scheduling.urlqueue import UrlTask
from crawler.scope.limits import counts_of
from crawler.scope.urls import server_of
from storage.bucket import local_root, node_publisher
from storage.writer import OutputFailed

logger = logging.getLogger(__name__)


class CrawlerNode:
    def __init__(self, settings: NodeSettings, link: PeerLink) -> None:
        """`link`: the connection to the other nodes through shared state
        (crawler/cluster/exchange.py and crawler/cluster/peerlink.py): URLs for servers other
        nodes own, and servers moving between nodes, go through it."""
        self.node_id = settings.node_id
        self.core = core = NodeCore(settings)
        self._link = link
        # Object storage output: written to this machine's staging directory, each committed
        # batch published from there (storage/bucket.py).
        output = settings.config.output
        crawl_dir = local_root(settings.out_dir, output.staging_dir) / settings.crawl_id
        publisher = node_publisher(settings.out_dir, crawl_dir, settings.lease_token)
        self.recorder = Recorder(core, crawl_dir, publisher)
        self.discovery = Discovery(core, link, self.recorder)
        self.handover = Handover(core, link.settings.heartbeat_s, self._ensure_workers)
        self.loop = FetchLoop(
            core, self.recorder, self.discovery, self.handover, settings.allow_private
        )
        self._metrics = NodeMetrics(core, crawl_dir, link, publisher)
        self._started = False  # no fetching before start(): the coordinator seeds or restores first
        self._connections = 0  # worker threads started
        self._threads: list[threading.Thread] = []
        with core.lock:
            for host in settings.hosts:
                core.own(ServerState(host))

    # ---- seeding and the page budget --------------------------------------------------------

    def add_urls(self, items: Iterable[Item]) -> int:
        """Queue canonical URLs (with their depth) of servers this node owns; returns how many
        were new. One past a queue bound gets a `skipped: queue_full` row instead (its
        `discovered` row is the sender's: the seeds' step, or the node that found it)."""
        core = self.core
        added = 0
        elsewhere: list[Item] = []
        skipped: Skipped = []
        with core.lock:
            for url, depth in items:
                host = server_of(url)
                server = core.servers.get(host)
                if server is None:
                    elsewhere.append((url, depth))  # its server moved on meanwhile
                    continue
                if url in server.seen:
                    continue
                task = UrlTask(url, depth, quality=core.score(url))
                added += self.discovery.queue_new(server, task, skipped)
            if added:
                core.changed()
        self.discovery.record_skipped(skipped)
        if elsewhere:
            self._link.forward(elsewhere)
        return added

    def restore(
        self, pending: list[tuple[str, int, int]], done: list[str], admitted: list[str]
    ) -> None:
        """Resume from a checkpoint: `done` URLs are never fetched again, `pending` ones
        (url, depth, attempt of the next try) are queued; retries go first. `admitted`: the
        URLs the first run let through crawler.scope.limits, which count against them again.
        New URLs past a queue bound get a `skipped: queue_full` row again (their `discovered`
        rows stay, so the next resume tries them again)."""
        core = self.core
        skipped: Skipped = []
        with core.lock:
            for host, counts in counts_of(admitted).items():
                core.servers[host].limits.add(counts)
            for url in done:
                if (server := core.servers.get(server_of(url))) is not None:
                    server.seen.add(url)
            for url, depth, attempt in pending:
                server = core.servers[server_of(url)]
                # The depth inside its server is not in the output: the crawl depth bounds it.
                task = UrlTask(url, depth, attempt, core.score(url), host_depth=depth)
                if attempt == 1:
                    self.discovery.queue_new(server, task, skipped)
                else:
                    core.queue_retry(server, task)
            core.changed()
        self.discovery.record_skipped(skipped)

    def grant(self, pages: int) -> None:
        """Allow this node to start `pages` more URLs (the driver enforces --max-pages)."""
        self.core.grant(pages)

    def reclaim(self) -> int:
        """Hand back the unused page budget (the driver gives it to nodes that have work)."""
        return self.core.reclaim()

    # ---- other nodes --------------------------------------------------------------------------

    def export_hosts(self, want_urls: int, max_urls: int) -> list[ServerState]:
        return self.handover.export_hosts(want_urls, max_urls)

    def adopt_hosts(self, states: list[ServerState]) -> None:
        self.handover.adopt_hosts(states)

    # ---- watching -------------------------------------------------------------------------------

    def status(self) -> NodeStatus:
        core = self.core
        with core.lock:
            counters = core.counters
            departing = len(self.handover.departed)
            queued, active, budget = core.frontier.queued(), core.active, core.budget
            servers, failure = len(core.servers), core.failure
            fetches, pages, urls_done = counters.fetches, counters.pages, counters.urls_done
            activity = counters.activity
        return NodeStatus(
            node_id=self.node_id,
            queued=queued,
            active=active,
            budget=budget,
            held_for_peers=departing + self._link.unsent(),
            servers=servers,
            failure=failure,
            fetches=fetches,
            pages=pages,
            urls_done=urls_done,
            activity=activity,
            link=self._link.stats(),
        )

    def flush(self) -> None:
        """Commit every buffered row now (a takeover reads the live nodes' output)."""
        self.recorder.flush()

    # ---- threads ------------------------------------------------------------------------------

    def start(self) -> None:
        load_suffix_list()  # before any connection opens (see there)
        ticker = self._thread(self._metrics.tick, f"{self.node_id}-metrics")
        ticker.start()
        self._threads.append(ticker)
        with self.core.lock:
            self._started = True
            self._ensure_workers()
        self._link.start(self)

    def _ensure_workers(self) -> None:
        """One worker per connection: as many as servers owned, up to `max_connections` (a
        node that adopts servers gets more). Under the lock."""
        core = self.core
        if not self._started:
            return
        wanted = min(core.config.scheduling.max_connections, max(1, len(core.servers)))
        while self._connections < wanted and not core.stopping:
            worker = self._thread(self.loop.work, f"{self.node_id}-conn{self._connections}")
            worker.start()
            self._threads.append(worker)
            self._connections += 1

    def _thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread whose death by a bug shows in `status()`: a dead worker keeps its
        server taken, so the crawl would otherwise wait for it forever."""
        core = self.core

        def run() -> None:
            try:
                target()
            except OutputFailed as exc:
                # A disk that takes nothing: said as the disk said it, not as a bug.
                logger.error("%s stopped: %s", name, exc)
                core.record_failure(str(exc)[:300])
            except Exception as exc:
                logger.exception("%s died", name)
                core.record_failure(f"{name}: {type(exc).__name__}: {exc}"[:300])

        return threading.Thread(target=run, name=name, daemon=True)

    def _stop_threads(self) -> None:
        self.core.stop()
        for thread in self._threads:
            thread.join()
        self.loop.close()

    def expire(self) -> int:
        """The deadline: stop fetching (fetches under way end first), record every URL still
        queued or waiting for a retry as `skipped: deadline` (a resumed crawl fetches them,
        see storage/checkpoint.py), commit. Returns how many URLs were left."""
        self._stop_threads()
        with self.core.lock:
            tasks = [task for server in self.core.servers.values() for task in server.drain()]
        # A batch of rows at a time: a full node queue (a million URLs) as rows at once would
        # cost more memory than the queue itself.
        rows = self.core.config.output.write_batch_rows
        for start in range(0, len(tasks), rows):
            self.loop.unfetched(tasks[start : start + rows])
        self.recorder.flush()
        return len(tasks)

    def halt(self) -> None:
        """Stop at once, committing nothing more: what the death of its process does (the
        in-process runtime's `kill`). Pages already handed to the record workers get their rows
        first, buffered like the rest (a batch they fill is committed)."""
        self._stop_threads()
        self.recorder.stop_workers()
        self._link.stop()

    def close(self) -> NodeStatus:
        """Stop the workers after their current fetch, flush every file, close connections."""
        self._stop_threads()
        self._link.stop()
        try:
            self._metrics.close()
            self.recorder.stop_workers()
            self.recorder.flush()
        except (OSError, OutputFailed) as exc:
            # The disk: said in the status (the flow fails the crawl with it); what was
            # committed before stays, and a resume fetches the rest again.
            self.core.record_failure(f"its last rows could not be committed: {exc}"[:300])
        self.core.close_sessions()
        return self.status()
