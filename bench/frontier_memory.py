"""Frontier benchmark: memory of 1,000,000 queued URLs, and what scheduling costs per page.

Goals: a frontier of 1,000,000 URLs fits in at most 1 GiB per node; scheduling costs at most
10% of a node's CPU at its peak page rate.

1. Scale (no network). A simulated crawl drives a node's scheduling state the way
   `crawler.node.CrawlerNode` does: the seen set, a crawl-capability `Frontier`, the incremental
   `PageRankQuality` and the per-server connection statistics, over a synthetic web of 10,000
   servers (12 links per page, 85% to the same server, URLs of about 64 characters, keep-alive
   and response times drawn per server), with 64 connections in simulated time, until
   1,000,000 URLs are queued. Memory is the growth of the process's resident set (URL strings
   included); CPU is the process time spent in the scheduling calls (acquire, release, push,
   next_task, connection statistics, PageRank), per fetched page.
2. Peak page rate. An in-process crawl of websim with zero latency and no rate limits, so the
   node is CPU-bound: its pages per second and CPU per page.

The scheduling share of the node's CPU at its peak is (scheduling CPU per page) x (peak pages
per second).

    .venv/bin/python -m bench.frontier_memory [--urls N] [--json PATH] [--peak-seconds S]
"""

from __future__ import annotations

import gc
import heapq
import random
import tempfile
import time
from typing import Any

from bench import harness
from crawler.config import CrawlConfig
from crawler.scheduling.frontier import Frontier
from crawler.scheduling.quality import PageRankQuality
from crawler.scheduling.server import ServerState
from crawler.scheduling.settings import SchedulingSettings
from crawler.scheduling.urlqueue import UrlTask
from runtime.backends import start_fleet
from runtime.fleet import single_node
from websim import WebSim, WebSpec

GIB = 1 << 30
GOALS = {"bytes_for_1m_urls": GIB, "scheduling_cpu_share": 0.10}
SERVERS = 10_000
LINKS_PER_PAGE = 12
SAME_SERVER_SHARE = 0.85
NEW_PAGE_SHARE = 0.7  # of same-server links: a page not linked before (else a popular one)
CONNECTIONS = 64


class _Always:
    """Rate controller stand-in: scheduling is measured, not politeness."""

    def earliest_next(self) -> float:
        return 0.0


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def _url(server: int, page: int) -> str:
    return f"http://www.server{server:05d}.example.com/articles/{page:07d}/index.html"


class SyntheticWeb:
    """Pages appear as they are linked: server s has pages 0..count[s]-1, popular ones first."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.count = [1] * SERVERS  # every server starts with its root, page 0
        self.response_s = [0.01 * 100 ** rng.random() for _ in range(SERVERS)]  # 10 ms - 1 s
        self.keepalive = [rng.choices((1, 100, 10), (0.24, 0.66, 0.10))[0] for _ in range(SERVERS)]

    def links(self, server: int) -> list[tuple[int, str]]:
        rng, found = self.rng, {}
        for _ in range(LINKS_PER_PAGE):
            target = server if rng.random() < SAME_SERVER_SHARE else rng.randrange(SERVERS)
            if rng.random() < NEW_PAGE_SHARE:
                page = self.count[target]
                self.count[target] += 1
            else:  # a popular page: low numbers are linked most (1/rank-like)
                page = int(self.count[target] ** rng.random()) - 1
            found[_url(target, page)] = target
        return [(target, url) for url, target in found.items()]


def scale(target_urls: int, seed: int = 1) -> dict[str, Any]:
    """Simulated crawl until `target_urls` are queued; memory and scheduling CPU."""
    gc.collect()
    before = rss_bytes()
    rng = random.Random(seed)
    web = SyntheticWeb(rng)
    frontier = Frontier(SchedulingSettings(policy="capability", requests_per_connection=50))
    quality = PageRankQuality()
    seen: set[str] = set()
    servers = [f"www.server{s:05d}.example.com" for s in range(SERVERS)]
    for host in servers:
        frontier.add_server(ServerState(host, _Always()))
    opened = [0] * SERVERS  # requests on each server's current connection
    cpu = 0.0
    pages = 0
    for s in range(SERVERS):
        url = _url(s, 0)
        seen.add(url)
        frontier.push(servers[s], UrlTask(url, 0, quality=quality.score(url)), "http")
    # (time the connection's next request completes, server, requests left on it)
    events: list[tuple[float, int, int]] = []
    now = 0.0

    def open_connections() -> float:
        spent = time.process_time()
        while len(events) < CONNECTIONS:
            server = frontier.acquire(now)
            if server is None:
                break
            s = int(server.host[10:15])
            heapq.heappush(events, (now + web.response_s[s], s, server.batch))
        return time.process_time() - spent

    cpu += open_connections()
    while events and frontier.queued() < target_urls:
        now, s, left = heapq.heappop(events)
        host = servers[s]
        server = frontier.servers[host]
        opened[s] += 1
        close = opened[s] >= web.keepalive[s]
        headers = (
            {"connection": "close"}
            if close
            else {"connection": "keep-alive", "keep-alive": f"max={web.keepalive[s] - opened[s]}"}
        )
        opened[s] = 0 if close else opened[s]
        spent = time.process_time()
        task = server.next_task(now, True)
        server.stats.on_response(200, web.response_s[s], headers)
        cpu += time.process_time() - spent
        if task is None:  # nothing left for this connection
            spent = time.process_time()
            frontier.release(server)
            cpu += time.process_time() - spent
            cpu += open_connections()
            continue
        pages += 1
        links = web.links(s)
        new = []
        for target, url in links:
            if url not in seen:
                seen.add(url)
                new.append((target, url))
        spent = time.process_time()
        quality.observe_page(task.url, [url for _, url in links])
        for target, url in new:
            frontier.push(servers[target], UrlTask(url, 1, quality=quality.score(url)), "http")
        cpu += time.process_time() - spent
        if close or left <= 1:
            spent = time.process_time()
            frontier.release(server)
            cpu += time.process_time() - spent
            cpu += open_connections()
        else:
            heapq.heappush(events, (now + web.response_s[s], s, left - 1))
    gc.collect()
    grown = rss_bytes() - before
    return {
        "queued_urls": frontier.queued(),
        "known_urls": len(seen),
        "servers": SERVERS,
        "pages_fetched": pages,
        "links_in_graph": len(quality._src),
        "pagerank_computations": quality.computations,
        "rss_growth_bytes": grown,
        "bytes_per_queued_url": round(grown / frontier.queued(), 1),
        "scheduling_cpu_s": round(cpu, 3),
        "scheduling_cpu_us_per_page": round(1e6 * cpu / max(1, pages), 1),
    }


def peak(seconds: float) -> dict[str, Any]:
    """The node's page rate and CPU per page when nothing but its CPU limits it."""
    spec = WebSpec(hosts=500, pages=30_000, seed=3, latency_ms=(0.0, 0.0), rate_limit_rps=None)
    config = CrawlConfig(
        scheduling={"policy": "capability"},
        rate_control={"mode": "fixed", "fixed": {"delay_s": 0.0}},
    )
    with WebSim(spec) as sim, tempfile.TemporaryDirectory() as out:
        hosts = sim.servers
        fleet = start_fleet(single_node("peak", out, config, hosts), "inprocess")
        fleet.coordinator().seed([sim.hub_url])
        (node,) = fleet.nodes
        time.sleep(min(3.0, seconds / 3))  # past the hub and the first robots.txt round
        pages0, cpu0, wall0 = node.status().pages, time.process_time(), time.monotonic()
        time.sleep(seconds)
        pages1, cpu1, wall1 = node.status().pages, time.process_time(), time.monotonic()
        fleet.stop()
    pages = pages1 - pages0
    return {
        "pages_per_s": round(pages / (wall1 - wall0), 1),
        "cpu_ms_per_page": round(1000 * (cpu1 - cpu0) / max(1, pages), 3),
        "cpu_cores_used": round((cpu1 - cpu0) / (wall1 - wall0), 2),
    }


def main() -> None:
    parser = harness.arguments(__doc__)
    parser.add_argument("--urls", type=int, default=1_000_000, help="queued URLs to reach")
    parser.add_argument("--peak-seconds", type=float, default=10.0)
    args = parser.parse_args()
    run = harness.start("frontier_memory", args)
    scaled = scale(args.urls)
    print(
        f"frontier: {scaled['queued_urls']:,} URLs queued over {SERVERS:,} servers "
        f"({scaled['known_urls']:,} known, {scaled['pages_fetched']:,} pages fetched, "
        f"{scaled['links_in_graph']:,} links in the PageRank graph)"
    )
    per_million = scaled["bytes_per_queued_url"] * 1_000_000
    memory_ok = per_million <= GOALS["bytes_for_1m_urls"]
    print(
        f"memory: {scaled['rss_growth_bytes'] / 2**20:,.0f} MiB resident, "
        f"{scaled['bytes_per_queued_url']:.0f} bytes per queued URL, "
        f"{per_million / GIB:.2f} GiB per 1,000,000 [{harness.verdict(memory_ok)}]"
    )
    print(f"scheduling: {scaled['scheduling_cpu_us_per_page']:.0f} us CPU per fetched page")
    top = peak(args.peak_seconds)
    share = scaled["scheduling_cpu_us_per_page"] * 1e-6 * top["pages_per_s"]
    cpu_ok = share <= GOALS["scheduling_cpu_share"]
    print(
        f"node peak: {top['pages_per_s']:.0f} pages/s, {top['cpu_ms_per_page']:.2f} ms CPU per "
        f"page ({top['cpu_cores_used']:.2f} cores)"
    )
    print(
        f"scheduling at the peak rate: {100 * share:.1f}% of a core "
        f"({100 * scaled['scheduling_cpu_us_per_page'] / 1000 / top['cpu_ms_per_page']:.1f}% "
        f"of the node's CPU per page) [{harness.verdict(cpu_ok)}]"
    )
    run.write_json(
        {
            "scale": scaled,
            "peak": top,
            "scheduling_cpu_share_at_peak": round(share, 4),
            "goals": {"memory": memory_ok, "cpu": cpu_ok},
        }
    )


if __name__ == "__main__":
    main()
