"""Node memory under a flood of links: the peak resident memory of one crawler node on a web
whose every page carries 100,000 links to pages never linked before, under the default bounds
(docs/scheduling.md#bounds).

One in-process node (the process of this benchmark; the web is served from another process,
websim/hostile/floods.py) crawls `--hosts` such hosts for `--seconds`, with default settings
but a rate control without delay (so it fetches as fast as its CPU allows) and the deadline
set to `--seconds`. Every page gives 10,000 links (`[limits] max_links_per_page`); each host
queues at most 100,000 URLs (`max_queued_per_server`) and the node 1,000,000
(`max_queued_per_node`); URLs past them get `skipped: queue_full` rows. The process's resident
memory is sampled every 0.1 s; the kernel's high-water mark (VmHWM) is the peak. The peak
before the deadline is the crawl's; at the deadline the node writes a row for every URL still
queued, which is reported apart.

Goal (issue 29): the peak stays under the documented bound, 2 GiB per node
(docs/scheduling.md#bounds).

    .venv/bin/python -m bench.node_memory [--quick] [--seconds S] [--hosts N] [--json PATH]
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import duckdb

from bench import harness
from crawler.config import CrawlConfig
from runtime.backends import start_fleet
from runtime.fleet import single_node
from websim.hostile.floods import FreshLinksWeb

GIB = 1 << 30
BOUND_BYTES = 2 * GIB
LINKS_PER_PAGE = 100_000


def status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class Sampler:
    """The process's resident memory and the node's queued URLs every `interval_s`."""

    def __init__(self, node: Any, interval_s: float = 0.2) -> None:
        self.samples: list[tuple[float, int, int]] = []  # (time, resident bytes, queued)
        self._node = node
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            queued = self._node.status().queued
            self.samples.append((time.monotonic(), status_kib("VmRSS") * 1024, queued))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, until: float) -> tuple[int, int]:
        """The highest resident memory and queue sampled before `until`."""
        before = [(rss, queued) for when, rss, queued in self.samples if when <= until]
        return max((r for r, _ in before), default=0), max((q for _, q in before), default=0)


def crawl(hosts: int, seconds: float) -> dict[str, Any]:
    config = CrawlConfig.model_validate(
        {
            "limits": {"deadline_s": seconds},
            "rate_control": {"mode": "fixed", "fixed": {"delay_s": 0.0}},
        }
    )
    with FreshLinksWeb(hosts, LINKS_PER_PAGE) as web, tempfile.TemporaryDirectory() as out:
        names = [root.split("/")[2] for root in web.roots]
        baseline = status_kib("VmRSS") * 1024
        fleet = start_fleet(single_node("flood", out, config, names), "inprocess")
        started = time.monotonic()
        (node,) = fleet.nodes
        sampler = Sampler(node)
        try:
            coordinator = fleet.coordinator()
            coordinator.seed(web.roots)
            coordinator.run(poll_s=0.05, deadline_s=seconds)
        finally:
            fleet.stop()
            sampler.stop()
        ended = time.monotonic()
        rss_before_deadline, queued_peak = sampler.peak(started + seconds)
        con = duckdb.connect()
        crawl_dir = Path(out) / "flood"
        outcome = dict(
            con.execute(
                "SELECT coalesce(split_part(error, ':', 1) || ':' || split_part(error, ':', 2), "
                "'fetched'), count(*) FROM read_parquet(?) GROUP BY 1",
                [str(crawl_dir / "fetches" / "*.parquet")],
            ).fetchall()
        )
        discovered = con.execute(
            "SELECT count(*) FROM read_parquet(?)", [str(crawl_dir / "discovered" / "*.parquet")]
        ).fetchone()
    return {
        "hosts": hosts,
        "links_per_page": LINKS_PER_PAGE,
        "seconds": round(ended - started, 1),
        "baseline_rss_bytes": baseline,
        "peak_rss_before_deadline_bytes": rss_before_deadline,
        "peak_rss_bytes": status_kib("VmHWM") * 1024,
        "queued_peak": queued_peak,
        "discovered_rows": discovered[0] if discovered else 0,
        "fetches_rows_by_outcome": outcome,
        # (seconds since the start, resident bytes, URLs queued), about one a second
        "samples": [
            (round(when - started, 1), rss, queued) for when, rss, queued in sampler.samples[::5]
        ],
    }


def main() -> None:
    parser = harness.arguments(__doc__, quick="20 s instead of 120 s")
    parser.add_argument("--seconds", type=float, default=None, help="crawl time (default 120)")
    parser.add_argument("--hosts", type=int, default=12, help="hosts of the web (default 12)")
    args = parser.parse_args()
    run = harness.start("node_memory", args)
    seconds = args.seconds or (20.0 if args.quick else 120.0)
    figures = crawl(args.hosts, seconds)
    met = figures["peak_rss_bytes"] <= BOUND_BYTES
    outcome = figures["fetches_rows_by_outcome"]
    harness.print_table(
        f"One node, {args.hosts} hosts whose pages each carry {LINKS_PER_PAGE:,} fresh links, "
        f"{figures['seconds']} s, default bounds",
        ["figure", "value"],
        [
            ["resident memory before the crawl", f"{figures['baseline_rss_bytes'] / GIB:.2f} GiB"],
            [
                "peak before the deadline",
                f"{figures['peak_rss_before_deadline_bytes'] / GIB:.2f} GiB",
            ],
            [
                "peak, deadline rows included (VmHWM)",
                f"{figures['peak_rss_bytes'] / GIB:.2f} GiB "
                f"(bound {BOUND_BYTES / GIB:.0f} GiB: {harness.verdict(met)})",
            ],
            ["URLs queued at most", f"{figures['queued_peak']:,}"],
            ["discovered rows", f"{figures['discovered_rows']:,}"],
            *[[f"fetches rows: {name}", f"{count:,}"] for name, count in sorted(outcome.items())],
        ],
    )
    run.write_json(figures | {"bound_bytes": BOUND_BYTES, "bound_met": met})


if __name__ == "__main__":
    main()
