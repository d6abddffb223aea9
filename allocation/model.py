"""The allocation model shared by every solver (docs/allocation.md).

An instance has node types and tasks. A plan is a list of nodes, each of one type and of kind
``reserved`` or ``surcharge``, each holding tasks. Cost of a plan:

- every reserved node costs the type's ``reserved`` price, plus its ``usage`` price if it holds
  at least one task;
- every surcharge node costs the type's ``surcharge`` price.

An instance is valid only if ``surcharge > reserved + usage`` for every type: extra capacity bought
during the crawl must cost more than capacity planned for, otherwise reserving would be pointless.

The module holds the model's types, its cost rules, the feasibility checker every solver's plan
passes, and the JSON reading with its checks: one vocabulary of the solvers, kept together
although it runs past 400 lines.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["reserved", "surcharge"]
KINDS: tuple[Kind, ...] = ("reserved", "surcharge")
DIMENSIONS = ("cpu", "memory_gb", "bandwidth_mbps")


class InstanceError(ValueError):
    """Bad instance input; the message is one line a user can act on."""


class NoFeasiblePlan(InstanceError):
    """No plan places every task within the node types' ``max_reserved`` / ``max_surcharge``."""


@dataclass(frozen=True)
class Resources:
    """An amount in each resource dimension: a node's capacity or a task's demand."""

    cpu: float
    memory_gb: float
    bandwidth_mbps: float

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.cpu, self.memory_gb, self.bandwidth_mbps)

    def __add__(self, other: Resources) -> Resources:
        return Resources(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)))

    def fits_in(self, capacity: Resources) -> bool:
        # A relative tolerance keeps float sums like 0.1 + 0.2 from rejecting an exact fit.
        return all(
            a <= c * (1 + 1e-9) + 1e-12
            for a, c in zip(self.as_tuple(), capacity.as_tuple(), strict=True)
        )

    def to_json(self) -> dict[str, float]:
        return dict(zip(DIMENSIONS, self.as_tuple(), strict=True))


ZERO = Resources(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class NodeType:
    name: str
    capacity: Resources
    reserved: float
    usage: float
    surcharge: float
    max_reserved: int
    max_surcharge: int | None = None  # None: as many surcharge nodes as needed

    @property
    def busy_reserved_cost(self) -> float:
        """What a reserved node holding tasks costs; the cheapest way to run a node of this type."""
        return self.reserved + self.usage

    @property
    def max_nodes(self) -> int | None:
        if self.max_surcharge is None:
            return None
        return self.max_reserved + self.max_surcharge


@dataclass(frozen=True)
class Task:
    id: str
    demand: Resources


@dataclass(frozen=True)
class Instance:
    """Node types and tasks; construction validates and raises InstanceError when invalid."""

    node_types: tuple[NodeType, ...]
    tasks: tuple[Task, ...]
    _types_by_name: dict[str, NodeType] = field(init=False, repr=False, compare=False)
    _tasks_by_id: dict[str, Task] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_types", tuple(self.node_types))
        object.__setattr__(self, "tasks", tuple(self.tasks))
        object.__setattr__(self, "_types_by_name", {t.name: t for t in self.node_types})
        object.__setattr__(self, "_tasks_by_id", {t.id: t for t in self.tasks})
        self._validate()

    def has_type(self, name: str) -> bool:
        return name in self._types_by_name

    def has_task(self, task_id: str) -> bool:
        return task_id in self._tasks_by_id

    def node_type(self, name: str) -> NodeType:
        return self._types_by_name[name]

    def task(self, task_id: str) -> Task:
        return self._tasks_by_id[task_id]

    def total_demand(self) -> Resources:
        return sum((t.demand for t in self.tasks), ZERO)

    def _validate(self) -> None:
        if not self.node_types:
            raise InstanceError("instance has no node types")
        if len(self._types_by_name) != len(self.node_types):
            names = [nt.name for nt in self.node_types]
            raise InstanceError(f"duplicate node type name {_first_duplicate(names)!r}")
        if len(self._tasks_by_id) != len(self.tasks):
            ids = [t.id for t in self.tasks]
            raise InstanceError(f"duplicate task id {_first_duplicate(ids)!r}")
        for nt in self.node_types:
            _check_node_type(nt)
        for task in self.tasks:
            _check_resources(f"task {task.id!r} demand", task.demand)
            if not any(
                task.demand.fits_in(nt.capacity) for nt in self.node_types if nt.max_nodes != 0
            ):
                raise InstanceError(
                    f"task {task.id!r} (demand {_fmt(task.demand)}) fits no node type"
                )

    @classmethod
    def from_json(cls, data: Any) -> Instance:
        """Parse the instance JSON (format in allocation/README.md); InstanceError if bad."""
        obj = _Obj(data, "instance")
        obj.keys(required={"node_types", "tasks"})
        node_types = [_node_type_from_json(o) for o in obj.list("node_types")]
        tasks = [_task_from_json(o) for o in obj.list("tasks")]
        return cls(tuple(node_types), tuple(tasks))

    def to_json(self) -> dict[str, Any]:
        return {
            "node_types": [
                {
                    "name": nt.name,
                    "capacity": nt.capacity.to_json(),
                    "price": {
                        "reserved": nt.reserved,
                        "usage": nt.usage,
                        "surcharge": nt.surcharge,
                    },
                    "max_reserved": nt.max_reserved,
                    "max_surcharge": nt.max_surcharge,
                }
                for nt in self.node_types
            ],
            "tasks": [{"id": t.id, "demand": t.demand.to_json()} for t in self.tasks],
        }


def load_instance(path: str | Path) -> Instance:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InstanceError(f"cannot read instance file {str(path)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise InstanceError(f"{path}: not a JSON file (not UTF-8 text)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstanceError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
    except RecursionError:
        raise InstanceError(f"{path}: JSON nested too deeply") from None
    return Instance.from_json(data)


@dataclass(frozen=True)
class Node:
    id: str
    type: str
    kind: Kind
    tasks: tuple[str, ...]


def make_nodes(groups: Iterable[tuple[str, Kind, Sequence[str]]]) -> tuple[Node, ...]:
    """Nodes from (type, kind, task ids) groups, named like ``small-r1`` and ``small-s1``."""
    seen: Counter[tuple[str, Kind]] = Counter()
    nodes = []
    for type_name, kind, tasks in groups:
        seen[type_name, kind] += 1
        nodes.append(
            Node(f"{type_name}-{kind[0]}{seen[type_name, kind]}", type_name, kind, tuple(tasks))
        )
    return tuple(nodes)


@dataclass(frozen=True)
class Cost:
    reserved: float
    usage: float
    surcharge: float

    @property
    def total(self) -> float:
        return self.reserved + self.usage + self.surcharge


@dataclass(frozen=True)
class Plan:
    """Nodes placing an instance's tasks; ``solve_seconds`` is how long the solver took."""

    instance: Instance = field(repr=False, compare=False)
    nodes: tuple[Node, ...]
    solve_seconds: float = 0.0

    @property
    def cost(self) -> Cost:
        return plan_cost(self.instance, self)

    @property
    def total_cost(self) -> float:
        return self.cost.total

    @property
    def reserved_cost(self) -> float:
        return self.cost.reserved

    @property
    def usage_cost(self) -> float:
        return self.cost.usage

    @property
    def surcharge_cost(self) -> float:
        return self.cost.surcharge

    def node_counts(self) -> Counter[tuple[str, Kind]]:
        """Number of nodes per (type, kind)."""
        return Counter((n.type, n.kind) for n in self.nodes)

    def utilization(self) -> Resources:
        """Placed demand over the capacity of all nodes in the plan (idle ones included)."""
        capacity = sum((self.instance.node_type(n.type).capacity for n in self.nodes), ZERO)
        demand = self.instance.total_demand()
        return Resources(
            *(
                d / c if c > 0 else 0.0
                for d, c in zip(demand.as_tuple(), capacity.as_tuple(), strict=True)
            )
        )

    def to_json(self) -> dict[str, Any]:
        cost = self.cost
        return {
            "total_cost": cost.total,
            "reserved_cost": cost.reserved,
            "usage_cost": cost.usage,
            "surcharge_cost": cost.surcharge,
            "solve_seconds": self.solve_seconds,
            "nodes": [
                {"id": n.id, "type": n.type, "kind": n.kind, "tasks": list(n.tasks)}
                for n in self.nodes
            ],
        }


def plan_cost(instance: Instance, plan: Plan) -> Cost:
    """The cost model of the module docstring, broken into its three parts."""
    reserved = usage = surcharge = 0.0
    for node in plan.nodes:
        nt = instance.node_type(node.type)
        if node.kind == "reserved":
            reserved += nt.reserved
            if node.tasks:
                usage += nt.usage
        else:
            surcharge += nt.surcharge
    return Cost(reserved, usage, surcharge)


def validate_plan(instance: Instance, plan: Plan) -> None:
    """Raise ValueError unless the plan is feasible for the instance.

    Feasible: known types and kinds, unique node ids, node counts within ``max_reserved`` and
    ``max_surcharge``, every task placed exactly once, and on every node the summed demand fits
    the capacity in every dimension.
    """
    ids = [n.id for n in plan.nodes]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate node id {_first_duplicate(ids)!r}")
    placed: Counter[str] = Counter()
    for node in plan.nodes:
        if not instance.has_type(node.type):
            raise ValueError(f"node {node.id!r} has unknown type {node.type!r}")
        if node.kind not in KINDS:
            raise ValueError(f"node {node.id!r} has unknown kind {node.kind!r}")
        unknown = [t for t in node.tasks if not instance.has_task(t)]
        if unknown:
            raise ValueError(f"node {node.id!r} holds unknown task {unknown[0]!r}")
        placed.update(node.tasks)
        load = sum((instance.task(t).demand for t in node.tasks), ZERO)
        capacity = instance.node_type(node.type).capacity
        if not load.fits_in(capacity):
            raise ValueError(
                f"node {node.id!r} is overloaded: load {_fmt(load)} > capacity {_fmt(capacity)}"
            )
    for task in instance.tasks:
        if placed[task.id] != 1:
            raise ValueError(f"task {task.id!r} is placed {placed[task.id]} times, not once")
    counts = plan.node_counts()
    for nt in instance.node_types:
        if counts[nt.name, "reserved"] > nt.max_reserved:
            raise ValueError(
                f"{counts[nt.name, 'reserved']} reserved {nt.name!r} nodes "
                f"exceed max_reserved={nt.max_reserved}"
            )
        if nt.max_surcharge is not None and counts[nt.name, "surcharge"] > nt.max_surcharge:
            raise ValueError(
                f"{counts[nt.name, 'surcharge']} surcharge {nt.name!r} nodes "
                f"exceed max_surcharge={nt.max_surcharge}"
            )


# --- validation and parsing helpers ---------------------------------------------------------


def _fmt(r: Resources) -> str:
    return f"cpu={r.cpu:g}, memory_gb={r.memory_gb:g}, bandwidth_mbps={r.bandwidth_mbps:g}"


def _first_duplicate(names: list[str]) -> str:
    return next(name for name, count in Counter(names).items() if count > 1)


def _check_number(where: str, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        raise InstanceError(f"{where} must be a finite non-negative number, got {value!r}")


def _check_resources(where: str, r: Resources) -> None:
    for dim, value in zip(DIMENSIONS, r.as_tuple(), strict=True):
        _check_number(f"{where} {dim}", value)


def _check_node_type(nt: NodeType) -> None:
    where = f"node type {nt.name!r}"
    if not nt.name:
        raise InstanceError("node type name must be a non-empty string")
    _check_resources(f"{where} capacity", nt.capacity)
    for price in ("reserved", "usage", "surcharge"):
        _check_number(f"{where} price {price}", getattr(nt, price))
    if nt.surcharge <= nt.busy_reserved_cost:
        raise InstanceError(
            f"{where}: surcharge price {nt.surcharge:g} must exceed reserved + usage "
            f"({nt.reserved:g} + {nt.usage:g} = {nt.busy_reserved_cost:g})"
        )
    for name in ("max_reserved", "max_surcharge"):
        value = getattr(nt, name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise InstanceError(f"{where} {name} must be a non-negative integer, got {value!r}")


class _Obj:
    """A JSON object with a path for error messages."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise InstanceError(f"{where} must be a JSON object, got {type(data).__name__}")
        self.data = data
        self.where = where

    def keys(self, required: set[str], optional: frozenset[str] = frozenset()) -> None:
        missing = sorted(required - self.data.keys())
        if missing:
            raise InstanceError(f"{self.where}: missing key {missing[0]!r}")
        unknown = sorted(self.data.keys() - required - optional)
        if unknown:
            raise InstanceError(f"{self.where}: unknown key {unknown[0]!r}")

    def obj(self, key: str) -> _Obj:
        return _Obj(self.data[key], f"{self.where}.{key}")

    def list(self, key: str) -> list[_Obj]:
        value = self.data[key]
        if not isinstance(value, list):
            raise InstanceError(f"{self.where}.{key} must be a JSON list")
        return [_Obj(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(value)]

    def number(self, key: str) -> float:
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InstanceError(f"{self.where}.{key} must be a number, got {value!r}")
        _check_number(f"{self.where}.{key}", float(value))
        return float(value)

    def count(self, key: str) -> int:
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InstanceError(f"{self.where}.{key} must be a non-negative integer, got {value!r}")
        return value

    def string(self, key: str) -> str:
        value = self.data[key]
        if not isinstance(value, str) or not value:
            raise InstanceError(f"{self.where}.{key} must be a non-empty string, got {value!r}")
        return value

    def resources(self, key: str) -> Resources:
        o = self.obj(key)
        o.keys(required=set(DIMENSIONS))
        return Resources(*(o.number(dim) for dim in DIMENSIONS))


def _node_type_from_json(o: _Obj) -> NodeType:
    o.keys(
        required={"name", "capacity", "price", "max_reserved"},
        optional=frozenset({"max_surcharge"}),
    )
    price = o.obj("price")
    price.keys(required={"reserved", "usage", "surcharge"})
    max_surcharge = None if o.data.get("max_surcharge") is None else o.count("max_surcharge")
    return NodeType(
        name=o.string("name"),
        capacity=o.resources("capacity"),
        reserved=price.number("reserved"),
        usage=price.number("usage"),
        surcharge=price.number("surcharge"),
        max_reserved=o.count("max_reserved"),
        max_surcharge=max_surcharge,
    )


def _task_from_json(o: _Obj) -> Task:
    o.keys(required={"id", "demand"})
    return Task(id=o.string("id"), demand=o.resources("demand"))
