"""Allocation benchmark (docs/allocation.md).

(a) The seed's figure: demand fixed on one node type, first fit's reserved, usage, surcharge and
    total cost against the number of reserved nodes ``R``; the curve should be U-shaped with its
    minimum where ``R`` equals the nodes the demand needs.
(b) The heuristics' gap to the MILP over random small instances (mean, p95, worst), with the
    MILP's solve times.
(c) The goal, on the instance families of ``allocation.instances`` (demands uniform, skewed
    or correlated; reservation caps tight or loose; surcharge cheap or dear; 2-5 node types):
    200 tasks, the MILP with a 10 s CPU limit; per family the share proven within 1%, the proven
    gap's mean, p95 and worst, and first fit's and FFD's cost above the MILP's plan; also drawn.
(d) The same over 50-400 tasks.

Run: ``python -m bench.allocation [--quick] [--json PATH]``.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from rich.console import Console

from allocation.first_fit import first_fit, first_fit_decreasing
from allocation.instances import (
    FAMILIES,
    SHAPES,
    family_instance,
    node_type,
    random_instance,
    random_tasks,
)
from allocation.milp import OPTIMAL, solve_milp
from allocation.model import Instance
from bench import harness

MILP_TIME_LIMIT_S = 10.0
# Instances per family: of 200 tasks for the goal (seeds 0-3), and of 50-400 tasks.
GOAL_SEEDS = 4
SIZE_SEEDS = 1


def u_curve(console: Console) -> dict[str, Any]:
    """First fit's cost against the reservation, on 80 tasks and the balanced node type."""
    tasks = random_tasks(random.Random(7), 80)
    needed = len(first_fit(Instance((node_type(SHAPES[1], 80),), tuple(tasks))).nodes)
    instance = Instance((node_type(SHAPES[1], 2 * needed),), tuple(tasks))
    name = instance.node_types[0].name
    rows = []
    for reserved in range(2 * needed + 1):
        plan = first_fit(instance, {name: reserved})
        rows.append(
            {
                "reserved_nodes": reserved,
                "reserved_cost": plan.reserved_cost,
                "usage_cost": plan.usage_cost,
                "surcharge_cost": plan.surcharge_cost,
                "total_cost": plan.total_cost,
            }
        )
    best = min(rows, key=lambda r: r["total_cost"])
    optimum = solve_milp(instance, MILP_TIME_LIMIT_S)

    harness.print_table(
        f"(a) first fit cost against reserved nodes ({len(tasks)} tasks, {name})",
        ("reserved nodes", "reserved", "usage", "surcharge", "total"),
        [
            [
                str(row["reserved_nodes"]),
                *(
                    f"{row[k]:.2f}"
                    for k in ("reserved_cost", "usage_cost", "surcharge_cost", "total_cost")
                ),
            ]
            for row in rows
        ],
        text_columns=(),
        bold_rows=[rows.index(best)],
    )
    console.print(
        f"minimum at R = {best['reserved_nodes']}; first fit needs {needed} nodes; "
        f"MILP optimum {optimum.plan.total_cost:.2f} on {len(optimum.plan.nodes)} "
        f"nodes ({optimum.status})"
    )
    return {
        "node_type": name,
        "tasks": len(tasks),
        "nodes_needed_by_first_fit": needed,
        "argmin_reserved": best["reserved_nodes"],
        "min_total_cost": best["total_cost"],
        "milp_total_cost": optimum.plan.total_cost,
        "milp_nodes": len(optimum.plan.nodes),
        "milp_status": optimum.status,
        "rows": rows,
    }


def plot_u_curve(figure: dict[str, Any], path: Path) -> None:
    rows = figure["rows"]
    xs = [r["reserved_nodes"] for r in rows]
    # A bare Figure renders with Agg, without pyplot's global state or a display.
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for key, label in (
        ("total_cost", "total"),
        ("reserved_cost", "reserved"),
        ("usage_cost", "usage"),
        ("surcharge_cost", "surcharge"),
    ):
        ax.plot(
            xs, [r[key] for r in rows], label=label, linewidth=2.5 if key == "total_cost" else 1.5
        )
    ax.axvline(
        figure["nodes_needed_by_first_fit"],
        color="grey",
        linestyle=":",
        label="nodes the demand needs (first fit)",
    )
    ax.axhline(
        figure["milp_total_cost"],
        color="black",
        linestyle="--",
        linewidth=1,
        label="MILP optimum (reservation chosen)",
    )
    ax.set_xlabel("reserved nodes R")
    ax.set_ylabel("cost")
    ax.set_title(f"First fit, {figure['tasks']} tasks on {figure['node_type']} nodes")
    top = max(max(r["total_cost"] for r in rows), figure["milp_total_cost"])
    ax.set_ylim(0, top * 1.45)  # headroom for the legend
    ax.legend(loc="upper center", ncol=2, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def random_gaps(count: int) -> dict[str, Any]:
    rng = random.Random(2024)
    gaps: dict[str, list[float]] = {"first_fit": [], "ffd": []}
    times: list[float] = []
    proven = 0
    for _ in range(count):
        instance = random_instance(rng)
        result = solve_milp(instance, MILP_TIME_LIMIT_S)
        best = result.plan.total_cost
        times.append(result.cpu_seconds)
        proven += result.status == OPTIMAL
        for name, heuristic in (("first_fit", first_fit), ("ffd", first_fit_decreasing)):
            gaps[name].append((heuristic(instance).total_cost - best) / best)

    summary: dict[str, Any] = {"instances": count, "milp_proven_optimal": proven}
    rows = []
    for name, values in gaps.items():
        stats = _stats(values)
        summary[f"{name}_gap"] = stats
        rows.append([f"{name} gap", *(f"{stats[k]:.1%}" for k in ("mean", "p95", "max"))])
    summary["milp_cpu_seconds"] = _stats(times)
    rows.append(
        ["MILP CPU s", *(f"{summary['milp_cpu_seconds'][k]:.2f}" for k in ("mean", "p95", "max"))]
    )
    harness.print_table(
        f"(b) gap to the MILP over {count} random instances "
        f"(10-40 tasks, 1-3 types; {proven} proven optimal)",
        ("", "mean", "p95", "worst"),
        rows,
    )
    return summary


def family_runs(
    seeds: range, tasks: int | None, title: str, console: Console
) -> list[dict[str, Any]]:
    """The MILP (10 s CPU) on one instance per family and seed, with first fit and FFD."""
    runs = []
    for family in FAMILIES:
        for seed in seeds:
            instance = family_instance(family, seed, tasks)
            result = solve_milp(instance, MILP_TIME_LIMIT_S)
            best = result.plan.total_cost
            runs.append(
                {
                    "family": family.name,
                    "seed": seed,
                    "tasks": len(instance.tasks),
                    "node_types": len(instance.node_types),
                    "first_fit_cost": first_fit(instance).total_cost,
                    "ffd_cost": first_fit_decreasing(instance).total_cost,
                    "milp_cost": best,
                    "lower_bound": result.lower_bound,
                    "status": result.status,
                    "gap": result.gap,
                    "cpu_seconds": result.cpu_seconds,
                    "wall_seconds": result.solve_seconds,
                }
            )
            console.log(
                f"{family.name} seed {seed}: {len(instance.tasks)} tasks, "
                f"gap {result.gap:.2%}, {result.cpu_seconds:.1f} s CPU"
            )
    _family_table(runs, title, console)
    return runs


def family_summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per family: share proven within 1%, gap mean/p95/max, first fit's and FFD's gaps."""
    rows = []
    for family in FAMILIES:
        mine = [r for r in runs if r["family"] == family.name]
        if not mine:
            continue
        gaps = [r["gap"] for r in mine]
        rows.append(
            {
                "family": family.name,
                "instances": len(mine),
                "proven_within_1pct": sum(g <= 0.01 for g in gaps) / len(gaps),
                "gap": _stats(gaps),
                "first_fit_gap": _stats([r["first_fit_cost"] / r["milp_cost"] - 1 for r in mine]),
                "ffd_gap": _stats([r["ffd_cost"] / r["milp_cost"] - 1 for r in mine]),
                "cpu_seconds": _stats([r["cpu_seconds"] for r in mine]),
            }
        )
    return rows


def _family_table(runs: list[dict[str, Any]], title: str, console: Console) -> None:
    rows = [
        [
            row["family"],
            str(row["instances"]),
            f"{row['proven_within_1pct']:.0%}",
            *(f"{row['gap'][k]:.2%}" for k in ("mean", "p95", "max")),
            f"{row['first_fit_gap']['mean']:+.0%}",
            f"{row['ffd_gap']['mean']:+.0%}",
            f"{row['cpu_seconds']['max']:.1f}",
        ]
        for row in family_summary(runs)
    ]
    gaps = [r["gap"] for r in runs]
    rows.append(
        [
            "all",
            str(len(runs)),
            f"{sum(g <= 0.01 for g in gaps) / len(gaps):.0%}",
            *(f"{_stats(gaps)[k]:.2%}" for k in ("mean", "p95", "max")),
            "",
            "",
            "",
        ]
    )
    harness.print_table(
        title,
        ("family", "n", "<=1%", "mean", "p95", "max", "FF", "FFD", "CPU s"),
        rows,
        bold_rows=[len(rows) - 1],
    )
    console.print(
        "<=1%: share of instances proven within 1%; mean, p95, max: the proven gap, "
        "(MILP cost - lower bound) / MILP cost, at the time limit; FF, FFD: first fit's "
        "and first-fit-decreasing's mean cost above the MILP's plan; CPU s: the "
        "longest solve."
    )


def plot_families(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    """Proven gap per instance by family, with first fit's and FFD's gaps to the best plan."""
    fig = Figure(figsize=(10, 5.5))
    ax_gap, ax_heur = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1, 1]})
    names = [f.name for f in FAMILIES if any(r["family"] == f.name for r in runs)]
    for y, name in enumerate(names):
        mine = [r for r in runs if r["family"] == name]
        ax_gap.scatter(
            [100 * r["gap"] for r in mine], [y] * len(mine), color="tab:blue", alpha=0.7, s=18
        )
        for key, color, dy in (
            ("first_fit_cost", "tab:red", -0.15),
            ("ffd_cost", "tab:orange", 0.15),
        ):
            ax_heur.scatter(
                [100 * (r[key] / r["milp_cost"] - 1) for r in mine],
                [y + dy] * len(mine),
                color=color,
                alpha=0.7,
                s=14,
            )
    for limit, style in ((1, "--"), (2, ":")):
        ax_gap.axvline(limit, color="grey", linestyle=style, linewidth=1)
    ax_gap.set_yticks(range(len(names)), names, fontsize="small")
    ax_gap.set_xlabel("MILP proven gap at the time limit (%)")
    ax_heur.set_xlabel("cost above the MILP's plan (%)")
    ax_heur.scatter([], [], color="tab:red", label="first fit")
    ax_heur.scatter([], [], color="tab:orange", label="first-fit-decreasing")
    ax_heur.legend(fontsize="small", loc="lower right")
    ax_gap.invert_yaxis()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
    }


def main(argv: list[str] | None = None) -> None:
    parser = harness.arguments(
        __doc__, quick="20 random instances, one 200-task instance per family and no mixed sizes"
    )
    args = parser.parse_args(argv)
    run = harness.start("allocation", args)
    out = run.directory
    # Wide enough for the family tables even when the output is a pipe (80 columns by default).
    console = Console(width=max(Console().width, 100))

    curve = u_curve(console)
    plot_u_curve(curve, out / "u_curve.png")
    random_summary = random_gaps(20 if args.quick else 100)
    goal_title = f"(c) goal: 200 tasks, every family; MILP limit {MILP_TIME_LIMIT_S:g} s CPU"
    goal = family_runs(range(1 if args.quick else GOAL_SEEDS), 200, goal_title, console)
    plot_families(goal, out / "families.png", goal_title)
    results: dict[str, Any] = {
        "load_average_before": run.load_at_start,
        "u_curve": curve,
        "random": random_summary,
        "goal": {"runs": goal, "summary": family_summary(goal)},
        "load_average_after": harness.load_average(),
    }
    # Written now and again after (d), so that a long run's first results are kept.
    run.write_json(results)
    if not args.quick:
        sizes_title = f"(d) 50-400 tasks, every family; MILP limit {MILP_TIME_LIMIT_S:g} s CPU"
        sizes = family_runs(range(100, 100 + SIZE_SEEDS), None, sizes_title, console)
        results["sizes"] = {"runs": sizes, "summary": family_summary(sizes)}
        results["load_average_after"] = harness.load_average()
        run.write_json(results)
    console.print(
        f"load average (1, 5, 15 min) before {run.load_at_start}, after "
        f"{results['load_average_after']}; the limit is CPU time, so load stretches "
        "wall time only"
    )
    console.print(f"plots: {out / 'u_curve.png'}, {out / 'families.png'}")


if __name__ == "__main__":
    main()
