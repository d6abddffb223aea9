"""What one crawler node is built from (runtime.fleet.FleetPlan.node makes it): plain data
that a Ray actor receives pickled."""

from __future__ import annotations

from dataclasses import dataclass

from crawler.config import CrawlConfig
from crawler.scheduling.recrawl import Revisits
from crawler.scope.rules import ScopeRules


@dataclass(frozen=True)
class NodeSettings:
    node_id: str
    crawl_id: str
    out_dir: str
    config: CrawlConfig
    hosts: list[str]  # the servers it owns at the start
    scope_hosts: list[str]  # every server in scope (links elsewhere are dropped)
    allow_private: bool  # fetch private and loopback addresses (tests, websim)
    # None for no [limits] max_pages, else what the driver grants (it starts at 0).
    page_budget: int | None
    # In a recrawl, what the earlier nights know of each URL (crawler/scheduling/recrawl.py): the
    # validators of its conditional GET, and its revisit priority, which ranks it in the
    # scheduler where page quality would.
    revisits: Revisits | None
    # The links it follows ([scope], the seeds, --allow); None: those of `scope_hosts`, whole.
    scope: ScopeRules | None = None
    # Its run's lease token (storage/lease.py): checked before each batch commits in a bucket.
    lease_token: str | None = None
