"""`crawlflow demo`: the whole product on one machine, checked against ground truth.

Serves the bundled synthetic web on loopback, crawls it through the Prefect flow on local Ray,
prints the report, then measures coverage (pages fetched / pages reachable and allowed) and
duplicates against the simulator's ground truth.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from rich.console import Console

from crawler.request import CrawlRequest
from crawlflow.boot import crawl_runtime, run_crawl
from crawlflow.summary import print_report
from storage.bucket import readable
from websim import WebSim, WebSpec
from websim.coverage import coverage


def run_demo(hosts: int, pages: int, nodes: int, out_dir: str) -> dict[str, Any]:
    console = Console()
    # Hidden rate limits of 30-90 requests/s keep the politeness bound of the demo web (its
    # biggest server's pages over that server's limit) under 20 s.
    spec = WebSpec(hosts=hosts, pages=pages, seed=1, rate_limit_rps=(30.0, 90.0))
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The synthetic web is built and started while the Prefect server and Ray start.
        web_started = pool.submit(lambda: WebSim(spec).start())
        with crawl_runtime(), ExitStack() as stack:
            sim = web_started.result()
            stack.callback(sim.stop)
            console.print(f"synthetic web: {hosts} servers, {pages} pages, hub {sim.hub_url}")
            summary = run_crawl(
                CrawlRequest(
                    seeds=[sim.hub_url],
                    allow=sim.servers,
                    allow_private=True,  # the synthetic web lives on loopback
                    nodes=nodes,
                    out_dir=out_dir,
                )
            )
            expected = sim.reachable_allowed_urls()
    crawl_dir = readable(summary["out_dir"])
    print_report(crawl_dir, summary)
    result = coverage(crawl_dir, expected)
    console.print(
        f"coverage vs ground truth: {result['fetched']}/{result['expected']} reachable allowed "
        f"pages = {100 * result['coverage']:.1f}%, duplicates = {result['duplicates']}"
    )
    return result
