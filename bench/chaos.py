"""Chaos benchmark: a crawler node against every hostile websim host, one scenario at a time.

Each scenario (websim/hostile.py) is crawled from its host's root by one in-process crawler
node and the coordinator, in a fresh process of its own, so that process's peak RSS is the
node's peak memory. A last run crawls a small normal web and every hostile host at once. Per
run the table shows the outcome (rows per error class, and per HTTP status >= 300), the pages
fetched against those a robust crawler must fetch, pages lost (expected but not fetched, or
known to the crawl and left without a final fetches row), duplicates (URLs with more than one
final row), worker threads that died, and the node's peak RSS.

    .venv/bin/python -m bench.chaos [--scenarios drip gzip_bomb ...] [--parallel 4] [--json PATH]

Goals: no crashes, no page lost, no duplicates, peak RSS under 500 MB with the 1 GB body and
the gzip bomb. Size limits are the defaults (10 MB); timeouts, retries and the trap limit are
shortened so that the run takes minutes, not hours (see CHAOS_SETTINGS).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crawler.config import CrawlConfig
from crawler.coordinator import Coordinator
from crawler.node import CrawlerNode
from crawler.politeness import is_retryable
from crawler.urls import canonical_url, host_key
from storage.views import connect
from websim import WebSim, WebSpec
from websim.hostile import SCENARIOS

CHAOS_SETTINGS: dict[str, Any] = {
    "connect_timeout_s": 2.0,
    "read_timeout_s": 2.0,
    "fetch_timeout_s": 5.0,
    "robots_retry_s": 1.0,
    "trap_max_urls_per_pattern": 100,
    "write_interval_s": 1.0,
    "rate_control": {
        "retry_after_max_s": 3.0,
        "max_retries": 2,
        "backoff_base_s": 0.2,
        "backoff_cap_s": 2.0,
    },
}
ALL = "everything_at_once"
RUN_TIMEOUT_S = 300.0


@dataclass
class CrawlReport:
    outcome: dict[str, int]  # error class, or HTTP status >= 300 -> rows (robots.txt left out)
    fetched: int  # expected URLs fetched with a 2xx and no error
    expected: int
    lost: list[str]  # expected but not fetched, or known and never finished
    duplicates: int  # URLs with more than one final row
    crashes: int  # worker threads that died of an exception
    peak_rss_mb: float  # of the process that ran the node
    seconds: float
    finished: bool  # the crawl ended by itself within the time limit


def crawl_in_process(
    seeds: list[str],
    scope: list[str],
    out_dir: Path,
    config: CrawlConfig,
    allow_private: bool = True,
    timeout_s: float = RUN_TIMEOUT_S,
) -> tuple[Path, bool]:
    """Crawl with one in-process node owning every server in `scope`; returns the crawl
    directory and whether the crawl finished within `timeout_s`."""
    seeds = [canonical_url(seed) for seed in seeds]
    hosts = sorted(set(scope) | {host_key(seed) for seed in seeds})
    node = CrawlerNode(
        "node-0", "chaos", str(out_dir), config, hosts, hosts, allow_private, max_depth=None
    )
    coordinator = Coordinator([node], dict.fromkeys(hosts, "node-0"), max_pages=None)
    coordinator.seed(seeds)
    # The coordinator has no deadline of its own; a crawl that never ends is a finding here.
    driver = threading.Thread(target=coordinator.run, kwargs={"poll_s": 0.02}, daemon=True)
    driver.start()
    driver.join(timeout_s)
    node.close()
    return out_dir / "chaos", not driver.is_alive()


def analyse(crawl_dir: Path, seeds: list[str], expected: set[str]) -> dict[str, Any]:
    """What the output says: error classes, expected pages fetched, lost, duplicates."""
    con = connect(crawl_dir)
    rows = con.execute(
        "SELECT url, fetch_status, error FROM fetches WHERE url_path <> '/robots.txt'"
    ).fetchall()
    ok = {url for url, status, error in rows if error is None and 200 <= (status or 0) < 300}
    finals = Counter(url for url, status, error in rows if not is_retryable(status, error))
    known = {url for (url,) in con.execute("SELECT DISTINCT url FROM discovered").fetchall()}
    known |= {canonical_url(seed) for seed in seeds}
    outcome = Counter(
        error.split(":", 1)[0] if error else f"HTTP {status}"
        for _, status, error in rows
        if error or (status or 0) >= 300
    )
    return {
        "outcome": dict(outcome.most_common()),
        "fetched": len(expected & ok),
        "expected": len(expected),
        "lost": sorted((expected - ok) | (known - set(finals))),
        "duplicates": sum(1 for count in finals.values() if count > 1),
    }


def _run(
    seeds: list[str], scope: list[str], expected: list[str], settings: dict[str, Any]
) -> CrawlReport:
    """One crawl in this (fresh) process, measured."""
    crashes: list[BaseException | None] = []
    threading.excepthook = lambda args: crashes.append(args.exc_value)
    out_dir = Path(tempfile.mkdtemp(prefix="chaos-"))
    started = time.monotonic()
    try:
        crawl_dir, finished = crawl_in_process(seeds, scope, out_dir, CrawlConfig(**settings))
        seconds = time.monotonic() - started
        # Read before the analysis: DuckDB's memory is not the node's.
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        result = analyse(crawl_dir, seeds, set(expected))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return CrawlReport(
        **result,
        crashes=len(crashes),
        peak_rss_mb=peak_kb / 1024,
        seconds=seconds,
        finished=finished,
    )


def _cell(report: CrawlReport) -> list[str]:
    outcome = ", ".join(f"{name} x{count}" for name, count in list(report.outcome.items())[:3])
    if len(report.outcome) > 3:
        outcome += ", ..."
    return [
        (outcome or "ok") if report.finished else "did not finish",
        f"{report.fetched}/{report.expected}",
        str(len(report.lost)),
        str(report.duplicates),
        str(report.crashes),
        f"{report.peak_rss_mb:.0f}",
        f"{report.seconds:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", choices=[*SCENARIOS, ALL])
    parser.add_argument("--parallel", type=int, default=4, help="crawls at once")
    parser.add_argument("--json", type=Path, help="write the reports here")
    args = parser.parse_args()
    names = args.scenarios or [*SCENARIOS, ALL]

    spec = WebSpec(
        hosts=4, pages=200, seed=5, rate_limit_rps=None, latency_ms=(1.0, 3.0),
        hostile=tuple(SCENARIOS),
    )  # fmt: skip
    reports: dict[str, CrawlReport] = {}
    with WebSim(spec) as sim:
        runs = {}
        for name in names:
            if name == ALL:
                seeds = [sim.hub_url] + [sim.hostile_url(s) for s in SCENARIOS]
                scope = sim.servers
                scope += [sim.hostile_host(s) for s in SCENARIOS]
                expected = sim.reachable_allowed_urls().union(
                    *(sim.hostile_expected(s) for s in SCENARIOS)
                )
            else:
                seeds, scope = [sim.hostile_url(name)], [sim.hostile_host(name)]
                expected = sim.hostile_expected(name)
            runs[name] = (seeds, scope, sorted(expected), CHAOS_SETTINGS)
        # A fresh process per crawl: its peak RSS is that crawl's alone. The all-at-once run
        # goes last: its scope includes the server the offsite redirect points to.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.parallel, context, max_tasks_per_child=1) as pool:
            for batch in ([n for n in runs if n != ALL], [n for n in runs if n == ALL]):
                futures = {name: pool.submit(_run, *runs[name]) for name in batch}
                for name, future in futures.items():
                    reports[name] = future.result()
                    print(f"{name}: done in {reports[name].seconds:.1f}s", flush=True)
                if ALL not in batch:
                    log = sim.request_log()
                    offsite = [e for e in log if e["path"] == "/from-hostile-redirect"]

    header = ["scenario", "outcome", "pages", "lost", "dup", "crash", "peak MB", "s"]
    table = [header] + [[name, *_cell(report)] for name, report in reports.items()]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    print(f"requests to the out-of-scope redirect target (one-scenario runs): {len(offsite)}")
    print(f"settings: {CHAOS_SETTINGS}, the rest defaults")
    if args.json:
        args.json.write_text(json.dumps({n: asdict(r) for n, r in reports.items()}, indent=2))


if __name__ == "__main__":
    main()
