"""Incumbent plans for the exact solver: first-fit-decreasing over several orders, then a local
search on the packing.

A packing (``allocation.packing``) is bins per node type; a type's first ``max_reserved`` bins are
reserved and the rest surcharge, so the price of one more bin of a type depends on how many it
already has (``next_bin_price``).

First-fit-decreasing here (``ffd_packing``) is cost-aware, unlike the seed's first fit: a task
goes to the first open bin that fits it (in opening order); if none does, a bin is opened of the
type with the lowest price of its next bin per task slot (the task slots of a type are how many
average tasks it holds by its tightest dimension), among the types that fit the task and have a
bin left. ``several_ffd`` runs it with the tasks sorted by several size measures and with the
types ranked in several ways, since no single order packs every instance family best.

The local search (``improve``) repeats three moves until none pays:

- empty a bin: the cheapest-to-lose bins first (least loaded, dearest), move each of its tasks to
  another bin that fits it, or swap it for a smaller task of a bin that then fits, when the
  smaller one fits a third bin; a bin emptied saves its price;
- re-type a bin: move a bin's tasks to a new bin of another type that holds them, when that type's
  next bin is cheaper than what the bin's removal saves;
- merge two bins into one new bin of a type that holds both loads, when cheaper.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from allocation.model import DIMENSIONS, Instance, NodeType, NoFeasiblePlan
from allocation.packing import Packing, packing_cost

Vector = tuple[float, ...]
# Relative and absolute slack on capacities, as Resources.fits_in.
_REL, _ABS = 1e-9, 1e-12


def next_bin_price(nt: NodeType, bins: int) -> float:
    """Price of a type's bin number ``bins + 1`` (reserved up to max_reserved, then surcharge)."""
    return nt.busy_reserved_cost if bins < nt.max_reserved else nt.surcharge


def last_bin_price(nt: NodeType, bins: int) -> float:
    """What removing one of ``bins`` bins of a type saves."""
    return next_bin_price(nt, bins - 1)


def room_for(nt: NodeType, bins: int) -> bool:
    return nt.max_nodes is None or bins < nt.max_nodes


class _Packer:
    """The instance as vectors, for fast fits and loads."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.types = {nt.name: nt for nt in instance.node_types}
        self.capacity = {
            nt.name: tuple(c * (1 + _REL) + _ABS for c in nt.capacity.as_tuple())
            for nt in instance.node_types
        }
        self.demand = {t.id: t.demand.as_tuple() for t in instance.tasks}
        n = max(len(instance.tasks), 1)
        mean = [d / n for d in instance.total_demand().as_tuple()]
        self.slots = {
            nt.name: min(
                (c / m for c, m in zip(nt.capacity.as_tuple(), mean, strict=True) if m > 0),
                default=math.inf,
            )
            for nt in instance.node_types
        }

    def fits(self, type_name: str, load: Vector, extra: Vector) -> bool:
        return all(
            a + b <= c for a, b, c in zip(load, extra, self.capacity[type_name], strict=True)
        )

    def load(self, tasks: Sequence[str]) -> Vector:
        total = [0.0, 0.0, 0.0]
        for t in tasks:
            for d, a in enumerate(self.demand[t]):
                total[d] += a
        return tuple(total)


# --- first-fit-decreasing --------------------------------------------------------------------


def size_keys(instance: Instance) -> dict[str, Callable[[str], float]]:
    """Task size measures, on demands normalized by the largest capacity in each dimension."""
    largest = [
        max(getattr(nt.capacity, dim) for nt in instance.node_types) or 1.0 for dim in DIMENSIONS
    ]
    norm = {
        t.id: tuple(d / c for d, c in zip(t.demand.as_tuple(), largest, strict=True))
        for t in instance.tasks
    }
    total = [sum(v[d] for v in norm.values()) or 1.0 for d in range(3)]
    keys: dict[str, Callable[[str], float]] = {
        "sum": lambda t: sum(norm[t]),
        "max": lambda t: max(norm[t]),
        "sum_squares": lambda t: sum(x * x for x in norm[t]),
        # Scarce dimensions weigh more: the weight is the dimension's share of all demand.
        "weighted": lambda t: sum(x * w for x, w in zip(norm[t], total, strict=True)),
    }
    for d, dim in enumerate(DIMENSIONS):
        keys[dim] = _component(norm, d)
    return keys


def _component(vectors: dict[str, tuple[float, ...]], d: int) -> Callable[[str], float]:
    return lambda t: vectors[t][d]


def ffd_packing(
    instance: Instance,
    order: Sequence[str],
    rank: Callable[[NodeType, int], float],
    packer: _Packer | None = None,
) -> Packing:
    """Place tasks in ``order``: first open bin that fits, else a new bin of the type with the
    lowest ``rank(type, bins it has)`` among those that fit the task and have room.

    Raises NoFeasiblePlan when a task fits no type with room left.
    """
    packer = packer or _Packer(instance)
    bins: list[tuple[str, list[str]]] = []
    loads: list[Vector] = []
    counts = dict.fromkeys(packer.types, 0)
    for task_id in order:
        demand = packer.demand[task_id]
        target = next(
            (
                k
                for k, (type_name, _) in enumerate(bins)
                if packer.fits(type_name, loads[k], demand)
            ),
            None,
        )
        if target is None:
            options = [
                nt
                for nt in packer.types.values()
                if room_for(nt, counts[nt.name]) and packer.fits(nt.name, (0.0, 0.0, 0.0), demand)
            ]
            if not options:
                raise NoFeasiblePlan(
                    f"cannot place task {task_id!r}: every node type that "
                    "could hold it is at max_reserved + max_surcharge"
                )
            nt = min(options, key=lambda nt: rank(nt, counts[nt.name]))
            counts[nt.name] += 1
            bins.append((nt.name, []))
            loads.append((0.0, 0.0, 0.0))
            target = len(bins) - 1
        bins[target][1].append(task_id)
        loads[target] = tuple(a + b for a, b in zip(loads[target], demand, strict=True))
    packing: Packing = {}
    for type_name, tasks in bins:
        packing.setdefault(type_name, []).append(tasks)
    return packing


def type_ranks(packer: _Packer) -> dict[str, Callable[[NodeType, int], float]]:
    """Ways to choose the type of a new bin: price of its next bin per task slot, per unit of
    its tightest capacity share, or plain price (the cheapest node first)."""

    def per_slot(nt: NodeType, bins: int) -> float:
        slots = packer.slots[nt.name]
        return next_bin_price(nt, bins) / slots if slots > 0 else math.inf

    def per_capacity(nt: NodeType, bins: int) -> float:
        largest = [
            max(t.capacity.as_tuple()[d] for t in packer.types.values()) or 1.0 for d in range(3)
        ]
        share = sum(c / m for c, m in zip(nt.capacity.as_tuple(), largest, strict=True))
        return next_bin_price(nt, bins) / share if share > 0 else math.inf

    def plain(nt: NodeType, bins: int) -> float:
        return next_bin_price(nt, bins)

    return {"per_slot": per_slot, "per_capacity": per_capacity, "price": plain}


def several_ffd(instance: Instance) -> list[Packing]:
    """``ffd_packing`` for every size key and type rank (those that find a plan)."""
    packer = _Packer(instance)
    ids = [t.id for t in instance.tasks]
    packings = []
    for key in size_keys(instance).values():
        order = sorted(ids, key=key, reverse=True)
        for rank in type_ranks(packer).values():
            try:
                packings.append(ffd_packing(instance, order, rank, packer))
            except NoFeasiblePlan:
                continue
    return packings


# --- local search ----------------------------------------------------------------------------


class _State:
    """A packing being improved, as arrays: the bin of each task, and per bin its type, load and
    capacity (bins that were emptied stay, dead, so indices remain stable)."""

    def __init__(self, packer: _Packer, packing: Packing) -> None:
        self.packer = packer
        self.task_ids = [t.id for t in packer.instance.tasks]
        index = {t: i for i, t in enumerate(self.task_ids)}
        self.demand = np.array([packer.demand[t] for t in self.task_ids]).reshape(-1, 3)
        self.bin_type: list[str] = []
        self.task_bin = np.full(len(self.task_ids), -1)
        for type_name, group in packing.items():
            for tasks in group:
                if tasks:
                    self.task_bin[[index[t] for t in tasks]] = len(self.bin_type)
                    self.bin_type.append(type_name)
        self.capacity = np.array([packer.capacity[t] for t in self.bin_type]).reshape(-1, 3)
        self.load = np.zeros_like(self.capacity)
        np.add.at(self.load, self.task_bin, self.demand)
        self.alive = np.ones(len(self.bin_type), dtype=bool)
        self.counts = dict.fromkeys(packer.types, 0)
        for type_name in self.bin_type:
            self.counts[type_name] += 1

    def alive_bins(self) -> list[int]:
        return [int(k) for k in np.flatnonzero(self.alive)]

    def packing(self) -> Packing:
        packing: Packing = {}
        for k in self.alive_bins():
            tasks = [self.task_ids[i] for i in np.flatnonzero(self.task_bin == k)]
            if tasks:
                packing.setdefault(self.bin_type[k], []).append(tasks)
        return packing

    def tasks_of(self, k: int) -> np.ndarray:
        return np.flatnonzero(self.task_bin == k)

    def fill(self, k: int) -> float:
        nominal = self.packer.types[self.bin_type[k]].capacity.as_tuple()
        return max(
            (a / c for a, c in zip(self.load[k], nominal, strict=True) if c > 0), default=0.0
        )

    def saving(self, k: int) -> float:
        type_name = self.bin_type[k]
        return last_bin_price(self.packer.types[type_name], self.counts[type_name])

    def move(self, task: int, target: int) -> None:
        self.load[self.task_bin[task]] -= self.demand[task]
        self.load[target] += self.demand[task]
        self.task_bin[task] = target

    def kill(self, k: int) -> None:
        self.alive[k] = False
        self.counts[self.bin_type[k]] -= 1

    def open(self, type_name: str, tasks: np.ndarray) -> None:
        k = len(self.bin_type)
        self.bin_type.append(type_name)
        self.capacity = np.vstack([self.capacity, self.packer.capacity[type_name]])
        self.load = np.vstack([self.load, np.zeros(3)])
        self.alive = np.append(self.alive, True)
        self.counts[type_name] += 1
        for task in tasks:
            self.move(int(task), k)

    def fits_load(self, type_name: str, load: np.ndarray) -> bool:
        return bool(np.all(load <= self.packer.capacity[type_name]))


def improve(
    instance: Instance,
    packing: Packing,
    deadline: Callable[[], bool] = lambda: False,
    rounds: int = 20,
) -> Packing:
    """The local search of the module docstring; never returns a dearer packing. Stops early
    when ``deadline()`` says so."""
    state = _State(_Packer(instance), packing)
    for _ in range(rounds):
        changed = _empty_bins(state, deadline)
        changed |= _retype_bins(state)
        changed |= _merge_bins(state)
        if not changed or deadline():
            break
    result = state.packing()
    return result if packing_cost(instance, result) <= packing_cost(instance, packing) else packing


def _empty_bins(state: _State, deadline: Callable[[], bool]) -> bool:
    changed = False
    victims = sorted(state.alive_bins(), key=lambda k: (state.fill(k), -state.saving(k)))
    for victim in victims:
        if deadline():
            break
        if _try_empty(state, victim):
            state.kill(victim)
            changed = True
    return changed


def _try_empty(state: _State, victim: int) -> bool:
    """Move every task of the victim bin elsewhere (directly or by one swap); undo on failure."""
    journal: list[tuple[int, int]] = []  # (task, bin it came from), undone in reverse
    tasks = sorted(state.tasks_of(victim), key=lambda i: -state.demand[i].sum())
    for task in tasks:
        moves = _place(state, victim, int(task))
        if moves is None:
            for moved, source in reversed(journal):
                state.move(moved, source)
            return False
        for moved, target in moves:
            journal.append((moved, int(state.task_bin[moved])))
            state.move(moved, target)
    return True


def _place(state: _State, victim: int, task: int) -> list[tuple[int, int]] | None:
    """Moves (task, target bin) that take ``task`` out of the victim bin, or None."""
    residual = state.capacity - state.load
    usable = state.alive.copy()
    usable[victim] = False
    direct = np.flatnonzero(usable & np.all(residual >= state.demand[task], axis=1))
    if direct.size:
        return [(task, int(direct[0]))]
    # A swap: a task `other` of bin k makes room for `task` and itself fits a third bin.
    others = np.flatnonzero(usable[state.task_bin] & (state.task_bin >= 0))
    home = state.task_bin[others]
    room = np.all(residual[home] + state.demand[others] >= state.demand[task], axis=1)
    others, home = others[room], home[room]
    if not others.size:
        return None
    fits_third = np.all(residual[None, :, :] >= state.demand[others][:, None, :], axis=2)
    fits_third &= usable[None, :]
    fits_third[np.arange(others.size), home] = False
    rows, cols = np.nonzero(fits_third)
    if not rows.size:
        return None
    other, third = int(others[rows[0]]), int(cols[0])
    return [(other, third), (task, int(home[rows[0]]))]


def _retype_bins(state: _State) -> bool:
    changed = False
    for k in state.alive_bins():
        saving = state.saving(k)
        options = [
            (next_bin_price(nt, state.counts[nt.name]), nt.name)
            for nt in state.packer.types.values()
            if nt.name != state.bin_type[k]
            and room_for(nt, state.counts[nt.name])
            and state.fits_load(nt.name, state.load[k])
        ]
        if options and min(options)[0] < saving - 1e-9:
            tasks = state.tasks_of(k)
            state.kill(k)
            state.open(min(options)[1], tasks)
            changed = True
    return changed


def _merge_bins(state: _State) -> bool:
    """Merge the first pair of the least-filled bins that one new bin holds more cheaply."""
    candidates = sorted(state.alive_bins(), key=state.fill)[:30]
    for a_pos, a in enumerate(candidates):
        for b in candidates[a_pos + 1 :]:
            load = state.load[a] + state.load[b]
            counts = dict(state.counts)
            saving = 0.0
            for k in (a, b):
                type_name = state.bin_type[k]
                saving += last_bin_price(state.packer.types[type_name], counts[type_name])
                counts[type_name] -= 1
            options = [
                (next_bin_price(nt, counts[nt.name]), nt.name)
                for nt in state.packer.types.values()
                if room_for(nt, counts[nt.name]) and state.fits_load(nt.name, load)
            ]
            if options and min(options)[0] < saving - 1e-9:
                tasks = np.concatenate([state.tasks_of(a), state.tasks_of(b)])
                state.kill(a)
                state.kill(b)
                state.open(min(options)[1], tasks)
                return True
    return False
