"""A trial crawl, for tests and benchmarks: one in-process node owning a hand-picked scope,
given up after a time limit if it has not ended by then, and what its output says against the
URLs it had to fetch (tests/test_hostile.py and bench/chaos.py crawl websim's hostile servers
with it)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

from crawler.config import CrawlConfig
from crawler.scope.urls import canonical_url, host_key
from runtime.backends import start_fleet
from runtime.fleet import single_node
from storage.outcomes import is_final
from storage.views import connect


def trial_crawl(
    seeds: list[str],
    scope: list[str],
    out_dir: Path,
    config: CrawlConfig,
    *,
    timeout_s: float,
    allow_private: bool = True,
) -> tuple[Path, bool]:
    """Crawl with one in-process node owning every server in `scope` and the seeds'; returns
    the crawl directory and whether the crawl finished within `timeout_s`."""
    seeds = [canonical_url(seed) for seed in seeds]
    hosts = sorted(set(scope) | {host_key(seed) for seed in seeds})
    plan = single_node("trial", str(out_dir), config, hosts, allow_private)
    fleet = start_fleet(plan, "inprocess")
    coordinator = fleet.coordinator()
    coordinator.seed(seeds)
    # The coordinator has no deadline of its own; a crawl that never ends is a finding here.
    driver = threading.Thread(target=coordinator.run, kwargs={"poll_s": 0.02}, daemon=True)
    driver.start()
    driver.join(timeout_s)
    fleet.stop()
    return plan.crawl_dir, not driver.is_alive()


def analyse(crawl_dir: Path, seeds: list[str], expected: set[str]) -> dict[str, Any]:
    """What the output says: rows per error class (and per HTTP status >= 300), the expected
    pages fetched, those lost (expected but not fetched, or known to the crawl and left without
    a final fetches row), and duplicates (URLs with more than one final row)."""
    con = connect(crawl_dir)
    rows = con.execute(
        "SELECT url, fetch_status, error FROM fetches WHERE url_path <> '/robots.txt'"
    ).fetchall()
    ok = {url for url, status, error in rows if error is None and 200 <= (status or 0) < 300}
    finals = Counter(url for url, status, error in rows if is_final(status, error))
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
