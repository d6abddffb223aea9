"""What reading pages costs a whole crawl: pages per CPU-second of `crawlflow crawl`, this
checkout (everything on, and with `[content] main_text = false`) against another checkout's
command (main), side by side in one run.

The crawl is bench/startup.py's (two documentation-like websim sites, 1,700 pages, on
loopback), and so is the measure: the CPU time (user + system) of the command's whole process
tree, the Prefect server and Ray's processes included. The variants run in turn, round after
round, so the machine's load falls on each alike; each has its own PREFECT_HOME, warmed by a
first run that is not counted. Pages per CPU-second: the pages the crawl reported over that
CPU time. Also, from this checkout's output: the share of HTML pages with a non-empty `text`
and the languages found.

    .venv/bin/python -m bench.content_cost --baseline /work/main/.venv/bin/crawlflow \\
        [--rounds N] [--json PATH]

Goal (issue 31): with everything on, at least 0.85 of the baseline's pages per CPU-second;
main text is on by default if it costs at most 15% of them.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb

from bench import harness
from bench.startup import CRAWLFLOW, PR_SET_CHILD_SUBREAPER, WEB, load, run_command
from websim import WebSim


def main() -> None:
    parser = harness.arguments(__doc__)
    parser.add_argument("--baseline", type=Path, required=True, help="the other crawlflow")
    parser.add_argument("--rounds", type=int, default=3, help="counted runs of each variant")
    args = parser.parse_args()
    bench_run = harness.start("content_cost", args)
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    figures: dict[str, list[dict[str, Any]]] = {}
    with WebSim(WEB) as sim, tempfile.TemporaryDirectory(prefix="bench-content-") as tmp:
        base = Path(tmp)
        off = base / "main_text_off.toml"
        off.write_text("[content]\nmain_text = false\n")
        variants = {
            "baseline": (args.baseline, ()),
            "this checkout": (CRAWLFLOW, ()),
            "this checkout, main_text = false": (CRAWLFLOW, ("--config", str(off))),
        }
        for round_index in range(args.rounds + 1):
            for name, (command, options) in variants.items():
                home = base / f"home-{list(variants).index(name)}"
                out = base / f"out-{round_index}-{list(variants).index(name)}"
                before = load()
                run = run_command(sim.host_urls, home, out, command, options)
                if run.returncode != 0:
                    print("\n".join(run.output[-30:]))
                    raise SystemExit(f"{name}: crawlflow crawl exited with {run.returncode}")
                if round_index == 0 or run.cpu_s is None:
                    continue  # the warm-up
                row: dict[str, Any] = {
                    "pages": run.crawl_pages,
                    "cpu_s": round(run.cpu_s, 2),
                    "pages_per_cpu_s": round(run.crawl_pages / run.cpu_s, 2),
                    "load": before,
                }
                if command == CRAWLFLOW and not options:
                    row.update(text_figures(out))
                figures.setdefault(name, []).append(row)
                print(f"round {round_index} {name}: {row}", flush=True)
    summary = {
        name: statistics.median(row["pages_per_cpu_s"] for row in rows)
        for name, rows in figures.items()
    }
    baseline = summary["baseline"]
    ratios = {name: round(value / baseline, 3) for name, value in summary.items()}
    for name, value in summary.items():
        print(f"{name:36s} {value:8.2f} pages/CPU-s  {ratios[name]:.3f} of the baseline")
    bench_run.write_json(
        {
            "baseline": str(args.baseline),
            "rounds": args.rounds,
            "runs": figures,
            "median_pages_per_cpu_s": summary,
            "ratio_to_baseline": ratios,
        }
    )


def text_figures(out: Path) -> dict[str, Any]:
    """The share of HTML pages with a non-empty text, and the languages, of a crawl's output."""
    (pages,) = out.glob("*/pages")
    con = duckdb.connect()
    files = [str(path) for path in sorted(pages.glob("*.parquet"))]
    total, with_text = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE length(trim(text)) > 0) FROM read_parquet(?)",
        [files],
    ).fetchone() or (0, 0)
    languages = con.execute(
        "SELECT coalesce(content_languages, 'unknown'), count(*) FROM read_parquet(?) "
        "GROUP BY 1 ORDER BY 2 DESC",
        [files],
    ).fetchall()
    return {
        "html_pages": total,
        "text_non_empty_share": round(with_text / total, 4) if total else None,
        "languages": dict(languages),
    }


if __name__ == "__main__":
    main()
