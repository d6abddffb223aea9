"""Allocation benchmark (SPEC section 5).

(a) The seed's figure: demand fixed on one node type, first fit's reserved, usage, surcharge and
    total cost against the number of reserved nodes ``R``; the curve should be U-shaped with its
    minimum where ``R`` equals the nodes the demand needs.
(b) The heuristics' gap to the MILP over random small instances (mean, p95, worst), with the
    MILP's solve times.
(c) The goal: 200 tasks, 3 node types, up to 30 reserved of each; the MILP's solve time and proven
    gap, on two families of generated instances.

Run: ``python -m bench.allocation [--quick] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from rich.console import Console
from rich.table import Table

from allocation.first_fit import first_fit, first_fit_decreasing
from allocation.milp import OPTIMAL, solve_milp
from allocation.model import Instance
from bench import results_dir
from bench.allocation_instances import (
    SHAPES,
    correlated_instance,
    goal_instance,
    node_type,
    random_instance,
    random_tasks,
)

MILP_TIME_LIMIT_S = 10.0


def u_curve(console: Console) -> dict[str, Any]:
    """First fit's cost against the reservation, on 80 tasks and the balanced node type."""
    tasks = random_tasks(random.Random(7), 80)
    needed = len(first_fit(Instance((node_type(SHAPES[1], 80),), tuple(tasks))).nodes)
    instance = Instance((node_type(SHAPES[1], 2 * needed),), tuple(tasks))
    name = instance.node_types[0].name
    rows = []
    for reserved in range(2 * needed + 1):
        plan = first_fit(instance, {name: reserved})
        rows.append({"reserved_nodes": reserved, "reserved_cost": plan.reserved_cost,
                     "usage_cost": plan.usage_cost, "surcharge_cost": plan.surcharge_cost,
                     "total_cost": plan.total_cost})
    best = min(rows, key=lambda r: r["total_cost"])
    optimum = solve_milp(instance, MILP_TIME_LIMIT_S)

    table = Table(title=f"(a) first fit cost against reserved nodes ({len(tasks)} tasks, {name})")
    for column in ("reserved nodes", "reserved", "usage", "surcharge", "total"):
        table.add_column(column, justify="right")
    for row in rows:
        style = "bold" if row is best else None
        table.add_row(str(row["reserved_nodes"]), *(f"{row[k]:.2f}" for k in
                      ("reserved_cost", "usage_cost", "surcharge_cost", "total_cost")),
                      style=style)
    console.print(table)
    console.print(f"minimum at R = {best['reserved_nodes']}; first fit needs {needed} nodes; "
                  f"MILP optimum {optimum.plan.total_cost:.2f} on {len(optimum.plan.nodes)} "
                  f"nodes ({optimum.status})")
    return {"node_type": name, "tasks": len(tasks), "nodes_needed_by_first_fit": needed,
            "argmin_reserved": best["reserved_nodes"], "min_total_cost": best["total_cost"],
            "milp_total_cost": optimum.plan.total_cost, "milp_nodes": len(optimum.plan.nodes),
            "milp_status": optimum.status, "rows": rows}


def plot_u_curve(figure: dict[str, Any], path: Path) -> None:
    rows = figure["rows"]
    xs = [r["reserved_nodes"] for r in rows]
    # A bare Figure renders with Agg, without pyplot's global state or a display.
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for key, label in (("total_cost", "total"), ("reserved_cost", "reserved"),
                       ("usage_cost", "usage"), ("surcharge_cost", "surcharge")):
        ax.plot(xs, [r[key] for r in rows], label=label, linewidth=2.5 if key == "total_cost"
                else 1.5)
    ax.axvline(figure["nodes_needed_by_first_fit"], color="grey", linestyle=":",
               label="nodes the demand needs (first fit)")
    ax.axhline(figure["milp_total_cost"], color="black", linestyle="--", linewidth=1,
               label="MILP optimum (reservation chosen)")
    ax.set_xlabel("reserved nodes R")
    ax.set_ylabel("cost")
    ax.set_title(f"First fit, {figure['tasks']} tasks on {figure['node_type']} nodes")
    top = max(max(r["total_cost"] for r in rows), figure["milp_total_cost"])
    ax.set_ylim(0, top * 1.45)  # headroom for the legend
    ax.legend(loc="upper center", ncol=2, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def random_gaps(count: int, console: Console) -> dict[str, Any]:
    rng = random.Random(2024)
    gaps: dict[str, list[float]] = {"first_fit": [], "ffd": []}
    times: list[float] = []
    proven = 0
    for _ in range(count):
        instance = random_instance(rng)
        result = solve_milp(instance, MILP_TIME_LIMIT_S)
        best = result.plan.total_cost
        times.append(result.solve_seconds)
        proven += result.status == OPTIMAL
        for name, heuristic in (("first_fit", first_fit), ("ffd", first_fit_decreasing)):
            gaps[name].append((heuristic(instance).total_cost - best) / best)

    table = Table(title=f"(b) gap to the MILP over {count} random instances "
                        f"(10-40 tasks, 1-3 types; {proven} proven optimal)")
    for column in ("", "mean", "p95", "worst"):
        table.add_column(column, justify="right")
    summary: dict[str, Any] = {"instances": count, "milp_proven_optimal": proven}
    for name, values in gaps.items():
        stats = _stats(values)
        summary[f"{name}_gap"] = stats
        table.add_row(f"{name} gap", *(f"{stats[k]:.1%}" for k in ("mean", "p95", "max")))
    summary["milp_seconds"] = _stats(times)
    table.add_row("MILP seconds", *(f"{summary['milp_seconds'][k]:.2f}"
                                    for k in ("mean", "p95", "max")))
    console.print(table)
    return summary


def goal_runs(seeds: range, console: Console) -> list[dict[str, Any]]:
    table = Table(title="(c) goal: 200 tasks, 3 types, max 30 reserved each; "
                        f"MILP limit {MILP_TIME_LIMIT_S:g} s")
    table.add_column("family", no_wrap=True)
    for column in ("seed", "first fit", "ffd", "MILP", "status", "gap", "seconds"):
        table.add_column(column, justify="right")
    runs = []
    for family, make in (("independent", goal_instance), ("correlated", correlated_instance)):
        for seed in seeds:
            instance = make(seed)
            result = solve_milp(instance, MILP_TIME_LIMIT_S)
            run = {"family": family, "seed": seed,
                   "first_fit_cost": first_fit(instance).total_cost,
                   "ffd_cost": first_fit_decreasing(instance).total_cost,
                   "milp_cost": result.plan.total_cost, "status": result.status,
                   "gap": result.gap, "solve_seconds": result.solve_seconds}
            runs.append(run)
            table.add_row(family, str(seed), f"{run['first_fit_cost']:.2f}",
                          f"{run['ffd_cost']:.2f}", f"{run['milp_cost']:.2f}", run["status"],
                          f"{run['gap']:.2%}", f"{run['solve_seconds']:.2f}")
    console.print(table)
    return runs


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"mean": statistics.fmean(ordered),
            "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
            "max": ordered[-1]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="20 random instances and one goal instance per family")
    parser.add_argument("--out", type=Path, help="where to write (default: bench/results)")
    args = parser.parse_args(argv)
    out = args.out or results_dir("allocation", args.quick)
    out.mkdir(parents=True, exist_ok=True)
    console = Console()

    curve = u_curve(console)
    plot_u_curve(curve, out / "u_curve.png")
    results = {
        "u_curve": curve,
        "random": random_gaps(20 if args.quick else 100, console),
        "goal": goal_runs(range(1 if args.quick else 5), console),
    }
    (out / "allocation.json").write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"wrote {out / 'u_curve.png'} and {out / 'allocation.json'}")


if __name__ == "__main__":
    main()
