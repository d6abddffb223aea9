"""What every benchmark shares: its command line, where its results go, the provenance each
result file carries, and how its tables are printed.

A run starts with `start(name, args)`. Its result file is `--json PATH`, or by default
`bench/results/<name>/<name>.json` (committed, from full runs) or, with `--quick`,
`bench/results/quick/<name>/<name>.json` (ignored by git: a quick run never overwrites a full
run's results); its plots go beside that file. `Run.write_json` adds a `provenance` object to
the document: when the run started and when the file was written (UTC), the git commit and
whether the code differed from it, the machine (CPU model, cores, memory), the load average at
the start and at the time of writing (figures on a shared machine move with it), the Python
version and the exact command line. A figure copied out of a result file keeps them with it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"


def results_dir(name: str, quick: bool) -> Path:
    """Where a benchmark writes its figures and plots unless told otherwise. A quick run writes
    under `results/quick/` (ignored by git): it never overwrites a full run's results."""
    directory = RESULTS / "quick" / name if quick else RESULTS / name
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def arguments(doc: str | None, quick: str | None = None) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring's first line as the description, `--json PATH`
    (its result file) and, for a benchmark with a quick mode, `--quick` (`quick`: what it
    leaves out). The benchmark adds its own options."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument(
        "--json",
        type=Path,
        help="the result file (default: bench/results/NAME/NAME.json, with --quick "
        "bench/results/quick/NAME/NAME.json; plots go beside it)",
    )
    return parser


class Run:
    """One run of a benchmark: where its results go, and the provenance every result file it
    writes carries."""

    def __init__(self, name: str, quick: bool, result_file: Path | None) -> None:
        self.name = name
        self.quick = quick
        self.result_file = result_file or results_dir(name, quick) / f"{name}.json"
        self.started = datetime.now(UTC)
        self.load_at_start = load_average()
        self.code = git_state()
        self.machine = machine()

    @property
    def directory(self) -> Path:
        """Where the run's plots go: beside its result file."""
        self.result_file.parent.mkdir(parents=True, exist_ok=True)
        return self.result_file.parent

    def provenance(self) -> dict[str, Any]:
        """Which code ran where, when, how loaded and how (the load's end: now)."""
        return {
            "benchmark": f"bench.{self.name}",
            "quick": self.quick,
            "started_utc": _utc(self.started),
            "written_utc": _utc(datetime.now(UTC)),
            **self.code,
            "machine": self.machine,
            "load_average": {"start": self.load_at_start, "end": load_average()},
            "python": platform.python_version(),
            "command": shlex.join(sys.orig_argv),
        }

    def summary(self) -> str:
        """The provenance in one line, for the top of the benchmark's output."""
        commit = (self.code["commit"] or "unknown")[:10]
        dirty = ", with uncommitted changes" if self.code["dirty"] else ""
        machine = self.machine
        return (
            f"bench.{self.name}{' --quick' if self.quick else ''}: commit {commit}{dirty}; "
            f"{machine['cores']} x {machine['cpu']}, {machine['memory_gib']} GiB; load average "
            f"{' '.join(f'{x:.2f}' for x in self.load_at_start)}; {_utc(self.started)}"
        )

    def write_json(self, document: dict[str, Any]) -> Path:
        """The document with this run's provenance first, as the run's result file."""
        path = self.result_file
        path.parent.mkdir(parents=True, exist_ok=True)
        stamped = {"provenance": self.provenance(), **document}
        path.write_text(json.dumps(stamped, indent=2) + "\n")
        print(f"figures: {path}", flush=True)
        return path


def start(name: str, args: argparse.Namespace) -> Run:
    """The run of benchmark `name` (`bench/<name>.py`) with the options `arguments` parsed;
    prints its provenance in one line."""
    run = Run(name, getattr(args, "quick", False), args.json)
    print(run.summary(), flush=True)
    return run


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    text_columns: Collection[int] = (0,),
    bold_rows: Collection[int] = (),
) -> None:
    """A result table under its title, every cell already formatted: the columns numbered in
    `text_columns` hold names (left-aligned), the others figures (right-aligned); rows numbered
    in `bold_rows` stand out. Never wrapped, whatever the terminal's width: a table is read
    whole or copied."""
    table = Table(padding=(0, 1))
    for index, column in enumerate(columns):
        justify = "left" if index in text_columns else "right"
        table.add_column(Text(column), justify=justify, no_wrap=True)
    for index, row in enumerate(rows):
        # Text, not markup: a cell such as a URL family may hold brackets.
        table.add_row(*(Text(cell) for cell in row), style="bold" if index in bold_rows else None)
    if title:
        print(f"\n{title}", flush=True)  # above the table, unwrapped: titles run long
    console = Console()
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    console.width = max(console.width, natural)
    console.print(table)


def verdict(met: bool) -> str:
    """How a goal's check reads in a benchmark's output."""
    return "ok" if met else "MISSED"


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def git_state() -> dict[str, Any]:
    """The commit checked out, and whether the code differs from it (bench/results left out:
    a run's own files do not make it dirty); None for each when git cannot tell."""

    def git(*command: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *command], cwd=REPO, capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", ".", ":(exclude)bench/results")
    return {
        "commit": commit.strip() if commit else None,
        "dirty": None if status is None else bool(status.strip()),
    }


def machine() -> dict[str, Any]:
    """CPU model, cores and memory of this machine."""
    cpu = platform.processor() or platform.machine()  # off Linux
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        models = [
            line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")
        ]
        cpu = models[0] if models else cpu
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(memory / 2**30, 1)}


def _utc(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
