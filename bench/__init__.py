"""Benchmarks: each `python -m bench.<name>` prints a table (see README.md)."""

from pathlib import Path

from runtime.environment import confine_to_loopback

confine_to_loopback()  # benchmarks, like tests, reach loopback only

RESULTS = Path(__file__).parent / "results"


def results_dir(name: str, quick: bool) -> Path:
    """Where a benchmark writes its plots and figures unless told otherwise. A quick run writes
    under `results/quick/` (ignored by git): it never overwrites a full run's results."""
    directory = RESULTS / "quick" / name if quick else RESULTS / name
    directory.mkdir(parents=True, exist_ok=True)
    return directory
