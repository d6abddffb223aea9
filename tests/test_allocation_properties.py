"""Property tests: every solver's plan is feasible, the MILP is never beaten, and on tiny
instances it equals brute force."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import TypeVar

from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from allocation.first_fit import first_fit, first_fit_decreasing
from allocation.milp import OPTIMAL, solve_milp
from allocation.model import (
    Instance,
    InstanceError,
    NodeType,
    NoFeasiblePlan,
    Resources,
    Task,
    validate_plan,
)
from allocation.patterns import DIVE_TAIL_TASKS

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@st.composite
def instances(draw: st.DrawFn, max_tasks: int, max_types: int = 3, min_tasks: int = 1) -> Instance:
    """Small integer capacities and prices, so that bins fill exactly and ties happen."""
    node_types = []
    for k in range(draw(st.integers(1, max_types))):
        reserved = draw(st.integers(0, 4))
        usage = draw(st.integers(0, 3))
        node_types.append(
            NodeType(
                name=f"type{k}",
                capacity=Resources(*(draw(st.integers(1, 8)) for _ in range(3))),
                reserved=float(reserved),
                usage=float(usage),
                surcharge=float(reserved + usage + draw(st.integers(1, 6))),
                max_reserved=draw(st.integers(0, 3)),
                max_surcharge=draw(st.one_of(st.none(), st.integers(0, 3))),
            )
        )
    tasks = []
    for i in range(draw(st.integers(min_tasks, max_tasks))):
        # Each task is drawn to fit some type, so most instances are valid.
        capacity = draw(st.sampled_from(node_types)).capacity.as_tuple()
        tasks.append(
            Task(f"t{i}", Resources(*(float(draw(st.integers(0, int(c)))) for c in capacity)))
        )
    try:
        return Instance(tuple(node_types), tuple(tasks))
    except InstanceError:
        reject()


T = TypeVar("T")


def or_none(solver: Callable[[Instance], T], instance: Instance) -> T | None:
    """The solver's answer, or None when it finds no feasible plan."""
    try:
        return solver(instance)
    except NoFeasiblePlan:
        return None


@SETTINGS
@given(instances(max_tasks=25), st.data())
def test_heuristic_plans_are_feasible(instance: Instance, data: st.DataObject) -> None:
    reserved = {nt.name: data.draw(st.integers(0, nt.max_reserved)) for nt in instance.node_types}
    for solver in (first_fit, first_fit_decreasing):
        for plan in (
            or_none(solver, instance),
            or_none(lambda i, s=solver: s(i, reserved), instance),
        ):
            if plan is not None:
                validate_plan(instance, plan)


@SETTINGS
@given(instances(max_tasks=25))
def test_default_reservation_reproduces_itself(instance: Instance) -> None:
    plan = or_none(first_fit, instance)
    assume(plan is not None)
    reserved = {nt.name: plan.node_counts()[nt.name, "reserved"] for nt in instance.node_types}
    assert first_fit(instance, reserved).nodes == plan.nodes


@settings(SETTINGS, max_examples=60)
@given(instances(max_tasks=12))
def test_milp_plan_is_feasible_and_no_dearer_than_the_heuristics(instance: Instance) -> None:
    result = or_none(lambda i: solve_milp(i, time_limit_s=10), instance)
    heuristics = [or_none(solver, instance) for solver in (first_fit, first_fit_decreasing)]
    if result is None:
        assert heuristics == [None, None]
        return
    validate_plan(instance, result.plan)
    assert 0 <= result.gap < 1
    for plan in heuristics:
        if plan is not None:
            assert result.plan.total_cost <= plan.total_cost + 1e-9


@settings(SETTINGS, max_examples=8)
@given(instances(max_tasks=40, min_tasks=DIVE_TAIL_TASKS + 1))
def test_plan_with_the_pattern_phase_is_feasible_and_no_dearer_than_first_fit(
    instance: Instance,
) -> None:
    # More tasks than a dive's tail: the pattern LP and its dive run unless the bound is met
    # first; a short limit keeps the test quick and cuts the phases short.
    result = or_none(lambda i: solve_milp(i, time_limit_s=1), instance)
    heuristics = [or_none(solver, instance) for solver in (first_fit, first_fit_decreasing)]
    if result is None:
        assert heuristics == [None, None]
        return
    validate_plan(instance, result.plan)
    for plan in heuristics:
        if plan is not None:
            assert result.plan.total_cost <= plan.total_cost + 1e-9


@settings(SETTINGS, max_examples=60)
@given(instances(max_tasks=5))
def test_milp_equals_brute_force_on_tiny_instances(instance: Instance) -> None:
    best = brute_force(instance)
    result = or_none(lambda i: solve_milp(i, time_limit_s=10), instance)
    if best is None:
        assert result is None
        return
    assert result is not None and result.status == OPTIMAL
    assert abs(result.plan.total_cost - best) < 1e-6


def brute_force(instance: Instance) -> float | None:
    """Cheapest cost over every partition of the tasks and every type for each part, with each
    type's nodes reserved up to max_reserved and surcharge beyond (idle nodes never pay off)."""
    best = None
    for blocks in partitions(list(instance.tasks)):
        loads = [sum((t.demand for t in block), Resources(0, 0, 0)) for block in blocks]
        options = [
            [nt for nt in instance.node_types if load.fits_in(nt.capacity)] for load in loads
        ]
        for choice in itertools.product(*options):
            cost = 0.0
            for nt in instance.node_types:
                n = sum(1 for chosen in choice if chosen is nt)
                if nt.max_surcharge is not None and n > nt.max_reserved + nt.max_surcharge:
                    break
                cost += (nt.reserved + nt.usage) * min(n, nt.max_reserved)
                cost += nt.surcharge * max(0, n - nt.max_reserved)
            else:
                best = cost if best is None else min(best, cost)
    return best


def partitions(items: list[Task]) -> Iterator[list[list[Task]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for smaller in partitions(rest):
        for k in range(len(smaller)):
            yield smaller[:k] + [[first, *smaller[k]]] + smaller[k + 1 :]
        yield [[first], *smaller]
