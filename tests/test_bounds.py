"""Bounds that hold (docs/scheduling.md#bounds): queued URLs per server and per node, links
taken from one page, robots.txt rules per user agent, sitemap entries per file and per server.
Each is checked by what it keeps (counts), never by time."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import duckdb
import pytest
from protego import Protego

from crawler.config import CrawlConfig
from crawler.fetching.fetcher import FetchResult
from crawler.fetching.politeness import RobotsRules, capped_rules
from crawler.fetching.sitemaps import (
    MAX_SITEMAP_FILES,
    SitemapEntry,
    bounded_sitemap,
    read_sitemaps,
)
from crawler.node.core import NodeCore
from crawler.node.discovery import Discovery
from crawler.node.settings import NodeSettings
from crawler.scheduling.frontier import NODE_QUEUE_FULL, SERVER_QUEUE_FULL
from crawler.scheduling.server import ServerState
from crawler.scheduling.urlqueue import UrlTask
from errors import FetchError
from storage.outcomes import NOT_LEFT_AT_DEADLINE

HOSTS = ["127.0.0.1:9", "127.0.0.2:9"]  # loopback, nothing listens: no request is made here


class Rows:
    """The recorder's `unfetched`, kept in memory."""

    def __init__(self) -> None:
        self.skipped: list[tuple[str, str]] = []

    def unfetched(self, tasks: list[UrlTask], error: FetchError) -> None:
        self.skipped += [(task.url, str(error)) for task in tasks]


class NoPeers:
    def admit(self, url: str) -> bool:
        raise AssertionError(f"every server is owned here: {url}")


def node(**config: Any) -> tuple[NodeCore, Discovery, Rows]:
    settings = NodeSettings(
        node_id="node-0",
        crawl_id="c",
        out_dir="unused",
        config=CrawlConfig.model_validate(config),
        hosts=HOSTS,
        scope_hosts=HOSTS,
        allow_private=True,
        page_budget=None,
        revisits=None,
    )
    core = NodeCore(settings)
    with core.lock:
        for host in HOSTS:
            core.own(ServerState(host))
    rows = Rows()
    return core, Discovery(core, NoPeers(), rows), rows  # type: ignore[arg-type]


def page_links(host: str, count: int, start: int = 0) -> list[str]:
    return [f"http://{host}/p{n}" for n in range(start, start + count)]


SOURCE = UrlTask(f"http://{HOSTS[0]}/", 0)


# ---- queued URLs -------------------------------------------------------------------------------


def test_a_server_queues_at_most_its_bound_and_the_rest_get_a_row_and_stay_discovered():
    core, discovery, rows = node(scheduling={"max_queued_per_server": 50})
    server = core.servers[HOSTS[0]]
    found = discovery.discover(page_links(HOSTS[0], 80), SOURCE, 1, [], canonical=True)
    assert server.pending() == 50 and core.frontier.queued() == 50
    assert len(found) == 80  # every one gets its discovered row: a resumed crawl reads them
    assert len(rows.skipped) == 30
    assert {error for _, error in rows.skipped} == {str(SERVER_QUEUE_FULL)}
    assert str(SERVER_QUEUE_FULL) == "skipped: queue_full: server"
    # Not seen: once there is room, the same URL found again is queued.
    assert all(url not in server.seen for url, _ in rows.skipped)
    with core.lock:
        core.take_task(server, now=float("inf"))
    again = discovery.discover([rows.skipped[0][0]], SOURCE, 1, [], canonical=True)
    assert len(again) == 1 and server.pending() == 50 and len(rows.skipped) == 30


def test_the_node_bound_holds_over_all_its_servers():
    core, discovery, rows = node(scheduling={"max_queued_per_node": 70})
    discovery.discover(page_links(HOSTS[0], 60), SOURCE, 1, [], canonical=True)
    discovery.discover(page_links(HOSTS[1], 60), SOURCE, 1, [], canonical=True)
    assert core.frontier.queued() == 70
    assert core.servers[HOSTS[1]].pending() == 10
    assert rows.skipped == [(url, str(NODE_QUEUE_FULL)) for url in page_links(HOSTS[1], 50, 10)]


def test_a_page_gives_at_most_max_links_per_page_links():
    core, discovery, rows = node(limits={"max_links_per_page": 100})
    found = discovery.discover(page_links(HOSTS[0], 100_000), SOURCE, 1, [], canonical=True)
    assert [url for url, _ in found] == page_links(HOSTS[0], 100)
    assert core.frontier.queued() == 100 and not rows.skipped


def test_sitemap_entries_queue_within_the_bound_too():
    core, discovery, rows = node(scheduling={"max_queued_per_server": 5})
    server = core.servers[HOSTS[0]]
    entries = [SitemapEntry(url, None) for url in page_links(HOSTS[0], 8)]
    added = discovery.queue_sitemap_entries(server, entries)
    assert len(added) == 8 and server.pending() == 5 and len(rows.skipped) == 3


def test_resume_reads_past_queue_full_rows_as_past_the_deadline(tmp_path: Path):
    """The rule resume and takeover share (storage.outcomes): a URL with only a `skipped:
    queue_full` row is not done, and the row is no try of it."""
    rows = [
        ("http://h/a", None, "skipped: queue_full: server"),
        ("http://h/b", None, "skipped: deadline"),
        ("http://h/c", None, "skipped: pattern_errors: /x"),
        ("http://h/d", 200, None),
    ]
    con = duckdb.connect()
    con.execute("CREATE TABLE fetches (url VARCHAR, fetch_status INTEGER, error VARCHAR)")
    con.executemany("INSERT INTO fetches VALUES (?, ?, ?)", rows)
    kept = con.execute(f"SELECT url FROM fetches WHERE {NOT_LEFT_AT_DEADLINE} ORDER BY url")
    assert [url for (url,) in kept.fetchall()] == ["http://h/c", "http://h/d"]


# ---- robots.txt --------------------------------------------------------------------------------

AGENT = "crawlflow/0.1"


def rule_counts(rules: RobotsRules) -> dict[str, int]:
    """Rules per user agent as protego holds them (what one URL check walks through)."""
    parser = rules._parser
    assert parser is not None
    return {agent: len(ruleset._rules) for agent, ruleset in parser._user_agents.items()}


@pytest.mark.parametrize(
    "hostile",
    [
        # One group of 40,000 wildcard rules: each costs a match in Python per URL checked.
        "User-agent: *\n" + "".join(f"Disallow: /*q{n}*z\n" for n in range(40_000)),
        # Groups that protego merges into one rule set, through spellings it tolerates.
        "".join(f"User-agent: *\nDissallow: /*q{n}*z$\n" for n in range(40_000)),
        # Agents with a `*` inside name the agent without it too.
        "".join(
            f"User-agent: craw*lflow{n % 7}\nUser agent: crawlflow\nAllow /a{n}*\n"
            for n in range(30_000)
        ),
    ],
)
def test_a_hostile_robots_txt_keeps_at_most_max_rules_per_agent(hostile: str):
    rules = RobotsRules.from_text(hostile, max_rules=300)
    counts = rule_counts(rules)
    assert max(counts.values()) <= 300 and max(counts.values()) >= 298
    assert rules.rules_dropped > 1000


def test_the_rules_before_the_cap_hold_and_those_after_are_ignored():
    text = "User-agent: *\nDisallow: /first\n" + "Disallow: /x\n" * 10 + "Disallow: /late\n"
    rules = RobotsRules.from_text(text, max_rules=5)
    assert not rules.allowed("http://h/first/page", AGENT)
    assert rules.allowed("http://h/late/page", AGENT)
    assert rules.rules_dropped == 7


def test_an_ordinary_robots_txt_is_read_as_protego_reads_it():
    text = (
        "# comment\nUser-agent: a\nUser-agent: b*\nDisallow: /x$\nAllow: /x/index.html\n\n"
        "Sitemap: http://h/s.xml\nUser-agent: *\nCrawl-delay: 2\nDisallow: /private # no\n"
    )
    lines, dropped = capped_rules(text, max_rules=1000)
    assert dropped == 0 and "\n".join(lines) == text.rstrip("\n")
    counts = rule_counts(RobotsRules.from_text(text))
    assert counts == {a: len(r._rules) for a, r in Protego.parse(text)._user_agents.items()}


# ---- sitemaps ----------------------------------------------------------------------------------


def urlset(start: int, count: int) -> bytes:
    entries = "".join(
        f"<url><loc>http://h.test/p{n}</loc><lastmod>2024-01-01</lastmod></url>"
        for n in range(start, start + count)
    )
    return f"<?xml version='1.0'?><urlset xmlns='x'>{entries}</urlset>".encode()


def test_a_sitemap_file_is_cut_after_its_first_entries_gzip_too():
    body, kept = bounded_sitemap(urlset(0, 1000), 100)
    assert kept == 100 and body.count(b"</url>") == 100
    assert bounded_sitemap(gzip.compress(urlset(0, 1000)), 100)[1] == 100
    text, lines = bounded_sitemap(b"".join(b"http://h.test/%d\n" % n for n in range(500)), 10)
    assert lines == 10 and text.count(b"\n") == 10


def test_a_servers_sitemaps_give_at_most_their_bounds():
    index = "".join(f"<sitemap><loc>http://h.test/s{n}.xml</loc></sitemap>" for n in range(50))
    files = {"http://h.test/sitemap.xml": f"<sitemapindex xmlns='x'>{index}</sitemapindex>"}
    files.update({f"http://h.test/s{n}.xml": urlset(n * 1000, 1000).decode() for n in range(50)})
    fetched: list[str] = []

    def fetch(url: str) -> FetchResult:
        fetched.append(url)
        return FetchResult(url, status=200, body=files[url].encode())

    entries = read_sitemaps("h.test", ["http://h.test/sitemap.xml"], fetch, 300, 1000)
    assert len(entries) == 1000  # four files of 300, the last one cut at 100
    assert len(fetched) == 5 <= MAX_SITEMAP_FILES
    assert {entry.url for entry in entries} >= {f"http://h.test/p{n}" for n in range(300)}


def test_urls_left_out_cost_no_memory_in_the_page_quality_graph():
    core, discovery, _ = node(scheduling={"max_queued_per_server": 50})
    discovery.discover(page_links(HOSTS[0], 80), SOURCE, 1, [], canonical=True)
    quality = core._quality  # PageRank over what the node keeps (crawler/scheduling/quality.py)
    assert len(quality) == 1 + 50  # the page itself and the URLs queued


def test_the_quick_room_test_agrees_with_the_queues():
    core, discovery, _ = node(scheduling={"max_queued_per_server": 100, "max_queued_per_node": 150})
    frontier = core.frontier
    assert frontier.has_room(50) and not frontier.has_room(51)  # past max - half: looked at
    discovery.discover(page_links(HOSTS[0], 60), SOURCE, 1, [], canonical=True)
    assert frontier.has_room(40) and not frontier.has_room(41)  # the crowded server's room
    discovery.discover(page_links(HOSTS[1], 60), SOURCE, 1, [], canonical=True)
    assert frontier.has_room(30) and not frontier.has_room(31)  # the node's room


@pytest.mark.integration  # websim
def test_a_resumed_crawl_with_a_raised_bound_fetches_what_a_full_queue_left_out(tmp_path: Path):
    from runtime.backends import crawl_in_process, start_fleet
    from runtime.fleet import single_node
    from storage.checkpoint import load_checkpoint
    from storage.views import connect
    from websim import WebSim, WebSpec

    spec = WebSpec(hosts=1, pages=60, seed=5, rate_limit_rps=None, latency_ms=(0.0, 0.0))
    fast = {"rate_control": {"mode": "fixed", "fixed": {"delay_s": 0.0}}}
    with WebSim(spec) as web:
        expected = web.reachable_allowed_urls()
        tight = CrawlConfig.model_validate({**fast, "scheduling": {"max_queued_per_server": 3}})
        crawl_in_process(single_node("c", str(tmp_path), tight, web.servers), [web.hub_url])
        crawl_dir = tmp_path / "c"
        con = connect(crawl_dir)
        left_out = con.execute(
            "SELECT count(DISTINCT url) FROM fetches WHERE error LIKE 'skipped: queue_full%'"
        ).fetchone()
        assert left_out is not None and left_out[0] > 0
        checkpoint = load_checkpoint(crawl_dir, [web.hub_url])
        assert checkpoint.pending  # the URLs left out, waiting for a resume

        fleet = start_fleet(
            single_node("c", str(tmp_path), CrawlConfig.model_validate(fast), web.servers),
            "inprocess",
        )
        try:
            coordinator = fleet.coordinator()
            coordinator.resume(checkpoint.pending, checkpoint.done, checkpoint.admitted)
            coordinator.run(poll_s=0.02)
        finally:
            fleet.stop()
        fetched = (
            connect(crawl_dir)
            .execute("SELECT url, count(*) FROM fetches WHERE fetch_status = 200 GROUP BY url")
            .fetchall()
        )
    assert {url for url, _ in fetched} >= expected
    assert all(count == 1 for _, count in fetched)  # nothing fetched twice
