"""``crawlflow plan``: first fit, first-fit-decreasing and the MILP side by side."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from allocation.first_fit import first_fit, first_fit_decreasing
from allocation.milp import MilpResult, solve_milp
from allocation.model import DIMENSIONS, Instance, Plan, load_instance

# Time limit of the MILP in `crawlflow plan`.
PLAN_TIME_LIMIT_S = 10.0


@dataclass(frozen=True)
class Comparison:
    instance: Instance
    first_fit: Plan
    ffd: Plan
    milp: MilpResult

    def plans(self) -> dict[str, Plan]:
        """Plans by solver name, in the order they are shown."""
        return {"first_fit": self.first_fit, "ffd": self.ffd, "milp": self.milp.plan}

    def gap_to_milp(self, plan: Plan) -> float:
        """How much dearer than the MILP's plan, relative to it (0 when the same cost)."""
        best = self.milp.plan.total_cost
        return (plan.total_cost - best) / best if best > 0 else 0.0


def compare(instance: Instance, time_limit_s: float = PLAN_TIME_LIMIT_S) -> Comparison:
    return Comparison(
        instance,
        first_fit(instance),
        first_fit_decreasing(instance),
        solve_milp(instance, time_limit_s),
    )


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """``{"plans": {"first_fit": PLAN, "ffd": PLAN, "milp": PLAN + milp_outcome(...)}}``."""
    plans = {name: plan.to_json() for name, plan in comparison.plans().items()}
    plans["milp"].update(milp_outcome(comparison.milp))
    return {"plans": plans}


def milp_outcome(result: MilpResult) -> dict[str, Any]:
    """Whether the MILP stopped on its time limit, and the gap it proved."""
    return {
        "status": result.status,
        "time_limit_hit": result.time_limit_hit,
        "gap": result.gap,
        "lower_bound": result.lower_bound,
        "time_limit_s": result.time_limit_s,
        "cpu_seconds": result.cpu_seconds,
    }


def milp_sentence(result: MilpResult) -> str:
    """The MILP's outcome in one plain sentence."""
    if not result.time_limit_hit:
        return (
            f"MILP: optimal (proven) after {result.cpu_seconds:.1f} s CPU "
            f"({result.solve_seconds:.1f} s wall), within its {result.time_limit_s:g} s "
            "limit."
        )
    return (
        f"MILP: time limit hit ({result.time_limit_s:g} s CPU, {result.solve_seconds:.1f} s "
        f"wall); its best plan costs "
        f"{result.plan.total_cost:.2f}, proven within {result.gap:.2%} of the optimum "
        f"(lower bound {result.lower_bound:.2f}); gaps to it are to this plan, not to the "
        "optimum."
    )


def plans_table_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """One flat row per solver, for Parquet or a Prefect table artifact."""
    rows = []
    for name, plan in comparison.plans().items():
        counts = plan.node_counts()
        utilization = plan.utilization()
        is_milp = name == "milp"
        rows.append(
            {
                "solver": name,
                "total_cost": plan.total_cost,
                "reserved_cost": plan.reserved_cost,
                "usage_cost": plan.usage_cost,
                "surcharge_cost": plan.surcharge_cost,
                "reserved_nodes": sum(n for (_, kind), n in counts.items() if kind == "reserved"),
                "surcharge_nodes": sum(n for (_, kind), n in counts.items() if kind == "surcharge"),
                "nodes_by_type": _nodes_by_type(plan),
                **{f"utilization_{dim}": getattr(utilization, dim) for dim in DIMENSIONS},
                "solve_seconds": plan.solve_seconds,
                "gap_to_milp": comparison.gap_to_milp(plan),
                "milp_status": comparison.milp.status if is_milp else None,
                "milp_time_limit_hit": comparison.milp.time_limit_hit if is_milp else None,
                "milp_gap": comparison.milp.gap if is_milp else None,
            }
        )
    return rows


def render(comparison: Comparison, console: Console) -> None:
    rows = plans_table_rows(comparison)
    instance = comparison.instance
    table = Table(
        title=f"Allocation of {len(instance.tasks)} tasks on {len(instance.node_types)} node types"
    )
    table.add_column("", no_wrap=True)
    for row in rows:
        table.add_column(_TITLES[row["solver"]], justify="right")

    def line(label: str, fmt: str, key: str) -> None:
        table.add_row(label, *(fmt.format(row[key]) for row in rows))

    line("total cost", "{:.2f}", "total_cost")
    line("  reserved", "{:.2f}", "reserved_cost")
    line("  usage", "{:.2f}", "usage_cost")
    line("  surcharge", "{:.2f}", "surcharge_cost")
    line("reserved nodes", "{}", "reserved_nodes")
    line("surcharge nodes", "{}", "surcharge_nodes")
    for nt in instance.node_types:
        table.add_row(
            f"  {nt.name} nodes",
            *(_type_nodes(plan, nt.name) for plan in comparison.plans().values()),
        )
    for dim, label in zip(DIMENSIONS, ("cpu", "memory", "bandwidth"), strict=True):
        line(f"utilization {label}", "{:.1%}", f"utilization_{dim}")
    line("solve time (s, wall)", "{:.3f}", "solve_seconds")
    line("gap to MILP", "{:+.2%}", "gap_to_milp")
    console.print(table)
    console.print(milp_sentence(comparison.milp))


def plan_command(instance_path: str, json_out: str | None) -> None:
    """Load an instance, print the three plans side by side, and write them to ``json_out``.

    Raises InstanceError for a bad instance file and SolverUnavailable if CBC cannot run.
    """
    comparison = compare(load_instance(instance_path))
    render(comparison, Console())
    if json_out is not None:
        Path(json_out).write_text(json.dumps(comparison_json(comparison), indent=2) + "\n")


_TITLES = {"first_fit": "first fit", "ffd": "first fit decr.", "milp": "MILP (CBC, HiGHS)"}


def _type_nodes(plan: Plan, type_name: str) -> str:
    """Like ``30r+1s``: reserved and surcharge nodes of one type."""
    counts = plan.node_counts()
    kinds = [
        f"{counts[type_name, kind]}{kind[0]}"
        for kind in ("reserved", "surcharge")
        if counts[type_name, kind]
    ]
    return "+".join(kinds) or "-"


def _nodes_by_type(plan: Plan) -> str:
    """Like ``bal8 30r+1s, net4 4r``."""
    parts = [
        f"{nt.name} {_type_nodes(plan, nt.name)}"
        for nt in plan.instance.node_types
        if any(n.type == nt.name for n in plan.nodes)
    ]
    return ", ".join(parts) or "none"
