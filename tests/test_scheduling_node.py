"""Scheduling inside a real node: every policy crawls a loopback web completely, exactly once,
and the connection statistics learn what each server allows."""

from __future__ import annotations

import pytest

from crawler.config import CrawlConfig
from crawler.coordinator import Coordinator
from crawler.node import CrawlerNode
from crawlflow.demo import coverage
from storage.views import connect
from websim import WebSim, WebSpec


@pytest.fixture(scope="module")
def web():
    # Some servers ask for a Crawl-delay (short, to keep the test fast): such a server waits
    # for it between connections while the others are served.
    spec = WebSpec(
        hosts=8,
        pages=400,
        seed=5,
        rate_limit_rps=None,
        latency_ms=(1.0, 4.0),
        robots_share=0.5,
        crawl_delay_s=0.005,
    )
    with WebSim(spec) as sim:
        yield sim


@pytest.mark.parametrize("policy", ["bfs", "performance", "quality", "capability"])
def test_policy_crawls_everything_once_and_learns_each_server(web, tmp_path, policy):
    hosts = web.servers
    config = CrawlConfig(
        policy=policy, max_connections=4, rate_control={"mode": "fixed", "fixed_delay_s": 0.0}
    )
    node = CrawlerNode("node-0", policy, str(tmp_path), config, hosts, hosts, True, None)
    coordinator = Coordinator([node], dict.fromkeys(hosts, "node-0"), max_pages=None)
    coordinator.seed([web.hub_url])
    coordinator.run(poll_s=0.02)
    node.close()

    result = coverage(tmp_path / policy, web.reachable_allowed_urls())
    assert result["coverage"] == 1.0 and result["duplicates"] == 0
    frontier = node._frontier
    assert frontier.queued() == 0
    slowest_s = dict(
        connect(tmp_path / policy)
        .execute("SELECT url_host_name, max(rtt_ms) / 1000 FROM fetches GROUP BY 1")
        .fetchall()
    )
    for profile in web.web.hosts:
        host = f"{profile.address}:{web.port}"
        stats = frontier.servers[host].stats
        assert stats.requests_per_connection == profile.keepalive_max
        assert stats.connections >= 1
        # A smoothed mean of the server's response times, each at most its fetch's RTT.
        assert 0.0 <= stats.response_time <= slowest_s[host] + 1e-9
        if profile.keepalive_max > 1:
            # Measured on reused connections. A server that closes after every request has
            # the node's mean connection time taken out of each fetch instead, which on a
            # busy machine can leave little.
            assert stats.response_time > 0.0005
