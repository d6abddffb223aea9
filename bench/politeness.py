"""Politeness benchmark: is the rate control polite to every kind of server, and fast?

Two synthetic webs, each crawled through the real Prefect flow `crawl` on a local Ray (two
crawler nodes):

- Rate-limited: hosts hide token-bucket limits of 5-50 requests/s (answered with 429/503 +
  Retry-After). Per host: the hidden limit, the achieved rate, the share of 429/503 answers;
  overall the coverage against the simulator's ground truth, the ban share and the crawl time
  over the politeness bound, the shortest time any crawler that keeps every limit could take:
  the largest over hosts of (pages on the host / its limit).
- Degrading: hosts that never say no but slow down under load (websim/queueing.py: one request
  at a time at a capacity of 4-30/s, M/M/1 response time at the arrival rate they see). Per
  host: the unloaded RTT (ground truth), the page RTT during the crawl (median and p95, as the
  crawler measured it), the achieved rate, and the rates at which the host's median RTT
  reaches 1.5x and 2x the unloaded one (ground truth). Overall: the crawl time against a crawl
  held at each host's 1.5x rate. That crawl is run, not computed: the same web with an oracle
  Crawl-delay of 1 / (the 1.5x rate) on every host (websim's `crawl_delay_at_inflation`),
  crawled with no delay of the controller's own (fixed, 0 s), so each host is held at its
  ground-truth 1.5x rate and pays the same discovery, ramp and tail as any crawl. Its time and
  per-host table are printed too; `pages / rate` (the largest over hosts) is printed beside it
  as the ideal it cannot reach.

Both webs are served on a delay line (websim/wire.py): each host's latency is the network's,
in its own private network namespace, where a TCP handshake shows it as on the real web (the
crawler reads it as the part of a response time that does not queue). That needs root;
`--latency-in-server` puts the latency in websim's server timer instead, as before the wire,
where no handshake shows it.

    .venv/bin/python -m bench.politeness [--quick] [--json PATH] [--modes adaptive fixed pid]
        [--webs rate-limited degrading] [--degrading-seed N] [--latency-in-server]

Goals. Rate-limited: coverage 100%, at most 1% of answers 429/503, crawl time (first request
to last) at most 1.10x the bound. Degrading: on every host the median RTT during the crawl at
most 1.5x the unloaded RTT, and the crawl at least 80% as fast as one held at the 1.5x rates.
For reference, stock Scrapy AutoThrottle drew 72% 429/503 on the rate-limited hosts, and a
fixed polite delay drew none but took 5x the bound. `--modes` also runs the fixed-delay and PID
controllers, told the lowest limit (5/s) as a careful operator would be, and `back-to-back`
(no delay: what a crawler without a delay signal does to a server that never says no).
Writes `host_rates.png` (achieved rate per rate-limited host against its hidden limit) and
`degrading.png` (RTT and rate per degrading host against the ground truth) next to the JSON
(by default in bench/results/politeness/).

Over 400 lines because it is one benchmark of two webs: each web's ground truth, run,
measures, table and plot are only meaningful side by side with the other's, and nothing else
imports them; split, the one command would be spread over modules no other code uses.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import harness
from crawler.scope.urls import host_key
from storage.plots import plot_host_rates
from storage.views import connect
from websim import WebSim, WebSpec
from websim.coverage import coverage
from websim.queueing import ArrivalRate
from websim.wire import Wire, unavailable

NODES = 2

# Webs picked (by seed) for limits that span 5-50 requests/s and a bound of about a minute
# (full) or 20 s (quick). Latency medians of 1-8 ms: a host answers one request at a time per
# connection, so it can only reach its limit L if a fetch takes well under 1/L (20 ms at
# L = 50); with the lognormal spread (sigma 0.5: mean 1.13x the median, 99th percentile 3.2x)
# and the client's own overhead every host here can. No Crawl-delay, so the hidden limit is
# the only bound on a host's rate.
_COMMON = {"latency_ms": (1.0, 8.0), "rate_limit_rps": (5.0, 50.0), "crawl_delay_share": 0.0}
WEBS = {
    "full": WebSpec(hosts=12, pages=4000, seed=1, **_COMMON),
    "quick": WebSpec(hosts=6, pages=1000, seed=8, **_COMMON),
}
# Degrading webs, picked (by seed) for hosts that each take 25-45 s (full) at their 1.5x rate.
# Network latency of 2-10 ms under service times of 33-250 ms: the server's own work is most of
# a response, as on dynamic pages, and one connection can reach every host's 1.5x rate (there
# it is busy about half the time). Response times spread lognormal with sigma 0.25 around the
# model's median.
_DEGRADING = {
    "latency_ms": (2.0, 10.0),
    "latency_sigma": 0.25,
    "rate_limit_rps": None,
    "capacity_rps": (4.0, 30.0),
    "crawl_delay_share": 0.0,
}
DEGRADING_WEBS = {
    "full": WebSpec(hosts=6, pages=1200, seed=10, **_DEGRADING),
    "quick": WebSpec(hosts=4, pages=500, seed=5, **_DEGRADING),
}

# Rate-control settings per mode. "fixed" and "pid" have to be told a rate: a careful operator
# who does not know the limits picks the lowest one anyone would impose, 5 requests/s.
POLITE_RPS = 5.0
MODES: dict[str, dict[str, Any]] = {
    "adaptive": {"mode": "adaptive"},
    "fixed": {"mode": "fixed", "fixed": {"delay_s": 1.0 / POLITE_RPS}},
    "pid": {
        "mode": "pid",
        "target_ppm": 60.0 * POLITE_RPS,
        "initial_delay_s": 1.0 / POLITE_RPS,
        "pid": {"window_s": 5.0},
    },
    "back-to-back": {"mode": "fixed", "fixed": {"delay_s": 0.0}},
}
# The crawl held at each degrading host's 1.5x rate: back to back under the oracle Crawl-delay.
HELD = "held-at-1.5x"  # an oracle setting, not a mode a user has
HELD_INFLATION = 1.5

GOALS = {
    "coverage": 1.0,
    "ban_share": 0.01,
    "time_over_bound": 1.10,
    "rtt_over_unloaded": 1.5,
    "speed_vs_held_at_1.5x": 0.8,
}

# Per host: answers (HTTP responses to page requests; robots.txt is exempt from the limits),
# 429/503 among them, and the time from its first to its last page request.
HOSTS_SQL = """
SELECT url_server AS host,
       count(*) AS answers,
       count(*) FILTER (WHERE fetch_status IN (429, 503)) AS bans,
       epoch(max(fetch_time) - min(fetch_time)) AS span_s
FROM fetches
WHERE fetch_status IS NOT NULL AND url_path <> '/robots.txt'
GROUP BY url_server
"""
# Per degrading host: page answers, their RTT as the crawler measured it (less the TCP handshake
# of a request that opened its connection: one more round trip, not the server's), and the
# busy span.
DEGRADING_SQL = """
SELECT url_server AS host,
       count(*) AS answers,
       quantile_cont(rtt_ms - coalesce(connect_ms, 0), 0.5) AS median_ms,
       quantile_cont(rtt_ms - coalesce(connect_ms, 0), 0.95) AS p95_ms,
       epoch(max(fetch_time) - min(fetch_time)) AS span_s
FROM fetches
WHERE fetch_status IS NOT NULL AND url_path <> '/robots.txt' AND rtt_ms IS NOT NULL
GROUP BY url_server
"""
TOTALS_SQL = """
SELECT count(*) FILTER (WHERE fetch_status IS NOT NULL),
       count(*) FILTER (WHERE fetch_status IN (429, 503)),
       epoch(max(fetch_time) - min(fetch_time))
FROM fetches
"""


@dataclass(frozen=True)
class HostTruth:
    host: str  # host:port, as url_server
    limit_rps: float
    latency_ms: float  # median
    pages: int  # reachable allowed URLs: the requests a complete polite crawl must make


def host_truth(sim: WebSim, expected: set[str]) -> list[HostTruth]:
    pages = Counter(host_key(url) for url in expected)
    truth = []
    for profile in sim.web.hosts:
        host = f"{profile.address}:{sim.port}"
        limit = profile.rate_limit_rps
        assert limit is not None  # every web in WEBS has limits
        truth.append(HostTruth(host, limit, profile.latency_ms_median, pages[host]))
    return truth


@dataclass(frozen=True)
class DegradingTruth:
    host: str  # host:port, as url_server
    pages: int  # reachable allowed URLs
    capacity_rps: float
    unloaded_ms: float  # median response time at no load
    rate_1_5x: float  # requests/s at which the median response time is 1.5x unloaded
    rate_2x: float  # ... and 2x


def degrading_truth(sim: WebSim, expected: set[str]) -> list[DegradingTruth]:
    pages = Counter(host_key(url) for url in expected)
    truth = []
    for profile in sim.web.hosts:
        model = profile.queueing()
        assert model is not None  # every host of a degrading web degrades
        host = f"{profile.address}:{sim.port}"
        truth.append(
            DegradingTruth(
                host,
                pages[host],
                model.capacity_rps,
                1000.0 * model.unloaded_rtt_s,
                model.rate_at_inflation(1.5),
                model.rate_at_inflation(2.0),
            )
        )
    return truth


def run_crawl(
    sim: WebSim, mode: str, out_dir: Path, web: str
) -> tuple[Path, float, tuple[float, float]]:
    """The real flow on local Ray; returns the crawl directory, the flow's wall time and the
    1-minute load average before and after (timings on a shared machine move with it)."""
    # A quiet flow log; set before Prefect is first imported.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from crawler.request import CrawlRequest
    from flows.crawl import crawl

    load_before = harness.load_average()[0]
    started = time.monotonic()
    summary = crawl(
        CrawlRequest(
            seeds=[sim.hub_url],
            allow=sim.servers,
            allow_private=True,  # the synthetic web lives on loopback
            nodes=NODES,
            out_dir=str(out_dir),
            crawl_id=f"politeness-{web}-{mode}",
            config={"rate_control": MODES["back-to-back" if mode == HELD else mode]},
        )
    )
    wall_s = time.monotonic() - started
    load_after = harness.load_average()[0]
    return Path(summary["out_dir"]), wall_s, (round(load_before, 1), round(load_after, 1))


def measure(
    crawl_dir: Path, truth: list[HostTruth], expected: set[str], wall_s: float
) -> dict[str, Any]:
    con = connect(crawl_dir)
    per_host = {row[0]: row[1:] for row in con.execute(HOSTS_SQL).fetchall()}
    answers, bans, crawl_s = con.execute(TOTALS_SQL).fetchone()
    bound_s = max(t.pages / t.limit_rps for t in truth)
    hosts = []
    for t in truth:
        host_answers, host_bans, span_s = per_host.get(t.host, (0, 0, 0.0))
        served = host_answers - host_bans
        hosts.append(
            {
                "host": t.host,
                "limit_rps": round(t.limit_rps, 2),
                # Served (non-429/503) answers over the host's busy span: the rate the server
                # granted. A host whose queue ran dry while links were still being found has a
                # span longer than its work needs, so its rate reads low.
                "achieved_rps": round(served / span_s, 2) if span_s else None,
                "ban_share": round(host_bans / host_answers, 4) if host_answers else 0.0,
                "pages": t.pages,
                "latency_ms": round(t.latency_ms, 1),
                "pages_over_limit_s": round(t.pages / t.limit_rps, 1),
            }
        )
    cov = coverage(crawl_dir, expected)
    return {
        "coverage": round(cov["coverage"], 4),
        "ban_share": round(bans / answers, 4) if answers else 0.0,
        "time_over_bound": round(crawl_s / bound_s, 3),
        "crawl_s": round(crawl_s, 1),
        "bound_s": round(bound_s, 1),
        "flow_wall_s": round(wall_s, 1),
        "answers": answers,
        "bans": bans,
        "duplicates": cov["duplicates"],
        "hosts": hosts,
    }


def server_side_rtt_ms(sim: WebSim, log: list[dict[str, Any]]) -> dict[str, float]:
    """Per host, the median of the response times the server chose for the crawl's page
    requests: its model's median at the arrival rate each request met, replayed from websim's
    request log. Unlike the RTT the crawler measures, it leaves out the crawler's own delays
    (on a loaded 2-core machine, tens of ms)."""
    models = {f"{p.address}:{sim.port}": p.queueing() for p in sim.web.hosts}
    arrivals = {host: ArrivalRate() for host in models}
    chosen: dict[str, list[float]] = {host: [] for host in models}
    for entry in sorted(log, key=lambda e: e["time"]):
        model = models.get(entry["host"])
        if model is None:
            continue
        rtt = model.median_rtt_s(arrivals[entry["host"]].arrive(entry["time"]))
        if entry["path"] != "/robots.txt":
            chosen[entry["host"]].append(1000.0 * rtt)
    return {host: statistics.median(values) for host, values in chosen.items() if values}


def measure_degrading(
    crawl_dir: Path,
    truth: list[DegradingTruth],
    expected: set[str],
    wall_s: float,
    server_ms: dict[str, float],
    held_s: float | None,
) -> dict[str, Any]:
    """`held_s`: the time of the crawl held at the 1.5x rates (None: this is that crawl)."""
    con = connect(crawl_dir)
    per_host = {row[0]: row[1:] for row in con.execute(DEGRADING_SQL).fetchall()}
    answers, bans, crawl_s = con.execute(TOTALS_SQL).fetchone()
    held_s = crawl_s if held_s is None else held_s
    hosts = []
    for t in truth:
        count, median_ms, p95_ms, span_s = per_host.get(t.host, (0, None, None, 0.0))
        achieved = count / span_s if span_s else None
        at_server = server_ms.get(t.host)
        hosts.append(
            {
                "host": t.host,
                "pages": t.pages,
                "capacity_rps": round(t.capacity_rps, 2),
                "unloaded_ms": round(t.unloaded_ms, 1),
                "median_ms": None if median_ms is None else round(median_ms, 1),
                "p95_ms": None if p95_ms is None else round(p95_ms, 1),
                "median_over_unloaded": None
                if median_ms is None
                else round(median_ms / t.unloaded_ms, 3),
                "server_median_ms": None if at_server is None else round(at_server, 1),
                "server_median_over_unloaded": None
                if at_server is None
                else round(at_server / t.unloaded_ms, 3),
                "achieved_rps": None if achieved is None else round(achieved, 2),
                "rate_1_5x_rps": round(t.rate_1_5x, 2),
                "rate_2x_rps": round(t.rate_2x, 2),
                "achieved_over_1_5x": None
                if achieved is None
                else round(achieved / t.rate_1_5x, 3),
            }
        )
    cov = coverage(crawl_dir, expected)
    ratios = [h["median_over_unloaded"] for h in hosts if h["median_over_unloaded"] is not None]
    at_server = [
        h["server_median_over_unloaded"]
        for h in hosts
        if h["server_median_over_unloaded"] is not None
    ]
    return {
        "coverage": round(cov["coverage"], 4),
        "ban_share": round(bans / answers, 4) if answers else 0.0,
        "worst_median_over_unloaded": max(ratios) if ratios else None,
        "worst_server_median_over_unloaded": max(at_server) if at_server else None,
        "speed_vs_held_at_1.5x": round(held_s / crawl_s, 3) if crawl_s else None,
        "crawl_s": round(crawl_s, 1),
        "held_at_1_5x_s": round(held_s, 1),
        "pages_over_1_5x_rate_s": round(max(t.pages / t.rate_1_5x for t in truth), 1),
        "flow_wall_s": round(wall_s, 1),
        "hosts": hosts,
    }


def print_degrading(mode: str, result: dict[str, Any]) -> None:
    what = (
        "the crawl held at each host's 1.5x rate (oracle: websim serves Crawl-delay = 1 / that "
        "rate; mode fixed, 0 s)"
        if mode == HELD
        else f"mode {mode}"
    )

    def cell(value: Any, spec: str, unit: str = "") -> str:
        return "-" if value is None else format(value, spec) + unit

    harness.print_table(
        f"{what} on degrading hosts: Prefect flow `crawl`, local Ray, {NODES} nodes",
        ["host", "pages", "unloaded", "median", "p95", "med/unl", "server med/unl"]
        + ["achieved/s", "1.5x at/s", "2x at/s", "ach/1.5x"],
        [
            [
                h["host"],
                str(h["pages"]),
                f"{h['unloaded_ms']:.1f}ms",
                cell(h["median_ms"], ".1f", "ms"),
                cell(h["p95_ms"], ".1f", "ms"),
                cell(h["median_over_unloaded"], ".2f"),
                cell(h["server_median_over_unloaded"], ".2f"),
                cell(h["achieved_rps"], ".2f"),
                f"{h['rate_1_5x_rps']:.2f}",
                f"{h['rate_2x_rps']:.2f}",
                cell(h["achieved_over_1_5x"], ".2f"),
            ]
            for h in result["hosts"]
        ],
    )
    worst = result["worst_median_over_unloaded"]
    worst_server = result["worst_server_median_over_unloaded"]
    speed = result["speed_vs_held_at_1.5x"]
    rtt_ok = worst is not None and worst <= GOALS["rtt_over_unloaded"]
    server_ok = worst_server is not None and worst_server <= GOALS["rtt_over_unloaded"]
    speed_ok = speed is not None and speed >= GOALS["speed_vs_held_at_1.5x"]
    print(
        f"worst median RTT / unloaded: as the crawler measured it {worst} "
        f"[{harness.verdict(rtt_ok)}], at the server {worst_server} "
        f"[{harness.verdict(server_ok)}]  "
        f"crawl {result['crawl_s']}s, the crawl held at the 1.5x rates (oracle Crawl-delay) "
        f"{result['held_at_1_5x_s']}s (pages / 1.5x rate: {result['pages_over_1_5x_rate_s']}s): "
        f"{speed} as fast [{harness.verdict(speed_ok)}]  coverage "
        f"{100 * result['coverage']:.2f}%  429/503 {100 * result['ban_share']:.2f}%  "
        f"load average {result['load_average_before_after']}"
    )


def plot_degrading(result: dict[str, Any], path: Path, mode: str) -> Path:
    """Two panels per host: RTT during the crawl over the unloaded RTT (median, p95) against
    the 1.5x goal; achieved rate against the rates where the RTT reaches 1.5x and 2x."""
    import matplotlib.pyplot as plt

    hosts = result["hosts"]
    x = list(range(len(hosts)))
    labels = [h["host"].split(":")[0] for h in hosts]
    fig, (rtt_ax, rate_ax) = plt.subplots(1, 2, figsize=(12, 4.2), constrained_layout=True)
    median = [h["median_over_unloaded"] or 0.0 for h in hosts]
    p95 = [(h["p95_ms"] or 0.0) / h["unloaded_ms"] for h in hosts]
    server = [h["server_median_over_unloaded"] or 0.0 for h in hosts]
    rtt_ax.bar([i - 0.27 for i in x], server, 0.27, label="median at the server")
    rtt_ax.bar(x, median, 0.27, label="median, crawler-measured")
    rtt_ax.bar([i + 0.27 for i in x], p95, 0.27, label="p95, crawler-measured", alpha=0.6)
    rtt_ax.axhline(1.5, color="tab:red", ls=":", label="goal: median 1.5x")
    rtt_ax.set_ylabel("RTT during the crawl / unloaded RTT")
    rtt_ax.set_title(f"{mode}: response time under the crawl")
    rate_ax.bar(x, [h["achieved_rps"] or 0.0 for h in hosts], 0.5, label="achieved")
    rate_ax.plot(
        x,
        [h["rate_1_5x_rps"] for h in hosts],
        "_",
        ms=30,
        mew=2,
        color="tab:green",
        label="RTT 1.5x at",
    )
    rate_ax.plot(
        x, [h["rate_2x_rps"] for h in hosts], "_", ms=30, mew=2, color="tab:red", label="RTT 2x at"
    )
    rate_ax.set_ylabel("requests/s")
    rate_ax.set_title("rate per host (ground truth from websim)")
    for ax in (rtt_ax, rate_ax):
        ax.set_xticks(x, labels, fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def print_result(mode: str, result: dict[str, Any]) -> None:
    rows = []
    for h in sorted(result["hosts"], key=lambda h: -h["pages_over_limit_s"]):
        achieved = h["achieved_rps"]
        rows.append(
            [
                h["host"],
                str(h["pages"]),
                str(h["latency_ms"]),
                f"{h['limit_rps']:.1f}",
                str(achieved) if achieved is not None else "-",
                f"{achieved / h['limit_rps']:.2f}" if achieved is not None else "-",
                f"{100 * h['ban_share']:.2f}%",
                f"{h['pages_over_limit_s']:.1f}",
            ]
        )
    harness.print_table(
        f"mode {mode}: Prefect flow `crawl`, local Ray, {NODES} nodes",
        ["host", "pages", "lat ms", "limit/s", "achieved/s", "ach/lim", "429/503"]
        + ["pages/limit s"],
        rows,
    )
    checks = {
        "coverage": result["coverage"] >= GOALS["coverage"],
        "ban_share": result["ban_share"] <= GOALS["ban_share"],
        "time_over_bound": result["time_over_bound"] <= GOALS["time_over_bound"],
    }
    print(
        f"coverage {100 * result['coverage']:.2f}% [{harness.verdict(checks['coverage'])}]"
        f"  429/503 {result['bans']}/{result['answers']} = {100 * result['ban_share']:.2f}% "
        f"[{harness.verdict(checks['ban_share'])}]"
        f"  crawl {result['crawl_s']}s / bound {result['bound_s']}s = "
        f"{result['time_over_bound']:.2f} [{harness.verdict(checks['time_over_bound'])}]"
        f"  (flow wall time {result['flow_wall_s']}s, load average "
        f"{result['load_average_before_after']})"
    )


def run_rate_limited(
    spec: WebSpec, modes: list[str], out_dir: Path, plots_dir: Path, wire: Wire | None
) -> dict[str, Any]:
    """`wire`: the hosts' latency is the network's, on a delay line (see `main`)."""
    results: dict[str, Any] = {}
    web = WebSim(spec)
    with web if wire is None else wire.serving(web) as sim:
        expected = sim.reachable_allowed_urls()
        truth = host_truth(sim, expected)
        # Share of a host's one connection that its limit keeps busy (mean latency x L);
        # near 1 or above, no controller could reach the limit.
        duty = max(
            t.limit_rps * t.latency_ms / 1000 * math.exp(spec.latency_sigma**2 / 2) for t in truth
        )
        print(
            f"rate-limited websim: {spec.hosts} hosts, {len(expected)} reachable allowed pages, "
            f"limits {min(t.limit_rps for t in truth):.1f}-{max(t.limit_rps for t in truth):.1f}"
            f"/s, latency medians {spec.latency_ms[0]:g}-{spec.latency_ms[1]:g} ms; every limit "
            f"is reachable on one connection (at most {100 * duty:.0f}% busy at its limit), "
            f"latency {_latency_where(wire)}"
        )
        for mode in modes:
            crawl_dir, wall_s, load = run_crawl(sim, mode, out_dir, "limited")
            results[mode] = measure(crawl_dir, truth, expected, wall_s)
            results[mode]["load_average_before_after"] = load
            print_result(mode, results[mode])
            suffix = "" if mode == modes[0] else f"_{mode}"
            png = plot_host_rates(
                connect(crawl_dir),
                plots_dir / f"host_rates{suffix}.png",
                limits={t.host: t.limit_rps for t in truth},
            )
            print(f"plot: {png}")
    if len(results) > 1:
        harness.print_table(
            "rate-limited web, every mode",
            ["mode", "coverage", "429/503", "crawl s", "/bound"],
            [
                [
                    mode,
                    f"{100 * r['coverage']:.2f}%",
                    f"{100 * r['ban_share']:.2f}%",
                    f"{r['crawl_s']:.1f}",
                    f"{r['time_over_bound']:.2f}",
                ]
                for mode, r in results.items()
            ],
        )
    return results


def _latency_where(wire: Wire | None) -> str:
    return "in the server's timer" if wire is None else "on the wire (websim/wire.py)"


def run_degrading(
    spec: WebSpec, modes: list[str], out_dir: Path, plots_dir: Path, wire: Wire | None
) -> dict[str, Any]:
    """`wire`: the hosts' latency is the network's, on a delay line (see `main`)."""
    results: dict[str, Any] = {}
    held_spec = replace(spec, crawl_delay_at_inflation=HELD_INFLATION)
    held_s: float | None = None
    for mode in [HELD, *modes]:
        # The same web (same seed: pages, links, server models); the held crawl's copy also
        # serves the oracle Crawl-delay.
        web = WebSim(held_spec if mode == HELD else spec)
        with web if wire is None else wire.serving(web) as sim:
            expected = sim.reachable_allowed_urls()
            truth = degrading_truth(sim, expected)
            if mode == HELD:
                print(
                    f"\ndegrading websim: {spec.hosts} hosts, {len(expected)} reachable allowed "
                    f"pages, capacities {min(t.capacity_rps for t in truth):.1f}-"
                    f"{max(t.capacity_rps for t in truth):.1f}/s, unloaded RTT "
                    f"{min(t.unloaded_ms for t in truth):.0f}-"
                    f"{max(t.unloaded_ms for t in truth):.0f} ms, latency {_latency_where(wire)}"
                )
            crawl_dir, wall_s, load = run_crawl(sim, mode, out_dir, "degrading")
            server_ms = server_side_rtt_ms(sim, sim.request_log(clear=True))
        results[mode] = measure_degrading(crawl_dir, truth, expected, wall_s, server_ms, held_s)
        results[mode]["load_average_before_after"] = load
        held_s = results[HELD]["crawl_s"]
        print_degrading(mode, results[mode])
        if mode != HELD:
            suffix = "" if mode == modes[0] else f"_{mode}"
            png = plot_degrading(results[mode], plots_dir / f"degrading{suffix}.png", mode)
            print(f"plot: {png}")
    if len(results) > 1:
        harness.print_table(
            "degrading web, every mode",
            ["mode", "worst median/unloaded", "at the server", "speed vs 1.5x"],
            [
                [
                    mode,
                    str(r["worst_median_over_unloaded"]),
                    str(r["worst_server_median_over_unloaded"]),
                    str(r["speed_vs_held_at_1.5x"]),
                ]
                for mode, r in results.items()
            ],
        )
    return results


def main() -> None:
    parser = harness.arguments(__doc__, quick="smaller webs")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=["adaptive"])
    parser.add_argument(
        "--webs",
        nargs="+",
        choices=["rate-limited", "degrading"],
        default=["rate-limited", "degrading"],
    )
    parser.add_argument("--keep", type=Path, help="keep the crawl output here")
    parser.add_argument(
        "--degrading-seed", type=int, help="another degrading web (default: the one picked)"
    )
    parser.add_argument(
        "--latency-in-server",
        action="store_true",
        help="hosts' latency in websim's timer, not on the wire (no root needed)",
    )
    args = parser.parse_args()
    run = harness.start("politeness", args)
    plots_dir = run.directory
    out_dir = args.keep or Path(tempfile.mkdtemp(prefix="politeness-"))
    document: dict[str, Any] = {"runner": "prefect flow, local ray", "mode": args.modes[0]}
    # The hosts' latency is the network's: on a delay line, where the crawler's TCP handshakes
    # show it as they would on the web, unless asked otherwise.
    wire: Wire | None = None
    if not args.latency_in_server:
        reason = unavailable()
        if reason is not None:
            raise SystemExit(f"error: {reason}: run as root, or pass --latency-in-server")
        wire = Wire()
    document["latency"] = "in the server" if wire is None else "on the wire"
    try:
        with wire or contextlib.nullcontext():
            run_webs(args, document, wire, out_dir, plots_dir)
    finally:
        if args.keep is None:
            shutil.rmtree(out_dir, ignore_errors=True)
    run.write_json(document)


def run_webs(
    args: argparse.Namespace,
    document: dict[str, Any],
    wire: Wire | None,
    out_dir: Path,
    plots_dir: Path,
) -> None:
    size = "quick" if args.quick else "full"
    limited, degrading = WEBS[size], DEGRADING_WEBS[size]
    if args.degrading_seed is not None:
        degrading = replace(degrading, seed=args.degrading_seed)
    if wire is not None:
        limited = replace(limited, latency_on_wire=True)
        degrading = replace(degrading, latency_on_wire=True)
    if "rate-limited" in args.webs:
        results = run_rate_limited(limited, args.modes, out_dir, plots_dir, wire)
        document.update(results[args.modes[0]])
        if len(args.modes) > 1:
            document["modes"] = results
    if "degrading" in args.webs:
        document["degrading"] = run_degrading(degrading, args.modes, out_dir, plots_dir, wire)


if __name__ == "__main__":
    main()
