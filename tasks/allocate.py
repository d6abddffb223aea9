"""Allocate step: how many crawler nodes, of what size, owning which servers.

The demand of each server is estimated from the newest earlier crawl under `out_dir` (pages per
server, average page size) or, for servers never crawled, from the config's expectations; see
`allocation.demand` for the estimate. First fit and the MILP both plan; the cheaper plan is
used. With `--nodes N` the user fixes the node count instead: the plan is still made and
reported, and the servers are spread over the N nodes, largest first, to balance them.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_table_artifact

from allocation.demand import CrawlAllocation, local_node_types, plan_crawl
from allocation.report import milp_sentence
from crawler.config import CrawlConfig
from crawler.scope.seeds import CrawlScope
from crawler.scope.urls import server_of
from storage.queries import previous_crawl_profile
from storage.schema import ALLOCATION
from storage.writer import ParquetDatasetWriter


@dataclass(frozen=True)
class NodeSpec:
    node_id: str
    node_type: str
    kind: str  # "reserved" or "surcharge"
    hosts: list[str]
    num_cpus: float
    memory_gb: float


def machine_memory_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def expected_host_pages(
    scope: CrawlScope, out_dir: str, crawl_id: str, config: CrawlConfig
) -> tuple[dict[str, int], float]:
    """Pages per server: what the newest earlier crawl fetched there, else the config's
    expectation; but a crawl that follows no link (`max_depth = 0`, no sitemaps) fetches a new
    server's seeds and nothing else, so a seed file of 100,000 URLs over 5,000 servers is planned
    as 100,000 pages, not 5,000 servers' worth of expected pages."""
    previous = previous_crawl_profile(Path(out_dir), crawl_id)
    known, page_kb = previous if previous else ({}, config.plan.expected_page_kb)
    default = config.plan.expected_pages_per_host
    max_pages = config.limits.max_pages
    if max_pages is not None:
        default = max(1, min(default, max_pages // len(scope.hosts)))
    if config.limits.max_depth == 0 and not config.fetch.sitemaps:
        seeds_per_host = Counter(server_of(url) for url in scope.seeds)
        return {
            host: known.get(host, max(1, seeds_per_host[host])) for host in scope.hosts
        }, page_kb
    return {host: known.get(host, default) for host in scope.hosts}, page_kb


def spread(hosts: dict[str, int], nodes: int) -> list[list[str]]:
    """Longest-processing-time first: each server, largest first, to the least loaded node."""
    loads = [0] * nodes
    assignment: list[list[str]] = [[] for _ in range(nodes)]
    for host in sorted(hosts, key=lambda h: (-hosts[h], h)):
        target = loads.index(min(loads))
        assignment[target].append(host)
        loads[target] += hosts[host]
    return [hosts_of_node for hosts_of_node in assignment if hosts_of_node]


def plan_rows(
    crawl_id: str, decision: CrawlAllocation, used: list[NodeSpec]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    plans = {"first_fit": decision.first_fit}
    if decision.milp is not None:
        plans["milp"] = decision.milp.plan
    for solver, plan in plans.items():
        rows.append(
            {
                "crawl_id": crawl_id,
                "solver": solver,
                "chosen": solver == decision.solver,
                "total_cost": plan.total_cost,
                "reserved_cost": plan.reserved_cost,
                "usage_cost": plan.usage_cost,
                "surcharge_cost": plan.surcharge_cost,
                "nodes": len(plan.nodes),
                "solve_seconds": plan.solve_seconds,
                "nodes_used": len(used),
            }
        )
    return rows


def artifact_rows(rows: list[dict[str, Any]], decision: CrawlAllocation) -> list[dict[str, Any]]:
    """The plan rows plus, on the MILP's row, whether it hit its time limit and the gap it
    proved (the Parquet dataset keeps its stable columns)."""
    extended = []
    for row in rows:
        milp = decision.milp if row["solver"] == "milp" else None
        extended.append(
            row
            | {
                "time_limit_hit": None if milp is None else milp.time_limit_hit,
                "proven_gap": None if milp is None else milp.gap,
            }
        )
    return extended


def allocation_description(decision: CrawlAllocation) -> str:
    if decision.milp is None:
        return "allocation plans and cost; CBC unavailable: first fit's plan is used"
    return f"allocation plans and cost. {milp_sentence(decision.milp)}"


@task(name="allocate")
def allocate_nodes(
    scope: CrawlScope,
    nodes: int | None,
    out_dir: str,
    crawl_id: str,
    config: CrawlConfig,
    history_dir: str | None = None,
) -> list[NodeSpec]:
    """`history_dir`: where the earlier crawls are read (default `out_dir`; a local mirror for
    object storage output, `out_dir` then being the staging directory)."""
    logger = get_run_logger()
    host_pages, page_kb = expected_host_pages(scope, history_dir or out_dir, crawl_id, config)
    cpus = os.cpu_count() or 1
    node_types = local_node_types(cpus=nodes or cpus, memory_gb=machine_memory_gb())
    decision = plan_crawl(
        host_pages,
        node_types,
        avg_page_kb=page_kb,
        pages_per_s_per_host=config.plan.expected_pages_per_s_per_host,
        budget_s=config.limits.deadline_s,
    )
    by_type = {node_type.name: node_type for node_type in node_types}
    if nodes is None:
        placed = [
            (node.id, node.type, node.kind, decision.hosts_by_node[node.id])
            for node in decision.chosen.nodes
            if decision.hosts_by_node[node.id]
        ]
    else:
        placed = [
            (f"fixed-{index}", node_types[0].name, "reserved", hosts)
            for index, hosts in enumerate(spread(host_pages, nodes))
        ]
    specs = [
        NodeSpec(
            node_id=f"node-{index}",
            node_type=type_name,
            kind=kind,
            hosts=hosts,
            num_cpus=by_type[type_name].capacity.cpu,
            memory_gb=by_type[type_name].capacity.memory_gb,
        )
        for index, (_, type_name, kind, hosts) in enumerate(placed)
    ]
    rows = plan_rows(crawl_id, decision, specs)
    writer = ParquetDatasetWriter(
        Path(out_dir) / crawl_id / "allocation", ALLOCATION, "plan", batch_rows=100, interval_s=60
    )
    for row in rows:
        writer.write(row)
    writer.flush()
    create_table_artifact(
        artifact_rows(rows, decision),
        key="crawl-allocation",
        description=allocation_description(decision),
    )
    logger.info(
        "allocation: %s plan costs %.2f (first fit %.2f); %d nodes for %d servers%s. %s",
        decision.solver,
        decision.chosen.total_cost,
        decision.first_fit_cost,
        len(specs),
        len(scope.hosts),
        "" if nodes is None else f" (--nodes {nodes} fixes the count)",
        allocation_description(decision),
    )
    return specs
