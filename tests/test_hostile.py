"""A crawler node against every hostile websim host at once: the crawl ends, no worker dies,
every good page is fetched once, and each attack ends as a fetches row with its error class.

Fast settings (short timeouts, a trap limit of 20, no politeness delay); bench/chaos runs the
same scenarios one by one with the default size limits and measures memory.
"""

from __future__ import annotations

import errno
import threading
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import crawler.node.fetchloop
import crawler.node.outcome
from crawler.cluster.coordinator import CrawlFailed
from crawler.config import CrawlConfig
from crawler.fetching.politeness import RobotsRules
from crawler.node.fetchloop import FetchLoop
from crawler.scope.addresses import AddressGuard
from crawler.scope.urls import host_key
from runtime.backends import start_fleet
from runtime.fleet import single_node
from runtime.trial import analyse, trial_crawl
from storage.views import connect
from storage.writer import CommitGroupWriter
from tasks.launch import require_committed
from websim import WebSim, WebSpec
from websim.hostile import ARCHIVE, DOC_PAGES, SCENARIOS, mixed

pytestmark = pytest.mark.integration  # websim's hostile servers

MANY_LINKS = 5000
FAST = CrawlConfig(
    fetch={
        "connect_timeout_s": 1.0,
        "read_timeout_s": 0.5,
        "fetch_timeout_s": 2.0,
        "robots_retry_s": 0.2,
        "max_body_bytes": 1_000_000,
        "max_decoded_bytes": 1_000_000,
    },
    limits={"trap_max_urls_per_pattern": 20},
    output={"write_interval_s": 0.5},
    rate_control={"mode": "fixed", "fixed": {"delay_s": 0.0}},
    retry={
        "retry_after_max_s": 0.5,
        "max_retries": 1,
        "backoff_base_s": 0.05,
        "backoff_cap_s": 0.2,
    },
)


@pytest.fixture(scope="module")
def hostile_web():
    spec = WebSpec(
        hosts=1,
        pages=5,
        hostile=tuple(SCENARIOS),
        hostile_drip_s=0.2,
        hostile_many_links=MANY_LINKS,
    )
    with WebSim(spec) as sim:
        yield sim


class Rows:
    """The fetches and pages of a crawl, by scenario and path."""

    def __init__(self, crawl_dir: Path, sim: WebSim) -> None:
        con = connect(crawl_dir)
        scenario_of = {sim.hostile_host(name): name for name in SCENARIOS}
        self.fetches: dict[str, list[tuple]] = defaultdict(list)
        for url, status, error, attempt in con.execute(
            "SELECT url, fetch_status, error, attempt FROM fetches ORDER BY fetch_time"
        ).fetchall():
            parts = urlsplit(url)
            target = parts.path + ("?" + parts.query if parts.query else "")
            self.fetches[scenario_of[parts.netloc]].append((target, status, error, attempt))
        self.requested: list[dict] = []  # what the servers received
        self.pages = {
            url: outlinks
            for url, outlinks in con.execute("SELECT url, outlink_count FROM pages").fetchall()
        }

    def errors(self, scenario: str) -> dict[str, str]:
        """Last error class per path."""
        return {t: e.split(":", 1)[0] for t, _, e, _ in self.fetches[scenario] if e is not None}

    def targets(self, scenario: str) -> list[str]:
        return [t for t, *_ in self.fetches[scenario] if t != "/robots.txt"]


@pytest.fixture(scope="module")
def hostile_crawl(hostile_web, tmp_path_factory):
    crashes: list[BaseException | None] = []
    previous_hook = threading.excepthook
    threading.excepthook = lambda args: crashes.append(args.exc_value)
    try:
        seeds = [hostile_web.hostile_url(name) for name in SCENARIOS]
        scope = [hostile_web.hostile_host(name) for name in SCENARIOS]
        crawl_dir, finished = trial_crawl(
            seeds, scope, tmp_path_factory.mktemp("hostile"), FAST, timeout_s=60
        )
    finally:
        threading.excepthook = previous_hook
    assert finished, "the crawl did not end"
    assert crashes == []
    expected = set().union(*(hostile_web.hostile_expected(name) for name in SCENARIOS))
    rows = Rows(crawl_dir, hostile_web)
    rows.requested = hostile_web.request_log()  # before a later test clears the log
    return analyse(crawl_dir, seeds, expected), rows


def test_nothing_lost_nothing_twice_no_internal_errors(hostile_crawl):
    summary, _ = hostile_crawl
    assert summary["fetched"] == summary["expected"]
    assert summary["lost"] == []
    assert summary["duplicates"] == 0
    assert "internal_error" not in summary["outcome"]


def test_redirect_chains_stop_at_max_redirects(hostile_crawl, hostile_web):
    _, rows = hostile_crawl
    loop = [t for t in rows.targets("redirect_loop") if t.startswith("/loop/")]
    assert loop == [f"/loop/{i}" for i in range(FAST.fetch.max_redirects + 1)]
    assert rows.errors("redirect_loop") == {
        f"/loop/{FAST.fetch.max_redirects}": "too_many_redirects"
    }
    # The 2-cycle ends by de-duplication: each URL once.
    assert sorted(t for t in rows.targets("redirect_loop") if "cycle" in t) == [
        "/cycle/a",
        "/cycle/b",
    ]
    requested = {e["path"] for e in hostile_web.request_log()}
    assert f"/loop/{FAST.fetch.max_redirects + 1}" not in requested


def test_out_of_scope_redirect_is_not_followed(hostile_crawl, hostile_web):
    log = hostile_web.request_log()
    assert not [e for e in log if e["path"] == "/from-hostile-redirect"]


@pytest.mark.parametrize(
    ("scenario", "errors"),
    [
        ("huge_body", {"/huge": "body_too_large", "/huge-stream": "body_too_large"}),
        ("gzip_bomb", {"/bomb": "decoded_too_large"}),
        ("drip", {"/drip": "fetch_timeout", "/drip-head": "fetch_timeout"}),
        ("hang_after_headers", {"/hang": "gave_up"}),
        ("reset_mid_body", {"/reset": "gave_up"}),
        ("binary_html", {"/binary": "not_html"}),
        ("content_type", {}),
        ("bad_charset", {}),
        ("broken_html", {}),
        ("robots_garbage", {}),
        ("retry_after_past", {}),
        ("retry_after_far", {}),
        ("empty_body", {}),
    ],
)
def test_each_attack_is_one_row_with_its_error_class(hostile_crawl, scenario, errors):
    _, rows = hostile_crawl
    assert rows.errors(scenario) == errors


def test_retries_end_as_gave_up_after_transient_errors(hostile_crawl):
    _, rows = hostile_crawl
    hang = [(e or "").split(":")[0] for t, _, e, _ in rows.fetches["hang_after_headers"]]
    assert hang.count("read_timeout") == FAST.retry.max_retries
    resets = [(e or "").split(":")[0] for t, _, e, _ in rows.fetches["reset_mid_body"]]
    assert resets.count("connection_error") == FAST.retry.max_retries


def test_content_sniffing_and_pages(hostile_crawl, hostile_web):
    _, rows = hostile_crawl
    origin = hostile_web.hostile_url("content_type").rstrip("/")
    assert origin + "/no-type" in rows.pages  # unlabelled HTML is sniffed and parsed
    assert origin + "/wrong-type" not in rows.pages  # labelled image/png: not a page
    assert "/via-wrong-type" not in rows.targets("content_type")
    binary = hostile_web.hostile_url("binary_html") + "binary"
    assert binary not in rows.pages
    empty = hostile_web.hostile_url("empty_body").rstrip("/")
    assert rows.pages[empty + "/empty"] == rows.pages[empty + "/empty-close"] == 0


def test_link_traps_are_bounded(hostile_crawl):
    _, rows = hostile_crawl
    targets = rows.targets("link_trap")
    calendar = [t for t in targets if t.startswith("/cal/")]
    fetched = [t for t, s, e, _ in rows.fetches["link_trap"] if s is not None]
    assert (
        len([t for t in fetched if t.startswith("/cal/")]) == FAST.limits.trap_max_urls_per_pattern
    )
    assert len(calendar) > FAST.limits.trap_max_urls_per_pattern  # the rest: one "trap" row each
    # Session ids are stripped: one /session page, and /ok/0?PHPSESSID=... is /ok/0.
    assert [t for t in targets if t.startswith("/session")] == ["/session"]
    assert targets.count("/ok/0") == 1
    assert "/deep/x/x/x/" in fetched
    assert rows.errors("link_trap")["/deep/x/x/x/x/"] == "trap"


def test_many_links_page_is_kept_and_its_links_bounded(hostile_crawl, hostile_web):
    _, rows = hostile_crawl
    assert rows.pages[hostile_web.hostile_url("many_links") + "many"] == MANY_LINKS
    many = [(t, s, e) for t, s, e, _ in rows.fetches["many_links"] if t.startswith("/many/")]
    assert len(many) == MANY_LINKS  # every link recorded once...
    assert (
        len([t for t, s, e in many if s == 200]) == FAST.limits.trap_max_urls_per_pattern
    )  # ...few
    assert {e.split(":")[0] for t, s, e in many if s is None} == {"trap"}


def test_garbage_links_and_locations_are_skipped(hostile_crawl):
    _, rows = hostile_crawl
    targets = rows.targets("garbage_links")
    assert {"/garbage", "/via-garbage", "/bad-redirect", "/long-redirect"} <= set(targets)
    assert rows.errors("garbage_links") == {}
    assert all(len(t) < 3000 for t in targets)


@pytest.mark.parametrize("scenario", ["robots_500", "robots_timeout"])
def test_unreachable_robots_txt_closes_the_host(hostile_crawl, scenario):
    _, rows = hostile_crawl
    assert rows.errors(scenario) | {"/robots.txt": None} == {
        "/": "robots_unavailable",
        "/robots.txt": None,
    }
    assert [t for t, s, *_ in rows.fetches[scenario] if s is not None and t != "/robots.txt"] == []


def test_retry_after_past_or_far_is_honoured_within_bounds(hostile_crawl):
    _, rows = hostile_crawl
    for scenario in ("retry_after_past", "retry_after_far"):
        by_target = defaultdict(list)
        for target, status, _, attempt in rows.fetches[scenario]:
            by_target[target].append((attempt, status))
        by_target.pop("/robots.txt")
        assert all(tries == [(1, 503), (2, 200)] for tries in by_target.values()), by_target


def test_internal_error_costs_one_url_not_the_node(hostile_web, tmp_path, monkeypatch):
    """A bug met while handling one answer is recorded for that URL and the crawl goes on."""
    real_parse = crawler.node.outcome.parse_html

    def parse_or_fail(body, url, *args):
        if url.endswith("/ok/1"):
            raise RuntimeError("boom")
        return real_parse(body, url, *args)

    monkeypatch.setattr(crawler.node.outcome, "parse_html", parse_or_fail)
    seed = hostile_web.hostile_url("empty_body")
    crawl_dir, finished = trial_crawl([seed], [], tmp_path, FAST, timeout_s=30)
    assert finished
    summary = analyse(crawl_dir, [seed], hostile_web.hostile_expected("empty_body"))
    assert summary["outcome"] == {"internal_error": 1}
    assert summary["lost"] == [seed + "ok/1"]  # fetched, but not successfully
    assert summary["duplicates"] == 0


def test_a_bug_in_a_urls_robots_check_costs_that_url(hostile_web, tmp_path, monkeypatch):
    """Every step of one URL is inside the net: robots.txt's verdict too."""
    real_allowed = RobotsRules.allowed

    def allowed_or_fail(self, url, user_agent):
        if url.endswith("/ok/1"):
            raise RuntimeError("boom")
        return real_allowed(self, url, user_agent)

    monkeypatch.setattr(RobotsRules, "allowed", allowed_or_fail)
    seed = hostile_web.hostile_url("empty_body")
    crawl_dir, finished = trial_crawl([seed], [], tmp_path, FAST, timeout_s=30)
    assert finished
    summary = analyse(crawl_dir, [seed], hostile_web.hostile_expected("empty_body"))
    assert summary["outcome"] == {"internal_error": 1}
    assert summary["lost"] == [seed + "ok/1"]


def test_a_robots_txt_that_sets_off_a_bug_is_an_unreadable_one(hostile_web, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(RobotsRules, "from_response", fail)
    seed = hostile_web.hostile_url("empty_body")
    crawl_dir, finished = trial_crawl([seed], [], tmp_path, FAST, timeout_s=30)
    assert finished
    errors = connect(crawl_dir).execute("SELECT DISTINCT error FROM fetches").fetchall()
    assert {e for (e,) in errors} == {
        None,
        "robots_unavailable: internal_error: RuntimeError: boom",
    }


def test_a_bug_outside_a_fetch_fails_the_crawl_and_keeps_its_output(
    hostile_web, tmp_path, monkeypatch
):
    """A worker thread killed by a bug would keep its server taken and the crawl would wait
    forever: the node reports it, the coordinator fails the crawl, the committed rows stay."""
    real_next_task = FetchLoop.next_task

    def next_task_or_fail(self, server):
        task = real_next_task(self, server)
        if task is not None and task.url.endswith("/ok/2"):
            raise RuntimeError("boom")
        return task

    monkeypatch.setattr(FetchLoop, "next_task", next_task_or_fail)
    seed = hostile_web.hostile_url("empty_body")
    host = host_key(seed)
    fleet = start_fleet(single_node("bug", str(tmp_path), FAST, [host]), "inprocess")
    coordinator = fleet.coordinator()
    coordinator.seed([seed])
    try:
        with pytest.raises(CrawlFailed, match=r"node-0 failed: node-0-conn0: RuntimeError: boom"):
            coordinator.run(poll_s=0.02, max_s=30)
    finally:
        fleet.stop()
    fetched = {
        url for (url,) in connect(tmp_path / "bug").execute("SELECT url FROM fetches").fetchall()
    }
    assert seed in fetched


def test_a_disk_that_takes_nothing_stops_the_node_with_one_line(hostile_web, tmp_path, monkeypatch):
    """Every flush fails (a full disk): the node stops once its output refuses rows, and the
    crawl fails saying what the disk said, not as a bug of some URL."""

    def full_disk(self, batch):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(CommitGroupWriter, "_commit", full_disk)
    seed = hostile_web.hostile_url("slow_failures")  # several seconds: several flushes
    fleet = start_fleet(single_node("full", str(tmp_path), FAST, [host_key(seed)]), "inprocess")
    coordinator = fleet.coordinator()
    coordinator.seed([seed])
    try:
        with pytest.raises(CrawlFailed) as failed:
            coordinator.run(poll_s=0.02, max_s=60)
    finally:
        statuses = fleet.stop()  # its last flush fails too: said in its status, not raised
    message = str(failed.value)
    assert "refuses rows" in message and "No space left on device" in message, message
    assert "\n" not in message and "internal_error" not in message
    with pytest.raises(CrawlFailed, match="No space left on device"):
        require_committed(statuses)


def test_redirect_to_private_address_in_scope_is_refused(hostile_web, tmp_path, monkeypatch):
    """Without --allow-private a redirect to a loopback server is refused even when that server
    is in scope: a redirect is a new URL and goes through the address check again."""
    hostile_ip = hostile_web.hostile_host("redirect_offsite").split(":")[0]
    target = urlsplit(hostile_web.host_urls[0]).netloc  # where its /away redirects to

    def resolver(host: str, port: int) -> list[str]:
        # The hostile host passes for a public server; the address is only checked, never
        # connected to (requests connects to the IP literal in the URL). Every other host is
        # an IP literal and resolves to itself.
        return ["93.184.216.34"] if host == hostile_ip else [host]

    monkeypatch.setattr(
        crawler.node.fetchloop,
        "AddressGuard",
        lambda allow_private, **settings: AddressGuard(allow_private, resolver, **settings),
    )
    seed = hostile_web.hostile_url("redirect_offsite")
    hostile_web.request_log(clear=True)
    crawl_dir, finished = trial_crawl(
        [seed], [target], tmp_path, FAST, allow_private=False, timeout_s=30
    )
    assert finished
    rows = connect(crawl_dir).execute("SELECT url, fetch_status, error FROM fetches").fetchall()
    refused = [(url, error) for url, status, error in rows if urlsplit(url).netloc == target]
    assert len(refused) == 1
    assert refused[0][0].endswith("/from-hostile-redirect")
    assert refused[0][1].startswith("address_refused: 127.0.1.1 resolves to loopback address")
    assert not [e for e in hostile_web.request_log() if e["host"] == target]
    # The hostile host itself was crawled.
    assert {"/", "/away", "/ok/0"} <= {urlsplit(u).path for u, s, _ in rows if s is not None}


def requests_to(rows: Rows, sim: WebSim, scenario: str) -> list[str]:
    """The request targets the scenario's host received, oldest first (robots.txt aside)."""
    host = sim.hostile_host(scenario)
    return [e["path"] for e in rows.requested if e["host"] == host and e["path"] != "/robots.txt"]


def test_calendar_with_session_ids_costs_the_pattern_budget(hostile_crawl, hostile_web):
    _, rows = hostile_crawl
    requested = requests_to(rows, hostile_web, "calendar_sid")
    days = [t for t in requested if t.startswith("/events")]
    # Pages of one template earn nothing (here, one URL: day -1 has a minus sign, day 0 not).
    assert (
        FAST.limits.trap_max_urls_per_pattern
        <= len(days)
        <= FAST.limits.trap_max_urls_per_pattern + 1
    )
    assert all("sid=" not in t for t in requested)  # the session ids were stripped
    assert requested.count("/ok/1") == 1  # linked from every day under a new session id
    assert {e for t, e in rows.errors("calendar_sid").items() if t.startswith("/events")} == {
        "trap"
    }


def test_a_page_of_dead_links_costs_the_error_budget_and_is_recorded(hostile_crawl, hostile_web):
    _, rows = hostile_crawl
    config = CrawlConfig()
    dead = [t for t in requests_to(rows, hostile_web, "dead_links") if t.startswith("/gone/")]
    assert len(dead) == config.limits.family_error_budget
    gone = [(t, s, e) for t, s, e, _ in rows.fetches["dead_links"] if t.startswith("/gone/")]
    assert len(gone) == MANY_LINKS == len({t for t, _, _ in gone})  # each link one row
    skipped = [e for _, s, e in gone if s is None]
    assert len(skipped) == MANY_LINKS - config.limits.family_error_budget
    # The family's errors close it. A second lane (crawler/node/fetchloop.py) that takes the
    # next dead links while the last answer of the budget is being handled finds the pattern's
    # URL budget spent first: those (30 of 4,980 in one CI run) are the trap's, and no request
    # is sent for them either.
    errors = "skipped: pattern_errors: /gone/"
    trap = f"trap: {FAST.limits.trap_max_urls_per_pattern} URLs like /gone/* fetched already"
    assert all(e == errors or e.startswith(trap) for e in skipped)
    assert errors in skipped


def test_a_trap_deep_inside_a_documentation_site_spares_the_site(hostile_crawl, hostile_web):
    summary, rows = hostile_crawl
    origin = hostile_web.hostile_url("deep_trap").rstrip("/")
    fetched_ok = {t for t, s, e, _ in rows.fetches["deep_trap"] if s == 200 and e is None}
    assert {origin + p for p in DOC_PAGES} - {origin + t for t in fetched_ok} == set()
    archive = [t for t in requests_to(rows, hostile_web, "deep_trap") if t.startswith(ARCHIVE)]
    assert len(archive) == FAST.limits.trap_max_urls_per_pattern


def test_pages_linked_from_the_front_page_are_fetched_early(hostile_crawl, hostile_web):
    """Round-robin between URL families: the front page links to an endless calendar, 5,000
    dead links and a redirect loop before its ordinary pages; those still come early."""
    _, rows = hostile_crawl
    requested = requests_to(rows, hostile_web, "hostile_site")
    # Each family gets one turn per round: /team, 7th in its family ("/", after /links, /away,
    # /huge, /bomb, /about, /contact), comes before the calendar's 10th day.
    tenth_day = [i for i, t in enumerate(requested) if t.startswith("/events")][9]
    for path in ("/about", "/contact", "/team", "/blog/", "/docs/"):
        assert requested.index(path) < tenth_day, (path, requested[:60])
    # Every page worth crawling once, and no trap past its budget.
    for path in SCENARIOS["hostile_site"].expected:
        assert requested.count(path) == 1, path
    assert (
        len([t for t in requested if t.startswith("/events")])
        <= FAST.limits.trap_max_urls_per_pattern + 1
    )


def test_a_generator_of_ever_deeper_fresh_paths_spares_the_ordinary_pages(
    hostile_crawl, hostile_web
):
    _, rows = hostile_crawl
    requested = requests_to(rows, hostile_web, "fresh_trap")
    trap = [t for t in requested if t.startswith(mixed.TRAP_ROOT)]
    budget = FAST.limits.trap_max_descending_urls
    # The generator's root, its children (one descending page away), then one budget in all.
    assert budget <= len(trap) <= 1 + mixed.TRAP_FANOUT + budget
    assert all(requested.count(path) == 1 for path in mixed.CHAIN)
    assert set(rows.errors("fresh_trap").values()) == {"trap"}


def test_a_url_that_asks_for_a_year_costs_itself_not_the_server(hostile_crawl, hostile_web):
    """Its 429 comes while the server's other URLs are answered: the URL has one retry
    after the clamp (with defaults, more tries would each ask for a year again; bench/chaos),
    and the articles are each fetched once."""
    _, rows = hostile_crawl
    limited = [error for t, _, error, _ in rows.fetches["slow_failures"] if t == "/limited"]
    assert len(limited) == 2 and limited[-1].startswith("gave_up")
    requested = requests_to(rows, hostile_web, "slow_failures")
    assert all(requested.count(path) == 1 for path in mixed.ARTICLES)
