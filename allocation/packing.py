"""Packings (tasks grouped into bins per node type) and the heuristics the MILP starts from.

A packing leaves the node kinds implicit: each type's first ``max_reserved`` bins are reserved
and the rest surcharge, which is the cheapest way to run the same bins (see ``allocation.milp``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from allocation.first_fit import task_sizes
from allocation.model import ZERO, Instance, Kind, Plan, Resources, make_nodes

# type name -> bins -> task ids
Packing = dict[str, list[list[str]]]

# Depth-first search nodes spent on filling one bin in min_slack_bins.
SEARCH_NODES = 300


def packing_of(plan: Plan) -> Packing:
    """The plan's busy nodes as a packing (idle reserved nodes dropped)."""
    packing: Packing = defaultdict(list)
    for node in plan.nodes:
        if node.tasks:
            packing[node.type].append(list(node.tasks))
    return dict(packing)


def packing_cost(instance: Instance, packing: Packing) -> float:
    return sum(
        nt.busy_reserved_cost * min(n, nt.max_reserved) + nt.surcharge * max(0, n - nt.max_reserved)
        for nt in instance.node_types
        for n in [len(packing.get(nt.name, []))]
    )


def within_limits(instance: Instance, packing: Packing) -> bool:
    """True if no type has more bins than ``max_reserved + max_surcharge``."""
    return all(
        nt.max_nodes is None or len(packing.get(nt.name, [])) <= nt.max_nodes
        for nt in instance.node_types
    )


def packing_plan(instance: Instance, packing: Packing, solve_seconds: float) -> Plan:
    groups: list[tuple[str, Kind, list[str]]] = []
    for nt in instance.node_types:
        for j, tasks in enumerate(packing.get(nt.name, [])):
            groups.append((nt.name, "reserved" if j < nt.max_reserved else "surcharge", tasks))
    return Plan(instance, make_nodes(groups), solve_seconds)


def min_slack_bins(
    instance: Instance, type_name: str, task_ids: Sequence[str], scarcity_power: float
) -> list[list[str]]:
    """Pack tasks on nodes of one type with minimum bin slack (Gupta and Ho), for vectors.

    Bins are filled one at a time. Each takes the largest remaining task plus the subset of the
    other remaining tasks that maximizes the weighted fill ``sum_d w_d * load_d / capacity_d``,
    searched depth first in decreasing size order for at most SEARCH_NODES nodes. The weight
    ``w_d = (remaining demand_d / capacity_d) ** scarcity_power`` makes a bin spend the
    dimensions that will run out: first-fit-style packing fills whatever dimension the tasks
    happen to stress, and leaves the last bins unable to take what remains.
    """
    capacity = instance.node_type(type_name).capacity.as_tuple()
    dims = [d for d, c in enumerate(capacity) if c > 0]
    demand = {t: instance.task(t).demand.as_tuple() for t in task_ids}
    sizes = task_sizes(instance)
    remaining = sorted(task_ids, key=lambda t: sizes[t], reverse=True)
    bins: list[list[str]] = []
    while remaining:
        left = [sum(demand[t][d] for t in remaining) for d in range(len(capacity))]
        weight = {d: (left[d] / capacity[d]) ** scarcity_power for d in dims}
        best = _best_subset(remaining, demand, capacity, weight)
        bins.append(best)
        taken = set(best)
        remaining = [t for t in remaining if t not in taken]
    return bins


def _best_subset(
    ordered: list[str],
    demand: Mapping[str, tuple[float, ...]],
    capacity: tuple[float, ...],
    weight: dict[int, float],
) -> list[str]:
    """``ordered[0]`` plus the best-filling subset of the rest found within SEARCH_NODES."""

    def fill(load: tuple[float, ...]) -> float:
        return sum(w * load[d] / capacity[d] for d, w in weight.items())

    rows = [demand[t] for t in ordered]
    # As Resources.fits_in; unpacked, since the scans below are most of the packing's time.
    limit_cpu, limit_memory, limit_bandwidth = (c * (1 + 1e-9) + 1e-12 for c in capacity)
    best = [0]
    best_fill = fill(rows[0])
    chosen = [0]
    nodes = 0

    def fitting(load: tuple[float, ...], candidates: list[int]) -> list[int]:
        """The candidates that fit on top of ``load``: only they can extend the subset, and
        demands are non-negative, so loads only grow and each level of the search need only scan
        what fit its parent."""
        cpu, memory, bandwidth = load
        return [
            k
            for k in candidates
            if cpu + rows[k][0] <= limit_cpu
            and memory + rows[k][1] <= limit_memory
            and bandwidth + rows[k][2] <= limit_bandwidth
        ]

    def search(load: tuple[float, ...], candidates: list[int]) -> None:
        nonlocal best, best_fill, nodes
        nodes += 1
        value = fill(load)
        if value > best_fill:
            best, best_fill = list(chosen), value
        for position, k in enumerate(candidates):
            if nodes >= SEARCH_NODES:
                return
            new = tuple(a + b for a, b in zip(load, rows[k], strict=True))
            chosen.append(k)
            search(new, fitting(new, candidates[position + 1 :]))
            chosen.pop()

    search(rows[0], fitting(rows[0], list(range(1, len(ordered)))))
    return [ordered[k] for k in best]


def eliminate_bins(instance: Instance, packing: Packing) -> Packing:
    """Empty bins whose tasks all fit in the other bins' spare capacity, lightest bins first.

    Removing a bin never raises the cost, whatever its type and kind.
    """
    bins = [(type_name, list(tasks)) for type_name, group in packing.items() for tasks in group]
    loads = [_load(instance, tasks) for _, tasks in bins]
    order = sorted(range(len(bins)), key=lambda k: _fill(instance, bins[k][0], loads[k]))
    alive = set(range(len(bins)))
    for victim in order:
        alive.discard(victim)
        trial = {k: loads[k] for k in alive}
        moves: list[tuple[int, str]] = []
        for task_id in bins[victim][1]:
            demand = instance.task(task_id).demand
            target = next(
                (
                    k
                    for k in sorted(alive)
                    if (trial[k] + demand).fits_in(instance.node_type(bins[k][0]).capacity)
                ),
                None,
            )
            if target is None:
                alive.add(victim)
                break
            trial[target] = trial[target] + demand
            moves.append((target, task_id))
        else:
            for target, task_id in moves:
                bins[target][1].append(task_id)
                loads[target] = trial[target]
    result: Packing = defaultdict(list)
    for k in sorted(alive):
        result[bins[k][0]].append(bins[k][1])
    return dict(result)


def _load(instance: Instance, tasks: list[str]) -> Resources:
    return sum((instance.task(t).demand for t in tasks), ZERO)


def _fill(instance: Instance, type_name: str, load: Resources) -> float:
    capacity = instance.node_type(type_name).capacity.as_tuple()
    return max(
        (a / c for a, c in zip(load.as_tuple(), capacity, strict=True) if c > 0), default=0.0
    )
