"""The import contracts in pyproject.toml ([tool.importlinter]) hold: algorithms import no
Prefect or Ray, storage imports no crawler, the top-level packages import each other in layers,
and no package's modules import each other in a cycle; and no test imports the benchmarks."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def test_import_contracts_are_kept():
    done = subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_tests_import_nothing_from_bench():
    # import-linter checks packages only, and tests/ is not one. The benchmarks are programs,
    # not a library: what tests share with them lives in the packages (allocation.instances,
    # runtime.trial).
    offenders = []
    for path in sorted((REPO / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            offenders += [
                f"{path.name}:{node.lineno}: {module}"
                for module in modules
                if module == "bench" or module.startswith("bench.")
            ]
    assert offenders == []
