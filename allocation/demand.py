"""Task demands of a real crawl, estimated by the plan step, and the allocation decision.

A task is a group of hosts. Before the crawl, the plan step knows, per host, how many pages it
expects, plus the crawl's average page size, the politeness rate (pages per second per host) and
the time budget. The estimate, per host ``h`` with ``p_h`` expected pages:

- rate: ``r_h = min(pages_per_s_per_host, p_h / budget_s)`` pages/s. A host that can finish within
  the budget is spread over all of it (its average rate is what the node must sustain); a host that
  cannot is fetched at the politeness rate for the whole budget;
- cpu (cores): ``r_h * (FETCH_CPU_S + PARSE_CPU_S_PER_KB * avg_page_kb)``: CPU-seconds per page
  for the HTTP exchange plus parsing and link extraction, which grows with page size;
- memory (GB): ``p_h * FRONTIER_BYTES_PER_URL`` for the host's URLs in the frontier and
  de-duplication state, plus ``HOST_STATE_BYTES`` (robots.txt, queues, controller state), plus
  ``BUFFERED_PAGES_PER_HOST * avg_page_kb`` for the page being downloaded and the one being parsed
  (one connection per host, docs/scheduling.md);
- bandwidth (Mbps): ``r_h * avg_page_kb * 8 / 1000``.

A task's demand is the sum over its hosts. The per-page constants are estimates for a Python
fetch loop with lxml parsing; they only need to be right in proportion for the plan to be useful.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from allocation.first_fit import first_fit
from allocation.milp import MilpResult, SolverUnavailable, solve_milp
from allocation.model import Instance, NodeType, Plan, Resources, Task

FETCH_CPU_S = 0.005
PARSE_CPU_S_PER_KB = 0.0003
FRONTIER_BYTES_PER_URL = 300
HOST_STATE_BYTES = 256 * 1024
BUFFERED_PAGES_PER_HOST = 2
# Hosts are grouped so that a crawl of any size gives about this many tasks: enough to balance
# nodes, few enough for the MILP to solve within the plan step's time limit.
MAX_TASKS = 200
# Assumed network link of the local machine when the plan runs on one machine.
LOCAL_BANDWIDTH_MBPS = 1000.0


def host_groups(host_pages: dict[str, int]) -> dict[str, list[str]]:
    """Task id -> hosts. Hosts with at least 1/MAX_TASKS of all pages get a task each; smaller
    hosts, in decreasing page order, are grouped until a group reaches that share."""
    if any(pages < 0 for pages in host_pages.values()):
        raise ValueError("expected pages per host must be non-negative")
    target = sum(host_pages.values()) / MAX_TASKS
    groups: list[list[str]] = []
    current: list[str] = []
    current_pages = 0
    for host in sorted(host_pages, key=lambda h: (-host_pages[h], h)):
        current.append(host)
        current_pages += host_pages[host]
        if current_pages >= target:
            groups.append(current)
            current, current_pages = [], 0
    if current:
        groups.append(current)
    return {f"g{k:03d}": hosts for k, hosts in enumerate(groups, start=1)}


def host_demand(
    pages: int, avg_page_kb: float, pages_per_s_per_host: float, budget_s: float
) -> Resources:
    """The estimate of the module docstring for one host."""
    rate = min(pages_per_s_per_host, pages / budget_s)
    memory_bytes = (
        pages * FRONTIER_BYTES_PER_URL
        + HOST_STATE_BYTES
        + BUFFERED_PAGES_PER_HOST * avg_page_kb * 1000
    )
    return Resources(
        cpu=rate * (FETCH_CPU_S + PARSE_CPU_S_PER_KB * avg_page_kb),
        memory_gb=memory_bytes / 1e9,
        bandwidth_mbps=rate * avg_page_kb * 8 / 1000,
    )


def crawl_tasks(
    host_pages: dict[str, int], avg_page_kb: float, pages_per_s_per_host: float, budget_s: float
) -> list[Task]:
    """One task per host group of ``host_groups``, with the demand estimate of the module
    docstring summed over the group's hosts."""
    if avg_page_kb < 0 or pages_per_s_per_host <= 0 or budget_s <= 0:
        raise ValueError("avg_page_kb must be >= 0, pages_per_s_per_host and budget_s > 0")
    tasks = []
    for task_id, hosts in host_groups(host_pages).items():
        demand = Resources(0.0, 0.0, 0.0)
        for host in hosts:
            demand = demand + host_demand(
                host_pages[host], avg_page_kb, pages_per_s_per_host, budget_s
            )
        tasks.append(Task(task_id, demand))
    return tasks


def local_node_types(cpus: int, memory_gb: float) -> list[NodeType]:
    """This machine as one node type for a local run: a node is a crawler worker (one Ray actor)
    pinned to one core, with an equal share of memory and of LOCAL_BANDWIDTH_MBPS.

    ``cpus`` workers can be reserved; a surcharge node is a worker beyond that, overcommitting
    the machine, so it is priced well above a reserved one and used only if the demand needs it.
    """
    if cpus < 1 or memory_gb <= 0:
        raise ValueError("cpus must be >= 1 and memory_gb > 0")
    return [
        NodeType(
            name="local-worker",
            capacity=Resources(1.0, memory_gb / cpus, LOCAL_BANDWIDTH_MBPS / cpus),
            reserved=1.0,
            usage=0.5,
            surcharge=4.0,
            max_reserved=cpus,
        )
    ]


@dataclass(frozen=True)
class CrawlAllocation:
    """What the plan step decided: the chosen plan and the hosts each of its nodes crawls."""

    instance: Instance
    first_fit: Plan
    milp: MilpResult | None  # None when CBC is not available
    chosen: Plan
    solver: str  # "milp" or "first_fit"
    hosts_by_node: dict[str, list[str]]

    @property
    def first_fit_cost(self) -> float:
        return self.first_fit.total_cost

    @property
    def milp_cost(self) -> float | None:
        return None if self.milp is None else self.milp.plan.total_cost


def plan_crawl(
    host_pages: dict[str, int],
    node_types: Sequence[NodeType],
    avg_page_kb: float,
    pages_per_s_per_host: float,
    budget_s: float,
    time_limit_s: float = 2.0,
) -> CrawlAllocation:
    """Estimate task demands, run first fit and the MILP (``time_limit_s``), and choose.

    The MILP's plan is chosen when CBC is available and the plan is no dearer than first fit's
    (it is warm-started from first fit, so it never is); otherwise first fit's. Raises
    InstanceError when a host group fits no node type (or NoFeasiblePlan when the node types'
    ``max_surcharge`` leaves no room).
    """
    groups = host_groups(host_pages)
    instance = Instance(
        tuple(node_types),
        tuple(crawl_tasks(host_pages, avg_page_kb, pages_per_s_per_host, budget_s)),
    )
    heuristic = first_fit(instance)
    try:
        exact: MilpResult | None = solve_milp(instance, time_limit_s)
    except SolverUnavailable:
        exact = None
    if exact is not None and exact.plan.total_cost <= heuristic.total_cost:
        chosen, solver = exact.plan, "milp"
    else:
        chosen, solver = heuristic, "first_fit"
    hosts_by_node = {node.id: [h for t in node.tasks for h in groups[t]] for node in chosen.nodes}
    return CrawlAllocation(instance, heuristic, exact, chosen, solver, hosts_by_node)
