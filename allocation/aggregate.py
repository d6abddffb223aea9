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

Few tasks per node. A type whose node holds only a few tasks at once (large tasks relative to
the node) has few feasible task sets; when no node holds more than SET_MAX_TASKS and they number
at most PATTERN_LIMIT they are all enumerated (``feasible_sets``), and the type is modelled
exactly instead: a binary per feasible
set (a node of the type holding exactly those tasks), the type's node count their sum. Every
plan still satisfies the model (each of its nodes of such a type is one of the sets), so the
bound stays valid, and the pooled volume no longer lets the type hold more tasks than its nodes
can: on generated 200-task instances with tight caps and nodes of two or three tasks, the bound
rose by 1.5-1.6%, where the conflict cliques had moved it by 0.1%. The chosen sets are returned
as that type's bins (``Aggregate.bins``), packed already.

HiGHS solves it (``allocation.highs``), several times faster than CBC, and at share 1 in rounds
that add the conflict cliques the last round's choice violates (``violated_cliques``).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pulp

from allocation.cbc import has_solution, run_cbc
from allocation.highs import HighsFailed, run_highs
from allocation.model import DIMENSIONS, Instance, NodeType, NoFeasiblePlan, Task

# Dual feasible functions applied per dimension: the Martello-Toth / Fekete-Schepers threshold
# ones at these fractions of the capacity, and Fekete-Schepers' rounding ones for these k.
THRESHOLDS = (0.1, 0.2, 0.25, 0.3, 1 / 3, 0.4, 0.45)
ROUNDINGS = (1, 2, 3, 4)
# Greedy conflict cliques grown per type.
CLIQUES = 4
# Cliques grown per type and round from the chosen tasks, when separating violated ones.
CLIQUE_STARTS = 10
# A type is modelled by its feasible task sets when it has at most this many (enumerating them
# costs about 5 microseconds each, and HiGHS' time grows with them: on generated 200-task
# instances, types with up to 1,500 sets were solved within 2 s and raised the bound, and one
# with 7,000 took 4 s and did not).
PATTERN_LIMIT = 5000
# ... and when no node of the type holds more than this many tasks. Where nodes hold more, the
# pooled model with its cuts is nearly as strong and HiGHS solves it much faster: on the small
# random instances of the benchmark (10-40 tasks, nodes of 5-20 of them), modelling every type
# by its sets took the mean solve from 0.04 s to 0.46 s CPU.
SET_MAX_TASKS = 4


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
        per_dim.append({task.id: task.demand.as_tuple()[d] / capacity[d] / slack for task in tasks})
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
        return max(
            (
                a / c
                for a, c in zip(task.demand.as_tuple(), capacity.as_tuple(), strict=True)
                if c > 0
            ),
            default=0.0,
        )

    order = sorted(tasks, key=size, reverse=True)
    cliques: list[list[str]] = []
    for start in order[:CLIQUES]:
        clique = [start]
        for task in order:
            if task is not start and all(
                not (task.demand + member.demand).fits_in(capacity) for member in clique
            ):
                clique.append(task)
        ids = sorted(task.id for task in clique)
        if len(ids) > 1 and ids not in cliques:
            cliques.append(ids)
    return cliques


def conflicts(node_type: NodeType, tasks: list[Task]) -> np.ndarray:
    """``conflict[a, b]``: tasks ``a`` and ``b`` do not fit one node of the type together (as
    ``Resources.fits_in`` decides: a load holding both is at least their sum in every dimension,
    so no node holds both)."""
    demand = np.array([task.demand.as_tuple() for task in tasks]).reshape(-1, 3)
    limit = np.array(node_type.capacity.as_tuple()) * (1 + 1e-9) + 1e-12
    pair = demand[:, None, :] + demand[None, :, :]
    conflict = np.any(pair > limit, axis=2)
    np.fill_diagonal(conflict, False)
    return conflict


def violated_cliques(conflict: np.ndarray, chosen: list[int], nodes: int) -> list[list[int]]:
    """Cliques of the conflict graph holding more of the ``chosen`` tasks than ``nodes``: each
    grown greedily from one of CLIQUE_STARTS chosen tasks (most conflicts among the chosen
    first) through the chosen tasks, then through the others (which makes the cut hold for
    other choices too)."""
    if len(chosen) <= nodes:
        return []
    inside = np.zeros(len(conflict), dtype=bool)
    inside[chosen] = True
    degree = conflict[:, inside].sum(axis=1)
    order = sorted(chosen, key=lambda a: -degree[a])
    others = sorted((int(a) for a in np.flatnonzero(~inside)), key=lambda a: -degree[a])
    found: list[list[int]] = []
    for start in order[:CLIQUE_STARTS]:
        clique = [start]
        common = conflict[start].copy()
        for candidate in order:
            if common[candidate]:
                clique.append(candidate)
                common &= conflict[candidate]
        if len(clique) <= nodes:
            continue
        for candidate in others:
            if common[candidate]:
                clique.append(candidate)
                common &= conflict[candidate]
        members = sorted(clique)
        if members not in found:
            found.append(members)
    return found


def feasible_sets(
    node_type: NodeType, tasks: list[Task], limit: int, max_tasks: int = SET_MAX_TASKS
) -> list[list[int]] | None:
    """Every non-empty set of the tasks (as indices into ``tasks``) that fits one node of the
    type together, as ``Resources.fits_in`` decides; None if there are more than ``limit``, or
    if one of them has more than ``max_tasks`` tasks.

    Depth first, each set extended only by later tasks that still fit, so the search costs about
    as much as the sets it finds."""
    demand = np.array([task.demand.as_tuple() for task in tasks]).reshape(-1, 3)
    room = np.array(node_type.capacity.as_tuple()) * (1 + 1e-9) + 1e-12
    found: list[list[int]] = []
    # (load, members, candidates): candidates are the later tasks that fit beside the members.
    stack: list[tuple[np.ndarray, list[int], np.ndarray]] = [
        (np.zeros(3), [], np.flatnonzero(np.all(demand <= room, axis=1)))
    ]
    while stack:
        load, members, candidates = stack.pop()
        for k, task in enumerate(candidates):
            grown = [*members, int(task)]
            found.append(grown)
            if len(found) > limit or len(grown) > max_tasks:
                return None
            loaded = load + demand[task]
            later = candidates[k + 1 :]
            later = later[np.all(demand[later] + loaded <= room, axis=1)]
            if len(later):
                stack.append((loaded, grown, later))
    return found


@dataclass(frozen=True)
class Aggregate:
    lower_bound: float  # valid only for capacity_share = 1
    by_type: dict[str, list[str]] | None  # task ids per type name; None if none was found
    nodes: dict[str, int] | None  # node count per type name; None if none was found
    # The nodes (task ids) of the types modelled by their feasible sets; None if none was found.
    bins: dict[str, list[list[str]]] | None = None


def solve_aggregate(
    instance: Instance,
    time_limit_s: float,
    capacity_share: float = 1.0,
    set_limit: int = PATTERN_LIMIT,
) -> Aggregate:
    """The relaxation's optimum (with HiGHS, within ``time_limit_s`` CPU seconds).

    Types with at most ``set_limit`` feasible task sets are modelled by them (0: none is; the
    tests use it to check the pooled model with its cuts on small instances).

    At ``capacity_share = 1`` it is solved in rounds: after each, the cliques of conflicting
    tasks that hold more of a type's chosen tasks than its node count are added as cuts
    (``violated_cliques``), until none is or the time is spent. Every round's optimum is a
    lower bound (its cuts hold for every plan); the last round's choice is returned. On the
    generated 200-task instances the static cliques of ``packing_cuts``, grown from the
    largest tasks of all, missed cliques of 50 among the 78 tasks a type was given 42 nodes
    for."""
    deadline = time.thread_time() + time_limit_s
    prob = pulp.LpProblem("aggregated", pulp.LpMinimize)
    z: dict[tuple[str, str], pulp.LpVariable] = {}
    counts: dict[str, tuple[pulp.LpVariable, pulp.LpVariable]] = {}
    fitting: dict[str, list[Task]] = {}
    # Per type modelled by its feasible sets: each set's task ids and binary.
    sets: dict[str, list[tuple[list[str], pulp.LpVariable]]] = {}
    covering: dict[str, list[pulp.LpVariable]] = defaultdict(list)
    cost = []
    for ti, nt in enumerate(instance.node_types):
        reserved = prob.add_variable(f"r_{ti}", 0, nt.max_reserved, cat=pulp.LpInteger)
        surcharge = prob.add_variable(f"s_{ti}", 0, nt.max_surcharge, cat=pulp.LpInteger)
        counts[nt.name] = (reserved, surcharge)
        cost.append(nt.busy_reserved_cost * reserved + nt.surcharge * surcharge)
        tasks = [t for t in instance.tasks if t.demand.fits_in(nt.capacity)]
        enumerated = feasible_sets(nt, tasks, set_limit)
        if enumerated is not None:
            sets[nt.name] = []
            for members in enumerated:
                var = prob.add_variable(f"p_{ti}_{len(sets[nt.name])}", cat=pulp.LpBinary)
                sets[nt.name].append(([tasks[a].id for a in members], var))
                for a in members:
                    covering[tasks[a].id].append(var)
            prob += pulp.lpSum(var for _, var in sets[nt.name]) == reserved + surcharge
            continue
        fitting[nt.name] = tasks
        for task in tasks:
            z[task.id, nt.name] = var = prob.add_variable(f"z_{ti}_{len(z)}", cat=pulp.LpBinary)
            covering[task.id].append(var)
        # Tasks sent to a type need at least one node of it, even tasks with no demand.
        prob += pulp.lpSum(z[task.id, nt.name] for task in tasks) <= len(tasks) * (
            reserved + surcharge
        )
        for dim in DIMENSIONS:
            load = [(getattr(task.demand, dim), z[task.id, nt.name]) for task in tasks]
            if any(amount > 0 for amount, _ in load):
                prob += pulp.lpSum(a * v for a, v in load) <= capacity_share * getattr(
                    nt.capacity, dim
                ) * (reserved + surcharge)
        if capacity_share == 1.0:
            for cut in packing_cuts(nt, tasks):
                prob += (
                    pulp.lpSum(c * z[task_id, nt.name] for task_id, c in cut.items())
                    <= reserved + surcharge
                )
    prob += pulp.lpSum(cost)
    for task in instance.tasks:
        prob += pulp.lpSum(covering[task.id]) == 1
    conflict = {name: conflicts(instance.node_type(name), tasks) for name, tasks in fitting.items()}

    lower = 0.0
    found: Aggregate | None = None
    while True:
        remaining = max(deadline - time.thread_time(), 0.0)
        try:
            bound = run_highs(prob, remaining)
        except HighsFailed:
            bound = run_cbc(prob, remaining)  # slower on these relaxations, but a bound
        if prob.status == pulp.LpStatusInfeasible:
            if capacity_share == 1.0:
                raise NoFeasiblePlan(
                    "no plan places every task within max_reserved and max_surcharge"
                )
            return Aggregate(0.0, None, None)
        optimal = prob.sol_status == pulp.LpSolutionOptimal
        lower = max(lower, pulp.value(prob.objective) if optimal else bound or 0.0)
        if not has_solution(prob):
            break
        by_type: dict[str, list[str]] = defaultdict(list)
        for (task_id, type_name), var in z.items():
            if (var.value() or 0) > 0.5:
                by_type[type_name].append(task_id)
        bins = {
            name: [members for members, var in chosen if (var.value() or 0) > 0.5]
            for name, chosen in sets.items()
        }
        for name, type_bins in bins.items():
            by_type[name] = [task_id for node in type_bins for task_id in node]
        nodes = {
            name: round(r.value() or 0) + round(s.value() or 0) for name, (r, s) in counts.items()
        }
        found = Aggregate(lower, dict(by_type), nodes, bins)
        if not optimal or capacity_share != 1.0 or time.thread_time() >= deadline:
            break
        added = 0
        for name, tasks in fitting.items():
            index = {task.id: a for a, task in enumerate(tasks)}
            chosen = [index[task_id] for task_id in by_type.get(name, [])]
            reserved, surcharge = counts[name]
            for clique in violated_cliques(conflict[name], chosen, nodes[name]):
                prob += pulp.lpSum(z[tasks[a].id, name] for a in clique) <= reserved + surcharge
                added += 1
        if not added:
            break
    if found is None:
        return Aggregate(lower, None, None)
    return Aggregate(lower, found.by_type, found.nodes, found.bins)
