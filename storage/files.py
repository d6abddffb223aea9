"""File names as DuckDB reads them.

DuckDB expands `*`, `?` and `[...]` in every file argument of `read_parquet`, a list of files
included, so a crawl directory named `night[1]` would read the rows of `night1`. Every path
reaches DuckDB through `literal` (those characters bracketed, which matches them as
themselves), and never as SQL text: as a query parameter or a relation, so a quote in a
directory name is just a character of it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

_GLOB_CHARACTERS = "*?["


def literal(path: str | Path) -> str:
    """`path`, absolute, in a form DuckDB's file arguments match only to itself."""
    text = str(Path(path).absolute())
    return "".join(f"[{char}]" if char in _GLOB_CHARACTERS else char for char in text)


def parquet_files(directory: Path, pattern: str = "*.parquet") -> list[str]:
    """The Parquet files of `directory` matching `pattern` (Python's glob: the directory's own
    name is never a pattern), sorted, as DuckDB arguments."""
    return [literal(path) for path in sorted(directory.glob(pattern))]


class OutputRootError(OSError):
    """The output root cannot hold crawls; the message says why, in one line."""


def prepare_output_root(root: Path) -> None:
    """Create the output root `root` if need be and check that a crawl can write in it, so that
    a wrong `--out` is a one-line error before anything starts, not a traceback later."""
    if root.exists() and not root.is_dir():
        raise OutputRootError(f"--out {root} is not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OutputRootError(f"--out {root}: cannot write there ({reason})") from None


def wait_for_quiet(newest_change: Callable[[], float], quiet_s: float, timeout_s: float) -> bool:
    """Wait until `newest_change()` (a time.time()) is `quiet_s` seconds old; False if it was
    still changing after `timeout_s`: a crawl directory or a bucket prefix that a killed run's
    nodes may still write to (storage/checkpoint.py, storage/bucket.py)."""
    deadline = time.monotonic() + timeout_s
    while True:
        idle = time.time() - newest_change()
        if idle >= quiet_s:
            return True
        if time.monotonic() + (quiet_s - idle) > deadline:
            return False
        time.sleep(quiet_s - idle)
