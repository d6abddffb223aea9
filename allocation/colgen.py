"""The pattern model's LP relaxation by column generation, and the lower bounds it proves.

Pattern model. A pattern is a set of tasks that fits one node of a type together. Per type ``t``,
``r_t`` reserved bins (each ``reserved + usage``, at most ``max_reserved``) and ``u_t`` surcharge
bins (each ``surcharge``, at most ``max_surcharge``); ``lambda_p`` uses pattern ``p``:

    min  sum_t (reserved_t + usage_t) r_t + surcharge_t u_t
    s.t. sum_{p holds i} lambda_p >= 1              for every task i    (dual pi_i >= 0)
         sum_{p of type t} lambda_p <= r_t + u_t    for every type t    (dual -w_t <= 0)

Its LP relaxation is much tighter than the assignment model's (it knows which tasks fit together),
but has a pattern for every subset that fits. Column generation solves it with few: solve the LP
on the patterns known (HiGHS), then look for a pattern of type ``t`` whose tasks' duals sum above
``w_t`` (a three-dimensional knapsack: greedily first, then exactly with HiGHS's MIP), add it,
repeat; when no type has one, the LP is solved.

Lower bound (``lagrangian_bound``). For any ``pi >= 0`` and, per type, an upper bound ``V_t`` on
the duals one node of that type can hold, every plan with ``n_t`` nodes of type ``t`` costs at
least ``sum_i pi_i + sum_t min_n (cost_t(n) - V_t n)``: the cost is ``sum_t cost_t(n_t)``, and each
node's tasks take at most ``V_t`` of ``sum_i pi_i``. ``cost_t`` is convex and piecewise linear, so
the minimum is at 0, ``max_reserved`` or the most nodes a type can have (``max_reserved +
max_surcharge``, or the number of tasks that fit it: an optimal plan has no empty node). This
bound holds at every iteration, with ``V_t`` from the exact knapsack's proven bound (or, before
that, the fractional knapsack's), and equals the LP optimum when column generation ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import highspy
import numpy as np

from allocation.highs import quiet_highs
from allocation.model import Instance, NodeType
from allocation.packing import Packing

# A pattern enters when its duals exceed the node price by this (relative to the price).
ENTER = 1e-6
# Seconds one exact knapsack may take; its proven bound is used when it stops early.
KNAPSACK_LIMIT_S = 1.0


@dataclass(frozen=True)
class DualBound:
    """Task duals and, per type, an upper bound on the duals one node holds: a valid cut for the
    aggregated relaxation (``sum_i pi_i z_it <= V_t n_t``) and the Lagrangian bound."""

    pi: dict[str, float]
    node_value: dict[str, float]


class PatternLP:
    """The LP of the module docstring and its columns; ``run`` generates them."""

    def __init__(self, instance: Instance, packings: list[Packing]) -> None:
        self.instance = instance
        self.types: list[NodeType] = [nt for nt in instance.node_types if nt.max_nodes != 0]
        self.task_ids = [t.id for t in instance.tasks]
        self.index = {t: i for i, t in enumerate(self.task_ids)}
        n = len(self.task_ids)
        self.demand = np.array([t.demand.as_tuple() for t in instance.tasks]).reshape(n, 3)
        self.capacity = [np.array(nt.capacity.as_tuple()) * (1 + 1e-9) + 1e-12
                         for nt in self.types]
        self.fitting = [np.flatnonzero(np.all(self.demand <= cap, axis=1))
                        for cap in self.capacity]
        # Normalized sizes per type, for the greedy knapsack's orders.
        with np.errstate(divide="ignore", invalid="ignore"):
            self.shares = [np.nan_to_num(self.demand / np.where(cap > 0, cap, np.inf))
                           for cap in self.capacity]
        self.columns: list[tuple[int, tuple[int, ...]]] = []
        self._seen: set[tuple[int, tuple[int, ...]]] = set()
        self.lower_bound = 0.0
        self.converged = False
        self.iterations = 0
        self.last_duals: DualBound | None = None
        self._knapsacks: dict[int, highspy.Highs] = {}
        self._build(packings)

    # --- the LP ------------------------------------------------------------------------------

    def _build(self, packings: list[Packing]) -> None:
        h = quiet_highs()
        self.highs = h
        inf = highspy.kHighsInf
        n, types = len(self.task_ids), len(self.types)
        empty_i = np.array([], dtype=np.int32)
        empty_f = np.array([], dtype=np.float64)
        h.addRows(n, np.ones(n), np.full(n, inf), 0, empty_i, empty_i, empty_f)
        h.addRows(types, np.full(types, -inf), np.zeros(types), 0, empty_i, empty_i, empty_f)
        for k, nt in enumerate(self.types):
            row = np.array([n + k], dtype=np.int32)
            h.addCol(nt.busy_reserved_cost, 0, nt.max_reserved, 1, row, np.array([-1.0]))
            upper = inf if nt.max_surcharge is None else nt.max_surcharge
            h.addCol(nt.surcharge, 0, upper, 1, row, np.array([-1.0]))
        # Artificial covers keep the LP feasible before patterns cover every task; priced above
        # any node, they only lower the LP's value, so every bound stays valid.
        big = 10 * max(nt.surcharge for nt in self.types) + 1
        for i in range(n):
            h.addCol(big, 0, inf, 1, np.array([i], dtype=np.int32), np.array([1.0]))
        by_name = {nt.name: k for k, nt in enumerate(self.types)}
        for packing in packings:
            for type_name, bins in packing.items():
                for tasks in bins:
                    self.add_column(by_name[type_name], [self.index[t] for t in tasks])

    def add_column(self, type_index: int, tasks: list[int] | np.ndarray) -> bool:
        key = (type_index, tuple(sorted(int(i) for i in tasks)))
        if key in self._seen or not key[1]:
            return False
        self._seen.add(key)
        self.columns.append(key)
        rows = np.array([*key[1], len(self.task_ids) + type_index], dtype=np.int32)
        self.highs.addCol(0.0, 0, highspy.kHighsInf, len(rows), rows, np.ones(len(rows)))
        return True

    def solve(self) -> tuple[float, np.ndarray, np.ndarray]:
        """LP value, task duals ``pi`` and node prices ``w`` (per type)."""
        self.highs.run()
        duals = np.array(self.highs.getSolution().row_dual)
        n = len(self.task_ids)
        value = self.highs.getInfo().objective_function_value
        return value, np.maximum(duals[:n], 0.0), np.maximum(-duals[n:], 0.0)

    # --- pricing -----------------------------------------------------------------------------

    def _greedy(self, k: int, pi: np.ndarray) -> list[np.ndarray]:
        """Patterns of type k filled greedily in three orders of dual per size."""
        items = self.fitting[k][pi[self.fitting[k]] > 1e-12]
        if not items.size:
            return []
        shares = self.shares[k][items]
        orders = (
            np.argsort(-pi[items] / np.maximum(shares.sum(axis=1), 1e-12), kind="stable"),
            np.argsort(-pi[items] / np.maximum(shares.max(axis=1), 1e-12), kind="stable"),
            np.argsort(-pi[items], kind="stable"),
        )
        patterns = []
        capacity = self.capacity[k]
        for order in orders:
            load = np.zeros(3)
            chosen = []
            for j in order:
                demand = self.demand[items[j]]
                if np.all(load + demand <= capacity):
                    load += demand
                    chosen.append(items[j])
            patterns.append(np.array(chosen))
        return patterns

    def _knapsack(self, k: int, pi: np.ndarray, time_limit_s: float
                  ) -> tuple[np.ndarray, float]:
        """The best pattern of type k found and the proven upper bound on any pattern's duals."""
        items = self.fitting[k]
        if not items.size:
            return np.array([], dtype=int), 0.0
        h = self._knapsacks.get(k)
        if h is None:
            h = quiet_highs()
            count = len(items)
            h.addCols(count, np.zeros(count), np.zeros(count), np.ones(count), 0,
                      np.array([], dtype=np.int32), np.array([], dtype=np.int32),
                      np.array([], dtype=np.float64))
            h.changeColsIntegrality(count, np.arange(count, dtype=np.int32),
                                    np.full(count, highspy.HighsVarType.kInteger))
            for d in range(3):
                h.addRow(-highspy.kHighsInf, float(self.capacity[k][d]), count,
                         np.arange(count, dtype=np.int32), self.demand[items, d].copy())
            h.changeObjectiveSense(highspy.ObjSense.kMaximize)
            h.setOptionValue("mip_rel_gap", 1e-7)
            self._knapsacks[k] = h
        h.setOptionValue("time_limit", max(time_limit_s, 0.05))
        columns = np.arange(len(items), dtype=np.int32)
        h.changeColsCost(len(items), columns, pi[items].copy())
        # Tasks with no dual cannot raise the value: fixing them out shrinks the search.
        h.changeColsBounds(len(items), columns, np.zeros(len(items)),
                           (pi[items] > 1e-12).astype(np.float64))
        h.run()
        info = h.getInfo()
        values = np.array(h.getSolution().col_value)
        chosen = items[values > 0.5] if values.size == len(items) else np.array([], dtype=int)
        upper = info.mip_dual_bound
        if not np.isfinite(upper):
            upper = self._fractional_bound(k, pi)
        return chosen, max(float(upper), float(pi[chosen].sum()) if chosen.size else 0.0)

    def _fractional_bound(self, k: int, pi: np.ndarray) -> float:
        """Upper bound on one node's duals: the fractional knapsack in the tightest dimension."""
        items = self.fitting[k][pi[self.fitting[k]] > 1e-12]
        best = float(pi[items].sum())
        for d in range(3):
            sizes = self.demand[items, d]
            capacity = self.capacity[k][d]
            free = sizes <= 1e-15
            value = float(pi[items][free].sum())
            ratio = pi[items][~free] / sizes[~free]
            order = np.argsort(-ratio, kind="stable")
            cumulative = np.cumsum(sizes[~free][order])
            whole = int(np.searchsorted(cumulative, capacity, side="right"))
            value += float(pi[items][~free][order][:whole].sum())
            if whole < order.size:
                used = cumulative[whole - 1] if whole > 0 else 0.0
                value += float(ratio[order][whole]) * (capacity - used)
            best = min(best, value)
        return best

    # --- bounds ------------------------------------------------------------------------------

    def lagrangian_bound(self, pi: np.ndarray, node_value: list[float]) -> float:
        bound = float(pi.sum())
        for k, nt in enumerate(self.types):
            most = len(self.fitting[k]) if nt.max_nodes is None \
                else min(nt.max_nodes, len(self.fitting[k]))
            reserved = min(nt.max_reserved, most)
            candidates = (0, reserved, most)
            bound += min(_cost(nt, n) - node_value[k] * n for n in candidates)
        return bound

    def run(self, time_left: Callable[[], float]) -> None:
        """Generate columns until the LP is solved or ``time_left()`` runs out."""
        while time_left() > 0:
            self.iterations += 1
            value, pi, w = self.solve()
            fractional = [self._fractional_bound(k, pi) for k in range(len(self.types))]
            self._record(pi, fractional)
            added = False
            for k in range(len(self.types)):
                for pattern in self._greedy(k, pi):
                    if pi[pattern].sum() > w[k] * (1 + ENTER) + ENTER:
                        added |= self.add_column(k, pattern)
            if added:
                continue
            exact = []
            for k in range(len(self.types)):
                limit = min(KNAPSACK_LIMIT_S, max(time_left(), 0.0))
                pattern, upper = self._knapsack(k, pi, limit)
                exact.append(min(upper, fractional[k]))
                if pattern.size and pi[pattern].sum() > w[k] * (1 + ENTER) + ENTER:
                    added |= self.add_column(k, pattern)
            self._record(pi, exact)
            if not added:
                # No pattern prices out: the LP is solved, and the bound just recorded is its value.
                self.converged = True
                return

    def _record(self, pi: np.ndarray, node_value: list[float]) -> None:
        bound = self.lagrangian_bound(pi, node_value)
        if bound > self.lower_bound:
            self.lower_bound = bound
            self.last_duals = DualBound(
                {self.task_ids[i]: float(pi[i]) for i in np.flatnonzero(pi > 1e-12)},
                {nt.name: node_value[k] for k, nt in enumerate(self.types)})

    def patterns(self) -> list[tuple[str, list[str]]]:
        """Every column as (type name, task ids)."""
        return [(self.types[k].name, [self.task_ids[i] for i in tasks])
                for k, tasks in self.columns]


def _cost(nt: NodeType, nodes: int) -> float:
    reserved = min(nodes, nt.max_reserved)
    return nt.busy_reserved_cost * reserved + nt.surcharge * (nodes - reserved)
