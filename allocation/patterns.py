"""The cost-minimizing pattern LP over every node type, and node counts and plans from it.

A pattern is a set of tasks that fits one node of a type. The LP (Gilmore and Gomory's, with
the reserved and surcharge prices of ``allocation.milp``'s reduction):

    minimize    sum_t (reserved_t + usage_t) r_t + surcharge_t s_t
    subject to  sum_{p holds i} x_p >= 1                    for every task i
                sum_{p of type t} x_p <= r_t + s_t          for every type t
                0 <= r_t <= max_reserved_t, 0 <= s_t <= max_surcharge_t, x_p >= 0

is solved by column generation (HiGHS' simplex on the restricted master, ``highs.quiet_highs``).
Its duals price the tasks (``pi_i``) and the nodes (``w_t``, what one more node of the type costs
at the margin); a pattern of type ``t`` improves the master when ``sum_{i in p} pi_i > w_t``,
and the pricing looks for one by greedy knapsacks with swaps (a heuristic: the LP is not solved
to optimality and its value is no bound; ``allocation.aggregate`` proves the bound).

Why: the aggregated relaxation chooses node counts by volume, so when two types cost almost the
same per unit of capacity it picks whichever mix packs in volume, not the one whose nodes pack
whole tasks best. On correlated/loose/cheap seed 0 of the benchmark's families (4- and 16-core
types within a few percent per core) it picks 63 four-core and 17 sixteen-core nodes, and the
plans the packing search finds near those counts cost 109.07; the pattern LP's counts are near
52 and 20, where a plan of 107.49 exists (issue 33).

What the solver takes from it (``allocation.milp``, after its packing phase): two dives
(``dive``: fix the pattern with the largest value and every other near 1, price again, repeat,
until at most DIVE_TAIL_TASKS tasks are left; ``tail_instance`` makes those an instance on the
nodes the fixed patterns leave, which ``solve_milp`` itself solves, so that a dive does not end
on a surcharge node for its last few tasks), each a plan the shrinking can start from; then every
task packed (``allocation.fixed_bins``) on the root LP's counts rounded to the nearest, and with
one type's rounded the other way, from its patterns (``start_packing``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import highspy
import numpy as np

from allocation.highs import quiet_highs
from allocation.model import Instance, InstanceError
from allocation.packing import Packing

# Columns added per type and pricing round, at most (the best knapsacks found).
COLUMNS_PER_TYPE = 3
# Swap rounds per knapsack in the pricing, at most.
SWAP_ROUNDS = 20
# A pattern improves the master when its tasks' prices exceed the node's by this much.
REDUCED_COST_TOLERANCE = 1e-7
# Each task's artificial cover costs this times the dearest node: it keeps the first master
# feasible whatever its columns, and no optimum uses it once patterns cover the task.
ARTIFICIAL_PRICE_FACTOR = 10.0
# The dive stops fixing patterns once this few tasks are left to cover (the tail goes to
# ``solve_milp`` as an instance of its own: small instances are proven optimal in well under a
# second).
DIVE_TAIL_TASKS = 20
# Patterns at least this close to 1 are fixed together in one dive step, in the first dive and
# in the second (from the root again, if time is left). Which dive ends better varies, and the
# first takes the longest whichever it is (it prices most of the columns the second reuses: on
# correlated/loose/dear seed 5 of the benchmark's families 9-11 s CPU, then 1-2 s). With
# ``several_ffd``'s bins in the master, the solver's 10 s runs were measured with 0.6 first
# (issue 33: uniform/tight/dear seed 2 184.56, uniform/tight/cheap seed 3 115.02).
DIVE_FIX_ABOVE = (0.6, 0.9)


@dataclass(frozen=True)
class PatternSolution:
    """The restricted master's optimum after column generation."""

    value: float  # the LP's cost (not a lower bound: the pricing is heuristic)
    nodes: dict[str, float]  # fractional node count per type
    patterns: list[tuple[float, str, list[str]]]  # (value, type, task ids) with value > 0


class PatternMaster:
    """The restricted master of the module docstring, grown by column generation; columns can
    be fixed at 1 (the dive)."""

    def __init__(self, instance: Instance, start: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.instance = instance
        self.types = list(instance.node_types)
        self.task_ids = [t.id for t in instance.tasks]
        self.index = {task_id: i for i, task_id in enumerate(self.task_ids)}
        self.demand = np.array([t.demand.as_tuple() for t in instance.tasks]).reshape(-1, 3)
        n_tasks, n_types = len(self.task_ids), len(self.types)
        self.limit = [np.array(nt.capacity.as_tuple()) * (1 + 1e-9) + 1e-12 for nt in self.types]
        self.rows = [tuple(row) for row in self.demand.tolist()]
        self.limit_rows = [tuple(limit.tolist()) for limit in self.limit]
        self.fits = [np.all(self.demand <= limit, axis=1) for limit in self.limit]
        # Per type: each task's share of a node in each dimension (the pricing's size measures).
        self.shares = [
            self.demand / np.where(cap > 0, cap, 1e-9)
            for cap in (np.array(nt.capacity.as_tuple()) for nt in self.types)
        ]
        self.covered = np.zeros(n_tasks, dtype=bool)  # by fixed columns
        self.fixed: list[int] = []  # the fixed columns, in the order fixed
        self.highs = quiet_highs()
        self.highs.setOptionValue("presolve", "off")
        # New columns leave the last basis primal feasible: primal simplex goes on from it.
        self.highs.setOptionValue("simplex_strategy", 4)
        inf = highspy.kHighsInf
        # Rows: the covers (0 .. n_tasks-1), then the links per type.
        lower = np.concatenate([np.ones(n_tasks), np.full(n_types, -inf)])
        upper = np.concatenate([np.full(n_tasks, inf), np.zeros(n_types)])
        self.highs.addRows(
            n_tasks + n_types, lower, upper, 0, np.array([], np.int32), np.array([], np.int32), []
        )
        # Columns: r_t and s_t per type, an artificial cover per task, then the patterns.
        dearest = max(max(nt.surcharge, nt.busy_reserved_cost) for nt in self.types)
        for k, nt in enumerate(self.types):
            row = np.array([n_tasks + k], np.int32)
            surcharge_cap = inf if nt.max_surcharge is None else nt.max_surcharge
            for price, cap in (
                (nt.busy_reserved_cost, nt.max_reserved),
                (nt.surcharge, surcharge_cap),
            ):
                self.highs.addCol(price, 0.0, cap, 1, row, np.array([-1.0]))
        for i in range(n_tasks):
            self.highs.addCol(
                ARTIFICIAL_PRICE_FACTOR * dearest,
                0.0,
                inf,
                1,
                np.array([i], np.int32),
                np.array([1.0]),
            )
        self.first_pattern = self.highs.getNumCol()
        self.columns: list[tuple[int, np.ndarray]] = []  # (type index, task indices)
        self.known: set[tuple[int, tuple[int, ...]]] = set()
        type_index = {nt.name: k for k, nt in enumerate(self.types)}
        for type_name, tasks in start:
            self._add(type_index[type_name], np.array(sorted(self.index[t] for t in tasks)))

    def _add(self, k: int, members: np.ndarray) -> bool:
        key = (k, tuple(int(i) for i in members))
        if not len(members) or key in self.known:
            return False
        self.known.add(key)
        rows = np.append(members, len(self.task_ids) + k).astype(np.int32)
        self.highs.addCol(0.0, 0.0, highspy.kHighsInf, len(rows), rows, np.ones(len(rows)))
        self.columns.append((k, members))
        return True

    def generate(self, deadline: Callable[[], bool]) -> bool:
        """Solve the master and price until no improving pattern is found; False if stopped by
        the deadline first (the master then holds the last round's optimum)."""
        while True:
            self.highs.run()
            if deadline():
                return False
            solution = self.highs.getSolution()
            duals = np.array(solution.row_dual)
            prices = np.maximum(duals[: len(self.task_ids)], 0.0)
            prices[self.covered] = 0.0
            node_prices = -duals[len(self.task_ids) :]
            added = False
            for k in range(len(self.types)):
                for members in self._price(k, prices, node_prices[k]):
                    added |= self._add(k, members)
            if not added:
                return True

    def _price(self, k: int, prices: np.ndarray, node_price: float) -> list[np.ndarray]:
        """Patterns of type k whose tasks are worth more than ``node_price``: greedy knapsacks
        (by price per size in three size measures), each improved by swaps."""
        usable = np.flatnonzero(self.fits[k] & (prices > REDUCED_COST_TOLERANCE))
        if not len(usable):
            return []
        shares = self.shares[k][usable]
        found: dict[tuple[int, ...], float] = {}
        for size in (shares.sum(axis=1), shares.max(axis=1), np.sqrt((shares**2).sum(axis=1))):
            order = usable[np.argsort(-prices[usable] / np.maximum(size, 1e-12), kind="stable")]
            members = self._improve(k, self._greedy(k, order, []), usable, prices)
            value = float(prices[members].sum())
            if value > node_price + REDUCED_COST_TOLERANCE:
                found[tuple(int(i) for i in sorted(members))] = value
        best = sorted(found.items(), key=lambda item: -item[1])[:COLUMNS_PER_TYPE]
        return [np.array(members) for members, _ in best]

    def _greedy(self, k: int, order: np.ndarray, members: list[int]) -> list[int]:
        """``members`` plus the tasks of ``order`` that still fit, in that order (plain floats:
        numpy per task is slower than the loop)."""
        cpu_limit, memory_limit, bandwidth_limit = self.limit_rows[k]
        cpu = memory = bandwidth = 0.0
        for i in members:
            cpu, memory, bandwidth = (
                cpu + self.rows[i][0],
                memory + self.rows[i][1],
                bandwidth + self.rows[i][2],
            )
        grown = list(members)
        taken = set(members)
        for i in order.tolist():
            row = self.rows[i]
            if (
                i not in taken
                and cpu + row[0] <= cpu_limit
                and memory + row[1] <= memory_limit
                and bandwidth + row[2] <= bandwidth_limit
            ):
                cpu, memory, bandwidth = cpu + row[0], memory + row[1], bandwidth + row[2]
                grown.append(i)
        return grown

    def _improve(
        self, k: int, members: list[int], usable: np.ndarray, prices: np.ndarray
    ) -> np.ndarray:
        """Add whatever still fits (dearest first), then swap one member for the outsider that
        gains most while the node still holds it; repeat while a swap gains."""
        limit = self.limit[k]
        chosen = list(members)
        for _ in range(SWAP_ROUNDS):
            inside = np.zeros(len(self.task_ids), dtype=bool)
            inside[chosen] = True
            outside = usable[~inside[usable]]
            chosen = self._greedy(k, outside[np.argsort(-prices[outside], kind="stable")], chosen)
            load = self.demand[chosen].sum(axis=0)
            inside[chosen] = True
            outside = usable[~inside[usable]]
            if not len(outside) or not chosen:
                break
            inside = np.array(chosen)
            # fits[a, b]: the load with member a swapped for outsider b fits the node.
            swapped = load - self.demand[inside][:, None, :] + self.demand[outside][None, :, :]
            fits = np.all(swapped <= limit, axis=2)
            gain = np.where(fits, prices[outside][None, :] - prices[inside][:, None], -np.inf)
            a, b = np.unravel_index(int(np.argmax(gain)), gain.shape)
            if gain[a, b] <= REDUCED_COST_TOLERANCE:
                break
            chosen[int(a)] = int(outside[b])
        return np.array(chosen, dtype=int)

    def solution(self) -> PatternSolution:
        values = np.array(self.highs.getSolution().col_value)
        nodes = {
            nt.name: float(values[2 * k] + values[2 * k + 1]) for k, nt in enumerate(self.types)
        }
        patterns = [
            (float(values[self.first_pattern + c]), self.types[k].name, self._ids(members))
            for c, (k, members) in enumerate(self.columns)
            if values[self.first_pattern + c] > 1e-9
        ]
        return PatternSolution(self.highs.getObjectiveValue(), nodes, patterns)

    def _ids(self, members: np.ndarray) -> list[str]:
        return [self.task_ids[i] for i in members]

    def fix(self, columns: list[int]) -> None:
        """Fix these pattern columns at 1 (at least): one node of that pattern in every plan
        the dive makes from here."""
        for c in columns:
            self.highs.changeColBounds(self.first_pattern + c, 1.0, highspy.kHighsInf)
            self.covered[self.columns[c][1]] = True
        self.fixed += columns

    def unfix(self) -> None:
        """Back to the root: no column fixed (the columns found stay)."""
        for c in self.fixed:
            self.highs.changeColBounds(self.first_pattern + c, 0.0, highspy.kHighsInf)
        self.covered[:] = False
        self.fixed = []

    def dive(self, deadline: Callable[[], bool], fix_above: float) -> Packing | None:
        """Fix patterns (the largest value first, with every other at ``fix_above`` or more)
        and price again until at most DIVE_TAIL_TASKS tasks are left uncovered; the fixed
        patterns as a packing (a task in two kept in the first), the tail's tasks left out.
        None if the deadline came first."""
        while np.count_nonzero(~self.covered) > DIVE_TAIL_TASKS:
            if not self.generate(deadline):
                return None
            values = np.array(self.highs.getSolution().col_value)[self.first_pattern :]
            fixed = set(self.fixed)
            free = [
                c
                for c in range(len(self.columns))
                if c not in fixed and np.any(~self.covered[self.columns[c][1]])
            ]
            if not free:
                break
            step = [c for c in free if values[c] >= fix_above]
            self.fix(step or [max(free, key=lambda c: values[c])])
        packing: Packing = {}
        placed = np.zeros(len(self.task_ids), dtype=bool)
        for c in self.fixed:
            k, members = self.columns[c]
            fresh = members[~placed[members]]
            placed[fresh] = True
            if len(fresh):
                packing.setdefault(self.types[k].name, []).append(self._ids(fresh))
        return packing


def start_packing(instance: Instance, solution: PatternSolution) -> Packing:
    """The LP's patterns as a packing: the largest values first, each task kept in the first
    pattern that holds it; tasks no kept pattern holds are left out (the packing search places
    them)."""
    placed: set[str] = set()
    packing: Packing = {}
    for _, name, task_ids in sorted(solution.patterns, key=lambda p: -p[0]):
        fresh = [t for t in task_ids if t not in placed]
        if fresh:
            placed.update(fresh)
            packing.setdefault(name, []).append(fresh)
    return packing


def rounded_counts(solution: PatternSolution) -> list[dict[str, int]]:
    """The LP's node counts rounded to the nearest, then each with one type's count rounded the
    other way (types whose count is whole keep it): finer steps in cost than rounding every type
    both ways, and few enough to try each (every way is up to 32 counts with 5 types, each
    tried for 0.2 s CPU in the packing phase's first pass)."""
    nearest = {name: round(n) for name, n in solution.nodes.items()}
    variants = [nearest]
    for name, n in solution.nodes.items():
        other = math.ceil(n - 1e-6) if nearest[name] < n else math.floor(n + 1e-6)
        if other != nearest[name]:
            variants.append({**nearest, name: other})
    return variants


def tail_instance(instance: Instance, fixed: Packing) -> Instance | None:
    """The tasks ``fixed`` does not hold, on the node types with ``fixed``'s nodes taken from
    their caps (reserved ones first, as a packing's are); None if no plan of them exists."""
    placed = {task_id for bins in fixed.values() for tasks in bins for task_id in tasks}
    types = []
    for nt in instance.node_types:
        used = len(fixed.get(nt.name, []))
        surcharge = nt.max_surcharge
        if surcharge is not None:
            surcharge = max(0, surcharge - max(0, used - nt.max_reserved))
        types.append(
            replace(nt, max_reserved=max(0, nt.max_reserved - used), max_surcharge=surcharge)
        )
    try:
        return Instance(tuple(types), tuple(t for t in instance.tasks if t.id not in placed))
    except InstanceError:
        return None
