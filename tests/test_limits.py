"""URL admission limits and trap heuristics (crawler/limits.py), and their configuration."""

from __future__ import annotations

import pytest

from crawler.config import ConfigError, CrawlConfig, config_from_dict
from crawler.limits import UrlLimits, counts_of, path_pattern, strip_session_ids
from crawler.node import CrawlerNode
from crawler.urls import MAX_URL_LENGTH


@pytest.mark.parametrize(
    ("url", "stripped"),
    [
        ("http://a.example/p?sid=123&x=1", "http://a.example/p?x=1"),
        ("http://a.example/p?PHPSESSID=ab&a=1&JSESSIONID=cd", "http://a.example/p?a=1"),
        ("http://a.example/cart;jsessionid=0AF3?item=2", "http://a.example/cart?item=2"),
        ("http://a.example/s;JSESSIONID=x/next", "http://a.example/s/next"),
        ("http://a.example/p?session_id=1", "http://a.example/p"),
        # Only whole parameter names match: these are not session ids.
        ("http://a.example/p?side=1&sidebar=2", "http://a.example/p?side=1&sidebar=2"),
        ("http://a.example/p;v=1?q=%2F", "http://a.example/p;v=1?q=%2F"),
    ],
)
def test_strip_session_ids(url, stripped):
    assert strip_session_ids(url) == stripped


def test_path_pattern_masks_numbered_segments_and_query_values():
    assert path_pattern("/cal/2024/5", "") == "/cal/*/*"
    assert path_pattern("/cal/1999/12", "view=day") == "/cal/*/*?"
    assert path_pattern("/docs/12.html", "") == "/docs/*"
    assert path_pattern("/about/team", "") == "/about/team"


def limits(**settings) -> UrlLimits:
    return UrlLimits(CrawlConfig(**settings))


def test_url_length_limit():
    rules = limits(max_url_length=40)
    assert rules.admit("http://a.example/" + "x" * 23) is None  # 40 characters
    refusal = rules.admit("http://a.example/" + "x" * 24)
    assert refusal == "url_too_long: 41 characters, the limit is 40"


def test_repeating_path_segment_is_a_trap():
    rules = limits(trap_max_segment_repeats=3)
    assert rules.admit("http://a.example/deep/x/x/x/") is None
    assert rules.admit("http://a.example/a/b/a/b/a/b/") is None
    refusal = rules.admit("http://a.example/deep/x/x/x/x/")
    assert refusal == "trap: path segment 'x' occurs 4 times"


def test_urls_per_pattern_are_capped_per_server():
    rules = limits(trap_max_urls_per_pattern=3)
    calendar = [f"http://a.example/cal/2024/{month}" for month in range(1, 6)]
    verdicts = [rules.admit(url) for url in calendar]
    assert verdicts[:3] == [None, None, None]
    assert verdicts[3] == "trap: 3 URLs like /cal/*/* fetched already"
    # Another shape on the same server, and the same shape on another server, still pass.
    assert rules.admit("http://a.example/cal/2024/1?view=week") is None
    assert rules.admit("http://b.example/cal/2024/1") is None


def test_host_budget_counts_only_admitted_urls():
    rules = limits(max_pages_per_host=2)
    assert rules.admit("http://a.example/" + "x" * 5000) is not None  # refused: not counted
    assert rules.admit("http://a.example/1") is None
    assert rules.admit("http://a.example/2") is None
    assert rules.admit("http://a.example/3") == "host_budget: 2 URLs fetched from a.example"
    assert rules.admit("http://b.example/1") is None


def test_limit_defaults_and_validation():
    config = CrawlConfig()
    assert config.max_body_bytes == config.max_decoded_bytes == 10_000_000
    assert (config.fetch_timeout_s, config.max_redirects) == (60.0, 10)
    assert config.max_url_length == MAX_URL_LENGTH
    assert config.max_pages_per_host == 100_000
    assert (config.trap_max_urls_per_pattern, config.trap_max_segment_repeats) == (10_000, 3)
    for bad in (
        {"max_url_length": MAX_URL_LENGTH + 1},  # canonicalization already drops longer URLs
        {"fetch_timeout_s": 0},
        {"max_redirects": -1},
        {"max_decoded_bytes": 10},
        {"trap_max_urls_per_pattern": 0},
    ):
        with pytest.raises(ConfigError):
            config_from_dict(bad)


def test_a_servers_counts_leave_with_it_and_count_where_it_goes():
    config = CrawlConfig(max_pages_per_host=3, trap_max_urls_per_pattern=2)
    here, there = UrlLimits(config), UrlLimits(config)
    assert here.admit("http://a.example/cal/1") is None
    assert here.admit("http://a.example/cal/2") is None
    assert here.admit("http://b.example/1") is None

    there.restore("a.example", here.take("a.example"))

    assert there.admit("http://a.example/cal/3") == "trap: 2 URLs like /cal/* fetched already"
    assert there.admit("http://a.example/about") is None
    assert there.admit("http://a.example/team") == "host_budget: 3 URLs fetched from a.example"
    # What left is gone here; other servers' counts stay.
    assert here.admit("http://a.example/cal/3") is None
    assert here.take("b.example").pages == 1


def test_counts_rebuilt_from_admitted_urls_are_those_admit_would_have_made():
    urls = ["http://a.example/cal/1", "http://a.example/cal/2?x=1", "http://b.example/"]
    counts = counts_of(urls)
    assert counts["a.example"].pages == 2
    assert counts["a.example"].patterns == {"/cal/*": 1, "/cal/*?": 1}
    assert counts["b.example"].pages == 1


def test_a_server_handed_to_another_node_takes_its_counts_along(tmp_path):
    config = CrawlConfig(max_pages_per_host=5)
    host = "127.0.0.1:9"  # loopback, nothing listens: the nodes are never started anyway
    sender = CrawlerNode("node-0", "c", str(tmp_path), config, [host], [host], True, None)
    receiver = CrawlerNode("node-1", "c", str(tmp_path), config, [], [host], True, None)
    # A resumed crawl: two URLs of the server were admitted by the first run, one is queued.
    admitted = [f"http://{host}/cal/1", f"http://{host}/cal/2"]
    sender.restore([(f"http://{host}/next", 1, 1)], admitted, admitted)

    (state,) = sender.export_hosts(want_urls=10, max_urls=10)
    receiver.adopt_hosts([state])
    (back,) = receiver.export_hosts(want_urls=10, max_urls=10)

    assert state.limits.pages == back.limits.pages == 2
    assert back.limits.patterns == {"/cal/*": 2}
    assert [task[0] for task in back.tasks] == [f"http://{host}/next"]
    # Adopting a server before start() opens no connection: the coordinator restores first.
    assert sender._workers == receiver._workers == []
    sender.close()
    receiver.close()
