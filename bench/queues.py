"""Politeness on physical queue servers: polite and fast where servers only slow down?

Issue 34's twelve servers (websim/physical.py): W = 1, 2, 4 and 8 workers behind one FIFO
queue, service times lognormal around 20 ms (sigma 0.5), and background users arriving at
random at 0%, 30% and 60% of the workers' capacity, who share the workers with the crawler. No
server answers 429 or 503: a request that finds every worker busy waits. One web per background
level (the four worker counts, pages split evenly), each crawled with `crawlflow crawl --nodes
2 --seeds FILE` (every page a seed, so that each server's queue is full from the start and its
rate is the rate controller's, not that of link discovery) on loopback, by this checkout's
command and, with `--baseline`, another checkout's (main), one after the other on a fresh copy
of the same web, so both meet the machine's load alike.

Per server, from websim's server-side log of each request's wait for a worker and service:

- `median / unloaded`: the median response time (wait + service) of the crawler's page
  requests over the unloaded median: that of a request sent alone at a random moment, the
  background users present (their own requests' median, logged over the quiet seconds before
  the crawl; on a server without background users the crawler's service times);
- `speed / best`: the crawler's rate on the server (its pages over the time from its first to
  its last) over the server's best polite rate, the highest rate at which a crawler with one
  request in flight keeps its median within 1.5x the unloaded one, from a discrete-event
  simulation of the same queue (websim/physical.py `best_polite_rate`), calibrated to the
  service times the server gave during the crawl (on a loaded machine its event loop stretches
  them). `b2b` marks a server where that rate is back to back: even requests sent one after
  the other stay within 1.5x, so the rate one connection can reach is the bound.

Goals (issue 34): median / unloaded at most 1.5 and speed / best at least 0.8 on at least 10
of the 12, none below 0.6, none above 1.7. Writes `queues.json`, `queues.png` (both ratios per
server for each variant) and `host_rates_queues_bg<N>.png` (this checkout's achieved rate,
pace and RTT over the unloaded RTT per server over time) to bench/results/politeness/.

    .venv/bin/python -m bench.queues [--baseline /work/main/.venv/bin/crawlflow] [--quick]
        [--json PATH]
"""

from __future__ import annotations

import ctypes
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import harness
from bench.startup import CRAWLFLOW, PR_SET_CHILD_SUBREAPER, run_command
from storage.plots import plot_host_rates
from storage.views import connect
from websim import PhysicalQueue, WebSim, WebSpec
from websim.physical import best_polite_rate
from websim.sim import QueuedRequest

WORKERS = (1, 2, 4, 8)
BACKGROUND = (0.0, 0.3, 0.6)
SERVICE_MS = 20.0
SERVICE_SIGMA = 0.5
INFLATION = 1.5
# Seconds the web runs before the crawl: the background users' requests logged meanwhile give
# each server's unloaded median (about 500 of them on a 1-worker server at 30%).
QUIET_S = 12.0
PAGES_PER_SERVER = {"full": 600, "quick": 200}
GOALS = {"median_over_unloaded": 1.5, "speed_over_best": 0.8, "servers": 10, "floor": 0.6}
CEILING = 1.7  # no server's median over this multiple of the unloaded one
RETRIES = 2  # runs of a crawl that failed to start


def web(background: float, pages_per_server: int) -> WebSpec:
    """The four worker counts at one background level: no network latency (loopback), no rate
    limit, no robots.txt rules, keep-alive for 100 requests."""
    queues = tuple(
        PhysicalQueue(w, SERVICE_MS, SERVICE_SIGMA, background_load=background) for w in WORKERS
    )
    return WebSpec(
        hosts=len(queues),
        pages=len(queues) * pages_per_server,
        seed=34,
        queues=queues,
        even_host_sizes=True,
        latency_ms=(0.0, 0.0),
        rate_limit_rps=None,
        robots_share=0.0,
        keepalive_max=(100,),
        keepalive_weights=(1.0,),
        static=True,
    )


FETCHES_SQL = """
SELECT url_server AS host,
       count(*) AS pages,
       epoch(max(fetch_time) - min(fetch_time)) AS span_s,
       quantile_cont(rtt_ms - coalesce(connect_ms, 0), 0.5) AS crawler_median_ms
FROM fetches
WHERE fetch_status IS NOT NULL AND url_path <> '/robots.txt'
GROUP BY url_server
"""


def measure(
    sim: WebSim,
    crawl_dir: Path,
    quiet: list[QueuedRequest],
    during: list[QueuedRequest],
) -> list[dict[str, Any]]:
    """Per server: the figures in the module notes."""
    rows = {row[0]: row[1:] for row in connect(crawl_dir).execute(FETCHES_SQL).fetchall()}
    servers = []
    for profile in sim.web.hosts:
        queue = profile.queue
        assert queue is not None  # every host of these webs is a physical queue
        host = f"{profile.address}:{sim.port}"
        crawler = [
            e for e in during if e["host"] == host and e["path"] not in (None, "/robots.txt")
        ]
        background = [e["wait_s"] + e["service_s"] for e in quiet if e["host"] == host]
        services = [e["service_s"] for e in during if e["host"] == host]
        unloaded = statistics.median(background or [e["service_s"] for e in crawler])
        median = statistics.median(e["wait_s"] + e["service_s"] for e in crawler)
        # The same queue at the service times the server really gave, its background users
        # arriving at the same rate.
        service_ms = 1000 * statistics.median(services)
        capacity = replace(queue, service_ms=service_ms).capacity_rps
        calibrated = replace(
            queue, service_ms=service_ms, background_load=queue.background_rps / capacity
        )
        best = best_polite_rate(calibrated, INFLATION)
        pages, span_s, crawler_median_ms = rows.get(host, (0, 0.0, None))
        speed = pages / span_s if span_s else None
        servers.append(
            {
                "server": queue.label(),
                "workers": queue.workers,
                "background_load": queue.background_load,
                "host": host,
                "pages": pages,
                "unloaded_ms": round(1000 * unloaded, 2),
                "unloaded_simulated_ms": round(1000 * best.unloaded_s, 2),
                "median_ms": round(1000 * median, 2),
                "median_over_unloaded": round(median / unloaded, 3),
                "crawler_median_ms": None
                if crawler_median_ms is None
                else round(crawler_median_ms, 2),
                "service_median_ms": round(service_ms, 2),
                "speed_rps": None if speed is None else round(speed, 2),
                "best_polite_rps": round(best.rate_rps, 2),
                "best_is_back_to_back": best.back_to_back,
                "speed_over_best": None if speed is None else round(speed / best.rate_rps, 3),
            }
        )
    return servers


def crawl(
    spec: WebSpec, crawlflow: Path, home: Path, out: Path, plot: Path | None
) -> dict[str, Any]:
    """One crawl of a fresh copy of the web: its servers' figures and the load around it."""
    with WebSim(spec) as sim:
        # Every page a seed: each server's queue is full from the start, so its rate is the
        # rate controller's, not the pace at which links to it are found.
        seeds = out.parent / f"{out.name}-seeds.txt"
        seeds.write_text("\n".join(sorted(sim.reachable_allowed_urls())) + "\n")
        options = ("--nodes", "2", "--seeds", str(seeds))
        time.sleep(QUIET_S)
        quiet = sim.queue_log(clear=True)
        before = harness.load_average()[0]
        run = run_command(sim.host_urls, home, out, crawlflow, options)
        for _ in range(RETRIES):
            if run.returncode == 0:
                break
            # On a loaded machine Ray's start can time out ("The current node timed out
            # during startup"), which says nothing about the crawl: run it again.
            print(run.output[-1] if run.output else "", "\nrunning it again", flush=True)
            shutil.rmtree(out, ignore_errors=True)
            sim.queue_log(clear=True)
            run = run_command(sim.host_urls, home, out, crawlflow, options)
        after = harness.load_average()[0]
        if run.returncode != 0:
            print("\n".join(run.output[-30:]))
            raise SystemExit(f"{crawlflow}: crawlflow crawl exited with {run.returncode}")
        during = sim.queue_log(clear=True)
        (crawl_dir,) = [path for path in out.iterdir() if path.is_dir()]
        servers = measure(sim, crawl_dir, quiet, during)
        if plot is not None:
            plot_host_rates(
                connect(crawl_dir),
                plot,
                unloaded_rtt_ms={s["host"]: s["unloaded_ms"] for s in servers},
                titles={s["host"]: f"{s['server']} ({s['host']})" for s in servers},
            )
    return {"load_before_after": (round(before, 1), round(after, 1)), "servers": servers}


def verdict(servers: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals over the twelve servers."""
    ratios = [s["speed_over_best"] or 0.0 for s in servers]
    medians = [s["median_over_unloaded"] for s in servers]
    both = sum(
        m <= GOALS["median_over_unloaded"] and r >= GOALS["speed_over_best"]
        for m, r in zip(medians, ratios, strict=True)
    )
    return {
        "servers_meeting_both": both,
        "lowest_speed_over_best": min(ratios),
        "highest_median_over_unloaded": max(medians),
        "met": both >= GOALS["servers"]
        and min(ratios) >= GOALS["floor"]
        and max(medians) <= CEILING,
    }


def print_variant(name: str, result: dict[str, Any]) -> None:
    servers = result["servers"]
    result["verdict"] = verdict(servers)
    harness.print_table(
        f"{name}: physical queue servers, crawlflow crawl --nodes 2",
        ["server", "pages", "unloaded", "median", "med/unl", "crawler med", "speed/s"]
        + ["best/s", "speed/best", "load"],
        [
            [
                s["server"],
                str(s["pages"]),
                f"{s['unloaded_ms']:.1f}ms",
                f"{s['median_ms']:.1f}ms",
                f"{s['median_over_unloaded']:.2f}",
                "-" if s["crawler_median_ms"] is None else f"{s['crawler_median_ms']:.1f}ms",
                "-" if s["speed_rps"] is None else f"{s['speed_rps']:.1f}",
                f"{s['best_polite_rps']:.1f}{' b2b' if s['best_is_back_to_back'] else ''}",
                "-" if s["speed_over_best"] is None else f"{s['speed_over_best']:.2f}",
                f"{s['load']}",
            ]
            for s in servers
        ],
    )
    v = result["verdict"]
    print(
        f"{name}: median <= 1.5x and speed >= 0.8 of best on {v['servers_meeting_both']} of "
        f"{len(servers)} (goal {GOALS['servers']}); lowest speed/best "
        f"{v['lowest_speed_over_best']:.2f} (goal >= {GOALS['floor']}); highest median/unloaded "
        f"{v['highest_median_over_unloaded']:.2f} (goal <= {CEILING}) "
        f"[{harness.verdict(v['met'])}]",
        flush=True,
    )


def plot_ratios(results: dict[str, dict[str, Any]], path: Path) -> Path:
    """Per server, speed / best polite rate and median / unloaded, one bar per variant."""
    import matplotlib.pyplot as plt

    fig, (speed_ax, median_ax) = plt.subplots(2, 1, figsize=(11, 6.5), constrained_layout=True)
    width = 0.8 / max(1, len(results))
    labels: list[str] = []
    for index, (name, result) in enumerate(results.items()):
        servers = result["servers"]
        labels = [s["server"] for s in servers]
        x = [i + (index - (len(results) - 1) / 2) * width for i in range(len(servers))]
        speed_ax.bar(x, [s["speed_over_best"] or 0.0 for s in servers], width, label=name)
        median_ax.bar(x, [s["median_over_unloaded"] for s in servers], width, label=name)
    speed_ax.axhline(GOALS["speed_over_best"], color="tab:green", ls=":", label="goal 0.8")
    speed_ax.set_ylabel("speed / best polite rate")
    median_ax.axhline(GOALS["median_over_unloaded"], color="tab:red", ls=":", label="goal 1.5")
    median_ax.set_ylabel("median / unloaded (server)")
    for ax in (speed_ax, median_ax):
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    speed_ax.set_title("physical queue servers: speed and politeness per server")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    parser = harness.arguments(__doc__, quick=f"{PAGES_PER_SERVER['quick']} pages per server")
    parser.add_argument("--baseline", type=Path, help="another checkout's crawlflow (main)")
    args = parser.parse_args()
    json_path = args.json or harness.results_dir("politeness", args.quick) / "queues.json"
    run = harness.Run("queues", args.quick, json_path)
    print(run.summary(), flush=True)
    if sys.platform == "linux":  # Ray's processes the crawl leaves behind are reaped here
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    pages = PAGES_PER_SERVER["quick" if args.quick else "full"]
    variants = {"this checkout": CRAWLFLOW}
    if args.baseline is not None:
        variants = {"baseline": args.baseline, **variants}
    results: dict[str, dict[str, Any]] = {
        name: {"command": str(command), "servers": []} for name, command in variants.items()
    }
    with tempfile.TemporaryDirectory(prefix="bench-queues-") as tmp:
        base = Path(tmp)
        for background in BACKGROUND:
            spec = web(background, pages)
            for index, (name, command) in enumerate(variants.items()):
                out = base / f"out-{background}-{index}"
                plot = (
                    run.directory / f"host_rates_queues_bg{round(100 * background)}.png"
                    if command == CRAWLFLOW
                    else None
                )
                result = crawl(spec, command, base / f"home-{index}", out, plot)
                for server in result["servers"]:
                    server["load"] = result["load_before_after"]
                results[name]["servers"] += result["servers"]
                # As it goes: a run cut short (the machine, a crawl that failed) keeps these.
                print_variant(f"{name}, background {background:.0%}", result)
                run.write_json({"inflation": INFLATION, "goals": GOALS, "variants": results})
    for name, result in results.items():
        result["servers"].sort(key=lambda s: (s["workers"], s["background_load"]))
        print_variant(name, result)
    print(f"plot: {plot_ratios(results, run.directory / 'queues.png')}")
    run.write_json({"inflation": INFLATION, "goals": GOALS, "variants": results})


if __name__ == "__main__":
    main()
