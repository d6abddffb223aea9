"""Distributed crawl benchmark (SPEC §4): the local dedup cache and the batched exchange, each
on and off, with a delay on every call to shared state.

Serves a synthetic web of realistic pages (40 KB, 200 links, 15% of them to other servers) on
loopback and crawls it from the hub with 2 and 4 Ray node actors, the way the flow does
(`tasks.launch.start_fleet`, `crawler.coordinator.Coordinator`), for a fixed time each. Every
call a node makes to shared state (the Bloom filter actor, the exchange actor) first waits the
injected delay, as if the store were 10 ms away. Four variants:

- none: no dedup cache, unbatched: a worker checks every link to another node's server with
  the filter and hands each new one to the exchange, one remote call each, before it goes on;
- lru: a bounded LRU of answers in front of the filter; misses are still one call each;
- batch: no cache; workers only buffer those links, the node's exchange thread sends them in
  calls of `exchange_batch` URLs, and servers move between nodes in one batch;
- both.

Then throughput against the batch size (10 to 200, both optimizations, PNG), and the same web
without delay or rate limits with 1 and 2 nodes: scaling, and pages per CPU-second of each
node's process (fetching, parsing, writing Parquet, and Ray's own threads in that process).

    .venv/bin/python -m bench.distributed [--json PATH] [--quick] [--png PATH] [--seconds S]

Goals: with both, at most 0.1 remote calls per page and at least 3x the pages per second of
none (the paper: about 4x); 2 nodes at least 1.7x one node's pages per second; at least 150
pages per CPU-second per node.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib

from crawler.config import config_from_dict
from crawler.coordinator import Coordinator, Progress
from tasks.allocate import NodeSpec
from tasks.launch import start_fleet, stop_fleet
from websim import WebSim, WebSpec

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "distributed"
WEB = WebSpec(
    hosts=40,
    pages=40_000,
    seed=4,
    page_bytes=40_000,
    links_per_page=200,
    latency_ms=(1.0, 5.0),
    rate_limit_rps=None,
    keepalive_max=(100,),
    keepalive_weights=(1.0,),
    crawl_delay_share=0.0,
)
UNTHROTTLED = replace(WEB, latency_ms=(0.0, 0.0))
# The crawler as fast as the servers allow: politeness delays are not what is measured here.
BASE = {
    "rate_control": {"mode": "fixed", "fixed_delay_s": 0.0},
    "requests_per_connection": 100,
    "dedup_expected_urls": 1_000_000,
}
DELAY_S = 0.010
VARIANTS = {
    "none": {"dedup_cache_size": 0, "exchange_batch": 1},
    "lru": {"exchange_batch": 1},
    "batch": {"dedup_cache_size": 0},
    "both": {},
}
BATCHES = (10, 20, 50, 100, 200)


def crawl(sim: WebSim, nodes: int, settings: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One crawl from the hub with `nodes` node actors for `seconds`. Figures are for the
    steady state: from a third of the time to the end (the start of a crawl from one hub is
    a few pages and cold caches)."""
    config = config_from_dict({**BASE, **settings})
    hosts = [url.split("/")[2] for url in sim.host_urls]
    specs = [
        NodeSpec(f"node-{i}", "bench", "reserved", hosts[i::nodes], 1.0, 1.0) for i in range(nodes)
    ]
    out = tempfile.mkdtemp(prefix="bench-distributed-")
    crawl_id = f"bench-{time.time_ns()}"
    fleet = start_fleet(crawl_id, out, config, specs, hosts, True, None, None)
    marks: list[tuple[float, list[dict[str, Any]]]] = []

    def mark(progress: Progress) -> None:
        if not marks and progress.elapsed_s >= seconds / 3:
            marks.append((progress.elapsed_s, [n.status() for n in fleet.nodes]))

    try:
        coordinator = Coordinator(fleet.nodes, fleet.owner, None, exchange=fleet.exchange)
        coordinator.seed([sim.hub_url])
        progress = coordinator.run(
            poll_s=0.1, on_progress=mark, progress_every_s=0.2, max_s=seconds
        )
        end = [n.status() for n in fleet.nodes]
    finally:
        stop_fleet(fleet)
        shutil.rmtree(out, ignore_errors=True)
        sim.request_log(clear=True)
    started, start = marks[0]

    def delta(key: str, link: bool = True) -> list[float]:
        return [
            (b["link"][key] - a["link"][key]) if link else (b[key] - a[key])
            for a, b in zip(start, end, strict=True)
        ]

    pages = delta("pages", link=False)
    cpu = delta("cpu_s")
    hits, misses = sum(delta("cache_hits")), sum(delta("cache_misses"))
    return {
        "pages": progress.pages,
        "pages_per_s": sum(pages) / (progress.elapsed_s - started),
        "remote_calls_per_page": sum(delta("remote_calls")) / max(1, sum(pages)),
        "mean_batch": sum(delta("batch_urls")) / max(1, sum(delta("batches"))),
        "cache_hit_rate": hits / max(1, hits + misses),
        "hosts_moved": int(sum(s["link"]["hosts_adopted"] for s in end)),
        "pages_per_cpu_s": [p / max(1e-9, c) for p, c in zip(pages, cpu, strict=True)],
    }


def plot(sweep: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["batch"] for r in sweep], [r["pages_per_s"] for r in sweep], marker="o")
    ax.set_xlabel("batch size (URLs per call to shared state)")
    ax.set_ylabel("pages per second")
    ax.set_title(f"2 nodes, LRU cache, {DELAY_S * 1000:.0f} ms per call to shared state")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--seconds", type=float, help="per crawl (default 20, quick 8)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--png", type=Path, default=RESULTS / "throughput_vs_batch.png")
    args = parser.parse_args()
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    # Ray runs workers at nice 15 by default; on a shared machine the nodes measured here
    # should not yield to whatever else runs.
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        _system_config={"worker_niceness": 0},
    )
    variants: list[dict[str, Any]] = []
    print(f"{WEB.hosts} servers, {WEB.page_bytes // 1000} KB pages, {WEB.links_per_page} links")
    print(f"{seconds:.0f} s per crawl, {DELAY_S * 1000:.0f} ms added to every shared-state call")
    print(
        f"{'nodes':>5} {'variant':<7} {'pages/s':>8} {'calls/page':>10} {'x none':>7}"
        f" {'batch':>6} {'cache hits':>10} {'moved':>6}"
    )
    with WebSim(WEB) as sim:
        for nodes in (2, 4):
            baseline = None
            for name, settings in VARIANTS.items():
                r = crawl(sim, nodes, {**settings, "shared_state_delay_s": DELAY_S}, seconds)
                baseline = baseline or r["pages_per_s"]
                variants.append({"nodes": nodes, "variant": name, **r})
                print(
                    f"{nodes:>5} {name:<7} {r['pages_per_s']:>8.1f}"
                    f" {r['remote_calls_per_page']:>10.3f} {r['pages_per_s'] / baseline:>7.2f}"
                    f" {r['mean_batch']:>6.1f} {r['cache_hit_rate']:>10.0%} {r['hosts_moved']:>6}",
                    flush=True,
                )
        sweep = []
        print(f"\nthroughput against batch size (2 nodes, both, {DELAY_S * 1000:.0f} ms delay)")
        for batch in BATCHES:
            settings = {"exchange_batch": batch, "shared_state_delay_s": DELAY_S}
            r = crawl(sim, 2, settings, seconds)
            sweep.append({"batch": batch, **r})
            print(
                f"batch {batch:>4}: {r['pages_per_s']:>7.1f} pages/s,"
                f" {r['remote_calls_per_page']:.3f} calls/page",
                flush=True,
            )
    plot(sweep, args.png)
    print(f"wrote {args.png}")
    scaling: dict[str, float] = {}
    cpu: list[float] = []
    print("\nunthrottled web (no delay, no latency, no rate limits), both optimizations")
    with WebSim(UNTHROTTLED) as sim:
        for nodes in (1, 2):
            r = crawl(sim, nodes, {}, seconds)
            scaling[str(nodes)] = r["pages_per_s"]
            cpu = r["pages_per_cpu_s"]
            print(
                f"{nodes} node(s): {r['pages_per_s']:.1f} pages/s,"
                f" pages per CPU-second per node: {', '.join(f'{v:.0f}' for v in cpu)}",
                flush=True,
            )
    print(f"scaling 2 nodes / 1 node: {scaling['2'] / scaling['1']:.2f}x")
    ray.shutdown()
    if args.json:
        report = {
            "variants": [
                {k: v[k] for k in ("nodes", "variant", "pages_per_s", "remote_calls_per_page")}
                for v in variants
            ],
            "scaling_pages_per_s": scaling,
            "pages_per_cpu_s": min(cpu),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
