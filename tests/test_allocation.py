"""Unit tests of the allocation model, heuristics, MILP, demand estimate and report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulp
import pytest

from allocation import milp
from allocation.demand import (
    MAX_TASKS,
    crawl_tasks,
    host_demand,
    host_groups,
    local_node_types,
    plan_crawl,
)
from allocation.first_fit import first_fit, first_fit_decreasing
from allocation.milp import OPTIMAL, SolverUnavailable, solve_milp
from allocation.model import (
    Instance,
    InstanceError,
    Node,
    NodeType,
    NoFeasiblePlan,
    Plan,
    Resources,
    Task,
    load_instance,
    plan_cost,
    validate_plan,
)
from allocation.report import compare, comparison_json, plan_command, plans_table_rows


def instance_json() -> dict[str, Any]:
    return {
        "node_types": [
            {
                "name": "small",
                "capacity": {"cpu": 4, "memory_gb": 8, "bandwidth_mbps": 100},
                "price": {"reserved": 1.0, "usage": 0.5, "surcharge": 3.0},
                "max_reserved": 2,
            },
            {
                "name": "big",
                "capacity": {"cpu": 8, "memory_gb": 16, "bandwidth_mbps": 200},
                "price": {"reserved": 1.8, "usage": 0.8, "surcharge": 5.0},
                "max_reserved": 1,
                "max_surcharge": 2,
            },
        ],
        "tasks": [
            {"id": f"t{i}", "demand": {"cpu": 1 + i % 3, "memory_gb": 2, "bandwidth_mbps": 20}}
            for i in range(8)
        ],
    }


def one_type(max_reserved: int = 10, **prices: float) -> NodeType:
    price = {"reserved": 1.0, "usage": 0.5, "surcharge": 3.0} | prices
    return NodeType("n", Resources(4, 4, 4), max_reserved=max_reserved, **price)


def tasks(*cpus: float) -> tuple[Task, ...]:
    return tuple(Task(f"t{i}", Resources(c, c, c)) for i, c in enumerate(cpus))


# --- model -------------------------------------------------------------------------------


def test_from_json_parses_the_documented_format() -> None:
    instance = Instance.from_json(instance_json())
    assert [nt.name for nt in instance.node_types] == ["small", "big"]
    assert instance.node_type("small").max_surcharge is None
    assert instance.node_type("big").max_surcharge == 2
    assert instance.task("t2").demand == Resources(3, 2, 20)
    assert Instance.from_json(instance.to_json()) == instance


def break_json(path: list[Any], value: Any = None, delete: bool = False) -> dict[str, Any]:
    data = instance_json()
    target = data
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (break_json(["tasks"], delete=True), "missing key 'tasks'"),
        (break_json(["node_types", 0, "price", "usage"], delete=True), "missing key 'usage'"),
        (break_json(["tasks", 1, "demand", "cpu"], -1), "non-negative"),
        (break_json(["tasks", 1, "demand", "cpu"], True), "must be a number"),
        (break_json(["node_types", 0, "max_reserved"], 1.5), "non-negative integer"),
        (
            break_json(["node_types", 0, "price", "surcharge"], 1.5),
            r"must exceed reserved \+ usage",
        ),
        (break_json(["node_types", 1, "name"], "small"), "duplicate node type name 'small'"),
        (break_json(["tasks", 1, "id"], "t0"), "duplicate task id 't0'"),
        (break_json(["tasks", 1, "demand", "cpu"], 9), "fits no node type"),
        (break_json(["node_types", 0, "max_surchage"], 1), "unknown key 'max_surchage'"),
        (break_json(["node_types"], []), "no node types"),
        ([], "must be a JSON object"),
    ],
)
def test_from_json_rejects_bad_input_with_one_line(data: Any, message: str) -> None:
    with pytest.raises(InstanceError, match=message) as info:
        Instance.from_json(data)
    assert "\n" not in str(info.value)


def test_load_instance_reports_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InstanceError, match="cannot read"):
        load_instance(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InstanceError, match="invalid JSON"):
        load_instance(bad)


def test_cost_model() -> None:
    instance = Instance((one_type(),), tasks(1, 1))
    plan = Plan(
        instance,
        (
            Node("a", "n", "reserved", ("t0",)),  # reserved + usage
            Node("b", "n", "reserved", ()),  # reserved only: idle
            Node("c", "n", "surcharge", ("t1",)),  # surcharge
        ),
    )
    cost = plan_cost(instance, plan)
    assert (cost.reserved, cost.usage, cost.surcharge) == (2.0, 0.5, 3.0)
    assert plan.total_cost == 5.5
    validate_plan(instance, plan)


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ((Node("a", "n", "reserved", ("t0", "t1", "t2")),), "overloaded"),
        ((Node("a", "n", "reserved", ("t0",)),), "placed 0 times"),
        (
            (Node("a", "n", "reserved", ("t0", "t1")), Node("b", "n", "surcharge", ("t1",))),
            "placed 2 times",
        ),
        (
            (Node("a", "n", "reserved", ("t0", "t2")), Node("b", "n", "reserved", ("t1",))),
            "exceed max_reserved",
        ),
        ((Node("a", "x", "reserved", ("t0", "t1")),), "unknown type"),
    ],
)
def test_validate_plan_rejects_infeasible_plans(nodes: tuple[Node, ...], message: str) -> None:
    instance = Instance((one_type(max_reserved=1),), tasks(2, 2, 1))
    with pytest.raises(ValueError, match=message):
        validate_plan(instance, Plan(instance, nodes))


# --- first fit ---------------------------------------------------------------------------


def test_first_fit_prefers_busy_nodes_over_idle_reserved_ones() -> None:
    instance = Instance((one_type(),), tasks(1, 1, 3, 1))
    plan = first_fit(instance, {"n": 3})
    assert [n.tasks for n in plan.nodes] == [("t0", "t1", "t3"), ("t2",), ()]
    assert plan.total_cost == 3 * 1.0 + 2 * 0.5


def test_first_fit_buys_surcharge_nodes_when_reservations_run_out() -> None:
    instance = Instance((one_type(),), tasks(3, 3, 3))
    plan = first_fit(instance, {"n": 1})
    assert [(n.kind, n.tasks) for n in plan.nodes] == [
        ("reserved", ("t0",)),
        ("surcharge", ("t1",)),
        ("surcharge", ("t2",)),
    ]
    assert plan.surcharge_cost == 6.0


def test_first_fit_cost_is_u_shaped_in_the_reservation() -> None:
    instance = Instance((one_type(),), tasks(3, 3, 3, 3))  # needs 4 nodes
    totals = [first_fit(instance, {"n": r}).total_cost for r in range(9)]
    assert totals.index(min(totals)) == 4
    assert totals == sorted(totals[:5], reverse=True) + sorted(totals[5:])


def test_default_reservation_is_the_nodes_first_fit_uses() -> None:
    instance = Instance.from_json(instance_json())
    plan = first_fit(instance)
    assert all(n.tasks for n in plan.nodes)
    reserved = {nt.name: plan.node_counts()[nt.name, "reserved"] for nt in instance.node_types}
    assert first_fit(instance, reserved).nodes == plan.nodes


def test_first_fit_rejects_reservations_beyond_the_limit() -> None:
    instance = Instance((one_type(max_reserved=2),), tasks(1))
    with pytest.raises(ValueError, match="max_reserved"):
        first_fit(instance, {"n": 3})
    with pytest.raises(ValueError, match="unknown node type"):
        first_fit(instance, {"m": 1})


def test_first_fit_decreasing_places_large_tasks_first() -> None:
    instance = Instance((one_type(),), tasks(1, 1, 3, 3))
    plan = first_fit_decreasing(instance)
    assert [n.tasks for n in plan.nodes] == [("t2", "t0"), ("t3", "t1")]
    assert first_fit(instance).total_cost > plan.total_cost


def test_first_fit_reports_when_max_surcharge_leaves_no_room() -> None:
    nt = NodeType("n", Resources(4, 4, 4), 1.0, 0.5, 3.0, max_reserved=1, max_surcharge=0)
    with pytest.raises(NoFeasiblePlan, match="max_surcharge"):
        first_fit(Instance((nt,), tasks(3, 3)))


# --- MILP --------------------------------------------------------------------------------


def test_milp_finds_the_optimum_and_reserves_only_busy_nodes() -> None:
    instance = Instance.from_json(instance_json())
    result = solve_milp(instance, time_limit_s=5)
    validate_plan(instance, result.plan)
    assert result.status == OPTIMAL and result.gap == 0.0
    assert all(n.tasks for n in result.plan.nodes)
    assert result.plan.total_cost <= first_fit(instance).total_cost
    assert result.solve_seconds > 0


def test_milp_raises_when_no_plan_exists() -> None:
    nt = NodeType("n", Resources(4, 4, 4), 1.0, 0.5, 3.0, max_reserved=1, max_surcharge=0)
    with pytest.raises(NoFeasiblePlan):
        solve_milp(Instance((nt,), tasks(3, 3)), time_limit_s=5)


def test_milp_explains_a_missing_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulp.COIN_CMD, "available", lambda self: False)
    with pytest.raises(SolverUnavailable, match="CBC solver is not available"):
        solve_milp(Instance((one_type(),), tasks(1)))


def test_milp_stops_on_the_time_limit_with_its_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without candidate plans the full model has to find and prove everything by itself.
    monkeypatch.setattr(milp, "_candidates", lambda instance, time_left, *lists: iter(()))
    instance = Instance(
        (one_type(max_reserved=4),),
        tuple(Task(f"t{i}", Resources(0.3 + 0.07 * (i % 11), 0.5, 0.5)) for i in range(60)),
    )
    result = solve_milp(instance, time_limit_s=1.5)
    validate_plan(instance, result.plan)
    # The limit is CPU time (wall time on a loaded machine can be many times longer).
    assert result.cpu_seconds < 4
    if result.status != OPTIMAL:
        assert 0 < result.gap < 1


# --- demand ------------------------------------------------------------------------------


def test_host_demand_follows_the_documented_estimate() -> None:
    demand = host_demand(pages=3600, avg_page_kb=100, pages_per_s_per_host=2, budget_s=3600)
    assert demand.cpu == pytest.approx(1 * (0.005 + 0.0003 * 100))  # 1 page/s needed
    assert demand.bandwidth_mbps == pytest.approx(1 * 100 * 8 / 1000)
    assert demand.memory_gb == pytest.approx((3600 * 300 + 256 * 1024 + 2 * 100_000) / 1e9)
    capped = host_demand(pages=360_000, avg_page_kb=100, pages_per_s_per_host=2, budget_s=3600)
    assert capped.cpu == pytest.approx(2 * (0.005 + 0.0003 * 100))  # politeness rate


def test_small_hosts_are_grouped_into_few_tasks() -> None:
    host_pages = {"big.example": 100_000} | {f"h{i}.example": 10 + i % 50 for i in range(5000)}
    groups = host_groups(host_pages)
    assert len(groups) <= MAX_TASKS + 1
    assert ["big.example"] in groups.values()
    assert sorted(h for hosts in groups.values() for h in hosts) == sorted(host_pages)
    crawl = crawl_tasks(host_pages, avg_page_kb=50, pages_per_s_per_host=1, budget_s=3600)
    assert [t.id for t in crawl] == list(groups)


def test_plan_crawl_maps_every_host_to_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    host_pages = {f"h{i}.example": 500 * (i + 1) for i in range(40)}
    types = local_node_types(cpus=4, memory_gb=8)
    decision = plan_crawl(
        host_pages, types, avg_page_kb=100, pages_per_s_per_host=5, budget_s=60, time_limit_s=2
    )
    validate_plan(decision.instance, decision.chosen)
    assert decision.solver == "milp"
    assert decision.milp_cost is not None and decision.milp_cost <= decision.first_fit_cost
    placed = [h for hosts in decision.hosts_by_node.values() for h in hosts]
    assert sorted(placed) == sorted(host_pages)

    monkeypatch.setattr(pulp.COIN_CMD, "available", lambda self: False)
    fallback = plan_crawl(host_pages, types, avg_page_kb=100, pages_per_s_per_host=5, budget_s=60)
    assert fallback.solver == "first_fit" and fallback.milp is None


def test_local_node_types_validate() -> None:
    (nt,) = local_node_types(cpus=8, memory_gb=16)
    assert nt.max_reserved == 8 and nt.capacity.cpu == 1 and nt.capacity.memory_gb == 2
    Instance((nt,), ())


# --- report ------------------------------------------------------------------------------


def test_plan_command_prints_and_writes_the_documented_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(instance_json()))
    out = tmp_path / "plans.json"
    plan_command(str(path), str(out))
    assert "first fit" in capsys.readouterr().out
    plans = json.loads(out.read_text())["plans"]
    assert set(plans) == {"first_fit", "ffd", "milp"}
    for plan in plans.values():
        assert {
            "total_cost",
            "reserved_cost",
            "usage_cost",
            "surcharge_cost",
            "solve_seconds",
            "nodes",
        } <= set(plan)
        assert {"id", "type", "kind", "tasks"} == set(plan["nodes"][0])
    assert plans["milp"]["status"] == OPTIMAL and plans["milp"]["gap"] == 0


def test_plan_command_rejects_a_bad_instance(tmp_path: Path) -> None:
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(break_json(["tasks", 0, "demand"], {"cpu": 1})))
    with pytest.raises(InstanceError, match=r"tasks\[0\]\.demand: missing key 'bandwidth_mbps'"):
        plan_command(str(path), None)


def test_table_rows_have_one_row_per_solver() -> None:
    comparison = compare(Instance.from_json(instance_json()), time_limit_s=5)
    rows = plans_table_rows(comparison)
    assert [r["solver"] for r in rows] == ["first_fit", "ffd", "milp"]
    assert rows[2]["gap_to_milp"] == 0
    assert all(r["gap_to_milp"] >= 0 for r in rows)
    assert comparison_json(comparison)["plans"]["ffd"]["total_cost"] == rows[1]["total_cost"]
