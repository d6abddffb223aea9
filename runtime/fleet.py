"""The runtime's one interface: a fleet of linked crawler nodes built from the plan, the shared
state they route URLs and servers through (crawler/cluster/exchange.py, crawler/cluster/dedup.py),
and what the driver does with it (seed and watch it through crawler.cluster.coordinator, add a
node, stop it).

Two backends build it (`runtime.backends.start_fleet`): Ray actors (runtime/ray_backend.py,
what the flow runs) and plain objects in this process (runtime/inprocess.py, what tests and
benchmarks run)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from crawler.cluster.coordinator import Coordinator, ExchangeView, NodeHandle, Recover, Surcharge
from crawler.config import CrawlConfig
from crawler.node import NodeSettings, NodeStatus
from crawler.scheduling.recrawl import Revisits
from crawler.scope.rules import ScopeRules


class PlannedNode(Protocol):
    """One node of the plan (tasks.allocate.NodeSpec): its servers and its size."""

    @property
    def node_id(self) -> str: ...
    @property
    def hosts(self) -> list[str]: ...
    @property
    def num_cpus(self) -> float: ...
    @property
    def memory_gb(self) -> float: ...


@dataclass(frozen=True)
class LoneNode:
    """A node planned by hand (tests, benchmarks): its servers, on a share of one machine."""

    node_id: str
    hosts: list[str]
    num_cpus: float = 1.0
    memory_gb: float = 0.0


@dataclass(frozen=True)
class FleetPlan:
    crawl_id: str
    out_dir: str
    config: CrawlConfig
    nodes: Sequence[PlannedNode]
    scope_hosts: list[str]
    allow_private: bool
    # a recrawl's knowledge of the URLs (crawler/scheduling/recrawl.py)
    revisits: Revisits | None = None
    scope: ScopeRules | None = None  # the links followed; None: those of scope_hosts, whole
    # The token of the run's lease on the crawl in the bucket (storage/lease.py), if any.
    lease_token: str | None = None

    @property
    def crawl_dir(self) -> Path:
        return Path(self.out_dir) / self.crawl_id

    @property
    def owner(self) -> dict[str, str]:
        """Server -> node at the start (servers move later)."""
        return {host: node.node_id for node in self.nodes for host in node.hosts}

    @property
    def expected_urls(self) -> int:
        """What the Bloom filter is sized for."""
        config = self.config
        expected_per_host = config.plan.expected_pages_per_host
        return config.dedup.expected_urls or len(self.scope_hosts) * expected_per_host

    @property
    def shard_capacity(self) -> int:
        """URLs each Bloom filter shard is sized for."""
        return -(-self.expected_urls // self.config.dedup.shards)

    def node(self, node_id: str, hosts: list[str]) -> NodeSettings:
        """A node owning `hosts` at the start. Its page budget: none without
        `[limits] max_pages` (unlimited), else what the coordinator grants it."""
        return NodeSettings(
            node_id=node_id,
            crawl_id=self.crawl_id,
            out_dir=self.out_dir,
            config=self.config,
            hosts=hosts,
            scope_hosts=self.scope_hosts,
            allow_private=self.allow_private,
            page_budget=None if self.config.limits.max_pages is None else 0,
            revisits=self.revisits,
            scope=self.scope,
            lease_token=self.lease_token,
        )


def single_node(
    crawl_id: str,
    out_dir: str,
    config: CrawlConfig,
    hosts: list[str],
    allow_private: bool = True,
    revisits: Revisits | None = None,
) -> FleetPlan:
    """The plan of one node owning every server in scope."""
    return FleetPlan(
        crawl_id,
        out_dir,
        config,
        [LoneNode("node-0", list(hosts))],
        list(hosts),
        allow_private,
        revisits,
    )


class Fleet(ABC):
    """The planned nodes, built and linked to the shared state but not fetching yet: the
    coordinator seeds or restores them, then starts them."""

    def __init__(self, plan: FleetPlan) -> None:
        self.plan = plan
        self.nodes: list[NodeHandle] = []  # the planned ones

    @property
    @abstractmethod
    def exchange(self) -> ExchangeView: ...

    @abstractmethod
    def add_node(self) -> NodeHandle:
        """A surcharge node: no servers of its own, it takes some through the water level."""

    def placements(self) -> dict[str, dict[str, str]]:
        """Where each node launched runs, by node id (on Ray: its Ray node id and address);
        empty in this process."""
        return {}

    @abstractmethod
    def stop(self) -> list[NodeStatus]:
        """Flush and stop every node still alive (planned or added), then the shared state;
        returns the last status of each."""

    def coordinator(self, recover: Recover | None = None) -> Coordinator:
        """The driver of this fleet: the plan's page budget, and up to `surcharge_max_nodes`
        nodes added while the crawl is projected past its deadline (`[limits] deadline_s`)."""
        config = self.plan.config
        surcharge = None
        if config.plan.surcharge_max_nodes:
            surcharge = Surcharge(
                deadline_s=config.limits.deadline_s,
                max_nodes=config.plan.surcharge_max_nodes,
                launch=self.add_node,
                check_every_s=config.plan.surcharge_check_s,
            )
        return Coordinator(
            list(self.nodes),
            self.plan.owner,
            config.limits.max_pages,
            self.exchange,
            recover=recover,
            surcharge=surcharge,
        )
