"""The crawl coordinator: seeds the nodes, shares out the page budget, watches the nodes (a
node that dies has its servers taken over, a crawl that falls behind its deadline gets
surcharge nodes) and decides when the crawl is over.

Nodes send each other URLs and servers themselves, through the shared state
(`crawler.cluster.exchange`): the coordinator only routes the seeds, before the nodes start.

Plain Python over small interfaces, so it runs the same over Ray actor proxies (the flow) and
over in-process nodes (tests); both are built by the runtime layer (runtime/).

About 400 lines because it is one loop over one state: the budget, the quiet check, the
takeover of a dead node and the surcharge nodes all read and change the same per-node grants,
usage and statuses within one poll; split into modules they would pass that state around.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from crawler.cluster.exchange import ExchangeSnapshot
from crawler.cluster.recovery import Recovered
from crawler.cluster.status import NodeStatus
from crawler.scheduling.server import ServerState
from crawler.scope.urls import server_of

logger = logging.getLogger(__name__)

# Seeds sent to the nodes at once. The nodes start after the first lot: queueing 100,000 seeds
# takes a node seconds, and its first fetches need not wait for the last seed (each URL is
# queued once whenever it comes). Smaller lots also keep a running node's lock short.
SEED_LOT = 5_000


# Between two looks at the nodes, at most this share of the time since the crawl started: the
# end of a crawl is seen within that share of its length (two looks see it quiet), while a
# long crawl is not looked at four times a second throughout (each look is a remote call to
# every node, answered by each).
POLL_SHARE = 0.01


def poll_interval(elapsed_s: float, poll_s: float, max_poll_s: float) -> float:
    """Seconds until the next look, `elapsed_s` into the crawl: POLL_SHARE of it, within
    [`poll_s`, `max_poll_s`]."""
    return min(max_poll_s, max(poll_s, POLL_SHARE * elapsed_s))


class CrawlFailed(RuntimeError):
    """The crawl cannot go on: a node hit a bug, or no node is left to take over. What the
    nodes committed stays; a rerun with the same crawl id resumes from it."""


class NodeLost(Exception):
    """A node stopped answering: its process died or was killed."""

    def __init__(self, node_id: str) -> None:
        super().__init__(f"crawler node {node_id} is gone")
        self.node_id = node_id


class NodeHandle(Protocol):
    """A crawler node as the coordinator reaches it; calls raise NodeLost once it is gone."""

    node_id: str

    def add_urls(self, items: list[tuple[str, int]]) -> int: ...
    def status(self) -> NodeStatus: ...
    def grant(self, pages: int) -> None: ...
    def reclaim(self) -> int: ...
    def restore(
        self, pending: list[tuple[str, int, int]], done: list[str], admitted: list[str]
    ) -> None: ...
    def flush(self) -> None: ...
    def start(self) -> None: ...
    def expire(self) -> int: ...


class ExchangeView(Protocol):
    """The shared exchange as the coordinator reaches it (see crawler.cluster.exchange.Exchange)."""

    def snapshot(self) -> ExchangeSnapshot: ...
    def orphan(self, node_id: str) -> list[str]: ...
    def put_hosts(self, states: list[ServerState]) -> None: ...
    def push(self, urls: list[tuple[str, int]]) -> int: ...


# (dead node, its servers) -> what it leaves, rebuilt from the committed output.
Recover = Callable[[str, list[str]], Recovered]


@dataclass
class Surcharge:
    """Adds nodes while the crawl is projected to overrun its deadline (docs/allocation.md's
    surcharge capacity): `launch()` starts one more node, which then takes servers from the
    busier ones through the water level. At most `max_nodes`, one per `check_every_s`."""

    deadline_s: float
    max_nodes: int
    launch: Callable[[], NodeHandle]
    check_every_s: float = 10.0


@dataclass
class Progress:
    elapsed_s: float
    pages: int
    fetches: int
    urls_done: int
    queued: int
    active: int


@dataclass
class NodeUsage:
    node_id: str
    kind: str  # "planned" (launched with the crawl) or "added" (surcharge, while it ran)
    started_s: float
    ended_s: float | None = None
    lost: bool = False
    last_status: NodeStatus | None = None


class Coordinator:
    def __init__(
        self,
        nodes: list[NodeHandle],
        owner: dict[str, str],
        max_pages: int | None,
        exchange: ExchangeView,
        recover: Recover | None = None,
        surcharge: Surcharge | None = None,
    ) -> None:
        self.nodes = {node.node_id: node for node in nodes}
        self.owner = owner  # server -> node_id at the start (servers move later)
        self.max_pages = max_pages
        self.exchange = exchange
        self.recover = recover
        self.surcharge = surcharge
        self.unassigned_budget = max_pages or 0
        self.granted: dict[str, int] = defaultdict(int)  # page budget held per node
        self.started = time.monotonic()
        self.usage = {node_id: NodeUsage(node_id, "planned", 0.0) for node_id in self.nodes}
        self._lost: list[str] = []
        self._last_surcharge = self.started
        self._samples: deque[tuple[float, int]] = deque()  # (time, URLs done) for projections
        self.left_at_deadline: int | None = None  # URLs the nodes held when the deadline came

    # ---- start -------------------------------------------------------------------------------

    def seed(self, urls: list[str], depths: Mapping[str, int] | None = None) -> None:
        """Start from `urls`, each at its depth in `depths` (a recrawl's known URLs), else 0:
        the nodes start once they have the first SEED_LOT, and get the rest while they run."""
        depths = depths or {}
        items = [(url, depths.get(url, 0)) for url in urls]
        self._route(items[:SEED_LOT])
        self._begin()
        for start in range(SEED_LOT, len(items), SEED_LOT):
            self._route(items[start : start + SEED_LOT])

    def resume(
        self,
        pending: dict[str, tuple[int, int]],
        done: set[str],
        admitted: list[str],
    ) -> None:
        """Start from a checkpoint instead of the seeds: each node gets the done and pending
        URLs of its servers, and those its servers had admitted (crawler.scope.limits); the page
        budget left is what the admitted URLs did not use."""
        pending_by_node: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
        done_by_node: dict[str, list[str]] = defaultdict(list)
        admitted_by_node: dict[str, list[str]] = defaultdict(list)
        for url, (depth, attempt) in pending.items():
            pending_by_node[self.owner[server_of(url)]].append((url, depth, attempt))
        for urls, by_node in ((done, done_by_node), (admitted, admitted_by_node)):
            for url in urls:
                node_id = self.owner.get(server_of(url))
                if node_id is not None:
                    by_node[node_id].append(url)
        for node_id, node in self.nodes.items():
            node.restore(pending_by_node[node_id], done_by_node[node_id], admitted_by_node[node_id])
        if self.max_pages is not None:
            self.unassigned_budget = max(0, self.max_pages - len(admitted))
        self._begin()

    def _begin(self) -> None:
        """Grant the page budget, then start the nodes. Only now: a node that ran while others
        were still being restored could be sent URLs their checkpoint says are done, or hand
        them a server before its own restore."""
        if self.max_pages is not None:
            share = max(1, self.unassigned_budget // len(self.nodes))
            for node_id in list(self.nodes):
                self._grant(node_id, share)
        for node in self.nodes.values():
            node.start()

    # ---- the loop ----------------------------------------------------------------------------

    def run(
        self,
        poll_s: float = 0.05,
        on_progress: Callable[[Progress], None] | None = None,
        progress_every_s: float = 2.0,
        max_s: float | None = None,
        deadline_s: float | None = None,
        max_poll_s: float | None = None,
    ) -> Progress:
        """Until the crawl is over, or `max_s` seconds after the start (benchmarks stop
        watching), or `deadline_s` seconds after the start: then the nodes stop and record
        what they hold as left at the deadline (`expire`), for a resumed run. The nodes and
        the exchange are looked at every `poll_s`, or, given `max_poll_s`, every
        POLL_SHARE of the time since the start within those bounds (see `poll_interval`)."""
        last_report = time.monotonic()
        previous_activity: int | None = None
        while True:
            while self._lost:
                self._take_over(self._lost.pop(0))
            statuses = self._statuses()
            if self._lost:
                continue
            if self.max_pages is not None:
                self._rebalance_budget(statuses)
            progress = self._progress(statuses)
            if on_progress is not None and time.monotonic() - last_report >= progress_every_s:
                on_progress(progress)
                last_report = time.monotonic()
            # The exchange is asked only once the nodes look done (or for a surcharge plan's
            # projection): while a node works the crawl is not over, whatever the exchange
            # holds, and most polls of a crawl find a node at work.
            quiet = not self._lost and self._nodes_quiet(statuses)
            activity: int | None = None
            if quiet or self.surcharge is not None:
                snapshot = self.exchange.snapshot()
                self._consider_surcharge(progress, snapshot)
                quiet = quiet and not (snapshot.inbox_urls or snapshot.pool_urls)
                activity = sum(s.activity for s in statuses) + snapshot.ops
            over = max_s is not None and progress.elapsed_s >= max_s
            if deadline_s is not None and progress.elapsed_s >= deadline_s and not quiet:
                self.left_at_deadline = sum(
                    self._call(node_id, "expire") or 0 for node_id in list(self.nodes)
                )
                logger.warning(
                    "deadline of %.0fs reached: %d URLs left", deadline_s, self.left_at_deadline
                )
                over = True
            # Over once two looks in a row find everything quiet, and nothing done between.
            if over or (quiet and activity == previous_activity):
                self._finish()
                return progress
            previous_activity = activity if quiet else None
            time.sleep(poll_interval(progress.elapsed_s, poll_s, max_poll_s or poll_s))

    def _statuses(self) -> list[NodeStatus]:
        statuses = []
        for node_id, node in list(self.nodes.items()):
            try:
                status = node.status()
            except NodeLost:
                self._lost.append(node_id)
                continue
            if status.failure:
                raise CrawlFailed(f"crawler node {node_id} failed: {status.failure}")
            self.usage[node_id].last_status = status
            statuses.append(status)
        return statuses

    def _nodes_quiet(self, statuses: list[NodeStatus]) -> bool:
        """No node fetching, holding URLs for others, or able to go on with its queue."""
        budget_left = self.max_pages is None or self.unassigned_budget > 0
        for status in statuses:
            if status.active or status.held_for_peers:
                return False
            can_progress = status.budget > 0 or budget_left
            if status.queued and can_progress:
                return False
        return True

    def _progress(self, statuses: list[NodeStatus]) -> Progress:
        # Nodes that are gone still count with what they did.
        counted = statuses + [
            u.last_status for u in self.usage.values() if u.lost and u.last_status is not None
        ]
        return Progress(
            elapsed_s=time.monotonic() - self.started,
            pages=sum(s.pages for s in counted),
            fetches=sum(s.fetches for s in counted),
            urls_done=sum(s.urls_done for s in counted),
            queued=sum(s.queued for s in statuses),
            active=sum(s.active for s in statuses),
        )

    def _finish(self) -> None:
        now = time.monotonic() - self.started
        for usage in self.usage.values():
            if usage.ended_s is None:
                usage.ended_s = now

    # ---- page budget ---------------------------------------------------------------------------

    def _call(self, node_id: str, method: str, *args: Any) -> Any:
        """A call on a node; a node that is gone is queued for takeover."""
        try:
            return getattr(self.nodes[node_id], method)(*args)
        except NodeLost:
            if node_id not in self._lost:
                self._lost.append(node_id)
            return None

    def _grant(self, node_id: str, pages: int) -> None:
        pages = min(pages, self.unassigned_budget)
        if pages > 0:
            self.unassigned_budget -= pages
            self.granted[node_id] += pages
            self._call(node_id, "grant", pages)

    def _rebalance_budget(self, statuses: list[NodeStatus]) -> None:
        # Budget parked on nodes with nothing to do returns to the pool for nodes with work.
        for status in statuses:
            node_id = status.node_id
            if status.queued == 0 and status.active == 0 and status.budget > 0:
                unused = self._call(node_id, "reclaim") or 0
                self.unassigned_budget += unused
                self.granted[node_id] -= unused
        hungry = [s for s in statuses if s.queued > 0 and s.budget <= 0]
        for status in hungry:
            share = max(1, self.unassigned_budget // len(hungry))
            self._grant(status.node_id, share)

    def _route(self, items: list[tuple[str, int]]) -> None:
        """The seeds, to the nodes that own their servers."""
        batches: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for url, depth in items:
            batches[self.owner[server_of(url)]].append((url, depth))
        for node_id, batch in batches.items():
            self.nodes[node_id].add_urls(batch)

    # ---- nodes that die, nodes that join -------------------------------------------------------

    def _take_over(self, node_id: str) -> None:
        """A node died: its servers, rebuilt from the committed output, go to the shared queue,
        where the others take them by the water level; the budget it held but did not use
        returns. Every live node commits its rows first, so the rebuild sees every URL the
        dead node had been sent (the nodes record a URL before they send it)."""
        if node_id not in self.nodes:
            return
        del self.nodes[node_id]
        usage = self.usage[node_id]
        usage.lost = True
        usage.ended_s = time.monotonic() - self.started
        if self.recover is None:
            raise CrawlFailed(f"crawler node {node_id} died and nothing can take its servers")
        hosts = self.exchange.orphan(node_id)
        for other in list(self.nodes):
            self._call(other, "flush")
        recovered = self.recover(node_id, hosts)
        self.exchange.put_hosts(recovered.states)
        self.exchange.push(recovered.foreign)
        logger.warning(
            "crawler node %s died: %d servers with %d URLs go to the others",
            node_id,
            len(recovered.states),
            sum(state.urls for state in recovered.states),
        )
        if self.max_pages is not None:
            spent = recovered.budget_spent
            self.unassigned_budget += max(0, self.granted.pop(node_id, 0) - spent)
        if not self.nodes:
            if self.surcharge is None:
                raise CrawlFailed("every crawler node died")
            self._add_node()

    def _add_node(self) -> None:
        assert self.surcharge is not None
        node = self.surcharge.launch()
        self.nodes[node.node_id] = node
        self.usage[node.node_id] = NodeUsage(node.node_id, "added", time.monotonic() - self.started)
        self._last_surcharge = time.monotonic()
        logger.warning("surcharge node %s added", node.node_id)
        if self.max_pages is not None:
            self._grant(node.node_id, max(1, self.unassigned_budget // len(self.nodes)))
        node.start()

    def _consider_surcharge(self, progress: Progress, snapshot: ExchangeSnapshot) -> None:
        """Add a node when the URLs known but not done, at the rate of the last
        `check_every_s`, would take the crawl past its deadline."""
        plan = self.surcharge
        if plan is None:
            return
        now = time.monotonic()
        self._samples.append((now, progress.urls_done))
        while now - self._samples[0][0] > plan.check_every_s:
            self._samples.popleft()
        added = sum(1 for u in self.usage.values() if u.kind == "added")
        if added >= plan.max_nodes or now - self._last_surcharge < plan.check_every_s:
            return
        (t0, done0), (t1, done1) = self._samples[0], self._samples[-1]
        if t1 - t0 < plan.check_every_s / 2:
            return  # not enough history for a rate
        remaining = progress.queued + snapshot.inbox_urls + snapshot.pool_urls
        rate = (done1 - done0) / (t1 - t0)
        projected = progress.elapsed_s + (remaining / rate if rate > 0 else float("inf"))
        if remaining and projected > plan.deadline_s:
            self._add_node()

    def report(self) -> dict[str, Any]:
        """Nodes used against nodes planned: per node its kind, lifetime and work."""
        now = time.monotonic() - self.started
        rows: list[dict[str, Any]] = [
            {
                "node_id": u.node_id,
                "kind": u.kind,
                "started_s": round(u.started_s, 3),
                "ended_s": round(u.ended_s if u.ended_s is not None else now, 3),
                "lost": u.lost,
                "pages": u.last_status.pages if u.last_status else 0,
                "fetches": u.last_status.fetches if u.last_status else 0,
            }
            for u in self.usage.values()
        ]
        seconds = {
            kind: sum(r["ended_s"] - r["started_s"] for r in rows if r["kind"] == kind)
            for kind in ("planned", "added")
        }
        planned = sum(1 for r in rows if r["kind"] == "planned")
        return {
            "nodes_planned": planned,
            "nodes_added": sum(1 for r in rows if r["kind"] == "added"),
            "nodes_lost": sum(1 for r in rows if r["lost"]),
            "planned_node_s": round(seconds["planned"], 3),
            "added_node_s": round(seconds["added"], 3),
            # What the plan reserved: its nodes until the deadline.
            "budgeted_node_s": planned * self.surcharge.deadline_s if self.surcharge else None,
            "left_at_deadline": self.left_at_deadline,
            "nodes": rows,
        }
