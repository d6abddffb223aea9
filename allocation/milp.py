"""Exact allocation as a mixed-integer program, solved with PuLP's CBC.

Reduction. An idle reserved node only adds cost, and ``surcharge > reserved + usage``, so an
optimal plan reserves exactly the nodes it uses and buys surcharge nodes of a type only once all
``max_reserved`` nodes of that type are in use. The program therefore chooses *bins*: for each
type, ``n`` bins of which the first ``min(n, max_reserved)`` are reserved (each costs
``reserved + usage``) and the rest surcharge (each costs ``surcharge``).

Formulation (``_Model``), for each type ``t`` and bin position ``j`` (``y[t, j]``: bin open;
``x[i, t, j]``: task ``i`` in that bin): every task in exactly one bin; per bin and dimension,
load <= capacity * ``y[t, j]``; cost ``sum price[t, j] * y[t, j]`` with ``price[t, j]`` the
reserved price for ``j < max_reserved`` and the surcharge price after.

A plain version of this model leaves CBC with a weak bound (the LP fills every type exactly with
fractional nodes) and a search space full of relabelings. What ``solve_milp`` adds:

- symmetry breaking: bins of a type are identical, so they are ordered by their first task in a
  fixed task order (largest first); then open bins form a prefix (``y[t, j] >= y[t, j+1]``) and
  the task of rank ``r`` can only be in positions ``j <= r``. This removes the ``n!`` relabelings
  of every plan and about half of the assignment variables;
- aggregating identical nodes for the bound: a small relaxation (``_aggregated_bound``) keeps
  only, per type, an integer node count whose summed capacity holds the summed demand of the tasks
  sent to that type. CBC solves it in a fraction of a second; its optimum is a lower bound that
  enters the full model as the cut ``cost >= bound``, and its task -> type choice, packed per type,
  is one more candidate plan;
- warm start and tightened bounds: the cheapest of first fit, first-fit-decreasing and that
  per-type packing, after emptying bins whose tasks fit elsewhere (``_eliminate_bins``), is CBC's
  first incumbent; since every bin of type ``t`` costs at least ``reserved + usage``, no optimal
  plan has more than ``incumbent cost / (reserved + usage)`` bins of that type, and positions
  beyond that are not created;
- if the incumbent already meets the bound it is optimal and the full model is skipped.

On the time limit CBC stops and the best plan is returned with the relative gap between its cost
and the best proven lower bound (CBC's, or the aggregated one if higher).
"""

from __future__ import annotations

import math
import re
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pulp

from allocation.first_fit import first_fit, first_fit_decreasing, task_sizes
from allocation.model import (
    DIMENSIONS,
    ZERO,
    Instance,
    Kind,
    NoFeasiblePlan,
    Plan,
    Resources,
    make_nodes,
)

# Status strings of MilpResult.
OPTIMAL = "optimal"
TIME_LIMIT = "time_limit"
# Costs within this of the lower bound count as optimal (prices are floats).
TOLERANCE = 1e-6
# Share of the time limit given to the aggregated relaxation (it usually needs far less).
AGGREGATE_SHARE = 0.3


class SolverUnavailable(RuntimeError):
    """CBC cannot be run."""


@dataclass(frozen=True)
class MilpResult:
    plan: Plan
    status: str  # OPTIMAL, or TIME_LIMIT when stopped with a plan that may not be optimal
    gap: float  # (cost - proven lower bound) / cost; 0 when optimal

    @property
    def solve_seconds(self) -> float:
        return self.plan.solve_seconds


def solve_milp(instance: Instance, time_limit_s: float = 10.0) -> MilpResult:
    """Solve the instance to optimality, or to the best plan within ``time_limit_s`` seconds.

    Raises SolverUnavailable if CBC cannot run and NoFeasiblePlan if no plan exists.
    """
    start = time.perf_counter()
    _check_cbc()
    if not instance.tasks:
        return MilpResult(Plan(instance, (), time.perf_counter() - start), OPTIMAL, 0.0)

    def remaining() -> float:
        return time_limit_s - (time.perf_counter() - start)

    candidates = _heuristic_packings(instance)
    lower, by_type = _aggregated_bound(instance, remaining() * AGGREGATE_SHARE)
    if by_type is not None:
        candidates.append(_pack_by_type(instance, by_type))
    found = [_eliminate_bins(instance, p) for p in candidates if p is not None]
    best = min(found, key=lambda p: _cost(instance, p), default=None)

    if best is None or _cost(instance, best) > lower + TOLERANCE:
        model = _Model(instance, best, lower)
        status, cbc_lower = _run_cbc(model.problem, max(remaining(), 1.0), best is not None)
        if status == pulp.LpStatusInfeasible:
            raise NoFeasiblePlan("no plan places every task within max_reserved and "
                                 "max_surcharge")
        solved = model.solution()
        if solved is not None and (best is None or _cost(instance, solved) < _cost(instance, best)):
            best = solved
        if model.problem.sol_status == pulp.LpSolutionOptimal and solved is not None:
            lower = max(lower, _cost(instance, solved))
        elif cbc_lower is not None:
            lower = max(lower, cbc_lower)
    if best is None:
        raise NoFeasiblePlan(f"CBC found no plan within {time_limit_s:g} s and no heuristic "
                             "could place every task")
    plan = _plan(instance, best, time.perf_counter() - start)
    cost = plan.total_cost
    if cost <= lower + TOLERANCE:
        return MilpResult(plan, OPTIMAL, 0.0)
    return MilpResult(plan, TIME_LIMIT, (cost - lower) / cost)


# A packing: for each type name, its bins, each a list of task ids.
Packing = dict[str, list[list[str]]]


def _heuristic_packings(instance: Instance) -> list[Packing | None]:
    packings: list[Packing | None] = []
    for heuristic in (first_fit, first_fit_decreasing):
        try:
            packings.append(_packing(heuristic(instance)))
        except NoFeasiblePlan:
            packings.append(None)
    return packings


def _packing(plan: Plan) -> Packing:
    packing: Packing = defaultdict(list)
    for node in plan.nodes:
        if node.tasks:
            packing[node.type].append(list(node.tasks))
    return packing


def _cost(instance: Instance, packing: Packing) -> float:
    """Cost of a packing with each type's first ``max_reserved`` bins reserved."""
    return sum(
        nt.busy_reserved_cost * min(n, nt.max_reserved)
        + nt.surcharge * max(0, n - nt.max_reserved)
        for nt in instance.node_types
        for n in [len(packing.get(nt.name, []))]
    )


def _plan(instance: Instance, packing: Packing, seconds: float) -> Plan:
    groups: list[tuple[str, Kind, list[str]]] = []
    for nt in instance.node_types:
        for j, tasks in enumerate(packing.get(nt.name, [])):
            groups.append((nt.name, "reserved" if j < nt.max_reserved else "surcharge", tasks))
    return Plan(instance, make_nodes(groups), seconds)


def _aggregated_bound(instance: Instance, time_limit_s: float
                      ) -> tuple[float, dict[str, list[str]] | None]:
    """Lower bound from the aggregated relaxation, and its task -> type choice if it found one.

    The relaxation forgets which node of a type a task is on: per type, the tasks' summed demand
    must fit the summed capacity of an integer number of nodes. Every plan satisfies it, so its
    optimum is a lower bound, and a much better one than the assignment LP, whose fractional
    node counts let every type be filled exactly.
    """
    prob = pulp.LpProblem("aggregated", pulp.LpMinimize)
    z: dict[tuple[str, str], pulp.LpVariable] = {}
    counts = []
    for ti, nt in enumerate(instance.node_types):
        reserved = pulp.LpVariable(f"r_{ti}", 0, nt.max_reserved, cat=pulp.LpInteger)
        surcharge = pulp.LpVariable(f"s_{ti}", 0, nt.max_surcharge, cat=pulp.LpInteger)
        counts.append(nt.busy_reserved_cost * reserved + nt.surcharge * surcharge)
        fitting = [(i, t) for i, t in enumerate(instance.tasks) if t.demand.fits_in(nt.capacity)]
        for i, task in fitting:
            z[task.id, nt.name] = pulp.LpVariable(f"z_{ti}_{i}", cat=pulp.LpBinary)
        for dim in DIMENSIONS:
            load = [(getattr(t.demand, dim), z[t.id, nt.name]) for _, t in fitting]
            if any(amount > 0 for amount, _ in load):
                prob += (pulp.lpSum(a * v for a, v in load)
                         <= getattr(nt.capacity, dim) * (reserved + surcharge))
    prob += pulp.lpSum(counts)
    for task in instance.tasks:
        prob += pulp.lpSum(z[task.id, nt.name] for nt in instance.node_types
                           if (task.id, nt.name) in z) == 1
    status, cbc_lower = _run_cbc(prob, max(time_limit_s, 0.5), warm_start=False)
    if status == pulp.LpStatusInfeasible:
        raise NoFeasiblePlan("no plan places every task within max_reserved and max_surcharge")
    if prob.sol_status == pulp.LpSolutionOptimal:
        lower = pulp.value(prob.objective)
    else:
        lower = cbc_lower if cbc_lower is not None else 0.0
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return lower, None
    by_type: dict[str, list[str]] = defaultdict(list)
    for (task_id, type_name), var in z.items():
        if (var.value() or 0) > 0.5:
            by_type[type_name].append(task_id)
    return lower, by_type


def _pack_by_type(instance: Instance, by_type: dict[str, list[str]]) -> Packing | None:
    """Pack each type's tasks from the aggregated relaxation with first-fit-decreasing."""
    packing: Packing = {}
    for type_name, task_ids in by_type.items():
        sub = Instance((instance.node_type(type_name),),
                       tuple(instance.task(t) for t in task_ids))
        try:
            packing.update(_packing(first_fit_decreasing(sub)))
        except NoFeasiblePlan:
            return None
    return packing


def _eliminate_bins(instance: Instance, packing: Packing) -> Packing:
    """Empty bins whose tasks all fit in the other bins' spare capacity, lightest bins first."""
    bins = [(type_name, list(tasks)) for type_name, group in packing.items() for tasks in group]

    def load(tasks: list[str]) -> Resources:
        return sum((instance.task(t).demand for t in tasks), ZERO)

    def fill(type_name: str, tasks: list[str]) -> float:
        capacity = instance.node_type(type_name).capacity.as_tuple()
        return max((a / c for a, c in zip(load(tasks).as_tuple(), capacity, strict=True)
                    if c > 0), default=0.0)

    for victim in sorted(bins, key=lambda b: fill(*b)):
        others = [b for b in bins if b is not victim]
        loads = [load(tasks) for _, tasks in others]
        moves: list[tuple[int, str]] = []
        for task_id in victim[1]:
            demand = instance.task(task_id).demand
            k = next((k for k, (type_name, _) in enumerate(others)
                      if (loads[k] + demand).fits_in(instance.node_type(type_name).capacity)),
                     None)
            if k is None:
                break
            loads[k] = loads[k] + demand
            moves.append((k, task_id))
        else:
            for k, task_id in moves:
                others[k][1].append(task_id)
            bins = others
    result: Packing = defaultdict(list)
    for type_name, tasks in bins:
        result[type_name].append(tasks)
    return result


class _Model:
    """The PuLP problem of the module docstring, with its variables."""

    def __init__(self, instance: Instance, warm: Packing | None, lower: float) -> None:
        self.instance = instance
        sizes = task_sizes(instance)
        order = sorted(instance.tasks, key=lambda task: sizes[task.id], reverse=True)
        upper = _cost(instance, warm) if warm is not None else math.inf
        prob = pulp.LpProblem("allocation", pulp.LpMinimize)
        self.problem = prob
        # rank[t][task id]: position of the task among the tasks that fit type t, largest first.
        self.rank: dict[str, dict[str, int]] = {}
        self.y: dict[tuple[str, int], pulp.LpVariable] = {}
        self.x: dict[tuple[str, str, int], pulp.LpVariable] = {}
        cost_terms = []
        for ti, nt in enumerate(instance.node_types):
            fitting = [task for task in order if task.demand.fits_in(nt.capacity)]
            self.rank[nt.name] = {task.id: r for r, task in enumerate(fitting)}
            positions = len(fitting)
            if nt.max_nodes is not None:
                positions = min(positions, nt.max_nodes)
            if nt.busy_reserved_cost > 0 and math.isfinite(upper):
                positions = min(positions, math.floor(upper / nt.busy_reserved_cost + 1e-9))
            for j in range(positions):
                self.y[nt.name, j] = pulp.LpVariable(f"y_{ti}_{j}", cat=pulp.LpBinary)
                price = nt.busy_reserved_cost if j < nt.max_reserved else nt.surcharge
                cost_terms.append(price * self.y[nt.name, j])
                if j > 0:
                    prob += self.y[nt.name, j] <= self.y[nt.name, j - 1]
            for r, task in enumerate(fitting):
                for j in range(min(r + 1, positions)):
                    var = pulp.LpVariable(f"x_{ti}_{r}_{j}", cat=pulp.LpBinary)
                    self.x[nt.name, task.id, j] = var
        prob += pulp.lpSum(cost_terms)

        by_task: dict[str, list[pulp.LpVariable]] = defaultdict(list)
        by_bin: dict[tuple[str, int], list[tuple[str, pulp.LpVariable]]] = defaultdict(list)
        for (type_name, task_id, j), var in self.x.items():
            by_task[task_id].append(var)
            by_bin[type_name, j].append((task_id, var))
        for task in instance.tasks:
            # An empty sum here means the warm-start bound left the task no position: infeasible.
            prob += pulp.lpSum(by_task[task.id]) == 1
        for (type_name, j), members in by_bin.items():
            capacity = instance.node_type(type_name).capacity
            for d, dim in enumerate(DIMENSIONS):
                load = [(instance.task(tid).demand.as_tuple()[d], var) for tid, var in members]
                if any(amount > 0 for amount, _ in load):
                    prob += (pulp.lpSum(a * v for a, v in load)
                             <= getattr(capacity, dim) * self.y[type_name, j])
        # The aggregated bound as a cut: CBC starts from it instead of the weak assignment LP.
        prob += pulp.lpSum(cost_terms) >= lower - TOLERANCE
        if warm is not None:
            self.set_start(warm)

    def set_start(self, packing: Packing) -> None:
        """Give CBC the packing as its first incumbent, in symmetry-broken position order."""
        for var in (*self.y.values(), *self.x.values()):
            var.setInitialValue(0)
        for type_name, bins in packing.items():
            rank = self.rank[type_name]
            for j, tasks in enumerate(sorted(bins, key=lambda b: min(rank[t] for t in b))):
                self.y[type_name, j].setInitialValue(1)
                for task_id in tasks:
                    self.x[type_name, task_id, j].setInitialValue(1)

    def solution(self) -> Packing | None:
        packing: Packing = defaultdict(list)
        for nt in self.instance.node_types:
            bins: dict[int, list[str]] = defaultdict(list)
            for (type_name, task_id, j), var in self.x.items():
                if type_name == nt.name and (var.value() or 0) > 0.5:
                    bins[j].append(task_id)
            packing[nt.name] = [bins[j] for j in sorted(bins)]
        placed = sum(len(b) for bins in packing.values() for b in bins)
        return packing if placed == len(self.instance.tasks) else None


_LOWER_BOUND = re.compile(r"^Lower bound:\s*([-+0-9.eE]+)", re.MULTILINE)


def _check_cbc() -> None:
    if not pulp.PULP_CBC_CMD(msg=False).available():
        raise SolverUnavailable(
            "the CBC solver is not available: PuLP's bundled CBC binary is missing or not "
            "executable on this platform; reinstall pulp or install coinor-cbc"
        )


def _run_cbc(problem: pulp.LpProblem, time_limit_s: float, warm_start: bool
             ) -> tuple[int, float | None]:
    """Solve with CBC; return PuLP's status and the lower bound CBC reports when it stops."""
    with tempfile.TemporaryDirectory(prefix="crawlflow-milp-") as tmp:
        log_path = Path(tmp) / "cbc.log"
        solver = pulp.PULP_CBC_CMD(timeLimit=time_limit_s, warmStart=warm_start, msg=False,
                                   logPath=str(log_path))
        try:
            status = problem.solve(solver)
        except pulp.PulpSolverError as exc:
            raise SolverUnavailable(f"CBC failed to run: {exc}") from exc
        match = _LOWER_BOUND.search(log_path.read_text())
    return status, float(match.group(1)) if match else None
