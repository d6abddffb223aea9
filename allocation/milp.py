"""Exact allocation as a mixed-integer program, solved with PuLP's CBC (and HiGHS for the
aggregated relaxation).

Reduction. An idle reserved node only adds cost, and ``surcharge > reserved + usage``, so an
optimal plan reserves exactly the nodes it uses and buys surcharge nodes of a type only once all
``max_reserved`` nodes of that type are in use. The program therefore chooses *bins*: for each
type, ``n`` bins of which the first ``min(n, max_reserved)`` are reserved (each costs
``reserved + usage``) and the rest surcharge (each costs ``surcharge``).

Formulation (``_Model``), for each type ``t`` and bin position ``j`` (``y[t, j]``: bin open;
``x[i, t, j]``: task ``i`` in that bin): every task in exactly one bin; tasks only in open bins;
per bin and dimension, load <= capacity * ``y[t, j]``; cost ``sum price[t, j] * y[t, j]`` with
``price[t, j]`` the reserved price for ``j < max_reserved`` and the surcharge price after.

A plain version of this model leaves CBC with a weak bound (the LP fills every type exactly with
fractional nodes) and a search space full of relabelings. What ``solve_milp`` adds, in phases, each
ending by a share of the time limit and skipped once a plan meets the lower bound:

1. candidate plans and the bound: first fit, first-fit-decreasing, cost-aware FFD over several
   task orders and type rankings (``allocation.heuristics``), and the aggregated relaxation
   (``allocation.aggregate``, solved by HiGHS with conflict cliques added in rounds): per type
   an integer node count whose summed capacity holds the
   summed demand of the tasks sent to it, except that a type with few feasible task sets (few
   tasks per node) is modelled exactly by them. Its optimum is a lower bound at least the
   assignment LP's (node counts and task -> type choices stay whole) and enters the full model
   as the cut ``cost >= bound``; its task -> type choices (also with capacities scaled down a
   little, to leave room for the packing loss) are packed type by type with minimum bin slack
   (``allocation.packing``; the exactly modelled types come packed), each then losing the bins
   whose tasks fit in the others; the bound's relaxation also carries packing cuts
   (``allocation.aggregate.packing_cuts``);
2. every task packed on exactly given node counts (``allocation.fixed_bins``: a tabu search that
   drives the nodes' overload to zero, moving tasks between types as well), cheapest counts
   first, while they would beat the best plan: the bound's relaxation's (a plan that meets the
   bound; searched from every relaxation's packing), those plus nodes of one type (one, two,
   ... while cheaper than the best plan) or with one node exchanged for one or two of other
   types, and the relaxations' at the lower capacity shares, each from the packing of the
   relaxation with the nearest counts; a short first pass over all of them (the relaxations'
   counts, one node more and one exchanged first; the bound's counts from the other starts and
   several nodes more after), then the ones that failed with the time left, each search resumed
   where the first pass stopped it. The greedy packers fill nodes one at a time and often need
   a node more than the counts allow; the search repairs a whole assignment;
3. plans from the cost-minimizing pattern LP over every type (``allocation.patterns``, started
   from the cheapest candidates' bins and ``several_ffd``'s): every task packed on its counts
   rounded to the nearest and with one type's rounded the other way (from its patterns), and
   two dives (fix its largest pattern, price again, until at most DIVE_TAIL_TASKS tasks are
   left; this function solves that tail in at most TAIL_LIMIT_S), whose plans are candidates;
   only on instances of more than DIVE_TAIL_TASKS tasks. The relaxation picks counts by
   volume; where two types cost about the same per unit of capacity, the pattern LP sees which
   mix holds whole tasks;
4. the best plan shrunk a node at a time: drop a node of the type whose last node saves the most
   (else the next type; never below the lower bound) and repack every task on the rest with
   ``pack_on_bins``, from that plan;
5. local search on the cheapest candidates (``allocation.heuristics.improve``): empty the least
   loaded and dearest bins, directly or by a swap, move bins to cheaper types, merge pairs;
6. the restricted master (``allocation.master``): the cheapest set of the candidates' bins that
   covers every task, which recombines bins of different plans;
7. the full model, warm-started from the best plan, with symmetry breaking: bins of a type are
   identical, so they are ordered by their first task in a fixed task order (largest first); then
   open bins form a prefix (``y[t, j] >= y[t, j+1]``) and the task of rank ``r`` can only be in
   positions ``j <= r``. This removes the ``n!`` relabelings of every plan and about half of the
   assignment variables. It only reorders bins within one type, and the reserved/surcharge split
   is by position within the type, so it holds whatever each type's ``max_reserved`` and
   ``max_surcharge``. Every bin of type ``t`` costs at least ``reserved + usage``, so no optimal
   plan has more than ``incumbent cost / (reserved + usage)`` bins of that type, and positions
   beyond that are not created.

Time. ``time_limit_s`` is CPU time (``allocation.clock``): this thread's plus CBC's, and CBC runs
with its clock in CPU mode; HiGHS runs in this thread and is stopped by a callback on this
thread's CPU time (``allocation.highs``). A loaded machine then stretches the wall time of a
solve, not what it proves. The solve returns by its limit: every phase ends on its share of it,
and the full model runs only if its build and the work around CBC's clock fit in what is left
(below); the one exception is HiGHS' root rounding, which no callback interrupts (a later phase
absorbs it at 10 s, not always at shorter limits). On the time limit the best plan is returned
with the relative gap between its cost and the best proven lower bound (CBC's, or the
aggregated one if higher).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pulp

from allocation.aggregate import Aggregate, solve_aggregate
from allocation.cbc import SolverUnavailable, check_cbc, has_solution, run_cbc
from allocation.clock import CpuClock
from allocation.first_fit import first_fit, first_fit_decreasing, task_sizes
from allocation.fixed_bins import BinSearch, pack_on_bins
from allocation.heuristics import improve, last_bin_price, room_for, several_ffd
from allocation.master import restricted_master
from allocation.model import (
    DIMENSIONS,
    Instance,
    NoFeasiblePlan,
    Plan,
    Resources,
    validate_plan,
)
from allocation.packing import (
    Packing,
    eliminate_bins,
    min_slack_bins,
    packing_cost,
    packing_of,
    packing_plan,
    within_limits,
)
from allocation.patterns import (
    DIVE_FIX_ABOVE,
    DIVE_TAIL_TASKS,
    PatternMaster,
    rounded_counts,
    start_packing,
    tail_instance,
)

__all__ = ["OPTIMAL", "TIME_LIMIT", "MilpResult", "SolverUnavailable", "solve_milp"]

# Status strings of MilpResult.
OPTIMAL = "optimal"
TIME_LIMIT = "time_limit"
# Costs within this of the lower bound count as optimal (prices are floats).
TOLERANCE = 1e-6
# The candidate plans: aggregated relaxations at these capacity shares (1 first: it also gives
# the bound), each packed by minimum bin slack at these scarcity powers. Chosen on generated
# 200-task instances, where no single setting found the best plan on all of them.
CAPACITY_SHARES = (1.0, 0.99, 0.98, 0.97, 0.95)
SCARCITY_POWERS = (1, 2, 4, 8)
# Shares of the time limit (CPU seconds) by which each phase must end: candidates, the packing
# on given node counts, the pattern LP's plans, the shrinking of the best plan, the local search
# on the best candidates, and the restricted master (whose CBC runs past its own clock by about
# 0.1 s at 200 tasks: PuLP writes the model for CBC and reads the solution back). The pattern
# phase comes after the packing phase: before it, its 2-4 s CPU at 200 tasks delayed the
# packing that finds most optima (uniform/tight/dear seed 0 of the benchmark's families, 2.5 s
# into that phase, and skewed/loose/dear seed 1 were no longer found), and it needs about 2.5 s
# for its LP and one dive.
CANDIDATE_SHARE = 0.4
FILL_SHARE = 0.65
PATTERN_SHARE = 0.9
SHRINK_SHARE = 0.93
IMPROVE_SHARE = 0.94
MASTER_SHARE = 0.95
# The local search on the master's plan ends by this share.
RECOMBINED_SHARE = 0.97
# The full model gets what is left of the limit. At 200 tasks its build takes 0.3-0.7 s CPU
# (about 16 us per assignment variable) and the work outside CBC's own clock (PuLP writing the
# model, CBC reading it, PuLP reading the solution back) 0.3-1.1 s more: CBC is given what is
# left after the build but CBC_IO_FACTOR times the build's CPU time, and is not started with
# less than CBC_MIN_S; the model is not built unless that much is left by
# BUILD_S_PER_ASSIGNMENT's estimate. What is left has no other use, so CBC_MIN_S is small: a
# 60-task model is proven optimal in under 0.3 s. Before this rule CBC's limit was at least 1 s
# whatever was left, and 10 s solves of the benchmark's 200-task instances used up to 12.5 s
# (bench/results/allocation/NOTES.md, issue 33).
CBC_IO_FACTOR = 3.0
CBC_MIN_S = 0.1
BUILD_S_PER_ASSIGNMENT = 20e-6
# CPU seconds each node count gets in the fill phase's first pass.
QUICK_TRIAL_S = 0.2
# CPU seconds the dive's tail (at most DIVE_TAIL_TASKS tasks) gets from the solver itself.
TAIL_LIMIT_S = 1.0
# CPU seconds each of the pattern LP's rounded counts gets (the dives need the phase's time).
PATTERN_TRIAL_S = 0.1
# How many of the cheapest candidates give the pattern LP its first columns.
PATTERN_START_PLANS = 4
# How many of the cheapest candidates the local search starts from.
IMPROVED_CANDIDATES = 4


@dataclass(frozen=True)
class MilpResult:
    plan: Plan
    status: str  # OPTIMAL, or TIME_LIMIT when stopped with a plan not proven optimal
    gap: float  # (cost - lower_bound) / cost; 0 when optimal
    lower_bound: float  # the best lower bound proven on the cost of any plan
    time_limit_s: float  # the limit, in CPU seconds (see allocation.clock)
    cpu_seconds: float  # CPU seconds used (this thread and CBC)

    @property
    def solve_seconds(self) -> float:
        """Wall-clock seconds."""
        return self.plan.solve_seconds

    @property
    def time_limit_hit(self) -> bool:
        return self.status == TIME_LIMIT


def solve_milp(instance: Instance, time_limit_s: float = 10.0) -> MilpResult:
    """Solve the instance to optimality, or to the best plan within about ``time_limit_s`` CPU
    seconds.

    Raises SolverUnavailable if CBC cannot run and NoFeasiblePlan if no plan exists.
    """
    clock = CpuClock(time_limit_s)
    check_cbc()
    if not instance.tasks:
        return MilpResult(
            Plan(instance, (), clock.wall_elapsed()),
            OPTIMAL,
            0.0,
            0.0,
            time_limit_s,
            clock.elapsed(),
        )

    lower = 0.0
    candidates: list[Packing] = []

    def best() -> Packing | None:
        return min(candidates, key=lambda p: packing_cost(instance, p), default=None)

    def best_cost() -> float:
        incumbent = best()
        return packing_cost(instance, incumbent) if incumbent is not None else math.inf

    def closed() -> bool:
        return best_cost() <= lower + TOLERANCE

    relaxations: list[tuple[float, Aggregate, list[Packing]]] = []
    ffd_packings: list[Packing] = []
    for candidate, bound in _candidates(
        instance, lambda: clock.until(CANDIDATE_SHARE), relaxations, ffd_packings
    ):
        lower = max(lower, bound)
        if candidate is not None and within_limits(instance, candidate):
            candidates.append(candidate)
        if closed() or clock.until(CANDIDATE_SHARE) <= 0:
            break

    if not closed():
        for filled in _filled(instance, relaxations, lower, best_cost, clock, FILL_SHARE):
            if within_limits(instance, filled):
                candidates.append(filled)
            if closed():
                break

    if not closed() and len(instance.tasks) > DIVE_TAIL_TASKS:
        for plan in _from_patterns(
            instance, candidates, ffd_packings, lower, best_cost, clock, PATTERN_SHARE
        ):
            if within_limits(instance, plan):
                candidates.append(plan)
            if closed():
                break

    incumbent = best()
    if not closed() and incumbent is not None:
        for shrunk in _shrunk(instance, incumbent, lower, clock, SHRINK_SHARE):
            candidates.append(shrunk)
            if closed():
                break

    if not closed():
        cheapest = sorted(candidates, key=lambda p: packing_cost(instance, p))
        for candidate in cheapest[:IMPROVED_CANDIDATES]:
            candidates.append(
                improve(instance, candidate, deadline=lambda: clock.until(IMPROVE_SHARE) <= 0)
            )
    if not closed() and candidates and clock.until(MASTER_SHARE) > 0:
        patterns = [(t, b) for p in candidates for t, bins in p.items() for b in bins]
        try:
            recombined, _ = restricted_master(
                instance, patterns, best(), lower, clock.until(MASTER_SHARE)
            )
        except SolverUnavailable:
            recombined = None  # CBC crashed (see below); the candidates stand
        if recombined is not None and within_limits(instance, recombined):
            candidates.append(
                improve(instance, recombined, deadline=lambda: clock.until(RECOMBINED_SHARE) <= 0)
            )

    incumbent = best()
    if not closed() and (incumbent is None or clock.left() >= _full_model_needs(instance)):
        build_started = clock.elapsed()
        model = _Model(instance, incumbent, lower)
        build_s = clock.elapsed() - build_started
        cbc_limit = clock.left() - CBC_IO_FACTOR * build_s
        if cbc_limit < CBC_MIN_S:
            if incumbent is not None:
                return _result(instance, candidates, lower, time_limit_s, clock)
            # No plan in hand: only CBC can find one (or prove there is none), past the limit.
            cbc_limit = CBC_MIN_S
        try:
            cbc_bound = run_cbc(model.problem, cbc_limit, warm_start=incumbent is not None)
        except SolverUnavailable:
            # CBC crashed once in a benchmark run (a segfault on a 200-task model, not
            # reproduced): with a plan in hand, return it with the bound proven so far.
            if incumbent is None:
                raise
            return _result(instance, candidates, lower, time_limit_s, clock)
        if model.problem.status == pulp.LpStatusInfeasible:
            if incumbent is None:
                raise NoFeasiblePlan(
                    "no plan places every task within max_reserved and max_surcharge"
                )
            # CBC has called this model infeasible on a 200-task instance stopped on its time
            # limit, though the warm start satisfies it: with a plan in hand, that proves nothing.
            cbc_bound = None
        solved = model.solution() if has_solution(model.problem) else None
        if solved is not None:
            candidates.append(solved)
        if model.problem.sol_status == pulp.LpSolutionOptimal:
            lower = max(lower, pulp.value(model.problem.objective))
        elif cbc_bound is not None:
            lower = max(lower, cbc_bound)
    return _result(instance, candidates, lower, time_limit_s, clock)


def _full_model_needs(instance: Instance) -> float:
    """CPU seconds the full model needs at least: its build (estimated from its assignment
    variables, at most half of each type's fitting tasks squared), the work around CBC's clock
    and CBC_MIN_S."""
    assignments = sum(
        sum(1 for task in instance.tasks if task.demand.fits_in(nt.capacity)) ** 2 / 2
        for nt in instance.node_types
    )
    return (1 + CBC_IO_FACTOR) * BUILD_S_PER_ASSIGNMENT * assignments + CBC_MIN_S


def _result(
    instance: Instance,
    candidates: list[Packing],
    lower: float,
    time_limit_s: float,
    clock: CpuClock,
) -> MilpResult:
    """The cheapest checked candidate, optimal if it meets ``lower``."""
    plan = _cheapest_feasible(instance, candidates, clock.wall_elapsed())
    if plan is None:
        raise NoFeasiblePlan(
            f"no plan found within {time_limit_s:g} s (none proven impossible either)"
        )
    cost = plan.total_cost
    if cost <= lower + TOLERANCE:
        return MilpResult(plan, OPTIMAL, 0.0, cost, time_limit_s, clock.elapsed())
    return MilpResult(plan, TIME_LIMIT, (cost - lower) / cost, lower, time_limit_s, clock.elapsed())


def _cheapest_feasible(
    instance: Instance, candidates: list[Packing], solve_seconds: float
) -> Plan | None:
    """The cheapest candidate that passes ``validate_plan``: what the solver returns is checked,
    whichever phase made it."""
    for packing in sorted(candidates, key=lambda p: packing_cost(instance, p)):
        plan = packing_plan(instance, packing, solve_seconds)
        try:
            validate_plan(instance, plan)
        except ValueError:
            continue
        return plan
    return None


def _candidates(
    instance: Instance,
    time_left: Callable[[], float],
    relaxations: list[tuple[float, Aggregate, list[Packing]]],
    ffd_packings: list[Packing],
) -> Iterator[tuple[Packing | None, float]]:
    """Candidate packings (None when a relaxation found no task -> type choice), each with the
    lower bound known when it was made. Each relaxation with a task -> type choice is appended
    to ``relaxations`` with its capacity share and its packings by minimum bin slack; the
    packings of ``several_ffd`` to ``ffd_packings``."""
    for heuristic in (first_fit, first_fit_decreasing):
        try:
            yield eliminate_bins(instance, packing_of(heuristic(instance))), 0.0
        except NoFeasiblePlan:
            continue
    ffd_packings += several_ffd(instance)
    for packing in ffd_packings:
        yield packing, 0.0
    lower = 0.0
    for share in CAPACITY_SHARES:
        aggregate = solve_aggregate(instance, max(time_left(), 0.5), share)
        if share == 1.0:
            lower = aggregate.lower_bound
        if aggregate.by_type is None:
            yield None, lower
            continue
        exact = aggregate.bins or {}
        packings = [
            {
                type_name: exact[type_name]
                if type_name in exact
                else min_slack_bins(instance, type_name, task_ids, power)
                for type_name, task_ids in aggregate.by_type.items()
            }
            for power in SCARCITY_POWERS
        ]
        # Recorded before the packings are yielded: the caller may stop at any yield.
        relaxations.append((share, aggregate, packings))
        for packing in packings:
            yield eliminate_bins(instance, packing), lower


def _from_patterns(
    instance: Instance,
    candidates: list[Packing],
    ffd_packings: list[Packing],
    lower: float,
    cost_to_beat: Callable[[], float],
    clock: CpuClock,
    share: float,
) -> Iterator[Packing]:
    """Plans from the pattern LP (``allocation.patterns``, started from the bins of the
    PATTERN_START_PLANS cheapest candidates and of ``several_ffd``'s packings),
    until ``share`` of the limit: every task packed (``BinSearch``, PATTERN_TRIAL_S each) on the
    root LP's counts rounded (``rounded_counts``, from its patterns) when they would beat
    ``cost_to_beat()``, then the plan of each dive (``DIVE_FIX_ABOVE``, each from the root):
    its fixed patterns and the tail solved by ``solve_milp`` itself (at most DIVE_TAIL_TASKS
    tasks).

    The first columns decide where a dive ends. From the cheapest candidates alone (the
    relaxations' packings, full to the last percent) uniform/tight/dear seed 2 of the
    benchmark's families dived to 187.63 and uniform/tight/cheap seed 3 found nothing below
    115.48; with ``several_ffd``'s bins beside them (varied, less full nodes: about 200 columns
    more, the root 0.1-0.2 s CPU slower) 184.56 and 115.02, 0.28% and 0.00% above the best
    plans known (issue 33)."""
    deadline = clock.passed(share * clock.limit_s)
    # Not every candidate's bins: every column slows each simplex solve of the dives.
    cheapest = sorted(candidates, key=lambda p: packing_cost(instance, p))[:PATTERN_START_PLANS]
    master = PatternMaster(
        instance,
        [(t, tasks) for p in (*cheapest, *ffd_packings) for t, bins in p.items() for tasks in bins],
    )
    if not master.generate(deadline):
        return
    root = master.solution()
    start = start_packing(instance, root)
    for counts in rounded_counts(root):
        bins = tuple(name for name, count in counts.items() for _ in range(count))
        cost = _bins_cost(instance, bins)
        if (
            lower - TOLERANCE <= cost < cost_to_beat() - TOLERANCE
            and _holds_volume(instance, bins)
            and not deadline()
        ):
            stop = clock.elapsed() + min(PATTERN_TRIAL_S, clock.until(share))
            packing = BinSearch(instance, bins, start).run(clock.passed(stop))
            if packing is not None:
                yield packing
    for fix_above in DIVE_FIX_ABOVE:
        master.unfix()
        fixed = master.dive(deadline, fix_above)
        tail = tail_instance(instance, fixed) if fixed is not None else None
        if fixed is None or tail is None:
            return
        if not tail.tasks:
            yield fixed
            continue
        try:
            tail_result = solve_milp(tail, min(TAIL_LIMIT_S, max(clock.until(share), 0.1)))
        except NoFeasiblePlan:
            continue
        tail_packing = packing_of(tail_result.plan)
        yield {
            nt.name: fixed.get(nt.name, []) + tail_packing.get(nt.name, [])
            for nt in instance.node_types
        }


def _filled(
    instance: Instance,
    relaxations: list[tuple[float, Aggregate, list[Packing]]],
    lower: float,
    cost_to_beat: Callable[[], float],
    clock: CpuClock,
    share: float,
) -> Iterator[Packing]:
    """Every task packed by ``pack_on_bins`` on given node counts, cheapest counts first, each
    tried only if it would beat ``cost_to_beat()`` and is not below ``lower``: the relaxations'
    counts (the bound's first: a plan that meets the bound), and the bound's counts with nodes
    of one type added (one, two, ... while they would beat the best plan), or with one node of a
    type exchanged for one or two of other types, when their capacity holds the demand's volume.

    Each count is searched from the packing of the relaxation with the nearest node counts
    (``_nearest_start``), except the bound's own counts, which
    are searched from every relaxation's packing in turn: a plan on them is optimal, and the
    search's success depends on its start (on uniform/loose/dear seed 0 of the benchmark's
    families it packed them in 0.1-0.45 s CPU from each of the 0.98 relaxation's four packings,
    and in 1.3-3 s, or not in 3 s, from the bound's own).

    Two passes: first every trial for QUICK_TRIAL_S (most counts that pack at all pack within a
    few hundred moves, and the cheapest ones often cannot pack: a pass that gave them the time
    first never reached the dearer ones that do; the relaxations' counts, one node more and one
    exchanged go first, cheapest first, then the rest, cheapest first), then the trials that
    failed, cheapest first, each search resumed where it stopped (or restarted from another
    random seed if it was stuck), the first with half of the CPU time left before ``share`` of
    the limit, each later one an equal part of what remains."""
    trials: dict[tuple[str, ...], tuple[float, Packing, bool]] = {}
    # (node counts, start) per relaxation with a task -> type choice, the bound's first.
    starts: list[tuple[dict[str, int], Packing]] = []
    for _, aggregate, packings in relaxations:
        if aggregate.nodes is not None:
            start = {t: min((p.get(t, []) for p in packings), key=len) for t in aggregate.nodes}
            starts.append((aggregate.nodes, start))
    bound_bins: tuple[str, ...] | None = None
    for capacity_share, aggregate, _ in relaxations:
        if aggregate.nodes is None:
            continue
        nodes = aggregate.nodes
        bins = tuple(name for name, count in nodes.items() for _ in range(count))
        variants = [bins]
        if capacity_share == 1.0:
            bound_bins = tuple(sorted(bins))
            variants += _near_counts(instance, bins, cost_to_beat())
        for variant in variants:
            key = tuple(sorted(variant))
            cost = _bins_cost(instance, key)
            if key not in trials and cost >= lower - TOLERANCE and _holds_volume(instance, key):
                trials[key] = (cost, _nearest_start(key, starts), len(variant) > len(bins) + 1)
    # (later, cost, node types, start): the bound's own counts from every relaxation's start.
    # The first pass tries the relaxations' counts, one node more and one exchanged first, then
    # the bound's counts from the other starts and several nodes more: those are many, and
    # cheaper than counts that often pack (on uniform/tight/dear seed 1 they took the whole
    # phase before a count with one node exchanged, which packs in 0.02 s CPU, was reached).
    attempts = [
        (later or start is not own, cost, bins, start)
        for bins, (cost, own, later) in trials.items()
        for start in ([start for _, start in starts] if bins == bound_bins else [own])
    ]
    attempts.sort(key=lambda attempt: attempt[:2])
    failed: list[tuple[float, BinSearch]] = []
    for _, cost, bins, start in attempts:
        if clock.until(share) <= 0:
            break
        if cost >= cost_to_beat() - TOLERANCE:
            continue
        search = BinSearch(instance, bins, start)
        stop = clock.elapsed() + min(QUICK_TRIAL_S, clock.until(share))
        packing = search.run(clock.passed(stop))
        if packing is not None:
            yield packing
        else:
            if search.stuck:
                search = BinSearch(instance, bins, start, seed=1)
            failed.append((cost, search))
    for position, (cost, search) in enumerate(failed):
        if cost >= cost_to_beat() - TOLERANCE or clock.until(share) <= 0:
            return
        part = 0.5 if position == 0 else 1 / (len(failed) - position)
        stop = clock.elapsed() + part * clock.until(share)
        packing = search.run(clock.passed(stop))
        if packing is not None:
            yield packing


def _nearest_start(bins: tuple[str, ...], starts: list[tuple[dict[str, int], Packing]]) -> Packing:
    """The start of the relaxation whose node counts are nearest to ``bins`` (fewest nodes
    added or removed, the first on ties): its bins land on the nodes of their type, and
    the fewer tasks are left to place greedily, the more of its packing the search keeps (on
    skewed/loose/dear seed 1 of the benchmark's families, the bound's counts with one node
    exchanged for two packed in 0.05 s CPU from the 0.98 relaxation's packing, one node from
    it, and not in 1 s from the bound's)."""
    return min(
        starts,
        key=lambda start: sum(abs(bins.count(name) - count) for name, count in start[0].items()),
    )[1]


def _near_counts(
    instance: Instance, bins: tuple[str, ...], cost_to_beat: float
) -> list[tuple[str, ...]]:
    """The node types ``bins`` with nodes of one type added (one, two, ... while cheaper than
    ``cost_to_beat``: a few small cheap nodes can take the tasks that do not fit full nodes of
    the pooled types), and with one node of a type exchanged for one of another type or for two
    (the exchanged-for type and any but the removed one: finer steps in cost, and on
    skewed/loose/dear seed 1 of the benchmark's families the cheapest plan within 1% of the
    bound)."""
    variants: list[tuple[str, ...]] = []
    for nt in instance.node_types:
        if not room_for(nt, bins.count(nt.name)):
            continue
        added = bins
        while (
            room_for(nt, added.count(nt.name))
            and _bins_cost(instance, (*added, nt.name)) < cost_to_beat
        ):
            added = (*added, nt.name)
            variants.append(added)
        for other in dict.fromkeys(bins):
            if other != nt.name:
                exchanged = list(bins)
                exchanged.remove(other)
                variants.append((*exchanged, nt.name))
                # ... or for two: one of this type and one of any type but the one removed.
                for third in instance.node_types:
                    two = (*exchanged, nt.name, third.name)
                    if third.name != other and room_for(third, two.count(third.name) - 1):
                        variants.append(two)
    return variants


def _shrunk(
    instance: Instance, packing: Packing, lower: float, clock: CpuClock, share: float
) -> Iterator[Packing]:
    """Plans with one node fewer than the last, each by ``pack_on_bins`` from the last: the node
    dropped is of the type whose last node saves the most that can spare one, else the next
    type (nodes that would cost less than ``lower`` are not tried). Stops when no type can spare
    a node or at ``share`` of the limit; each trial gets half of the CPU time left."""
    current = packing
    while clock.until(share) > 0:
        counts = {name: len(bins) for name, bins in current.items() if bins}
        by_saving = sorted(
            counts, key=lambda name: -last_bin_price(instance.node_type(name), counts[name])
        )
        for name in by_saving:
            bins = tuple(t for t, count in counts.items() for _ in range(count - (t == name)))
            if _bins_cost(instance, bins) < lower - TOLERANCE:
                continue  # cheaper than the lower bound: no packing exists
            stop = clock.elapsed() + 0.5 * clock.until(share)
            shrunk = pack_on_bins(instance, bins, current, clock.passed(stop))
            if shrunk is not None:
                break
            if clock.until(share) <= 0:
                return
        else:
            return
        yield shrunk
        current = shrunk


def _holds_volume(instance: Instance, bins: tuple[str, ...]) -> bool:
    """True if the nodes' summed capacity holds the summed demand in every dimension (else no
    packing on them exists)."""
    capacity = Resources(
        *(
            sum(instance.node_type(name).capacity.as_tuple()[d] for name in bins)
            for d in range(len(DIMENSIONS))
        )
    )
    return instance.total_demand().fits_in(capacity)


def _bins_cost(instance: Instance, bins: tuple[str, ...]) -> float:
    """What nodes of these types cost, each type's first ``max_reserved`` reserved."""
    return packing_cost(
        instance, {nt.name: [[]] * bins.count(nt.name) for nt in instance.node_types}
    )


class _Model:
    """The PuLP problem of the module docstring, with its variables."""

    def __init__(self, instance: Instance, warm: Packing | None, lower: float) -> None:
        self.instance = instance
        sizes = task_sizes(instance)
        order = sorted(instance.tasks, key=lambda task: sizes[task.id], reverse=True)
        upper = packing_cost(instance, warm) if warm is not None else math.inf
        prob = pulp.LpProblem("allocation", pulp.LpMinimize)
        self.problem = prob
        # rank[t][task id]: position of the task among the tasks that fit type t, largest first.
        self.rank: dict[str, dict[str, int]] = {}
        self.y: dict[tuple[str, int], pulp.LpVariable] = {}
        self.x: dict[tuple[str, str, int], pulp.LpVariable] = {}
        cost_terms = []
        for ti, nt in enumerate(instance.node_types):
            fitting = [task for task in order if task.demand.fits_in(nt.capacity)]
            self.rank[nt.name] = {task.id: r for r, task in enumerate(fitting)}
            positions = len(fitting)
            if nt.max_nodes is not None:
                positions = min(positions, nt.max_nodes)
            if nt.busy_reserved_cost > 0 and math.isfinite(upper):
                positions = min(positions, math.floor(upper / nt.busy_reserved_cost + 1e-9))
            for j in range(positions):
                self.y[nt.name, j] = prob.add_variable(f"y_{ti}_{j}", cat=pulp.LpBinary)
                price = nt.busy_reserved_cost if j < nt.max_reserved else nt.surcharge
                cost_terms.append(price * self.y[nt.name, j])
                if j > 0:
                    prob += self.y[nt.name, j] <= self.y[nt.name, j - 1]
            for r, task in enumerate(fitting):
                for j in range(min(r + 1, positions)):
                    var = prob.add_variable(f"x_{ti}_{r}_{j}", cat=pulp.LpBinary)
                    self.x[nt.name, task.id, j] = var
        prob += pulp.lpSum(cost_terms)

        by_task: dict[str, list[pulp.LpVariable]] = defaultdict(list)
        by_bin: dict[tuple[str, int], list[tuple[str, pulp.LpVariable]]] = defaultdict(list)
        for (type_name, task_id, j), var in self.x.items():
            by_task[task_id].append(var)
            by_bin[type_name, j].append((task_id, var))
        for task in instance.tasks:
            # An empty sum here means the warm-start bound left the task no position: infeasible.
            prob += pulp.lpSum(by_task[task.id]) == 1
        for (type_name, j), members in by_bin.items():
            # A bin holds tasks only if open; the capacity rows say so too, but not for tasks
            # with no demand.
            prob += pulp.lpSum(v for _, v in members) <= len(members) * self.y[type_name, j]
            capacity = instance.node_type(type_name).capacity
            for d, dim in enumerate(DIMENSIONS):
                load = [(instance.task(tid).demand.as_tuple()[d], var) for tid, var in members]
                if any(amount > 0 for amount, _ in load):
                    prob += (
                        pulp.lpSum(a * v for a, v in load)
                        <= getattr(capacity, dim) * self.y[type_name, j]
                    )
        # The aggregated bound as a cut: CBC starts from it instead of the weak assignment LP.
        prob += pulp.lpSum(cost_terms) >= lower - TOLERANCE
        if warm is not None:
            self.set_start(warm)

    def set_start(self, packing: Packing) -> None:
        """Give CBC the packing as its first incumbent, in symmetry-broken position order."""
        for var in (*self.y.values(), *self.x.values()):
            var.setInitialValue(0)
        for type_name, bins in packing.items():
            rank = self.rank[type_name]
            for j, tasks in enumerate(sorted(bins, key=lambda b: min(rank[t] for t in b))):
                self.y[type_name, j].setInitialValue(1)
                for task_id in tasks:
                    self.x[type_name, task_id, j].setInitialValue(1)

    def solution(self) -> Packing | None:
        packing: Packing = defaultdict(list)
        for nt in self.instance.node_types:
            bins: dict[int, list[str]] = defaultdict(list)
            for (type_name, task_id, j), var in self.x.items():
                if type_name == nt.name and (var.value() or 0) > 0.5:
                    bins[j].append(task_id)
            packing[nt.name] = [bins[j] for j in sorted(bins)]
        placed = sum(len(b) for bins in packing.values() for b in bins)
        return packing if placed == len(self.instance.tasks) else None
