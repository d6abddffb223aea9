"""The cheapest valid plan known for each benchmark instance (``bench/results/allocation/
best_known.json``), which the benchmark measures plans against.

An entry is keyed ``family:seed`` (the 200-task instances of ``allocation.instances``: seeds 0-3
for the goal, 4-5 held out) and holds the plan's cost, the method and CPU time that found it, and
the plan itself (nodes as ``[type, kind, [task ids]]``), so that anyone can check it:
``entry_plan`` rebuilds the instance and the plan, and the tests run ``validate_plan`` on every
entry and compare the cost. Entries are only ever lowered (``lower``): a run of any method, of
any length, that finds a cheaper valid plan replaces the entry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from allocation.instances import FAMILIES, family_instance
from allocation.model import Instance, Kind, Plan, make_nodes, validate_plan

# The task count of the benchmark's goal instances.
GOAL_TASKS = 200
# Costs within this are the same plan cost (sums of float prices).
COST_TOLERANCE = 1e-6

Entries = dict[str, dict[str, Any]]


def instance_key(family: str, seed: int) -> str:
    return f"{family}:{seed}"


def key_instance(key: str) -> Instance:
    """The instance an entry's key names."""
    family_name, seed = key.rsplit(":", 1)
    family = next(f for f in FAMILIES if f.name == family_name)
    return family_instance(family, int(seed), GOAL_TASKS)


def load(path: Path) -> Entries:
    if not path.exists():
        return {}
    return cast(Entries, json.loads(path.read_text())["instances"])


def entry_plan(key: str, entry: dict[str, Any]) -> tuple[Instance, Plan]:
    instance = key_instance(key)
    groups: list[tuple[str, Kind, list[str]]] = [
        (type_name, kind, tasks) for type_name, kind, tasks in entry["nodes"]
    ]
    return instance, Plan(instance, make_nodes(groups))


def lower(entries: Entries, key: str, plan: Plan, method: str, cpu_seconds: float) -> bool:
    """Record ``plan`` for the instance ``key`` if it is valid and cheaper than the entry (or
    there is none); True if recorded."""
    validate_plan(plan.instance, plan)
    cost = plan.total_cost
    known = entries.get(key)
    if known is not None and cost >= known["cost"] - COST_TOLERANCE:
        return False
    family, seed = key.rsplit(":", 1)
    entries[key] = {
        "family": family,
        "seed": int(seed),
        "tasks": len(plan.instance.tasks),
        "cost": cost,
        "method": method,
        "cpu_seconds": round(cpu_seconds, 1),
        "nodes": [[n.type, n.kind, list(n.tasks)] for n in plan.nodes],
    }
    return True


def write(path: Path, entries: Entries) -> None:
    """The entries in key order, one node per line (the file is read and diffed by people)."""
    lines = ["{", f'  "about": {json.dumps(ABOUT)},', '  "instances": {']
    keys = sorted(entries, key=_order)
    for position, key in enumerate(keys):
        entry = entries[key]
        head = {k: v for k, v in entry.items() if k != "nodes"}
        fields = [f"      {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
        nodes = ",\n".join(f"        {json.dumps(node)}" for node in entry["nodes"])
        comma = "," if position < len(keys) - 1 else ""
        lines += [f"    {json.dumps(key)}: {{", *fields, '      "nodes": [', nodes, "      ]"]
        lines.append(f"    }}{comma}")
    lines += ["  }", "}"]
    path.write_text("\n".join(lines) + "\n")


ABOUT = (
    "The cheapest valid plan known for each 200-task instance of allocation.instances "
    "(key family:seed; seeds 0-3 the goal, 4-5 held out), with the method and CPU seconds "
    "that found it. Only ever lowered (allocation.best_known.lower); tests check every plan."
)


def _order(key: str) -> tuple[int, int]:
    family, seed = key.rsplit(":", 1)
    return [f.name for f in FAMILIES].index(family), int(seed)
