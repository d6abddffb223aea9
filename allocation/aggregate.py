"""The aggregated relaxation: identical nodes of a type pooled into one integer count.

Per type ``t``: integer counts ``r_t <= max_reserved`` and ``s_t <= max_surcharge`` of reserved
and surcharge nodes, binary ``z[i, t]`` sending task ``i`` to type ``t``, and, per dimension, the
summed demand of the tasks sent to ``t`` at most ``capacity_share * capacity * (r_t + s_t)``.
Minimize ``sum (reserved + usage) * r_t + surcharge * s_t``.

With ``capacity_share = 1`` every plan satisfies it (count its nodes per type), so its optimum is a
lower bound on the cost; it is much stronger than the LP of the assignment model because node
counts stay integer. It forgets that tasks come in pieces that must fit node by node; the packing
cuts (``packing_cuts``, added at share 1) give part of that back: tasks too large to share a node,
and dual feasible functions that count a node's tasks for more than their volume. A share below 1
(leaving room for the packing loss) is also useful: its task -> type choice packs better.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import pulp

from allocation.cbc import has_solution, run_cbc
from allocation.model import DIMENSIONS, Instance, NodeType, NoFeasiblePlan, Task

# Dual feasible functions applied per dimension: the Martello-Toth / Fekete-Schepers threshold
# ones at these fractions of the capacity, and Fekete-Schepers' rounding ones for these k.
THRESHOLDS = (0.1, 0.2, 0.25, 0.3, 1 / 3, 0.4, 0.45)
ROUNDINGS = (1, 2, 3, 4)
# Greedy conflict cliques grown per type.
CLIQUES = 4


def packing_cuts(node_type: NodeType, tasks: list[Task]) -> list[dict[str, float]]:
    """Cuts ``nodes of the type >= sum coefficient * z[task, type]``, one dict per cut, each
    holding for every plan.

    Dual feasible functions. A function ``f`` on ``[0, 1]`` is dual feasible if
    ``sum x_i <= 1`` implies ``sum f(x_i) <= 1``. In one node of the type, the tasks' shares
    ``x_i = demand / capacity`` of a dimension sum to at most 1, so ``sum f(x_i) <= 1`` per node;
    summed over the type's nodes, ``sum_i f(x_i) z[i, t] <= n_t``. The shares are divided by
    ``1 + slack`` first, with ``slack`` above the tolerance with which ``Resources.fits_in``
    accepts a load (and the rounding error of the division), so the shares of an accepted node
    sum to at most 1. Used: ``U_e(x) = 1 if x > 1 - e, x if e <= x <= 1 - e, 0 if x < e`` for
    ``e <= 1/2`` (Martello and Toth's L2 bound, linearized) and ``u_k(x) = x if (k + 1) x is
    whole, floor((k + 1) x) / k otherwise`` (Fekete and Schepers 2001). Both are dual feasible,
    and so is any function below one of them, which is how float comparisons at their steps are
    settled: on the safe side, by a margin.

    Conflict cliques. Tasks any two of which do not fit one node together use one node each, so
    ``n_t >= sum_{i in C} z[i, t]`` for such a set ``C``; the cliques are grown greedily from the
    largest tasks.
    """
    cuts: list[dict[str, float]] = []
    functions = [_threshold(e) for e in THRESHOLDS] + [_rounding(k) for k in ROUNDINGS]
    for shares in _shares(node_type, tasks):
        for f in functions:
            cut = {tid: f(x) for tid, x in shares.items() if f(x) > 0}
            # A cut with f(x) <= x for every task is implied by the volume constraint.
            if any(c > shares[tid] for tid, c in cut.items()) and cut not in cuts:
                cuts.append(cut)
    cuts.extend({tid: 1.0 for tid in clique} for clique in _cliques(node_type, tasks))
    return cuts


def _shares(node_type: NodeType, tasks: list[Task]) -> list[dict[str, float]]:
    """Each task's share of the node per dimension, and the mean share over the dimensions (the
    mean shares of a node's tasks sum to at most 1 too), each divided by the fit tolerance."""
    capacity = node_type.capacity.as_tuple()
    dims = [d for d, cap in enumerate(capacity) if cap > 0]
    per_dim = []
    for d in dims:
        slack = 1 + 2e-9 + 2e-12 / capacity[d]
        per_dim.append({task.id: task.demand.as_tuple()[d] / capacity[d] / slack
                        for task in tasks})
    mean = {task.id: sum(shares[task.id] for shares in per_dim) / len(per_dim) for task in tasks}
    return [*per_dim, mean] if per_dim else []


# How near a step of a dual feasible function a share takes the lower value.
STEP_MARGIN = 1e-9


def _threshold(e: float) -> Callable[[float], float]:
    """U_e, its upper step moved right by the margin (a task just above ``1 - e`` counts as its
    share, not 1)."""
    return lambda x: 1.0 if x > 1 - e + STEP_MARGIN else (x if x >= e else 0.0)


def _rounding(k: int) -> Callable[[float], float]:
    """u_k, taking near a step ``(k + 1) x = j`` its value just left of it, ``(j - 1) / k``,
    which is below both ``x`` and ``j / k`` there."""
    def f(x: float) -> float:
        scaled = (k + 1) * x
        step = round(scaled)
        if abs(scaled - step) <= STEP_MARGIN:
            return max(0.0, (step - 1) / k)
        return math.floor(scaled) / k
    return f


def _cliques(node_type: NodeType, tasks: list[Task]) -> list[list[str]]:
    """Sets of tasks no two of which fit one node of the type together, each grown from one of
    the CLIQUES largest tasks (largest share in any dimension) by adding, largest first, every
    task that conflicts with all those already in."""
    capacity = node_type.capacity

    def size(task: Task) -> float:
        return max((a / c for a, c in zip(task.demand.as_tuple(), capacity.as_tuple(),
                                          strict=True) if c > 0), default=0.0)

    order = sorted(tasks, key=size, reverse=True)
    cliques: list[list[str]] = []
    for start in order[:CLIQUES]:
        clique = [start]
        for task in order:
            if task is not start and all(not (task.demand + member.demand).fits_in(capacity)
                                         for member in clique):
                clique.append(task)
        ids = sorted(task.id for task in clique)
        if len(ids) > 1 and ids not in cliques:
            cliques.append(ids)
    return cliques


@dataclass(frozen=True)
class Aggregate:
    lower_bound: float  # valid only for capacity_share = 1
    by_type: dict[str, list[str]] | None  # task ids per type name; None if CBC found none
    nodes: dict[str, int] | None  # node count per type name; None if CBC found none


def solve_aggregate(instance: Instance, time_limit_s: float, capacity_share: float = 1.0
                    ) -> Aggregate:
    prob = pulp.LpProblem("aggregated", pulp.LpMinimize)
    z: dict[tuple[str, str], pulp.LpVariable] = {}
    counts: dict[str, tuple[pulp.LpVariable, pulp.LpVariable]] = {}
    cost = []
    for ti, nt in enumerate(instance.node_types):
        reserved = prob.add_variable(f"r_{ti}", 0, nt.max_reserved, cat=pulp.LpInteger)
        surcharge = prob.add_variable(f"s_{ti}", 0, nt.max_surcharge, cat=pulp.LpInteger)
        counts[nt.name] = (reserved, surcharge)
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
        if capacity_share == 1.0:
            for cut in packing_cuts(nt, [task for _, task in fitting]):
                prob += (pulp.lpSum(c * z[task_id, nt.name] for task_id, c in cut.items())
                         <= reserved + surcharge)
    prob += pulp.lpSum(cost)
    for task in instance.tasks:
        prob += pulp.lpSum(z[task.id, nt.name] for nt in instance.node_types
                           if (task.id, nt.name) in z) == 1

    cbc_bound = run_cbc(prob, time_limit_s)
    if prob.status == pulp.LpStatusInfeasible:
        if capacity_share == 1.0:
            raise NoFeasiblePlan("no plan places every task within max_reserved and "
                                 "max_surcharge")
        return Aggregate(0.0, None, None)
    if prob.sol_status == pulp.LpSolutionOptimal:
        lower = pulp.value(prob.objective)
    else:
        lower = cbc_bound if cbc_bound is not None else 0.0
    if not has_solution(prob):
        return Aggregate(lower, None, None)
    by_type: dict[str, list[str]] = defaultdict(list)
    for (task_id, type_name), var in z.items():
        if (var.value() or 0) > 0.5:
            by_type[type_name].append(task_id)
    nodes = {name: round(r.value() or 0) + round(s.value() or 0) for name, (r, s) in counts.items()}
    return Aggregate(lower, dict(by_type), nodes)
