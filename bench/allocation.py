"""Allocation benchmark (docs/allocation.md).

(a) The seed's figure: demand fixed on one node type, first fit's reserved, usage, surcharge and
    total cost against the number of reserved nodes ``R``; the curve should be U-shaped with its
    minimum where ``R`` equals the nodes the demand needs.
(b) The heuristics' gap to the MILP over random small instances (mean, p95, worst), with the
    MILP's solve times.
(c) The goal, on the instance families of ``allocation.instances`` (demands uniform, skewed
    or correlated; reservation caps tight or loose; surcharge cheap or dear; 2-5 node types):
    200 tasks (seeds 0-3), the MILP with a CPU limit (``--cpu-limit``: 10 s by default, 60 s
    and 600 s are the other levels); per instance two measures: the plan's cost above the
    best-known plan (``best_known.json``, ``allocation.best_known``) and the proven gap; per
    family the share within 0.5% and 1% of the best known, the proven gap's mean, p95 and worst,
    the share proven within 1%, and first fit's and FFD's cost above the MILP's plan; also drawn
    (``families.png``).
(c') The same on the held-out seeds 4-5 (``holdout.png``).
(d) The same over 50-400 tasks (no best-known plans there: proven gap only).

At 10 s all four run; at other limits only (c) and (c'), optionally on some instances only
(``--instances family:seed,...``), with results in ``allocation_<limit>s.json``.
``--update-best-known`` lowers the best-known entries that the run's plans beat.

Run: ``python -m bench.allocation [--quick] [--cpu-limit S] [--instances K,...]
[--update-best-known] [--json PATH]``.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from rich.console import Console

from allocation import best_known
from allocation.clock import cpu_seconds
from allocation.first_fit import first_fit, first_fit_decreasing
from allocation.heuristics import several_ffd
from allocation.instances import (
    FAMILIES,
    SHAPES,
    family_instance,
    node_type,
    random_instance,
    random_tasks,
)
from allocation.milp import OPTIMAL, solve_milp
from allocation.model import Instance, Plan
from allocation.packing import packing_of, packing_plan
from allocation.patterns import DIVE_FIX_ABOVE, PatternMaster, tail_instance
from bench import harness

MILP_TIME_LIMIT_S = 10.0
# Instances per family: of 200 tasks for the goal (seeds 0-3) and held out (4-5), and of 50-400
# tasks.
GOAL_SEEDS = range(4)
HOLDOUT_SEEDS = range(4, 6)
SIZE_SEEDS = 1
BEST_KNOWN = harness.RESULTS / "allocation" / "best_known.json"
# The goal's thresholds on the plan's cost above the best known, and on the proven gap.
NEAR_BEST = (0.005, 0.01)
PROVEN = (0.01, 0.02)


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
    seeds: range,
    tasks: int | None,
    title: str,
    console: Console,
    limit_s: float = MILP_TIME_LIMIT_S,
    only: set[str] | None = None,
    found: dict[str, tuple[Plan, float]] | None = None,
) -> list[dict[str, Any]]:
    """The MILP (``limit_s`` CPU) on one instance per family and seed (those in ``only``, keyed
    ``family:seed``, if given), with first fit and FFD. The plans of 200-task instances go to
    ``found`` (key -> plan, CPU seconds) for the best-known file."""
    runs = []
    for family in FAMILIES:
        for seed in seeds:
            key = best_known.instance_key(family.name, seed)
            if only is not None and key not in only:
                continue
            instance = family_instance(family, seed, tasks)
            result = solve_milp(instance, limit_s)
            best = result.plan.total_cost
            if found is not None and tasks == best_known.GOAL_TASKS:
                found[key] = (result.plan, result.cpu_seconds)
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
                f"{family.name} seed {seed}: {len(instance.tasks)} tasks, cost {best:.3f}, "
                f"gap {result.gap:.2%}, {result.cpu_seconds:.1f} s CPU"
            )
    return runs


def add_best_known(runs: list[dict[str, Any]], entries: best_known.Entries) -> None:
    """Each run's best-known cost and its plan's cost above it (None without an entry)."""
    for run in runs:
        entry = entries.get(best_known.instance_key(run["family"], run["seed"]))
        if entry is None or run["tasks"] != entry["tasks"]:
            run["best_known_cost"] = run["above_best_known"] = None
        else:
            run["best_known_cost"] = entry["cost"]
            run["above_best_known"] = run["milp_cost"] / entry["cost"] - 1


def family_summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per family and for all: share within 0.5% and 1% of the best known and the cost above
    it, share proven within 1% and the proven gap, first fit's and FFD's cost above the plan."""
    groups = [(f.name, [r for r in runs if r["family"] == f.name]) for f in FAMILIES]
    rows = []
    for name, mine in [*groups, ("all", runs)]:
        if not mine:
            continue
        gaps = [r["gap"] for r in mine]
        above = [r["above_best_known"] for r in mine if r.get("above_best_known") is not None]
        rows.append(
            {
                "family": name,
                "instances": len(mine),
                "within_half_pct_of_best": sum(a <= NEAR_BEST[0] + 1e-9 for a in above),
                "within_1pct_of_best": sum(a <= NEAR_BEST[1] + 1e-9 for a in above),
                "above_best_known": _stats(above) if above else None,
                "proven_within_1pct": sum(g <= PROVEN[0] for g in gaps),
                "proven_within_2pct": sum(g <= PROVEN[1] for g in gaps),
                "gap": _stats(gaps),
                "first_fit_gap": _stats([r["first_fit_cost"] / r["milp_cost"] - 1 for r in mine]),
                "ffd_gap": _stats([r["ffd_cost"] / r["milp_cost"] - 1 for r in mine]),
                "cpu_seconds": _stats([r["cpu_seconds"] for r in mine]),
            }
        )
    return rows


def family_table(runs: list[dict[str, Any]], title: str, console: Console) -> None:
    def above(row: dict[str, Any], key: str) -> str:
        stats = row["above_best_known"]
        return f"{stats[key]:.2%}" if stats is not None else "-"

    summary = family_summary(runs)
    rows = [
        [
            row["family"],
            str(row["instances"]),
            f"{row['within_half_pct_of_best']}",
            f"{row['within_1pct_of_best']}",
            above(row, "mean"),
            above(row, "max"),
            f"{row['proven_within_1pct']}",
            f"{row['proven_within_2pct']}",
            *(f"{row['gap'][k]:.2%}" for k in ("mean", "max")),
            f"{row['first_fit_gap']['mean']:+.0%}",
            f"{row['ffd_gap']['mean']:+.0%}",
            f"{row['cpu_seconds']['max']:.1f}",
        ]
        for row in summary
    ]
    harness.print_table(
        title,
        (
            "family",
            "n",
            "<=0.5% best",
            "<=1% best",
            "above best mean",
            "max",
            "proven <=1%",
            "<=2%",
            "gap mean",
            "max",
            "FF",
            "FFD",
            "CPU s",
        ),
        rows,
        bold_rows=[len(rows) - 1],
    )
    console.print(
        "<=0.5% best, <=1% best: instances whose plan costs at most that much above the "
        "best-known plan (best_known.json); above best: the plan's cost over the best known, "
        "minus 1; proven <=1%, <=2%: instances whose proven gap, (cost - lower bound) / cost, "
        "is at most that; FF, FFD: first fit's and first-fit-decreasing's mean cost above the "
        "MILP's plan; CPU s: the longest solve."
    )


def plot_families(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    """Per instance by family: cost above the best-known plan, proven gap, and first fit's and
    FFD's cost above the MILP's plan."""
    fig = Figure(figsize=(13, 5.5))
    ax_best, ax_gap, ax_heur = fig.subplots(1, 3, sharey=True)
    names = [f.name for f in FAMILIES if any(r["family"] == f.name for r in runs)]
    for y, name in enumerate(names):
        mine = [r for r in runs if r["family"] == name]
        known = [r for r in mine if r.get("above_best_known") is not None]
        ax_best.scatter(
            [100 * r["above_best_known"] for r in known],
            [y] * len(known),
            color="tab:green",
            alpha=0.7,
            s=18,
        )
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
    for limit, style in ((0.5, "--"), (1, ":")):
        ax_best.axvline(limit, color="grey", linestyle=style, linewidth=1)
    for limit, style in ((1, "--"), (2, ":")):
        ax_gap.axvline(limit, color="grey", linestyle=style, linewidth=1)
    ax_best.set_yticks(range(len(names)), names, fontsize="small")
    ax_best.set_xlabel("MILP plan's cost above the best known (%)")
    ax_gap.set_xlabel("MILP proven gap at the time limit (%)")
    ax_heur.set_xlabel("cost above the MILP's plan (%)")
    ax_heur.scatter([], [], color="tab:red", label="first fit")
    ax_heur.scatter([], [], color="tab:orange", label="first-fit-decreasing")
    ax_heur.legend(fontsize="small", loc="lower right")
    ax_best.invert_yaxis()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def goal_verdict(runs: list[dict[str, Any]], console: Console) -> dict[str, Any]:
    """The issue-33 goals on these runs: cost within 0.5% of the best known on all but 2 of 48
    (scaled to the runs) and within 1% on all; proven gap at most 2% on all and 1% on 42 of
    48."""
    above = [r["above_best_known"] for r in runs if r.get("above_best_known") is not None]
    gaps = [r["gap"] for r in runs]
    n = len(runs)
    verdict = {
        "within_half_pct_of_best": sum(a <= NEAR_BEST[0] + 1e-9 for a in above),
        "within_1pct_of_best": sum(a <= NEAR_BEST[1] + 1e-9 for a in above),
        "proven_within_1pct": sum(g <= PROVEN[0] for g in gaps),
        "proven_within_2pct": sum(g <= PROVEN[1] for g in gaps),
        "instances": n,
    }
    allowed_above = round(n * 2 / 48)
    proven_goal = math.ceil(n * 42 / 48)
    console.print(
        f"within 0.5% of the best known: {verdict['within_half_pct_of_best']} of {n} (goal: "
        f"{n - allowed_above}); within 1%: {verdict['within_1pct_of_best']} of {n} (goal: {n}); "
        f"proven within 2%: {verdict['proven_within_2pct']} of {n} (goal: {n}); proven within "
        f"1%: {verdict['proven_within_1pct']} of {n} (goal: {proven_goal})"
    )
    return verdict


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
    }


def dive_plans(console: Console, only: set[str] | None) -> dict[str, tuple[Plan, float]]:
    """The pattern LP's dives alone, as a method for the best-known file: per 200-task instance
    (seeds 0-5), the LP started from the bins of ``several_ffd``, each dive of
    ``DIVE_FIX_ABOVE`` from its root, the tail solved by ``solve_milp`` (1 s CPU); the cheaper
    plan, with the CPU seconds of it all."""
    found: dict[str, tuple[Plan, float]] = {}
    for family in FAMILIES:
        for seed in (*GOAL_SEEDS, *HOLDOUT_SEEDS):
            key = best_known.instance_key(family.name, seed)
            if only is not None and key not in only:
                continue
            instance = family_instance(family, seed, best_known.GOAL_TASKS)
            started = cpu_seconds()
            bins = [(t, b) for p in several_ffd(instance) for t, group in p.items() for b in group]
            master = PatternMaster(instance, bins)
            master.generate(lambda: False)
            best: Plan | None = None
            for fix_above in DIVE_FIX_ABOVE:
                master.unfix()
                fixed = master.dive(lambda: False, fix_above)
                tail = tail_instance(instance, fixed) if fixed is not None else None
                if fixed is None or tail is None:
                    continue
                tail_packing = packing_of(solve_milp(tail, 1.0).plan) if tail.tasks else {}
                packing = {
                    nt.name: fixed.get(nt.name, []) + tail_packing.get(nt.name, [])
                    for nt in instance.node_types
                }
                plan = packing_plan(instance, packing, 0.0)
                if best is None or plan.total_cost < best.total_cost:
                    best = plan
            if best is not None:
                found[key] = (best, cpu_seconds() - started)
                console.log(f"{key}: dives' plan {best.total_cost:.3f}")
    return found


def rescore(path: Path) -> None:
    """The result file's runs measured against best_known.json as it is now (entries only ever
    go down, so a run's cost above the best known can only grow after it), its tables printed
    and plots redrawn; the file keeps its provenance and records when it was rescored."""
    console = Console(width=max(Console().width, 140))
    document = json.loads(path.read_text())
    entries = best_known.load(BEST_KNOWN)
    limit = document.get("cpu_limit_s", MILP_TIME_LIMIT_S)
    suffix = "" if path.name == "allocation.json" else f"_{limit:g}s"
    for section, name, title in (
        ("goal", "families", f"(c) goal: 200 tasks, seeds 0-3; MILP limit {limit:g} s CPU"),
        ("holdout", "holdout", f"(c') held out: 200 tasks, seeds 4-5; MILP limit {limit:g} s CPU"),
    ):
        runs = document.get(section, {}).get("runs")
        if not runs:
            continue
        add_best_known(runs, entries)
        family_table(runs, title, console)
        plot_families(runs, path.parent / f"{name}{suffix}.png", title)
        document[section]["summary"] = family_summary(runs)
        document[section]["verdict"] = goal_verdict(runs, console)
    document["rescored_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
    path.write_text(json.dumps(document, indent=2) + "\n")
    console.print(f"rescored: {path}")


def main(argv: list[str] | None = None) -> None:
    parser = harness.arguments(
        __doc__, quick="20 random instances, one 200-task instance per family and no mixed sizes"
    )
    parser.add_argument(
        "--cpu-limit",
        type=float,
        default=MILP_TIME_LIMIT_S,
        help="the MILP's CPU-time limit per instance, in seconds (10, 60 or 600; at any but "
        "10 only the 200-task families run)",
    )
    parser.add_argument(
        "--instances",
        help="only these 200-task instances, as family:seed,... (e.g. correlated/loose/cheap:0)",
    )
    parser.add_argument(
        "--update-best-known",
        action="store_true",
        help="lower the entries of best_known.json that this run's plans beat",
    )
    parser.add_argument(
        "--dives",
        action="store_true",
        help="run the pattern LP's dives alone on the 200-task instances (seeds 0-5) and lower "
        "best_known.json with their plans; nothing else",
    )
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="solve nothing: measure the result file's plans (--json, or the level's file) "
        "against best_known.json as it is now, and redraw its plots",
    )
    args = parser.parse_args(argv)
    limit = args.cpu_limit
    full = limit == MILP_TIME_LIMIT_S and args.instances is None
    if args.json is None and not full and not args.quick:
        suffix = f"_{limit:g}s" if args.instances is None else f"_{limit:g}s_some"
        args.json = harness.results_dir("allocation", False) / f"allocation{suffix}.json"
    if args.rescore:
        rescore(args.json or harness.results_dir("allocation", False) / "allocation.json")
        return
    only = set(args.instances.split(",")) if args.instances else None
    if args.dives:
        entries = best_known.load(BEST_KNOWN)
        commit = (harness.git_state()["commit"] or "unknown")[:7]
        method = f"the pattern LP's dives alone, tail by solve_milp 1 s (commit {commit})"
        console = Console()
        lowered = [
            key
            for key, (plan, cpu) in dive_plans(console, only).items()
            if best_known.lower(entries, key, plan, method, cpu)
        ]
        best_known.write(BEST_KNOWN, entries)
        console.print(f"best-known plans lowered: {', '.join(lowered) or 'none'}")
        return
    run = harness.start("allocation", args)
    out = run.directory
    # Wide enough for the family tables even when the output is a pipe (80 columns by default).
    console = Console(width=max(Console().width, 140))
    results: dict[str, Any] = {"load_average_before": run.load_at_start, "cpu_limit_s": limit}
    if full:
        curve = u_curve(console)
        plot_u_curve(curve, out / "u_curve.png")
        results["u_curve"] = curve
        results["random"] = random_gaps(20 if args.quick else 100)

    found: dict[str, tuple[Plan, float]] = {}
    goal_title = f"(c) goal: 200 tasks, seeds 0-3, every family; MILP limit {limit:g} s CPU"
    holdout_title = f"(c') held out: 200 tasks, seeds 4-5; MILP limit {limit:g} s CPU"
    goal_seeds = range(1) if args.quick else GOAL_SEEDS
    goal = family_runs(goal_seeds, 200, goal_title, console, limit, only, found)
    holdout = (
        []
        if args.quick
        else family_runs(HOLDOUT_SEEDS, 200, holdout_title, console, limit, only, found)
    )
    entries = best_known.load(BEST_KNOWN)
    if args.update_best_known:
        commit = (run.code["commit"] or "unknown")[:7]
        method = f"solve_milp, {limit:g} s CPU limit (commit {commit})"
        lowered = [
            key
            for key, (plan, cpu) in found.items()
            if best_known.lower(entries, key, plan, method, cpu)
        ]
        best_known.write(BEST_KNOWN, entries)
        console.print(f"best-known plans lowered: {', '.join(lowered) or 'none'}")
    suffix = "" if full or args.quick else f"_{limit:g}s"
    for runs, title, name in ((goal, goal_title, "families"), (holdout, holdout_title, "holdout")):
        if not runs:
            continue
        add_best_known(runs, entries)
        family_table(runs, title, console)
        plot_families(runs, out / f"{name}{suffix}.png", title)
    results["goal"] = {
        "runs": goal,
        "summary": family_summary(goal),
        "verdict": goal_verdict(goal, console),
    }
    if holdout:
        results["holdout"] = {
            "runs": holdout,
            "summary": family_summary(holdout),
            "verdict": goal_verdict(holdout, console),
        }
    results["load_average_after"] = harness.load_average()
    # Written now and again after (d), so that a long run's first results are kept.
    run.write_json(results)
    if full and not args.quick:
        sizes_title = f"(d) 50-400 tasks, every family; MILP limit {limit:g} s CPU"
        sizes = family_runs(range(100, 100 + SIZE_SEEDS), None, sizes_title, console, limit)
        add_best_known(sizes, {})
        family_table(sizes, sizes_title, console)
        results["sizes"] = {"runs": sizes, "summary": family_summary(sizes)}
        results["load_average_after"] = harness.load_average()
        run.write_json(results)
    console.print(
        f"load average (1, 5, 15 min) before {run.load_at_start}, after "
        f"{results['load_average_after']}; the limit is CPU time, so load stretches "
        "wall time only"
    )


if __name__ == "__main__":
    main()
