"""The best-known plans the benchmark measures against (allocation.best_known), and the pattern
LP that finds counts the volume relaxation misses (allocation.patterns)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from allocation import best_known, milp
from allocation.clock import CpuClock
from allocation.instances import FAMILIES
from allocation.model import Instance, NodeType, Plan, Resources, Task, make_nodes, validate_plan
from allocation.packing import Packing, packing_plan
from allocation.patterns import PatternMaster, rounded_counts, tail_instance

BEST_KNOWN = Path(__file__).resolve().parents[1] / "bench/results/allocation/best_known.json"


def test_every_best_known_plan_is_valid_and_costs_what_it_says() -> None:
    entries = best_known.load(BEST_KNOWN)
    # Every family's goal seeds 0-3 and held-out seeds 4-5.
    assert sorted(entries) == sorted(
        best_known.instance_key(f.name, seed) for f in FAMILIES for seed in range(6)
    )
    for key, entry in entries.items():
        instance, plan = best_known.entry_plan(key, entry)
        validate_plan(instance, plan)
        assert plan.total_cost == pytest.approx(entry["cost"], rel=1e-12), key
        assert entry["method"] and entry["cpu_seconds"] >= 0


def _instance() -> Instance:
    small = NodeType("small", Resources(4, 8, 100), 1.0, 0.5, 2.0, max_reserved=2)
    large = NodeType("large", Resources(8, 16, 200), 1.8, 0.9, 3.5, max_reserved=1)
    tasks = [Task(f"t{i}", Resources(1.5 + 0.05 * i, 2, 30)) for i in range(8)]
    return Instance((small, large), tuple(tasks))


def _plan(instance: Instance, groups: list[tuple[str, str, list[str]]]) -> Plan:
    return Plan(instance, make_nodes([(t, k, ts) for t, k, ts in groups]))  # type: ignore[misc]


def test_lower_records_only_valid_cheaper_plans() -> None:
    instance = _instance()
    ids = [t.id for t in instance.tasks]
    dear = _plan(
        instance,
        [("small", "reserved", [i]) for i in ids[:2]]
        + [("small", "surcharge", [i]) for i in ids[2:]],
    )
    cheap = _plan(
        instance,
        [
            ("small", "reserved", ids[0:2]),
            ("small", "reserved", ids[2:4]),
            ("large", "reserved", ids[4:8]),
        ],
    )
    entries: best_known.Entries = {}
    assert best_known.lower(entries, "x:0", dear, "test", 1.0)
    assert best_known.lower(entries, "x:0", cheap, "test", 2.0)
    assert entries["x:0"]["cost"] == pytest.approx(cheap.total_cost)
    assert not best_known.lower(entries, "x:0", dear, "test", 1.0)  # dearer: kept
    overloaded = _plan(instance, [("small", "reserved", ids)])
    with pytest.raises(ValueError):
        best_known.lower(entries, "x:0", overloaded, "test", 1.0)
    assert entries["x:0"]["cost"] == pytest.approx(cheap.total_cost)


def test_pattern_lp_covers_every_task_and_its_dive_leaves_a_solvable_tail() -> None:
    instance = _instance()
    singletons = [("small", [t.id]) for t in instance.tasks]
    master = PatternMaster(instance, singletons)
    assert master.generate(lambda: False)
    root = master.solution()
    # Fractional covers: every task's patterns sum to at least 1 (the artificials are not used).
    cover = {t.id: 0.0 for t in instance.tasks}
    for value, _, tasks in root.patterns:
        for task_id in tasks:
            cover[task_id] += value
    assert min(cover.values()) >= 1 - 1e-6
    # Two tasks fit a small node (1.5-1.85 cores of 4), four a large one: the LP beats singletons.
    assert root.value < 8 * 1.5
    counts = rounded_counts(root)
    assert counts and all(set(c) == {"small", "large"} for c in counts)
    fixed = master.dive(lambda: False, 0.9)
    assert fixed is not None
    tail = tail_instance(instance, fixed)
    assert tail is not None
    placed = [t for bins in fixed.values() for tasks in bins for t in tasks]
    assert len(placed) == len(set(placed))
    assert {t.id for t in tail.tasks} == {t.id for t in instance.tasks} - set(placed)
    for nt in tail.node_types:
        used = len(fixed.get(nt.name, []))
        assert nt.max_reserved == max(0, instance.node_type(nt.name).max_reserved - used)


def test_the_pattern_lp_starts_from_the_ffd_bins_and_the_cheapest_candidates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    instance = _instance()
    ids = [t.id for t in instance.tasks]
    # Candidates from dearest to cheapest (one task per node is dearest): the dearest is left
    # out once there are more than PATTERN_START_PLANS, and the FFD bins are always in.
    candidates: list[Packing] = [
        {"small": [[i] for i in ids]},
        *({"small": [ids[2 * k : 2 * k + 2] for k in range(4)]} for _ in range(2)),
        {"large": [ids[:4], ids[4:]]},
        {"small": [ids[:2], ids[2:4]], "large": [ids[4:]]},
    ]
    assert len(candidates) > milp.PATTERN_START_PLANS
    ffd: list[Packing] = [{"small": [ids[1:3], ids[3:5]], "large": [ids[5:], ids[:1]]}]
    started: list[list[tuple[str, list[str]]]] = []

    class Recorder(PatternMaster):
        def __init__(self, instance: Instance, start: list[tuple[str, list[str]]]) -> None:
            started.append(list(start))
            super().__init__(instance, start)

    monkeypatch.setattr(milp, "PatternMaster", Recorder)
    plans = list(
        milp._from_patterns(instance, candidates, ffd, 0.0, lambda: math.inf, CpuClock(10.0), 0.9)
    )
    columns = {(t, tuple(tasks)) for t, tasks in started[0]}
    assert ("small", tuple(ids[1:3])) in columns and ("large", tuple(ids[:1])) in columns
    assert ("large", tuple(ids[4:])) in columns
    assert ("small", (ids[0],)) not in columns  # the dearest candidate's bins
    assert plans
    for packing in plans:
        validate_plan(instance, packing_plan(instance, packing, 0.0))
