"""The import contracts in pyproject.toml ([tool.importlinter]) hold: algorithms import no
Prefect or Ray, storage imports no crawler, the top-level packages import each other in layers,
and no package's modules import each other in a cycle."""

from __future__ import annotations

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
