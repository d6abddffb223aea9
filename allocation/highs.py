"""Running HiGHS (highspy, through PuLP's HiGHS interface) on a PuLP problem, with a CPU-time
limit.

HiGHS solves the aggregated relaxation (``allocation.aggregate``) several times faster than CBC:
on the generated 200-task instances every one in 0.1-4.2 s, where CBC stopped at 10 s without
proving three of them. CBC stays the solver of the full model and of the tests' plain model.

HiGHS' own ``time_limit`` is wall time, which a loaded machine shortens; the solver's budget is
CPU time (``allocation.clock``). HiGHS runs single-threaded here (``threads=1``), in the calling
thread, so that thread's CPU time is what it used; a callback that HiGHS calls between simplex
iterations and in the branch-and-bound loop stops the solve once it has used ``time_limit_s``.

The callback is only as prompt as HiGHS' calls to it: its root node's rounding heuristics
(``tryRoundedPoint``, propagating the conflict pool; no option turns them off) run to the end
without one. On a model with many set columns that is seconds: correlated/loose/dear seed 5 of
the benchmark's families took 5.3-6.2 s CPU whether its limit was 0.7 s or 3.7 s.
"""

from __future__ import annotations

import math
import time

import highspy
import pulp


class HighsFailed(Exception):
    """HiGHS stopped with an error instead of a status (the caller falls back to CBC)."""


class _QuietHighs(highspy.Highs):
    """``highspy.Highs`` that prints nothing: the wrapper's constructor enables callbacks, which
    makes HiGHS print its banner on stdout before any option can be set."""

    def enableCallbacks(self) -> None:
        self.setOptionValue("output_flag", False)
        super().enableCallbacks()


def quiet_highs() -> highspy.Highs:
    """A single-threaded HiGHS instance that prints nothing (for LPs built directly on it)."""
    highs = _QuietHighs()
    highs.setOptionValue("threads", 1)
    return highs


class _CpuLimitedHiGHS(pulp.HiGHS):
    def __init__(self, time_limit_s: float) -> None:
        super().__init__(msg=False, threads=1)
        self.cpu_limit_s = time_limit_s

    def createAndConfigureSolver(self, lp: pulp.LpProblem) -> None:
        highs = _QuietHighs()
        highs.setOptionValue("threads", 1)
        # HiGHS' default stops 0.01% short of proving a plan optimal; callers take an optimal
        # status for a proof.
        highs.setOptionValue("mip_rel_gap", 0.0)
        # Presolve off: on the aggregated relaxation of the benchmark's correlated/loose/dear
        # seed 5 (11,744 set columns) a 3.7 s budget ran to 6.4-7.3 s CPU with it and 5.3-6.2 s
        # without (see the module docstring). Over the 72 family instances at 10 s, side by side
        # with presolve on, it kept every goal and found six plans cheaper than the other's
        # (two dearer), its bound's starts packing sooner (bench/results/allocation/NOTES.md).
        highs.setOptionValue("presolve", "off")
        deadline = time.thread_time() + self.cpu_limit_s

        def stop_at_deadline(event: highspy.highs.HighsCallbackEvent) -> None:
            if time.thread_time() >= deadline:
                event.interrupt()

        highs.cbSimplexInterrupt.subscribe(stop_at_deadline)
        highs.cbMipInterrupt.subscribe(stop_at_deadline)
        lp.solverModel = highs

    def actualSolve(self, lp: pulp.LpProblem) -> int:
        self.createAndConfigureSolver(lp)
        self.buildSolverModel(lp)
        highs = lp.solverModel
        self.callSolver(lp)
        # PuLP's reading of the result takes an interrupted solve for a solved one; only the
        # values it assigns to the variables are used, the statuses are read here.
        self.findSolutionValues(lp)
        model_status = highs.getModelStatus()
        feasible = (
            highs.getInfo().primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
        )
        if model_status == highspy.HighsModelStatus.kOptimal:
            status, sol_status = pulp.LpStatusOptimal, pulp.LpSolutionOptimal
        elif model_status in (
            highspy.HighsModelStatus.kInfeasible,
            highspy.HighsModelStatus.kUnboundedOrInfeasible,
        ):
            # Presolve may not tell the two apart; a sum of prices is never unbounded.
            status, sol_status = pulp.LpStatusInfeasible, pulp.LpSolutionInfeasible
        elif feasible:
            status, sol_status = pulp.LpStatusNotSolved, pulp.LpSolutionIntegerFeasible
        else:
            status, sol_status = pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound
        lp.assignStatus(status, sol_status)
        return status


def run_highs(problem: pulp.LpProblem, time_limit_s: float) -> float | None:
    """Solve with HiGHS for at most ``time_limit_s`` CPU seconds and return the lower bound it
    proved, if any. The status is left on ``problem`` as ``run_cbc`` does."""
    try:
        problem.solve(_CpuLimitedHiGHS(time_limit_s))
    except (pulp.PulpSolverError, RuntimeError) as exc:
        raise HighsFailed(str(exc)) from exc
    bound = problem.solverModel.getInfo().mip_dual_bound
    return bound if math.isfinite(bound) else None
