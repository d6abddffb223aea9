"""Packing every task onto a given set of nodes, by a tabu search that drives overload to zero.

The aggregated relaxation (``allocation.aggregate``) names node counts per type that its volume
constraints allow; whether the tasks can really be packed on exactly those nodes (or on those plus
one cheap node) is a vector bin packing feasibility question that the greedy packers answer too
pessimistically (they fill nodes one at a time and leave the last ones unable to take what
remains) and CBC answers too slowly at 200 tasks.

The search keeps every task on some node and lets nodes be overloaded; the overload of a node is
``sum over dimensions of max(0, load - capacity) / capacity``. Each step applies the best move
(lowest total overload after it) among relocating a task of an overloaded node to another node
and swapping it with a task of another node, except moves of tasks moved in the last few steps
(tabu, unless the move reaches a new best). It stops when the overload is zero, which is a
packing of every task within capacity (the capacities carry ``Resources.fits_in``'s tolerance),
or at its deadline. Moves are evaluated for all pairs at once with numpy.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Sequence

import numpy as np

from allocation.model import Instance
from allocation.packing import Packing

# Tabu tenure: a moved task stays put for this many steps, drawn per move.
TENURE = (4, 12)
# Random amounts added to the moves' overload changes to break ties (overloads that matter are
# thousandths of a node at least).
TIE_NOISE = 1e-9
# Steps checked against the deadline at once (a step takes about a millisecond).
STEPS_PER_CHECK = 20
# Steps without a new least overload after which the search gives up before its deadline (on
# small instances it has tried what it can long before).
GIVE_UP_STEPS = 3000


def pack_on_bins(
    instance: Instance,
    bin_types: Sequence[str],
    start: Packing,
    deadline: Callable[[], bool],
    seed: int = 0,
) -> Packing | None:
    """Every task of the instance on exactly the nodes ``bin_types`` (one type name per node),
    or None if the search ends without one (at its deadline, or GIVE_UP_STEPS steps after its
    last progress). ``start`` (a packing, possibly with
    other node counts) gives the first assignment."""
    return BinSearch(instance, bin_types, start, seed).run(deadline)


class BinSearch:
    """``pack_on_bins`` as a search that can be stopped at a deadline and resumed later from
    where it stopped (the MILP gives every node count a short first try, then more time to the
    ones that failed: resuming keeps the progress of the first try)."""

    def __init__(
        self, instance: Instance, bin_types: Sequence[str], start: Packing, seed: int = 0
    ) -> None:
        self._search: _Search | None = None
        if bin_types:
            with contextlib.suppress(_Unplaceable):
                self._search = _Search(instance, list(bin_types), start, random.Random(seed))
        # True once more time cannot help: no move left, or GIVE_UP_STEPS without progress.
        self.stuck = self._search is None

    @property
    def steps(self) -> int:
        return self._search.steps if self._search is not None else 0

    def run(self, deadline: Callable[[], bool]) -> Packing | None:
        """The packing, or None at the deadline (resumable unless ``stuck``) or when stuck."""
        search = self._search
        if self.stuck or search is None:
            return None
        while search.total > 0:
            for _ in range(STEPS_PER_CHECK):
                if not search.step():
                    self.stuck = True
                    return None
                if search.total <= 0:
                    break
            if search.total > 0 and search.steps - search.best_step > GIVE_UP_STEPS:
                self.stuck = True
                return None
            if search.total > 0 and deadline():
                return None
        return search.packing()


class _Unplaceable(Exception):
    """A task fits on none of the nodes: there is no first assignment to search from."""


class _Search:
    def __init__(
        self, instance: Instance, bin_types: list[str], start: Packing, rng: random.Random
    ) -> None:
        self.rng = rng
        self.noise = np.random.default_rng(rng.randrange(2**32))
        self.bin_types = bin_types
        self.task_ids = [t.id for t in instance.tasks]
        self.demand = np.array([t.demand.as_tuple() for t in instance.tasks]).reshape(-1, 3)
        nominal = np.array([instance.node_type(t).capacity.as_tuple() for t in bin_types])
        self.capacity = nominal * (1 + 1e-9) + 1e-12
        # Overload is measured in shares of the capacity; a zero capacity makes any load on it
        # cost a great deal.
        self.scale = 1.0 / np.where(nominal > 0, nominal, 1e-9)
        self.fits = np.all(self.demand[:, None, :] <= self.capacity[None, :, :], axis=2)
        self.tabu_until = np.zeros(len(self.task_ids), dtype=int)
        self.steps = 0
        self.assign = self._first_assignment(start)
        self.load = np.zeros_like(self.capacity)
        np.add.at(self.load, self.assign, self.demand)
        self.total = float(self._overload(self.load).sum())
        self.best = self.total  # the least total overload reached so far
        self.best_step = 0  # the step that reached it

    def _overload(self, load: np.ndarray, nodes: np.ndarray | slice = slice(None)) -> np.ndarray:
        """Summed overload in capacity shares of loads on ``nodes`` (the last axis is the
        dimension; ``nodes`` indexes the capacities and broadcasts like ``load``)."""
        return (np.maximum(load - self.capacity[nodes], 0.0) * self.scale[nodes]).sum(axis=-1)

    def _first_assignment(self, start: Packing) -> np.ndarray:
        """Each type's fullest start bins on that type's nodes; the other tasks one by one, largest
        first, on the node they overload least. Raises _Unplaceable if a task fits nowhere."""
        index = {t: i for i, t in enumerate(self.task_ids)}
        assign = np.full(len(self.task_ids), -1)
        load = np.zeros_like(self.capacity)
        for type_name in dict.fromkeys(self.bin_types):
            slots = [j for j, t in enumerate(self.bin_types) if t == type_name]
            bins = sorted(
                start.get(type_name, []), key=lambda b: -sum(self.demand[index[t]].sum() for t in b)
            )
            for j, tasks in zip(slots, bins, strict=False):
                for task_id in tasks:
                    assign[index[task_id]] = j
                    load[j] += self.demand[index[task_id]]
        for i in sorted(np.flatnonzero(assign < 0), key=lambda i: -self.demand[i].sum()):
            options = np.flatnonzero(self.fits[i])
            if not options.size:
                raise _Unplaceable
            added = self._overload(load[options] + self.demand[i], options) - self._overload(
                load[options], options
            )
            j = int(options[np.argmin(added)])
            assign[i] = j
            load[j] += self.demand[i]
        return assign

    def step(self) -> bool:
        """Apply the best allowed move (any move when tabu forbids all); False if none exists.
        Ties are broken at random, so that plateaus of equal overload do not cycle."""
        self.steps += 1
        over = self._overload(self.load)
        movable = np.flatnonzero(over[self.assign] > 0)
        home = self.assign[movable]
        d = self.demand[movable]
        removed = self._overload(self.load[home] - d, home) - over[home]
        # Relocations: task movable[a] to node b.
        move = removed[:, None] + self._overload(self.load[None, :, :] + d[:, None, :]) - over
        move[~self.fits[movable]] = np.inf
        move[np.arange(movable.size), home] = np.inf
        # Swaps: task movable[a] with task k of another node.
        other = self.assign
        new_home = self.load[home][:, None, :] - d[:, None, :] + self.demand[None, :, :]
        new_other = self.load[other][None, :, :] - self.demand[None, :, :] + d[:, None, :]
        swap = (
            self._overload(new_home, home[:, None])
            - over[home][:, None]
            + self._overload(new_other, other[None, :])
            - over[other][None, :]
        )
        swap[other[None, :] == home[:, None]] = np.inf
        swap[~self.fits[movable][:, other]] = np.inf
        swap[~self.fits[:, home].T] = np.inf
        move += self.noise.uniform(0, TIE_NOISE, move.shape)
        swap += self.noise.uniform(0, TIE_NOISE, swap.shape)

        free = self.tabu_until <= self.steps
        new_best = self.best - self.total
        move_ok = free[movable][:, None] | (move < new_best)
        swap_ok = (free[movable][:, None] & free[None, :]) | (swap < new_best)
        if not (np.isfinite(move[move_ok]).any() or np.isfinite(swap[swap_ok]).any()):
            move_ok, swap_ok = np.ones_like(move_ok), np.ones_like(swap_ok)
        move = np.where(move_ok, move, np.inf)
        swap = np.where(swap_ok, swap, np.inf)
        a, b = np.unravel_index(np.argmin(move), move.shape)
        a2, k = np.unravel_index(np.argmin(swap), swap.shape)
        if min(move[a, b], swap[a2, k]) == np.inf:
            return False
        if move[a, b] <= swap[a2, k]:
            self._relocate(int(movable[a]), int(b))
        else:
            i, j = int(movable[a2]), int(k)
            node_i, node_j = int(self.assign[i]), int(self.assign[j])
            self._relocate(i, node_j)
            self._relocate(j, node_i)
        self.total = float(self._overload(self.load).sum())
        if self.total < self.best:
            self.best, self.best_step = self.total, self.steps
        return True

    def _relocate(self, i: int, node: int) -> None:
        self.load[self.assign[i]] -= self.demand[i]
        self.load[node] += self.demand[i]
        self.assign[i] = node
        self.tabu_until[i] = self.steps + self.rng.randint(*TENURE)

    def packing(self) -> Packing:
        # Loads were updated move by move; the caller checks the plan from scratch
        # (validate_plan), so float drift cannot pass an overloaded node.
        packing: Packing = {}
        for j, type_name in enumerate(self.bin_types):
            tasks = [self.task_ids[i] for i in np.flatnonzero(self.assign == j)]
            if tasks:
                packing.setdefault(type_name, []).append(tasks)
        return packing
