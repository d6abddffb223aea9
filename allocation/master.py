"""The restricted master: the cheapest plan made of known patterns (bins), with CBC.

Patterns are the bins of every candidate packing. Choosing the cheapest set of them that covers
every task (``lambda_p`` binary, reserved and surcharge node counts integer, within
``max_reserved`` and ``max_surcharge``) recombines bins of different candidates; a task
covered twice is then kept in its first bin only, which keeps every bin within capacity.
"""

from __future__ import annotations

from collections import defaultdict

import pulp

from allocation.cbc import has_solution, run_cbc
from allocation.model import Instance
from allocation.packing import Packing


def restricted_master(
    instance: Instance,
    patterns: list[tuple[str, list[str]]],
    warm: Packing | None,
    lower: float,
    time_limit_s: float,
) -> tuple[Packing | None, float | None]:
    """The best packing CBC finds among the patterns, and CBC's bound (valid for these patterns
    only, so not a bound on the instance)."""
    prob = pulp.LpProblem("master", pulp.LpMinimize)
    unique = list(dict.fromkeys((t, tuple(sorted(tasks))) for t, tasks in patterns if tasks))
    use = [prob.add_variable(f"p_{k}", cat=pulp.LpBinary) for k in range(len(unique))]
    by_task: dict[str, list[pulp.LpVariable]] = defaultdict(list)
    by_type: dict[str, list[pulp.LpVariable]] = defaultdict(list)
    for var, (type_name, tasks) in zip(use, unique, strict=True):
        by_type[type_name].append(var)
        for task_id in tasks:
            by_task[task_id].append(var)
    cost = []
    reserved = {}
    surcharge = {}
    for ti, nt in enumerate(instance.node_types):
        reserved[nt.name] = prob.add_variable(f"r_{ti}", 0, nt.max_reserved, cat=pulp.LpInteger)
        surcharge[nt.name] = prob.add_variable(f"s_{ti}", 0, nt.max_surcharge, cat=pulp.LpInteger)
        cost += [nt.busy_reserved_cost * reserved[nt.name], nt.surcharge * surcharge[nt.name]]
        prob += pulp.lpSum(by_type[nt.name]) <= reserved[nt.name] + surcharge[nt.name]
    prob += pulp.lpSum(cost)
    for task in instance.tasks:
        if not by_task[task.id]:
            return None, None
        prob += pulp.lpSum(by_task[task.id]) >= 1
    if warm is not None:
        chosen = {(t, tuple(sorted(b))) for t, bins in warm.items() for b in bins}
        for var, key in zip(use, unique, strict=True):
            var.setInitialValue(1 if key in chosen else 0)
        for nt in instance.node_types:
            n = len(warm.get(nt.name, []))
            reserved[nt.name].setInitialValue(min(n, nt.max_reserved))
            surcharge[nt.name].setInitialValue(max(0, n - nt.max_reserved))
    prob += pulp.lpSum(cost) >= lower - 1e-6
    bound = run_cbc(prob, time_limit_s, warm_start=warm is not None)
    if not has_solution(prob):
        return None, bound
    packing: Packing = defaultdict(list)
    placed: set[str] = set()
    for var, (type_name, tasks) in zip(use, unique, strict=True):
        if (var.value() or 0) > 0.5:
            fresh = [t for t in tasks if t not in placed]
            placed.update(fresh)
            if fresh:
                packing[type_name].append(fresh)
    if len(placed) < len(instance.tasks):
        # Stopped within hundredths of a second, CBC reports a solution that covers some tasks
        # only (the caller's local search then failed on it).
        return None, bound
    return dict(packing), bound
