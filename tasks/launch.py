"""Launch step: start Ray (local, or the cluster at RAY_ADDRESS), the shared state (the task
exchange and the Bloom filter shards) and one actor per node; and the thin adapter through
which the coordinator reaches the node actors (what runs inside the actors: tasks/actors.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.environment import prepare_environment

# Before Ray is imported, by every way in: the CLI, a Prefect worker running the flow, tests.
prepare_environment()

import ray  # noqa: E402
from prefect import task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.tasks import exponential_backoff  # noqa: E402
from ray.exceptions import RayActorError  # noqa: E402

from crawler.config import CrawlConfig  # noqa: E402
from crawler.coordinator import NodeLost  # noqa: E402
from crawler.dedup import BloomShard  # noqa: E402
from crawler.exchange import Exchange  # noqa: E402
from crawler.node import NodeStatus  # noqa: E402
from crawler.recrawl import Revisits  # noqa: E402
from tasks.actors import (  # noqa: E402
    LinkedCrawlerNode,
    RayExchange,
    RayFilterShard,
    ensure_ray,
)
from tasks.allocate import NodeSpec  # noqa: E402


class RayNode:
    """A crawler node actor seen through the coordinator's node interface."""

    def __init__(self, node_id: str, actor: Any) -> None:
        self.node_id = node_id
        self.actor = actor

    def _get(self, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except RayActorError:
            raise NodeLost(self.node_id) from None

    def add_urls(self, items: list[tuple[str, int]]) -> int:
        return self._get(self.actor.add_urls.remote(items))

    def take_outbox(self) -> list[tuple[str, int]]:
        return self._get(self.actor.take_outbox.remote())

    def status(self) -> NodeStatus:
        return self._get(self.actor.status.remote())

    def grant(self, pages: int) -> None:
        self._get(self.actor.grant.remote(pages))

    def reclaim(self) -> int:
        return self._get(self.actor.reclaim.remote())

    def restore(
        self, pending: list[tuple[str, int, int]], done: list[str], admitted: list[str]
    ) -> None:
        self._get(self.actor.restore.remote(pending, done, admitted))

    def flush(self) -> None:
        self._get(self.actor.flush.remote())

    def start(self) -> None:
        self._get(self.actor.start.remote())

    def expire(self) -> int:
        return self._get(self.actor.expire.remote())


@dataclass
class NodeLauncher:
    """Starts node actors, the planned ones and any added while the crawl runs."""

    crawl_id: str
    out_dir: str
    config: CrawlConfig
    scope_hosts: list[str]
    allow_private: bool
    max_depth: int | None
    max_pages: int | None
    exchange: Any  # actor handles of the shared state
    shards: list[Any]
    revisits: Revisits | None = None  # a recrawl's knowledge of the URLs (crawler/recrawl.py)
    launched: list[RayNode] = field(default_factory=list)

    def launch(self, node_id: str, hosts: list[str], num_cpus: float, memory: int) -> RayNode:
        actor = (
            ray.remote(LinkedCrawlerNode)
            .options(
                num_cpus=num_cpus,
                memory=memory,
                max_concurrency=4,
                name=f"{self.crawl_id}-{node_id}",
            )
            .remote(
                exchange=self.exchange,
                node_id=node_id,
                crawl_id=self.crawl_id,
                out_dir=self.out_dir,
                config=self.config,
                hosts=hosts,
                scope_hosts=self.scope_hosts,
                allow_private=self.allow_private,
                max_depth=self.max_depth,
                page_budget=None if self.max_pages is None else 0,
                revisits=self.revisits,
            )
        )
        node = RayNode(node_id, actor)
        self.launched.append(node)
        return node

    def add_node(self) -> RayNode:
        """A surcharge node: no servers of its own, it takes some through the water level.
        It asks for what is left of the cluster's CPU (on one machine, it shares the cores)."""
        free = ray.available_resources().get("CPU", 0.0)
        return self.launch(f"node-{len(self.launched)}", [], max(0.01, min(1.0, free)), 0)


@dataclass
class Fleet:
    nodes: list[RayNode]
    owner: dict[str, str]  # server -> node_id at the start
    exchange: RayExchange
    launcher: NodeLauncher
    crawl_dir: Path


def start_fleet(
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
    """The shared state and the planned nodes, started (also used by bench/distributed)."""
    ensure_ray()
    owner = {host: spec.node_id for spec in specs for host in spec.hosts}
    # The shared state is small and mostly waits: no CPU reserved for it.
    expected = config.dedup_expected_urls or len(scope_hosts) * config.expected_pages_per_host
    shards = [
        ray.remote(BloomShard)
        .options(num_cpus=0)
        .remote(-(-expected // config.dedup_shards), config.dedup_fp_rate)
        for _ in range(config.dedup_shards)
    ]
    exchange = (
        ray.remote(Exchange)
        .options(num_cpus=0)
        .remote(
            owner,
            shards=[RayFilterShard(shard) for shard in shards],
            balance=config.balance,
            tolerance=config.balance_tolerance,
        )
    )
    launcher = NodeLauncher(
        crawl_id,
        out_dir,
        config,
        scope_hosts,
        allow_private,
        max_depth,
        max_pages,
        exchange=exchange,
        shards=shards,
        revisits=revisits,
    )
    resources = ray.cluster_resources()
    # Each actor gets its node type's size, scaled down when the plan holds more nodes than
    # the cluster has room for (surcharge nodes on one machine): Ray would never start them.
    cpu_scale = min(1.0, resources.get("CPU", 1.0) / sum(spec.num_cpus for spec in specs))
    memory_scale = min(
        1.0, resources.get("memory", 1e9) / sum(spec.memory_gb * 1e9 for spec in specs)
    )
    nodes = [
        launcher.launch(
            spec.node_id,
            spec.hosts,
            spec.num_cpus * cpu_scale,
            int(spec.memory_gb * 1e9 * memory_scale),
        )
        for spec in specs
    ]
    # Wait until every actor is up, so that the crawl's clock starts with the nodes ready; the
    # coordinator starts them once it has seeded or restored them all.
    ray.get([node.actor.status.remote() for node in nodes])
    return Fleet(
        nodes=nodes,
        owner=owner,
        exchange=RayExchange(exchange),
        launcher=launcher,
        crawl_dir=Path(out_dir) / crawl_id,
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
    revisits: Revisits | None = None,
) -> Fleet:
    return start_fleet(
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


def stop_fleet(fleet: Fleet) -> list[NodeStatus]:
    """Flush and stop every node still alive (planned or added), then the shared state."""
    statuses = []
    for node in fleet.launcher.launched:
        try:
            statuses.append(ray.get(node.actor.close.remote()))
        except RayActorError:
            continue  # died during the crawl: its servers were taken over
        ray.kill(node.actor)
    for actor in [fleet.launcher.exchange, *fleet.launcher.shards]:
        ray.kill(actor)
    return statuses


@task(name="close nodes", cache_policy=NO_CACHE)
def close_nodes(fleet: Fleet) -> list[NodeStatus]:
    """Flush every node's files and stop its actor; runs even when the crawl failed."""
    return stop_fleet(fleet)
