"""The aggregated relaxation: identical nodes of a type pooled into one integer count.

Per type ``t``: integer counts ``r_t <= max_reserved`` and ``s_t <= max_surcharge`` of reserved
and surcharge nodes, binary ``z[i, t]`` sending task ``i`` to type ``t``, and, per dimension, the
summed demand of the tasks sent to ``t`` at most ``capacity_share * capacity * (r_t + s_t)``.
Minimize ``sum (reserved + usage) * r_t + surcharge * s_t``.

With ``capacity_share = 1`` every plan satisfies it (count its nodes per type), so its optimum is a
lower bound on the cost; it is much stronger than the LP of the assignment model because node
counts stay integer. It forgets only that tasks come in pieces that must fit node by node, and
that is why a share below 1 (leaving room for the packing loss) is also useful: its task -> type
choice packs better.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pulp

from allocation.cbc import has_solution, run_cbc
from allocation.model import DIMENSIONS, Instance, NoFeasiblePlan


@dataclass(frozen=True)
class Aggregate:
    lower_bound: float  # valid only for capacity_share = 1
    by_type: dict[str, list[str]] | None  # task ids per type name; None if CBC found none


def solve_aggregate(instance: Instance, time_limit_s: float, capacity_share: float = 1.0
                    ) -> Aggregate:
    prob = pulp.LpProblem("aggregated", pulp.LpMinimize)
    z: dict[tuple[str, str], pulp.LpVariable] = {}
    cost = []
    for ti, nt in enumerate(instance.node_types):
        reserved = prob.add_variable(f"r_{ti}", 0, nt.max_reserved, cat=pulp.LpInteger)
        surcharge = prob.add_variable(f"s_{ti}", 0, nt.max_surcharge, cat=pulp.LpInteger)
        cost.append(nt.busy_reserved_cost * reserved + nt.surcharge * surcharge)
        fitting = [(i, t) for i, t in enumerate(instance.tasks) if t.demand.fits_in(nt.capacity)]
        for i, task in fitting:
            z[task.id, nt.name] = prob.add_variable(f"z_{ti}_{i}", cat=pulp.LpBinary)
        # Tasks sent to a type need at least one node of it, even tasks with no demand.
        prob += (pulp.lpSum(z[task.id, nt.name] for _, task in fitting)
                 <= len(fitting) * (reserved + surcharge))
        for dim in DIMENSIONS:
            load = [(getattr(task.demand, dim), z[task.id, nt.name]) for _, task in fitting]
            if any(amount > 0 for amount, _ in load):
                prob += (pulp.lpSum(a * v for a, v in load)
                         <= capacity_share * getattr(nt.capacity, dim) * (reserved + surcharge))
    prob += pulp.lpSum(cost)
    for task in instance.tasks:
        prob += pulp.lpSum(z[task.id, nt.name] for nt in instance.node_types
                           if (task.id, nt.name) in z) == 1

    cbc_bound = run_cbc(prob, time_limit_s)
    if prob.status == pulp.LpStatusInfeasible:
        if capacity_share == 1.0:
            raise NoFeasiblePlan("no plan places every task within max_reserved and "
                                 "max_surcharge")
        return Aggregate(0.0, None)
    if prob.sol_status == pulp.LpSolutionOptimal:
        lower = pulp.value(prob.objective)
    else:
        lower = cbc_bound if cbc_bound is not None else 0.0
    if not has_solution(prob):
        return Aggregate(lower, None)
    by_type: dict[str, list[str]] = defaultdict(list)
    for (task_id, type_name), var in z.items():
        if (var.value() or 0) > 0.5:
            by_type[type_name].append(task_id)
    return Aggregate(lower, dict(by_type))
