"""Launch step: the plan's fleet of crawler nodes on Ray (local, or the cluster at
RAY_ADDRESS), with its shared state; and the step that stops it. Ray itself stays in the
runtime layer (runtime/ray_backend.py)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from crawler.cluster.coordinator import CrawlFailed
from crawler.node import NodeStatus
from runtime.backends import start_fleet
from runtime.fleet import Fleet, FleetPlan


# Starting Ray or an actor can fail for passing reasons (a busy cluster, a slow node start).
@task(
    name="launch nodes",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=5),
)
def launch_nodes(plan: FleetPlan) -> Fleet:
    fleet = start_fleet(plan, "ray")
    logger = get_run_logger()
    for node_id, placement in fleet.placements().items():
        logger.info(
            "crawler node %s runs on Ray node %s (%s)",
            node_id,
            placement["ray_node_id"],
            placement["ray_node_ip"],
        )
    return fleet


@task(name="close nodes", cache_policy=NO_CACHE)
def close_nodes(fleet: Fleet) -> list[NodeStatus]:
    """Flush every node's files and stop its actor; runs even when the crawl failed."""
    return fleet.stop()


def require_committed(statuses: list[NodeStatus]) -> None:
    """Fail the crawl if a node could not commit its last rows (its disk refused them)."""
    for status in statuses:
        if status.failure is not None:
            raise CrawlFailed(f"crawler node {status.node_id} failed: {status.failure}")
