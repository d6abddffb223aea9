"""Chaos benchmark: a crawler node against every hostile websim host, one scenario at a time.

Each scenario (websim/hostile/) is crawled from its host's root by one in-process crawler
node and the coordinator, in a fresh process of its own, so that process's peak RSS is the
node's peak memory. A last run crawls a small normal web and every hostile host at once. Per
run the table shows the outcome (rows per error class, and per HTTP status >= 300), the pages
fetched against those a robust crawler must fetch, pages lost (expected but not fetched, or
known to the crawl and left without a final fetches row), duplicates (URLs with more than one
final row), the requests the hostile hosts received (counted by websim) and the URL family
(crawler/scope/traps.py) that took most of them, worker threads that died, the node's peak RSS and
the time to finish.

Then the hostile site of issue 13 (`hostile_site`: about 40 good pages among an endless
calendar with session ids, 100,000 dead links, a trap deep inside its documentation, a
redirect loop, an out-of-scope redirect, a 1 GB body and a gzip bomb; next to a server whose
robots.txt answers 500) is crawled with DEFAULT settings by `crawlflow crawl` (Prefect flow,
Ray nodes), and checked: finished in under 5 minutes, at most 500 requests in any trap, every
good page requested exactly once, every URL fetched or recorded with a reason. So are the two
servers of issue 29's class, each on its own: `slow_failures` (20 articles beside URLs that
hang, drip, reset, answer 429 with a Retry-After of a year, or 503 always) and `fresh_trap`
(a chain of 30 pages beside paths that grow ever deeper with fresh words; goal: at most 500
requests outside the chain).

    .venv/bin/python -m bench.chaos [--scenarios drip gzip_bomb ...] [--parallel 4] [--json PATH]

The crawls run through `runtime.trial` (tests/test_hostile.py crawls the same scenarios all at
once with it, on fast settings).

Goals: no crashes, no page lost, no duplicates, peak RSS under 500 MB with the 1 GB body and
the gzip bomb. Size limits are the defaults (10 MB); timeouts and retries are shortened so
that the run takes minutes, not hours (see CHAOS_SETTINGS).
"""

from __future__ import annotations

import multiprocessing
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import harness
from crawler.config import CrawlConfig
from crawler.scope.traps import url_family
from runtime.trial import analyse, trial_crawl
from websim import WebSim, WebSpec
from websim.hostile import SCENARIOS

CHAOS_SETTINGS: dict[str, Any] = {
    "fetch": {
        "connect_timeout_s": 2.0,
        "read_timeout_s": 2.0,
        "fetch_timeout_s": 5.0,
        "robots_retry_s": 1.0,
    },
    "output": {"write_interval_s": 1.0},
    "retry": {
        "retry_after_max_s": 3.0,
        "max_retries": 2,
        "backoff_base_s": 0.2,
        "backoff_cap_s": 2.0,
    },
}
ALL = "everything_at_once"
DEFAULTS_CLI = "defaults"  # DEFAULT_RUNS by `crawlflow crawl`, default settings
RUN_TIMEOUT_S = 300.0
CLI_GOAL_S = 300.0
TRAP_GOAL_REQUESTS = 500


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
    requests: int = 0  # the scenario's hosts received, robots.txt included
    families: dict[str, int] | None = None  # requests per URL family, most first


def _run(
    seeds: list[str], scope: list[str], expected: list[str], settings: dict[str, Any]
) -> CrawlReport:
    """One crawl in this (fresh) process, measured."""
    crashes: list[BaseException | None] = []
    threading.excepthook = lambda args: crashes.append(args.exc_value)
    out_dir = Path(tempfile.mkdtemp(prefix="chaos-"))
    started = time.monotonic()
    try:
        crawl_dir, finished = trial_crawl(
            seeds, scope, out_dir, CrawlConfig(**settings), timeout_s=RUN_TIMEOUT_S
        )
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


def families_requested(log: list[dict], hosts: set[str]) -> dict[str, int]:
    """Requests to `hosts` per URL family of their targets, most first."""
    counts = Counter(
        url_family("http://h" + entry["path"]) for entry in log if entry["host"] in hosts
    )
    return dict(counts.most_common())


def _cell(report: CrawlReport) -> list[str]:
    outcome = ", ".join(f"{name} x{count}" for name, count in list(report.outcome.items())[:3])
    if len(report.outcome) > 3:
        outcome += ", ..."
    top = next(iter((report.families or {}).items()), None)
    return [
        (outcome or "ok") if report.finished else "did not finish",
        f"{report.fetched}/{report.expected}",
        str(len(report.lost)),
        str(report.duplicates),
        str(report.requests),
        f"{top[0][:30]} x{top[1]}" if top else "-",
        str(report.crashes),
        f"{report.peak_rss_mb:.0f}",
        f"{report.seconds:.1f}",
    ]


def crawl_with_cli(seeds: list[str], out_root: Path, crawl_id: str) -> tuple[Path, float, int]:
    """`crawlflow crawl SEEDS --allow-private` with default settings, in a process of its own
    (an ephemeral Prefect API, a local Ray); returns the crawl directory, the seconds the
    command took, and its exit code."""
    command = [sys.executable, "-m", "crawlflow", "crawl", *seeds, "--allow-private"]
    command += ["--out", str(out_root), "--crawl-id", crawl_id]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, timeout=2 * CLI_GOAL_S, check=False)
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = -1
    return out_root / crawl_id, time.monotonic() - started, code


# The hostile servers crawled by the real command with default settings: each with the
# URL families that hold its good pages (the others are its traps and failures), and the
# servers crawled beside it.
DEFAULT_RUNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "hostile_site": (("/", "/docs/", "/blog/", "/blog/*/*/"), ("robots_500",)),
    "slow_failures": (("/articles/",), ()),
    "fresh_trap": (("/guide/",), ()),
}


def with_defaults(sim: WebSim, scenario: str) -> dict[str, Any]:
    """A hostile server (and its companions) through the real command with default
    settings."""
    good_families, companions = DEFAULT_RUNS[scenario]
    site = sim.hostile_host(scenario)
    seeds = [sim.hostile_url(name) for name in (scenario, *companions)]
    expected = sim.hostile_expected(scenario)
    out_root = Path(tempfile.mkdtemp(prefix="chaos-cli-"))
    sim.request_log(clear=True)
    try:
        crawl_dir, seconds, code = crawl_with_cli(seeds, out_root, scenario.replace("_", "-"))
        log = sim.request_log()
        result = analyse(crawl_dir, seeds, expected) if code == 0 else None
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    counts = Counter(e["path"] for e in log if e["host"] == site)
    good = ["/" + url.split("/", 3)[3] for url in expected]
    families = families_requested(log, {site})
    traps = {f: n for f, n in families.items() if f not in good_families}
    companion_hosts = {sim.hostile_host(name) for name in companions}
    return {
        "exit_code": code,
        "seconds": round(seconds, 1),
        "requests": sum(counts.values()),
        "families": families,
        "most_in_one_trap": max(traps.values(), default=0),
        "outside_good_families": sum(traps.values()),
        "good_pages": len(good),
        "good_pages_once": sum(1 for path in good if counts[path] == 1),
        "lost": None if result is None else result["lost"],
        "duplicates": None if result is None else result["duplicates"],
        "outcome": None if result is None else result["outcome"],
        "companion_requests": sum(
            1 for e in log if e["host"] in companion_hosts and e["path"] != "/robots.txt"
        ),
        "offsite_requests": sum(1 for e in log if e["path"] == "/from-hostile-redirect"),
    }


def print_defaults(results: dict[str, dict[str, Any]]) -> None:
    print(
        f"\n{DEFAULTS_CLI}: `crawlflow crawl` with default settings (Prefect + Ray); goals: "
        f"under {CLI_GOAL_S:.0f} s, every good page once, at most {TRAP_GOAL_REQUESTS} requests "
        "in any trap family (hostile_site) or outside the good pages' families (fresh_trap)"
    )
    header = ["server", "exit", "s", "good once", "requests", "top trap", "outside good"]
    header += ["lost", "dup"]
    rows = []
    for name, r in results.items():
        lost = r["lost"]
        rows.append(
            [
                name,
                str(r["exit_code"]),
                f"{r['seconds']:.0f}",
                f"{r['good_pages_once']}/{r['good_pages']}",
                str(r["requests"]),
                str(r["most_in_one_trap"]),
                str(r["outside_good_families"]),
                "?" if lost is None else str(len(lost)),
                str(r["duplicates"]),
            ]
        )
    harness.print_table(None, header, rows, text_columns=(0,))
    for name, r in results.items():
        top = dict(list(r["families"].items())[:8])
        print(f"  {name}: requests per URL family (top 8) {top}; rows by outcome {r['outcome']}")
    if "hostile_site" in results:
        r = results["hostile_site"]
        print(
            f"  hostile_site: requests past robots.txt to the robots-500 server: "
            f"{r['companion_requests']}; to the out-of-scope redirect target: "
            f"{r['offsite_requests']}"
        )


def main() -> None:
    parser = harness.arguments(__doc__)
    parser.add_argument("--scenarios", nargs="+", choices=[*SCENARIOS, ALL, DEFAULTS_CLI])
    parser.add_argument("--parallel", type=int, default=4, help="crawls at once")
    args = parser.parse_args()
    run = harness.start("chaos", args)
    names = args.scenarios or [*SCENARIOS, ALL, DEFAULTS_CLI]

    spec = WebSpec(
        hosts=4, pages=200, seed=5, rate_limit_rps=None, latency_ms=(1.0, 3.0),
        hostile=tuple(SCENARIOS),
    )  # fmt: skip
    reports: dict[str, CrawlReport] = {}
    defaults: dict[str, dict[str, Any]] = {}
    offsite: list[dict] = []
    with WebSim(spec) as sim:
        runs = {}
        for name in names:
            if name == DEFAULTS_CLI:
                continue
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
        hosts_of = {name: {s.split("/")[2] for s in runs[name][0]} for name in runs}
        sim.request_log(clear=True)
        # A fresh process per crawl: its peak RSS is that crawl's alone. The all-at-once run
        # goes last: its scope includes the server the offsite redirect points to.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.parallel, context, max_tasks_per_child=1) as pool:
            for batch in ([n for n in runs if n != ALL], [n for n in runs if n == ALL]):
                futures = {name: pool.submit(_run, *runs[name]) for name in batch}
                for name, future in futures.items():
                    reports[name] = future.result()
                    print(f"{name}: done in {reports[name].seconds:.1f}s", flush=True)
                log = sim.request_log(clear=True)
                for name in batch:
                    mine = [e for e in log if e["host"] in hosts_of[name]]
                    reports[name].requests = len(mine)
                    reports[name].families = families_requested(mine, hosts_of[name])
                if ALL not in batch:
                    offsite = [e for e in log if e["path"] == "/from-hostile-redirect"]
        if DEFAULTS_CLI in names:
            for scenario in DEFAULT_RUNS:
                defaults[scenario] = with_defaults(sim, scenario)
                print(f"{scenario} with defaults: {defaults[scenario]['seconds']} s", flush=True)

    header = ["scenario", "outcome", "pages", "lost", "dup", "requests", "top family", "crash"]
    header += ["peak MB", "s"]
    rows = [[name, *_cell(report)] for name, report in reports.items()]
    harness.print_table(None, header, rows, text_columns=(0, 1, 6))
    print(f"requests to the out-of-scope redirect target (one-scenario runs): {len(offsite)}")
    print(f"settings: {CHAOS_SETTINGS}, the rest defaults")
    if defaults:
        print_defaults(defaults)
    results: dict[str, Any] = {n: asdict(r) for n, r in reports.items()}
    if defaults:
        results[DEFAULTS_CLI] = defaults
    run.write_json(results)


if __name__ == "__main__":
    main()
