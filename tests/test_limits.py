"""URL admission limits and trap heuristics (crawler/scope/limits.py), and their configuration."""

from __future__ import annotations

import random
import re
import time
import zlib
from collections import defaultdict
from urllib.parse import urlsplit

import pytest

from crawler.config import ConfigError, CrawlConfig, config_from_dict
from crawler.scope.limits import ServerCounts, UrlLimits, counts_of
from crawler.scope.settings import LimitSettings
from crawler.scope.traps import (
    DEFAULT_STRIP_PARAMS,
    ParamStripper,
    content_shape,
    descends,
    path_pattern,
)
from crawler.scope.urls import MAX_URL_LENGTH
from errors import FetchError

strip = ParamStripper(DEFAULT_STRIP_PARAMS)


@pytest.mark.parametrize(
    ("url", "stripped"),
    [
        ("http://a.example/p?sid=123&x=1", "http://a.example/p?x=1"),
        ("http://a.example/p?PHPSESSID=ab&a=1&JSESSIONID=cd", "http://a.example/p?a=1"),
        ("http://a.example/cart;jsessionid=0AF3?item=2", "http://a.example/cart?item=2"),
        ("http://a.example/s;JSESSIONID=x/next", "http://a.example/s/next"),
        ("http://a.example/p?session_id=1", "http://a.example/p"),
        ("http://a.example/cal?d=5&sid=9f8e7d", "http://a.example/cal?d=5"),
        # Tracking parameters, by name or by prefix (utm_*), in any case.
        (
            "http://a.example/p?fbclid=x&gclid=y&id=3&UTM_Source=news&utm_medium=mail",
            "http://a.example/p?id=3",
        ),
        ("http://a.example/p?ASPSESSIONIDQQGGRSTA=AB", "http://a.example/p"),
        # Only whole parameter names match: these are not session ids.
        ("http://a.example/p?side=1&sidebar=2", "http://a.example/p?side=1&sidebar=2"),
        ("http://a.example/p;v=1?q=%2F", "http://a.example/p;v=1?q=%2F"),
    ],
)
def test_session_ids_and_tracking_parameters_are_stripped(url, stripped):
    assert strip(url) == stripped


def test_stripped_parameters_are_configurable():
    custom = ParamStripper(["ref", "track_*"])
    assert custom("http://a.example/p?ref=x&track_id=1&sid=2") == "http://a.example/p?sid=2"
    assert LimitSettings(strip_params=["ref"]).strip_params == ["ref"]
    assert "utm_*" in LimitSettings().strip_params


def test_content_shape_ignores_numbers_and_session_ids_only():
    def calendar(year: int, sid: str) -> bytes:
        return (
            f"<title>{year}-5</title><a href='/cal?d={year}&sid={sid}'>next</a>"
            f"<a href='/x;jsessionid={sid}'>y</a>"
        ).encode()

    assert content_shape(calendar(2024, "ab12")) == content_shape(calendar(1999, "zzqq"))
    assert content_shape(b"<p>installing</p>") != content_shape(b"<p>configuring</p>")


def test_path_pattern_masks_numbered_segments_and_query_values():
    assert path_pattern("/cal/2024/5", "") == "/cal/*/*"
    assert path_pattern("/cal/1999/12", "view=day") == "/cal/*/*?"
    assert path_pattern("/docs/12.html", "") == "/docs/*"
    assert path_pattern("/about/team", "") == "/about/team"


class Servers:
    """The limits of one node that owns every server: each server's counts are its own, as a
    node's `ServerState.limits` are."""

    def __init__(self, settings: LimitSettings) -> None:
        self.rules = UrlLimits(settings)
        self.counts: defaultdict[str, ServerCounts] = defaultdict(ServerCounts)

    def of(self, url: str) -> ServerCounts:
        return self.counts[urlsplit(url).netloc]

    def admit(self, url: str, host_depth: int = 0) -> FetchError | None:
        return self.rules.admit(self.of(url), url, host_depth)

    def observe(self, url: str, shape: int) -> None:
        self.rules.observe(self.of(url), url, shape)

    def outcome(self, url: str, failed: bool) -> bool:
        return self.rules.outcome(self.of(url), url, failed)

    def closed(self, url: str) -> bool:
        return self.rules.closed(self.of(url), url)


def limits(**settings) -> Servers:
    return Servers(LimitSettings(**settings))


def test_url_length_limit():
    rules = limits(max_url_length=40)
    assert rules.admit("http://a.example/" + "x" * 23) is None  # 40 characters
    refusal = rules.admit("http://a.example/" + "x" * 24)
    assert str(refusal) == "url_too_long: 41 characters, the limit is 40"


def test_repeating_path_segment_is_a_trap():
    rules = limits(trap_max_segment_repeats=3)
    assert rules.admit("http://a.example/deep/x/x/x/") is None
    assert rules.admit("http://a.example/a/b/a/b/a/b/") is None
    refusal = rules.admit("http://a.example/deep/x/x/x/x/")
    assert str(refusal) == "trap: path segment 'x' occurs 4 times"


def test_urls_per_pattern_are_capped_per_server():
    rules = limits(trap_max_urls_per_pattern=3)
    calendar = [f"http://a.example/cal/2024/{month}" for month in range(1, 6)]
    verdicts = [rules.admit(url) for url in calendar]
    assert verdicts[:3] == [None, None, None]
    assert str(verdicts[3]) == "trap: 3 URLs like /cal/*/* fetched already, their pages of 0 shapes"
    # Another shape on the same server, and the same shape on another server, still pass.
    assert rules.admit("http://a.example/cal/2024/1?view=week") is None
    assert rules.admit("http://b.example/cal/2024/1") is None


def test_a_pattern_whose_pages_differ_earns_budget_one_alike_does_not():
    rules = limits(trap_max_urls_per_pattern=3)
    admitted = {"docs": 0, "cal": 0}
    for i in range(50):
        for kind in admitted:
            url = f"http://a.example/{kind}/{i}"
            if rules.admit(url) is None:
                admitted[kind] += 1
                # Documentation pages differ; calendar months are one template.
                rules.observe(url, i if kind == "docs" else 7)
    assert admitted == {"docs": 50, "cal": 3}


def test_depth_inside_a_server_is_limited():
    rules = limits(max_depth_per_host=4)
    assert rules.admit("http://a.example/a", host_depth=4) is None
    refusal = rules.admit("http://a.example/b", host_depth=5)
    assert str(refusal) == "trap: 5 links into the server, the limit is 4"


def test_a_family_closes_after_its_error_budget_of_failures_in_a_row():
    rules = limits(family_error_budget=3)
    dead = [f"http://a.example/dead/{i}" for i in range(6)]
    assert [rules.outcome(url, failed=True) for url in dead[:2]] == [False, False]
    assert rules.outcome("http://a.example/dead/ok", failed=False) is False  # a success resets
    assert [rules.outcome(url, failed=True) for url in dead[2:5]] == [False, False, True]
    assert rules.closed(dead[5]) and rules.closed("http://a.example/dead/x?y=1") is False
    assert not rules.closed("http://a.example/alive/1")
    assert not rules.closed("http://b.example/dead/1")


def test_host_budget_counts_only_admitted_urls():
    rules = limits(max_pages_per_host=2)
    assert rules.admit("http://a.example/" + "x" * 5000) is not None  # refused: not counted
    assert rules.admit("http://a.example/1") is None
    assert rules.admit("http://a.example/2") is None
    assert str(rules.admit("http://a.example/3")) == "host_budget: 2 URLs fetched from a.example"
    assert rules.admit("http://b.example/1") is None


def test_limit_defaults_and_validation():
    config = CrawlConfig()
    assert config.fetch.max_body_bytes == config.fetch.max_decoded_bytes == 10_000_000
    assert (config.fetch.fetch_timeout_s, config.fetch.max_redirects) == (60.0, 10)
    assert config.limits.max_url_length == MAX_URL_LENGTH
    assert config.limits.max_pages_per_host == 100_000
    assert (config.limits.trap_max_urls_per_pattern, config.limits.trap_max_segment_repeats) == (
        100,
        3,
    )
    assert (config.limits.max_depth_per_host, config.limits.family_error_budget) == (30, 20)
    # The crawl as a whole: no page or depth limit, a deadline of an hour.
    limits = config.limits
    assert (limits.max_pages, limits.max_depth, limits.deadline_s) == (None, None, 3600.0)
    for section, key, value in (
        ("limits", "max_pages", 0),
        ("limits", "max_depth", -1),
        ("limits", "deadline_s", 0),
        ("limits", "max_url_length", MAX_URL_LENGTH + 1),  # canonicalization drops longer URLs
        ("fetch", "fetch_timeout_s", 0),
        ("fetch", "max_redirects", -1),
        ("fetch", "max_decoded_bytes", 10),
        ("limits", "trap_max_urls_per_pattern", 0),
        ("limits", "family_error_budget", 0),
        ("limits", "max_depth_per_host", -1),
    ):
        with pytest.raises(ConfigError, match=f"{section}.{key}"):
            config_from_dict({section: {key: value}})


def test_a_servers_counts_leave_with_it_and_count_where_it_goes():
    settings = LimitSettings(max_pages_per_host=3, trap_max_urls_per_pattern=2)
    here, there = Servers(settings), Servers(settings)
    assert here.admit("http://a.example/cal/1") is None
    assert here.admit("http://a.example/cal/2") is None
    assert here.admit("http://b.example/1") is None

    there.counts["a.example"] = here.counts.pop("a.example")  # the server moves, whole

    assert str(there.admit("http://a.example/cal/3")).startswith("trap: 2 URLs like /cal/* fetched")
    assert there.admit("http://a.example/about") is None
    assert str(there.admit("http://a.example/team")) == "host_budget: 3 URLs fetched from a.example"
    # What left is gone here; other servers' counts stay.
    assert here.admit("http://a.example/cal/3") is None
    assert here.counts["b.example"].pages == 1


def test_counts_rebuilt_from_admitted_urls_are_those_admit_would_have_made():
    urls = ["http://a.example/cal/1", "http://a.example/cal/2?x=1", "http://b.example/"]
    counts = counts_of(urls)
    assert counts["a.example"].pages == 2
    assert counts["a.example"].patterns == {"/cal/*": 1, "/cal/*?": 1}
    # A resumed run gives each pattern its base budget afresh (content shapes are not kept).
    assert counts["a.example"].credits == counts["a.example"].patterns
    assert counts["b.example"].pages == 1


def test_a_server_handed_to_another_node_takes_its_counts_along(two_nodes):
    # Heartbeats of 10 ms: a server adopted may be handed on after 8 of them (no ping-pong).
    config = CrawlConfig(limits={"max_pages_per_host": 5}, exchange={"heartbeat_s": 0.01})
    host = "127.0.0.1:9"  # loopback, nothing listens: the nodes are never started anyway
    sender, receiver = two_nodes(config, host)
    # A resumed crawl: two URLs of the server were admitted by the first run, one is queued.
    admitted = [f"http://{host}/cal/1", f"http://{host}/cal/2"]
    sender.restore([(f"http://{host}/next", 1, 1)], admitted, admitted)

    (state,) = sender.export_hosts(want_urls=10, max_urls=10)
    receiver.adopt_hosts([state])
    time.sleep(0.1)
    (back,) = receiver.export_hosts(want_urls=10, max_urls=10)

    assert state.limits.pages == back.limits.pages == 2
    assert back.limits.patterns == {"/cal/*": 2}
    assert [task.url for task in back.queue.drain()] == [f"http://{host}/next"]
    # Adopting a server before start() opens no connection: the coordinator restores first.
    assert sender._threads == receiver._threads == []
    sender.close()
    receiver.close()


def test_descending_runs_share_one_budget_per_section():
    """From the second descending page in a row on, a section's URLs share one budget,
    whatever their words; ordinary URLs of the section and other sections are not held."""
    limits = UrlLimits(LimitSettings(trap_max_descending_urls=5))
    counts = ServerCounts()
    fresh = [f"http://a.example/t/{'x' * n}/{'y' * n}/" for n in range(1, 9)]
    verdicts = [limits.admit(counts, url, descent=2 + n % 3) for n, url in enumerate(fresh)]
    assert [v is None for v in verdicts] == [True] * 5 + [False] * 3
    assert all(v.kind.value == "trap" for v in verdicts[5:] if v is not None)
    assert limits.admit(counts, "http://a.example/t/named/page.html", descent=1) is None
    assert limits.admit(counts, "http://a.example/t/other/", descent=0) is None
    assert limits.admit(counts, "http://a.example/u/deep/er/", descent=3) is None


@pytest.mark.parametrize(
    ("page", "links", "descending"),
    [
        # Fresh subdirectories of its own, and only those: a generator's page.
        ("http://a/t/ab/", ["http://a/t/ab/cd/", "http://a/t/ab/ef/"], True),
        ("http://a/t/ab", ["http://a/t/ab/cd/"], True),  # no slash: its directory is /t/
        # Half deeper is enough; a home link does not hide it.
        ("http://a/t/ab/", ["http://a/t/ab/cd/", "http://a/"], True),
        # Ordinary pages: a sibling, files in its own directory, nothing new.
        ("http://a/t/ab/", ["http://a/t/ab/x.html", "http://a/t/ab/y.html"], False),
        (
            "http://a/docs/p.html",
            ["http://a/docs/q.html", "http://a/docs/api/x.html", "http://a/b"],
            False,
        ),
        ("http://a/t/ab/", [], False),
        # The root directory never descends: everything is under it.
        ("http://a/", ["http://a/t/", "http://a/u/v/"], False),
        ("http://a/index.html", ["http://a/t/"], False),
    ],
)
def test_which_pages_descend(page, links, descending):
    assert descends(page, links) is descending


def test_content_shape_is_the_crc_of_the_body_without_volatile_runs_and_digits():
    """The matches are found by `bytes.find`; the values are the regex's, many matches (the
    regex takes over) and none included."""
    generator = random.Random(34)
    bodies = [b"", b"no match", b";" * 200, b"?a;b?c" * 50, b"<a href='x?1'>;y z;\n"]
    for _ in range(3000):
        size = generator.randrange(80)
        bodies.append(bytes(generator.choice(b"ab1?;\"' <>\t\n=&/") for _ in range(size)))
    for body in bodies:
        expected = zlib.crc32(re.sub(rb"[?;][^\"'\s<>]*", b"", body).translate(None, b"0123456789"))
        assert content_shape(body) == expected, body
