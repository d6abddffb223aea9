"""The crawl coordinator: routes URLs between nodes, shares out the page budget, and decides
when the crawl is over.

Plain Python over a small node interface, so it runs the same over Ray actor proxies (the
flow) and over in-process nodes (tests).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from crawler.urls import host_key


class NodeHandle(Protocol):
    node_id: str

    def add_urls(self, items: list[tuple[str, int]]) -> int: ...
    def take_outbox(self) -> list[tuple[str, int]]: ...
    def status(self) -> dict[str, Any]: ...
    def grant(self, pages: int) -> None: ...
    def reclaim(self) -> int: ...
    def restore(self, pending: list[tuple[str, int, int]], done: list[str]) -> None: ...


@dataclass
class Progress:
    elapsed_s: float
    pages: int
    fetches: int
    urls_done: int
    queued: int
    active: int


class Coordinator:
    def __init__(
        self,
        nodes: list[NodeHandle],
        owner: dict[str, str],
        max_pages: int | None,
    ) -> None:
        self.nodes = {node.node_id: node for node in nodes}
        self.owner = owner  # server -> node_id
        self.max_pages = max_pages
        self.unassigned_budget = max_pages or 0
        self.routed = 0

    def seed(self, urls: list[str]) -> None:
        self._route([(url, 0) for url in urls])
        self._grant_initial_budget()

    def resume(
        self, pending: dict[str, tuple[int, int]], done: set[str], budget_spent: int
    ) -> None:
        """Start from a checkpoint instead of the seeds: each node gets the done and pending
        URLs of its servers; the page budget left is what the first run did not use."""
        pending_by_node: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
        done_by_node: dict[str, list[str]] = defaultdict(list)
        for url, (depth, attempt) in pending.items():
            pending_by_node[self.owner[host_key(url)]].append((url, depth, attempt))
        for url in done:
            node_id = self.owner.get(host_key(url))
            if node_id is not None:
                done_by_node[node_id].append(url)
        for node_id, node in self.nodes.items():
            node.restore(pending_by_node[node_id], done_by_node[node_id])
        if self.max_pages is not None:
            self.unassigned_budget = max(0, self.max_pages - budget_spent)
        self._grant_initial_budget()

    def _grant_initial_budget(self) -> None:
        if self.max_pages is not None:
            share = max(1, self.unassigned_budget // len(self.nodes))
            for node in self.nodes.values():
                self._grant(node, share)

    def run(
        self,
        poll_s: float = 0.05,
        on_progress: Callable[[Progress], None] | None = None,
        progress_every_s: float = 2.0,
    ) -> Progress:
        started = time.monotonic()
        last_report = started
        previous_activity: int | None = None
        while True:
            statuses = [node.status() for node in self.nodes.values()]
            moved = self._exchange()
            if self.max_pages is not None:
                self._rebalance_budget(statuses)
            progress = self._progress(statuses, started)
            if on_progress is not None and time.monotonic() - last_report >= progress_every_s:
                on_progress(progress)
                last_report = time.monotonic()
            activity = sum(s["activity"] for s in statuses)
            if not moved and self._quiet(statuses) and activity == previous_activity:
                return progress
            previous_activity = activity
            time.sleep(poll_s)

    def _grant(self, node: NodeHandle, pages: int) -> None:
        pages = min(pages, self.unassigned_budget)
        if pages > 0:
            self.unassigned_budget -= pages
            node.grant(pages)

    def _rebalance_budget(self, statuses: list[dict[str, Any]]) -> None:
        # Budget parked on nodes with nothing to do returns to the pool for nodes with work.
        for status in statuses:
            if status["queued"] == 0 and status["active"] == 0 and status["budget"] > 0:
                self.unassigned_budget += self.nodes[status["node_id"]].reclaim()
        hungry = [s for s in statuses if s["queued"] > 0 and s["budget"] <= 0]
        for status in hungry:
            share = max(1, self.unassigned_budget // len(hungry))
            self._grant(self.nodes[status["node_id"]], share)

    def _exchange(self) -> int:
        moved = 0
        for node in self.nodes.values():
            outbox = node.take_outbox()
            if outbox:
                moved += len(outbox)
                self._route(outbox)
        return moved

    def _route(self, items: list[tuple[str, int]]) -> None:
        batches: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for url, depth in items:
            batches[self.owner[host_key(url)]].append((url, depth))
        for node_id, batch in batches.items():
            self.routed += self.nodes[node_id].add_urls(batch)

    def _quiet(self, statuses: list[dict[str, Any]]) -> bool:
        budget_left = self.max_pages is None or self.unassigned_budget > 0
        for status in statuses:
            if status["active"] or status["outbox"]:
                return False
            can_progress = status["budget"] > 0 or budget_left
            if status["queued"] and can_progress:
                return False
        return True

    def _progress(self, statuses: list[dict[str, Any]], started: float) -> Progress:
        return Progress(
            elapsed_s=time.monotonic() - started,
            pages=sum(s["pages"] for s in statuses),
            fetches=sum(s["fetches"] for s in statuses),
            urls_done=sum(s["urls_done"] for s in statuses),
            queued=sum(s["queued"] for s in statuses),
            active=sum(s["active"] for s in statuses),
        )
