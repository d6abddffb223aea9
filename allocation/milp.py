"""Exact allocation as a mixed-integer program, solved with PuLP's CBC.

Reduction. An idle reserved node only adds cost, and ``surcharge > reserved + usage``, so an
optimal plan reserves exactly the nodes it uses and buys surcharge nodes of a type only once all
``max_reserved`` nodes of that type are in use. The program therefore chooses *bins*: for each
type, ``n`` bins of which the first ``min(n, max_reserved)`` are reserved (each costs
``reserved + usage``) and the rest surcharge (each costs ``surcharge``).

Formulation, for each type ``t`` and bin position ``j`` (``y[t, j]``: bin open; ``x[i, t, j]``:
task ``i`` in that bin):

- every task in exactly one bin; per bin and dimension, load <= capacity * ``y[t, j]``, and
  ``x[i, t, j] <= y[t, j]`` (a tighter relaxation than the capacity row alone);
- cost ``sum price[t, j] * y[t, j]``, with ``price[t, j]`` the reserved price for
  ``j < max_reserved`` and the surcharge price after.

What makes it solve fast:

- symmetry breaking: bins of a type are identical, so they are ordered by their first task in a
  fixed task order (largest first); then open bins form a prefix (``y[t, j] >= y[t, j+1]``) and
  task of rank ``r`` can only be in positions ``j <= r``. This removes the ``n!`` relabelings of
  every plan, and a third of the assignment variables;
- bounds from a warm start: the better of first fit and first-fit-decreasing (re-costed with
  reserved nodes first) is handed to CBC as its first incumbent, and since every bin of type
  ``t`` costs at least ``reserved + usage``, no optimal plan has more than ``cost / (reserved +
  usage)`` bins of that type: positions beyond that are not created;
- aggregated covering rows, ``sum_t capacity[t, d] * n_t >= total demand[d]`` with ``n_t`` the
  integer bin count of type ``t``: redundant for the integer program, but they let CBC's cuts
  lift the lower bound to whole bins, which is what proves the gap.

On the time limit CBC stops and the best plan found is returned with the relative gap between its
cost and CBC's proven lower bound.
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
from allocation.model import DIMENSIONS, Instance, Kind, NoFeasiblePlan, Plan, make_nodes

# Status strings of MilpResult.
OPTIMAL = "optimal"
TIME_LIMIT = "time_limit"


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
    warm = _warm_start(instance)
    if not instance.tasks:
        return MilpResult(Plan(instance, (), time.perf_counter() - start), OPTIMAL, 0.0)
    model = _Model(instance, warm)
    if warm is not None:
        model.set_start(warm)
    remaining = max(time_limit_s - (time.perf_counter() - start), 1.0)
    status, bound = _run_cbc(model.problem, remaining, warm_start=warm is not None)

    if status == pulp.LpStatusInfeasible:
        raise NoFeasiblePlan("no plan places every task within max_reserved and max_surcharge")
    solved = model.problem.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    found = model.solution() if solved else None
    if found is None or (warm is not None and _cost(instance, warm) < _cost(instance, found)):
        # CBC stopped before improving on (or even loading) the start: the start is the best plan.
        found = warm
    if found is None:
        raise NoFeasiblePlan(f"CBC found no plan within {time_limit_s:g} s and no heuristic "
                             "could place every task")
    plan = _plan(instance, found, time.perf_counter() - start)
    if model.problem.sol_status == pulp.LpSolutionOptimal:
        return MilpResult(plan, OPTIMAL, 0.0)
    cost = plan.total_cost
    gap = 0.0 if cost <= 0 or bound is None else max(0.0, (cost - bound) / cost)
    return MilpResult(plan, TIME_LIMIT, gap)


# A packing: for each type name, its bins, each a list of task ids.
Packing = dict[str, list[list[str]]]


def _warm_start(instance: Instance) -> Packing | None:
    best: Packing | None = None
    for heuristic in (first_fit, first_fit_decreasing):
        try:
            plan = heuristic(instance)
        except NoFeasiblePlan:
            continue
        packing: Packing = defaultdict(list)
        for node in plan.nodes:
            if node.tasks:
                packing[node.type].append(list(node.tasks))
        if best is None or _cost(instance, packing) < _cost(instance, best):
            best = packing
    return best


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


class _Model:
    """The PuLP problem of the module docstring, with its variables."""

    def __init__(self, instance: Instance, warm: Packing | None) -> None:
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
                    prob += var <= self.y[nt.name, j]
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
        total = instance.total_demand().as_tuple()
        for d, dim in enumerate(DIMENSIONS):
            if total[d] > 0:
                prob += pulp.lpSum(getattr(instance.node_type(t).capacity, dim) * var
                                   for (t, _), var in self.y.items()) >= total[d]

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


def _run_cbc(problem: pulp.LpProblem, time_limit_s: float, warm_start: bool
             ) -> tuple[int, float | None]:
    """Solve with CBC; return PuLP's status and the lower bound CBC reports when it stops."""
    solver_kwargs = {"timeLimit": time_limit_s, "warmStart": warm_start, "msg": False}
    if not pulp.PULP_CBC_CMD(**solver_kwargs).available():
        raise SolverUnavailable(
            "the CBC solver is not available: PuLP's bundled CBC binary is missing or not "
            "executable on this platform; reinstall pulp or install coinor-cbc"
        )
    with tempfile.TemporaryDirectory(prefix="crawlflow-milp-") as tmp:
        log_path = Path(tmp) / "cbc.log"
        solver = pulp.PULP_CBC_CMD(**solver_kwargs, logPath=str(log_path))
        try:
            status = problem.solve(solver)
        except pulp.PulpSolverError as exc:
            raise SolverUnavailable(f"CBC failed to run: {exc}") from exc
        match = _LOWER_BOUND.search(log_path.read_text())
    return status, float(match.group(1)) if match else None
