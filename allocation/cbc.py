"""Running PuLP's CBC and reading back the lower bound it proved."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pulp
from pulp.apis.coin_api import pulp_cbc_path


class SolverUnavailable(RuntimeError):
    """CBC cannot be run."""


_LOWER_BOUND = re.compile(r"^Lower bound:\s*([-+0-9.eE]+)", re.MULTILINE)


def _cbc_path() -> str | None:
    """A CBC installed on the system (what PuLP 4 will require), else the one PuLP 3 bundles."""
    for path in (None, pulp_cbc_path):
        solver = pulp.COIN_CMD(path=path, msg=False)
        if solver.available():
            return solver.path
    return None


def check_cbc() -> None:
    if _cbc_path() is None:
        raise SolverUnavailable(
            "the CBC solver is not available: no `cbc` on PATH and PuLP's bundled binary is "
            "missing or not executable; install coinor-cbc (or `pip install pulp[cbc]`)"
        )


def run_cbc(problem: pulp.LpProblem, time_limit_s: float, warm_start: bool = False) -> float | None:
    """Solve with CBC and return the lower bound it reports when stopped early, if any.

    ``time_limit_s`` is CBC's CPU time (PuLP's default is wall time, which a loaded machine
    shortens). The status is left on ``problem`` (``status``, ``sol_status``). PuLP does not
    expose CBC's bound, so it is read from CBC's log.
    """
    with tempfile.TemporaryDirectory(prefix="crawlflow-cbc-") as tmp:
        log_path = Path(tmp) / "cbc.log"
        solver = pulp.COIN_CMD(
            path=_cbc_path(),
            timeLimit=time_limit_s,
            timeMode="cpu",
            warmStart=warm_start,
            msg=False,
            logPath=str(log_path),
        )
        try:
            problem.solve(solver)
        except pulp.PulpSolverError as exc:
            raise SolverUnavailable(f"CBC failed to run: {exc}") from exc
        match = _LOWER_BOUND.search(log_path.read_text())
    return float(match.group(1)) if match else None


def has_solution(problem: pulp.LpProblem) -> bool:
    return problem.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
