"""Distributed crawl benchmark (docs/distributed.md): the local dedup cache and the batched
exchange, each on and off, with a delay on every call to shared state.

Serves a synthetic web of realistic pages (40 KB, 200 links, 15% of them to other servers) on
loopback and crawls it from the hub with 2 and 4 Ray node actors, the way the flow does (the
Ray runtime, `runtime.backends.start_fleet`, and `crawler.cluster.coordinator.Coordinator`), for
a fixed time each. Every call a node makes to shared state (the Bloom filter actor, the exchange
actor) first waits the injected delay, as if the store were 10 ms away. Four variants:

- none: no dedup cache, unbatched: a worker checks every link to another node's server with
  the filter and hands each new one to the exchange, one remote call each, before it goes on;
- lru: a bounded LRU of answers in front of the filter; misses are still one call each;
- batch: no cache; workers only buffer those links, the node's exchange thread checks them
  with the filter `[exchange] batch` per call, the new ones ride the next heartbeat, and
  servers move between nodes in batches;
- both.

Then throughput and remote calls against the batch size (10 to 200, both optimizations, PNG),
and the same web without delay or rate limits with 1 and 2 nodes: scaling, and pages per
CPU-second of the whole crawl: every process of it (this driver and all its descendants: Ray's
daemons, the node, exchange and Bloom filter actors; websim left out), read from /proc; beside
it, of each node's process alone (fetching, parsing, writing Parquet).

Figures are for the steady state (from a third of each crawl's time to its end) and, per case,
the median of interleaved rounds: on a shared machine other load moves throughput by tens of
percent from one minute to the next. Ray's workers run at nice 0 here (Ray's default is 15),
so that the nodes do not yield to unrelated processes.

    .venv/bin/python -m bench.distributed [--json PATH] [--quick] [--png PATH] [--seconds S]
        [--rounds N]

Goals: with both, at most 0.1 remote calls per page and at least 3x the pages per second of
none (the paper: about 4x); 2 nodes at least 1.7x one node's pages per second; at least 150
pages per CPU-second per node.

"none" is the implementation with neither buffer, not a competing design: each worker blocks
on one remote call (10 ms here) per link to another node's server, to the filter and then to
the exchange, before it goes on. The ratios against it say how much of a fetch loop such
blocking calls take.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bench import harness
from crawler.cluster.coordinator import Progress
from crawler.config import config_from_dict, with_overrides
from crawler.node import NodeStatus
from runtime import cpu_accounting
from runtime.backends import start_fleet
from runtime.fleet import FleetPlan, LoneNode
from runtime.ray_backend import LOCAL_RAY
from websim import WebSim, WebSpec

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
# Served from memory: on this 2-core machine websim's rendering would take CPU from the nodes.
UNTHROTTLED = replace(WEB, latency_ms=(0.0, 0.0), static=True)
# The crawler as fast as the servers allow: politeness delays are not what is measured here.
BASE = {
    "rate_control": {"mode": "fixed", "fixed": {"delay_s": 0.0}},
    "scheduling": {"requests_per_connection": 100},
    "dedup": {"expected_urls": 1_000_000},
}
DELAY_S = 0.010
VARIANTS = {
    "none": {"dedup": {"cache_size": 0}, "exchange": {"batch": 1}},
    "lru": {"exchange": {"batch": 1}},
    "batch": {"dedup": {"cache_size": 0}},
    "both": {},
}
BATCHES = (10, 20, 50, 100, 200)


def crawl(sim: WebSim, nodes: int, settings: dict[str, Any], seconds: float) -> dict[str, Any]:
    """One crawl from the hub with `nodes` node actors for `seconds`. Figures are for the
    steady state: from a third of the time to the end (the start of a crawl from one hub is
    a few pages and cold caches)."""
    config = config_from_dict(with_overrides(BASE, settings))
    hosts = sim.servers
    planned = [LoneNode(f"node-{i}", hosts[i::nodes], 1.0, 1.0) for i in range(nodes)]
    out = tempfile.mkdtemp(prefix="bench-distributed-")
    crawl_id = f"bench-{time.time_ns()}"
    fleet = start_fleet(FleetPlan(crawl_id, out, config, planned, hosts, True), "ray")
    marks: list[tuple[float, list[NodeStatus], CpuTimes]] = []

    def mark(progress: Progress) -> None:
        if not marks and progress.elapsed_s >= seconds / 3:
            marks.append((progress.elapsed_s, [n.status() for n in fleet.nodes], cpu_times(sim)))

    try:
        coordinator = fleet.coordinator()
        coordinator.seed([sim.hub_url])
        progress = coordinator.run(
            poll_s=0.1, on_progress=mark, progress_every_s=0.2, max_s=seconds
        )
        end = [n.status() for n in fleet.nodes]
        machine = cpu_times(sim)
    finally:
        fleet.stop()
        shutil.rmtree(out, ignore_errors=True)
        sim.request_log(clear=True)
    if not marks:
        raise SystemExit(f"a {seconds:g} s crawl ends before its steady state: use more --seconds")
    started, start, machine_start = marks[0]
    steady_s = progress.elapsed_s - started

    def delta(key: str, link: bool = True) -> list[float]:
        return [
            (b.link[key] - a.link[key]) if link else (getattr(b, key) - getattr(a, key))
            for a, b in zip(start, end, strict=True)
        ]

    pages = delta("pages", link=False)
    cpu = delta("cpu_s")
    hits, misses = sum(delta("cache_hits")), sum(delta("cache_misses"))
    return {
        "pages": progress.pages,
        "pages_per_s": sum(pages) / steady_s,
        "remote_calls_per_page": sum(delta("remote_calls")) / max(1, sum(pages)),
        "mean_batch": sum(delta("batch_urls")) / max(1, sum(delta("batches"))),
        "cache_hit_rate": hits / max(1, hits + misses),
        "hosts_moved": int(sum(s.link["hosts_adopted"] for s in end)),
        "pages_per_cpu_s": [p / max(1e-9, c) for p, c in zip(pages, cpu, strict=True)],
        # Every process of the crawl counted: the nodes, Ray's daemons and other actors, the
        # driver. The figure a user's machine pays per page.
        "pages_per_crawl_cpu_s": sum(pages) / max(1e-9, machine.crawl - machine_start.crawl),
        "cpus_crawl": (machine.crawl - machine_start.crawl) / steady_s,
        # Where the machine's CPUs went in the steady state, in CPUs: the nodes' processes,
        # websim's, everything else (Ray's actors and daemons, the driver), and what the
        # hypervisor gave to other machines (Linux `steal`; on a shared virtual machine it
        # moves throughput by tens of percent).
        "cpus_nodes": sum(cpu) / steady_s,
        "cpus_websim": (machine.websim - machine_start.websim) / steady_s,
        "cpus_other": (
            (machine.busy - machine_start.busy) - sum(cpu) - (machine.websim - machine_start.websim)
        )
        / steady_s,
        "stolen_cpus": (machine.stolen - machine_start.stolen) / steady_s,
    }


@dataclass(frozen=True)
class CpuTimes:
    busy: float  # CPU-seconds the machine spent running anything
    stolen: float
    websim: float  # of them, websim's server process
    # ... and every process of the crawl: this driver and all its descendants (Ray's daemons,
    # the node, exchange and Bloom filter actors), websim excluded.
    crawl: float


def crawl_ticks(exclude: int | None) -> int:
    """CPU ticks of this process's tree (each process's own and those of the children it has
    reaped), the subtree rooted at `exclude` left out."""
    total = 0
    for pid in cpu_accounting.process_tree(os.getpid(), exclude):
        stat = cpu_accounting.proc_stat(pid)
        if stat is not None:  # else gone meanwhile
            total += sum(int(field) for field in stat[11:15])  # utime, stime, cutime, cstime
    return total


def cpu_times(sim: WebSim) -> CpuTimes:
    """The machine's CPU-seconds so far (Linux /proc; zeros elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open("/proc/stat") as stat:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (
                int(field) for field in stat.readline().split()[1:9]
            )
        websim_stat = cpu_accounting.proc_stat(sim.pid)
        if websim_stat is None:
            raise OSError(f"websim's process {sim.pid} is gone")
        websim = sum(int(field) for field in websim_stat[11:13])  # utime, stime
        crawl = crawl_ticks(exclude=sim.pid)
    except (OSError, ValueError):
        return CpuTimes(math.nan, math.nan, math.nan, math.nan)  # unknown: the table prints nan
    busy = user + nice + system + irq + softirq
    return CpuTimes(busy / tick, steal / tick, websim / tick, crawl / tick)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput (of repeated, interleaved runs: the machine's other
    load moves throughput more than anything measured here)."""
    return sorted(runs, key=lambda r: r["pages_per_s"])[(len(runs) - 1) // 2]


def rounds_of(
    rounds: int, cases: list[tuple[Any, Callable[[], dict[str, Any]]]]
) -> dict[Any, dict[str, Any]]:
    """Run every case once per round, rounds one after the other, and keep each case's median
    run: a load that comes and goes hits all cases alike."""
    runs: dict[Any, list[dict[str, Any]]] = {key: [] for key, _ in cases}
    for round_number in range(1, rounds + 1):
        for key, run in cases:
            runs[key].append(run())
            print(
                f"  round {round_number}/{rounds}, {key}: {runs[key][-1]['pages_per_s']:.0f}"
                " pages/s",
                flush=True,
            )
    return {key: median_run(found) for key, found in runs.items()}


def plot(sweep: dict[int, dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    batches = sorted(sweep)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(batches, [sweep[b]["pages_per_s"] for b in batches], marker="o", color="C0")
    ax.set_xlabel("batch size (URLs per call to shared state)")
    ax.set_ylabel("pages per second", color="C0")
    ax.set_ylim(bottom=0)
    calls = ax.twinx()
    calls.plot(batches, [sweep[b]["remote_calls_per_page"] for b in batches], "s--", color="C1")
    calls.set_ylabel("remote calls per page", color="C1")
    calls.set_ylim(bottom=0)
    ax.set_title(f"2 nodes, LRU cache, {DELAY_S * 1000:.0f} ms per call to shared state")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = harness.arguments(__doc__, quick="shorter runs, one round")
    parser.add_argument("--seconds", type=float, help="per crawl (default 15, quick 8)")
    parser.add_argument("--rounds", type=int, help="runs per case, median kept (default 3)")
    parser.add_argument("--png", type=Path, help="the batch-size plot (default: beside the JSON)")
    args = parser.parse_args()
    run = harness.start("distributed", args)
    seconds = args.seconds or (8.0 if args.quick else 15.0)
    rounds = args.rounds or (1 if args.quick else 3)
    import ray

    # Ray runs workers at nice 15 by default; on a shared machine the nodes measured here
    # should not yield to whatever else runs.
    ray.init(num_cpus=os.cpu_count(), _system_config={"worker_niceness": 0}, **LOCAL_RAY)
    print(f"{WEB.hosts} servers, {WEB.page_bytes // 1000} KB pages, {WEB.links_per_page} links")
    print(
        f"{seconds:.0f} s per crawl, median of {rounds} round(s),"
        f" {DELAY_S * 1000:.0f} ms added to every shared-state call"
    )
    with WebSim(WEB) as sim:

        def delayed(nodes: int, settings: dict[str, Any]) -> Callable[[], dict[str, Any]]:
            return lambda: crawl(
                sim,
                nodes,
                with_overrides(settings, {"exchange": {"shared_state_delay_s": DELAY_S}}),
                seconds,
            )

        table = rounds_of(
            rounds,
            [
                ((nodes, name), delayed(nodes, settings))
                for nodes in (2, 4)
                for name, settings in VARIANTS.items()
            ],
        )
        sweep = rounds_of(
            rounds, [(batch, delayed(2, {"exchange": {"batch": batch}})) for batch in BATCHES]
        )
    harness.print_table(
        f"the variants, {DELAY_S * 1000:.0f} ms on every call to shared state",
        ["nodes", "variant", "pages/s", "calls/page", "x none", "batch", "cache hits", "moved"]
        + ["stolen"],
        [
            [
                str(nodes),
                name,
                f"{r['pages_per_s']:.1f}",
                f"{r['remote_calls_per_page']:.3f}",
                f"{r['pages_per_s'] / table[nodes, 'none']['pages_per_s']:.2f}",
                f"{r['mean_batch']:.1f}",
                f"{r['cache_hit_rate']:.0%}",
                str(r["hosts_moved"]),
                f"{r['stolen_cpus']:.2f}",
            ]
            for (nodes, name), r in table.items()
        ],
        text_columns=(1,),
    )
    harness.print_table(
        f"throughput against batch size (2 nodes, both, {DELAY_S * 1000:.0f} ms delay)",
        ["batch", "pages/s", "calls/page"],
        [
            [str(batch), f"{r['pages_per_s']:.1f}", f"{r['remote_calls_per_page']:.3f}"]
            for batch, r in sweep.items()
        ],
        text_columns=(),
    )
    png = args.png or run.directory / "throughput_vs_batch.png"
    plot(sweep, png)
    print(f"plot: {png}")
    print("\nunthrottled web (no delay, no latency, no rate limits), both optimizations")
    with WebSim(UNTHROTTLED) as sim:
        scaled = rounds_of(rounds, [(n, partial(crawl, sim, n, {}, seconds)) for n in (1, 2)])
    for nodes, r in scaled.items():
        print(
            f"{nodes} node(s): {r['pages_per_s']:.1f} pages/s, pages per CPU-second of the"
            f" whole crawl (every process: nodes, Ray, driver) {r['pages_per_crawl_cpu_s']:.0f},"
            f" of each node's process alone {', '.join(f'{v:.0f}' for v in r['pages_per_cpu_s'])};"
            f" CPUs used by the crawl {r['cpus_crawl']:.2f} (nodes {r['cpus_nodes']:.2f}),"
            f" websim {r['cpus_websim']:.2f}, the rest {r['cpus_other']:.2f}; stolen by the"
            f" hypervisor {r['stolen_cpus']:.2f}"
        )
    scaling = {str(n): r["pages_per_s"] for n, r in scaled.items()}
    print(f"scaling 2 nodes / 1 node: {scaling['2'] / scaling['1']:.2f}x")
    ray.shutdown()
    run.write_json(
        {
            "variants": [
                {
                    "nodes": nodes,
                    "variant": name,
                    "pages_per_s": r["pages_per_s"],
                    "remote_calls_per_page": r["remote_calls_per_page"],
                }
                for (nodes, name), r in table.items()
            ],
            "scaling_pages_per_s": scaling,
            # The 2-node run, every process of the crawl counted.
            "pages_per_crawl_cpu_s": scaled[2]["pages_per_crawl_cpu_s"],
            # The 2-node run: each node's process alone, its least efficient one.
            "pages_per_cpu_s": min(scaled[2]["pages_per_cpu_s"]),
        }
    )


if __name__ == "__main__":
    main()
