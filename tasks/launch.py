"""Launch step: the plan's fleet of crawler nodes on Ray (local, or the cluster at
RAY_ADDRESS), with its shared state; and the step that stops it. Ray itself stays in the
runtime layer (runtime/ray_backend.py)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from crawler.config import CrawlConfig
from crawler.node import NodeStatus
from crawler.recrawl import Revisits
from runtime.backends import start_fleet
from runtime.fleet import Fleet, FleetPlan
from tasks.allocate import NodeSpec


# Starting Ray or an actor can fail for passing reasons (a busy cluster, a slow node start).
@task(
    name="launch nodes",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=5),
)
def launch_nodes(
    crawl_id: str,
    out_dir: str,
    config: CrawlConfig,
    specs: list[NodeSpec],
    scope_hosts: list[str],
    allow_private: bool,
    max_depth: int | None,
    max_pages: int | None,
    revisits: Revisits | None = None,
) -> Fleet:
    plan = FleetPlan(
        crawl_id,
        out_dir,
        config,
        specs,
        scope_hosts,
        allow_private,
        max_depth,
        max_pages,
        revisits,
    )
    return start_fleet(plan, "ray")


@task(name="close nodes", cache_policy=NO_CACHE)
def close_nodes(fleet: Fleet) -> list[NodeStatus]:
    """Flush every node's files and stop its actor; runs even when the crawl failed."""
    return fleet.stop()
