"""The seed's heuristic, first fit that prefers busy nodes, and first-fit-decreasing.

Placement rule (docs/allocation.md), for each task in order:

1. the first busy node (one already holding a task) whose remaining capacity fits the task in
   every dimension, scanning nodes in the order they were created;
2. else the first idle reserved node that fits;
3. else a new surcharge node, of the type with the lowest surcharge price per task slot (see
   ``_slots``) among the types that fit the task and still have surcharge nodes left;
4. else ``NoFeasiblePlan``.

Reserved nodes are created up front, grouped by type in order of ``busy_reserved_cost`` per task
slot, cheapest first, so an idle node is taken from the cheapest type that fits.

How many nodes to reserve when the caller does not say (``reserved=None``): the nodes first fit
uses when it may reserve up to ``max_reserved`` of every type. Placement is computed once with
that full pool, and the reserved nodes left idle are dropped; the result is exactly what first
fit does when given only the nodes it used, because an idle node is skipped only when an earlier
node of the same type was taken or it does not fit, and removing never-used nodes changes
neither case.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from allocation.model import (
    DIMENSIONS,
    ZERO,
    Instance,
    Kind,
    Node,
    NodeType,
    NoFeasiblePlan,
    Plan,
    Resources,
    Task,
    make_nodes,
)


def first_fit(instance: Instance, reserved: dict[str, int] | None = None) -> Plan:
    """Place tasks in instance order; ``reserved`` maps type name to reserved node count."""
    return _timed_pack(instance, list(instance.tasks), reserved)


def first_fit_decreasing(instance: Instance, reserved: dict[str, int] | None = None) -> Plan:
    """First fit with the largest tasks first (by ``task_sizes``; ties keep instance order)."""
    sizes = task_sizes(instance)
    order = sorted(instance.tasks, key=lambda task: sizes[task.id], reverse=True)
    return _timed_pack(instance, order, reserved)


def task_sizes(instance: Instance) -> dict[str, float]:
    """Size of each task: the sum over dimensions of its demand over the largest capacity any
    node type has in that dimension, so that no single unit (cores vs Mbps) dominates."""
    largest = [max(getattr(nt.capacity, dim) for nt in instance.node_types) for dim in DIMENSIONS]
    return {
        task.id: sum(d / c for d, c in zip(task.demand.as_tuple(), largest, strict=True) if c > 0)
        for task in instance.tasks
    }


@dataclass
class _Bin:
    type: NodeType
    kind: Kind
    load: Resources = ZERO
    tasks: list[str] = field(default_factory=list)

    def fits(self, task: Task) -> bool:
        return (self.load + task.demand).fits_in(self.type.capacity)

    def add(self, task: Task) -> None:
        self.load = self.load + task.demand
        self.tasks.append(task.id)


def _timed_pack(instance: Instance, order: list[Task], reserved: dict[str, int] | None) -> Plan:
    start = time.perf_counter()
    nodes = _pack(instance, order, reserved)
    return Plan(instance, nodes, solve_seconds=time.perf_counter() - start)


def _pack(
    instance: Instance, order: list[Task], reserved: dict[str, int] | None
) -> tuple[Node, ...]:
    slots = _slots(instance)
    by_reserved_price = _ranked(instance, slots, lambda nt: nt.busy_reserved_cost)
    by_surcharge_price = _ranked(instance, slots, lambda nt: nt.surcharge)
    counts = _reserved_counts(instance, reserved)

    bins = [_Bin(nt, "reserved") for nt in by_reserved_price for _ in range(counts[nt.name])]
    surcharge_used = dict.fromkeys(counts, 0)
    for task in order:
        target = next((b for b in bins if b.tasks and b.fits(task)), None)
        if target is None:
            target = next((b for b in bins if not b.tasks and b.fits(task)), None)
        if target is None:
            nt = next(
                (
                    nt
                    for nt in by_surcharge_price
                    if task.demand.fits_in(nt.capacity)
                    and (nt.max_surcharge is None or surcharge_used[nt.name] < nt.max_surcharge)
                ),
                None,
            )
            if nt is None:
                raise NoFeasiblePlan(
                    f"first fit cannot place task {task.id!r}: no reserved node fits it and "
                    "every node type that could hold it is at max_surcharge"
                )
            surcharge_used[nt.name] += 1
            target = _Bin(nt, "surcharge")
            bins.append(target)
        target.add(task)
    if reserved is None:
        bins = [b for b in bins if b.kind == "surcharge" or b.tasks]
    return make_nodes((b.type.name, b.kind, b.tasks) for b in bins)


def _reserved_counts(instance: Instance, reserved: dict[str, int] | None) -> dict[str, int]:
    if reserved is None:
        # The sizing pool; a type never needs more nodes than there are tasks it can hold.
        return {
            nt.name: min(nt.max_reserved, _tasks_fitting(instance, nt))
            for nt in instance.node_types
        }
    unknown = sorted(set(reserved) - {nt.name for nt in instance.node_types})
    if unknown:
        raise ValueError(f"reserved names unknown node type {unknown[0]!r}")
    counts = {nt.name: reserved.get(nt.name, 0) for nt in instance.node_types}
    for nt in instance.node_types:
        if not 0 <= counts[nt.name] <= nt.max_reserved:
            raise ValueError(
                f"reserved[{nt.name!r}]={counts[nt.name]} is outside "
                f"0..max_reserved={nt.max_reserved}"
            )
    return counts


def _tasks_fitting(instance: Instance, nt: NodeType) -> int:
    return sum(task.demand.fits_in(nt.capacity) for task in instance.tasks)


def _slots(instance: Instance) -> dict[str, float]:
    """How many average tasks fit on a node of each type, by its tightest dimension.

    Prices are compared per slot so that a big node is not ranked behind a small one only
    because it costs more in absolute terms.
    """
    n = max(len(instance.tasks), 1)
    mean = [d / n for d in instance.total_demand().as_tuple()]
    slots: dict[str, float] = {}
    for nt in instance.node_types:
        ratios = [c / m for c, m in zip(nt.capacity.as_tuple(), mean, strict=True) if m > 0]
        slots[nt.name] = min(ratios, default=math.inf)
    return slots


def _ranked(
    instance: Instance, slots: dict[str, float], price: Callable[[NodeType], float]
) -> list[NodeType]:
    """Types by price per task slot, cheapest first; ties (as when nothing has demand, and all
    slots are infinite) by price, then instance order."""

    def key(nt: NodeType) -> tuple[float, float]:
        n = slots[nt.name]
        return (price(nt) / n if n > 0 else math.inf, price(nt))

    return sorted(instance.node_types, key=key)
