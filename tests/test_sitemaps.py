"""Sitemaps through the node's own fetch: robots.txt `Sitemap:` lines (index, gzip) and
/sitemap.xml seed the frontier, and in a recrawl a newer `lastmod` puts a URL first."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.config import CrawlConfig
from crawler.scheduling.recrawl import RecrawlError, start_depths, start_urls
from crawler.scope.urls import host_key
from runtime.backends import crawl_in_process
from runtime.fleet import single_node
from storage.health import scope_refusals
from storage.views import connect
from tasks.recrawl import load_revisits, start_manifest
from websim import WebSim, WebSpec

pytestmark = pytest.mark.integration  # websim

CONFIG = {
    "fetch": {"sitemaps": True},
    "rate_control": {"mode": "fixed", "fixed": {"delay_s": 0.0}},
}


@pytest.fixture(scope="module")
def web():
    spec = WebSpec(
        hosts=6,
        pages=300,
        seed=4,
        rate_limit_rps=None,
        latency_ms=(0.5, 1.0),
        robots_share=0.5,
        sitemap_share=1.0,
        validator_fault_share=0.0,
        change_share=0.2,
    )
    with WebSim(spec) as sim:
        yield sim


def night(sim: WebSim, out: Path, crawl_id: str, seeds: list[str], **options) -> None:
    hosts = sim.servers
    budget = options.get("max_pages")
    manifest = start_manifest(out, crawl_id, hosts, None, incremental=True)
    revisits = load_revisits(out, manifest, hosts)
    config = CrawlConfig(**CONFIG, limits=options)
    plan = single_node(crawl_id, str(out), config, hosts, True, revisits)
    crawl_in_process(plan, start_urls(seeds, revisits, budget), start_depths(seeds, revisits))


def test_sitemaps_seed_the_frontier_through_the_nodes_fetch(web, tmp_path):
    # Depth 0: only the home pages and what the sitemaps list get fetched.
    night(web, tmp_path, "c1", web.host_urls, max_depth=0)
    con = connect(tmp_path / "c1")
    fetched = {
        u for (u,) in con.execute("SELECT url FROM fetches WHERE fetch_status = 200").fetchall()
    }
    allowed = web.web.allowed
    expected = {web.url_of(p) for p in range(web.web.n_pages) if allowed[p]}
    assert expected <= fetched
    sitemap_rows = dict(
        con.execute(
            "SELECT url_path, count(*) FROM fetches WHERE url_path LIKE '/sitemap%' GROUP BY 1"
        ).fetchall()
    )
    with_robots = sum(h.robots_disallow is not None for h in web.web.hosts)
    assert sitemap_rows == {
        "/sitemap_index.xml": with_robots,
        "/sitemap-1.xml.gz": with_robots,
        "/sitemap.xml": len(web.web.hosts) - with_robots,
    }
    # No request went anywhere but the servers' own addresses (usp fetched nothing itself).
    assert all(entry["path"].startswith("/") for entry in web.request_log())
    # The links of those depth-0 pages are not followed, and counted as refused by depth.
    (links,) = con.execute("SELECT sum(outlink_count) FROM pages").fetchone()
    assert links > 0
    assert scope_refusals(con) == {"depth": links}


def sitemap_files(con) -> set[str]:
    """The sitemap files (they change when their pages do)."""
    return {
        url
        for (url,) in con.execute(
            "SELECT url FROM fetches WHERE url_path LIKE '/sitemap%'"
        ).fetchall()
    }


def test_a_newer_lastmod_puts_a_changed_url_first(web, tmp_path):
    night(web, tmp_path, "n1", [web.hub_url])
    changed = web.advance_night() & web.reachable_allowed_urls()
    assert len(changed) > 20
    # A budget of the changed pages plus a few: the sitemaps' lastmod points straight at them.
    night(web, tmp_path, "n2", [web.hub_url], max_pages=len(changed) + 10)
    con = connect(tmp_path)
    caught = {
        url
        for (url,) in con.execute(
            "SELECT n2.url FROM fetches n2 JOIN fetches n1 USING (url) "
            "WHERE n2.crawl_id = 'n2' AND n1.crawl_id = 'n1' AND n2.fetch_status = 200 "
            "AND n1.fetch_status = 200 AND n2.content_digest <> n1.content_digest"
        ).fetchall()
    }
    caught -= sitemap_files(con)
    assert caught <= changed
    # Servers spend the budget side by side, so one with few changes moves on to unchanged
    # URLs while another still has changed ones: most, not all, are caught. An order blind to
    # change would catch about the budget's share of them.
    known = len(web.reachable_allowed_urls())
    assert len(caught) >= 0.6 * len(changed)
    assert len(caught) >= 2.5 * len(changed) * (len(changed) + 10) / known


def test_a_recrawl_revisits_only_the_servers_in_its_scope(web, tmp_path):
    night(web, tmp_path, "all", [web.hub_url])
    one = web.servers[:1]
    # A crawl of one server naming, as --since, the crawl of them all.
    manifest = start_manifest(tmp_path, "one", one, "all", incremental=True)
    revisits = load_revisits(tmp_path, manifest, one)
    assert revisits is not None and revisits.urls
    assert {host_key(url) for url in revisits.urls} == set(one)


def test_sitemap_fetches_keep_the_servers_crawl_delay(tmp_path):
    spec = WebSpec(
        hosts=1,
        pages=8,
        seed=5,
        rate_limit_rps=None,
        latency_ms=(0.5, 1.0),
        robots_share=1.0,
        crawl_delay_share=1.0,
        crawl_delay_s=0.2,
        sitemap_share=1.0,
        validator_fault_share=0.0,
    )
    with WebSim(spec) as sim:
        night(sim, tmp_path, "c1", sim.host_urls, max_depth=0)
        times = [e["time"] for e in sim.request_log() if e["path"] != "/robots.txt"]
        paths = [e["path"] for e in sim.request_log()]
    assert any(path.startswith("/sitemap") for path in paths)
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    # Crawl-delay: 0.2, sitemaps included. The server sees the crawler's pacing through the
    # jitter of each request's way to it (tens of ms on a loaded machine): each gap is held to
    # half the delay (back to back would be about 1 ms), and their mean, which only the last
    # request's jitter shortens, to 90% of it.
    assert len(gaps) >= 4 and min(gaps) >= 0.1
    assert (times[-1] - times[0]) / len(gaps) >= 0.18


def test_a_resumed_crawl_keeps_what_it_revisits(tmp_path):
    (tmp_path / "n1" / "fetches").mkdir(parents=True)
    hosts = ["127.0.0.1:9"]
    start_manifest(tmp_path, "n2", hosts, "n1", incremental=True)
    assert start_manifest(tmp_path, "n2", hosts, None, incremental=True).since == "n1"
    with pytest.raises(RecrawlError, match="revisits n1"):
        start_manifest(tmp_path, "n2", hosts, None, incremental=False)  # --full on resume
    start_manifest(tmp_path, "full", hosts, None, incremental=False)
    with pytest.raises(RecrawlError, match="is a full crawl"):
        start_manifest(tmp_path, "full", hosts, "n1", incremental=True)


def test_a_recrawl_keeps_counting_depth_from_the_seeds(tmp_path):
    spec = WebSpec(hosts=2, pages=200, seed=6, rate_limit_rps=None, latency_ms=(0.5, 1.0))
    with WebSim(spec) as sim:

        def fetched(crawl_id: str) -> dict[str, int]:
            return dict(
                connect(tmp_path / crawl_id)
                .execute("SELECT url, depth FROM fetches WHERE fetch_status IN (200, 304)")
                .fetchall()
            )

        night(sim, tmp_path, "n1", [sim.hub_url], max_depth=1)
        night(sim, tmp_path, "n2", [sim.hub_url], max_depth=1)
    first, second = fetched("n1"), fetched("n2")
    assert len(first) < 150  # depth 1 does not reach the whole web
    # Revisited URLs start at the depth night 1 found them at, not at 0: night 2 goes no deeper.
    assert second == first
