"""Launch step: start Ray (local, or the cluster at RAY_ADDRESS) and one actor per node."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from crawler.config import CrawlConfig
from crawler.node import CrawlerNode
from tasks.allocate import NodeSpec


class RayNode:
    """A crawler node actor seen through the coordinator's node interface."""

    def __init__(self, node_id: str, actor: Any) -> None:
        self.node_id = node_id
        self.actor = actor

    def add_urls(self, items: list[tuple[str, int]]) -> int:
        return ray.get(self.actor.add_urls.remote(items))

    def take_outbox(self) -> list[tuple[str, int]]:
        return ray.get(self.actor.take_outbox.remote())

    def status(self) -> dict[str, Any]:
        return ray.get(self.actor.status.remote())

    def grant(self, pages: int) -> None:
        ray.get(self.actor.grant.remote(pages))

    def reclaim(self) -> int:
        return ray.get(self.actor.reclaim.remote())

    def restore(self, pending: list[tuple[str, int, int]], done: list[str]) -> None:
        ray.get(self.actor.restore.remote(pending, done))


@dataclass
class Fleet:
    nodes: list[RayNode]
    owner: dict[str, str]  # server -> node_id


def ensure_ray() -> None:
    """Join the cluster at RAY_ADDRESS, or start a local Ray, unless already connected."""
    if not ray.is_initialized():
        ray.init(
            address=os.environ.get("RAY_ADDRESS") or None,
            include_dashboard=False,
            log_to_driver=False,
        )


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
) -> Fleet:
    ensure_ray()
    resources = ray.cluster_resources()
    # Each actor gets its node type's size, scaled down when the plan holds more nodes than
    # the cluster has room for (surcharge nodes on one machine): Ray would never start them.
    cpu_scale = min(1.0, resources.get("CPU", 1.0) / sum(spec.num_cpus for spec in specs))
    memory_scale = min(
        1.0, resources.get("memory", 1e9) / sum(spec.memory_gb * 1e9 for spec in specs)
    )
    node_actor = ray.remote(CrawlerNode)
    nodes: list[RayNode] = []
    owner: dict[str, str] = {}
    for spec in specs:
        node_id = spec.node_id
        actor = node_actor.options(
            num_cpus=spec.num_cpus * cpu_scale,
            memory=int(spec.memory_gb * 1e9 * memory_scale),
            max_concurrency=4,
            name=f"{crawl_id}-{node_id}",
        ).remote(
            node_id=node_id,
            crawl_id=crawl_id,
            out_dir=out_dir,
            config=config,
            hosts=spec.hosts,
            scope_hosts=scope_hosts,
            allow_private=allow_private,
            max_depth=max_depth,
            page_budget=None if max_pages is None else 0,
        )
        nodes.append(RayNode(node_id, actor))
        owner.update(dict.fromkeys(spec.hosts, node_id))
    ray.get([node.actor.start.remote() for node in nodes])
    return Fleet(nodes=nodes, owner=owner)


@task(name="close nodes", cache_policy=NO_CACHE)
def close_nodes(fleet: Fleet) -> list[dict[str, Any]]:
    """Flush every node's files and stop its actor; runs even when the crawl failed."""
    statuses = ray.get([node.actor.close.remote() for node in fleet.nodes])
    for node in fleet.nodes:
        ray.kill(node.actor)
    return statuses
