"""Unit tests of crawler.fetching.politeness: pure functions, no clock, no network."""

from __future__ import annotations

import random
from email.utils import formatdate

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.config import ConfigError, config_from_dict
from crawler.fetching.headers import parse_retry_after
from crawler.fetching.politeness import (
    Backoff,
    RetryPolicy,
    RetrySettings,
    RobotsRules,
    is_retryable,
)

NOW_WALL = 1_700_000_000.0


# ---- Retry-After -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120.0), ("  5 ", 5.0), ("0", 0.0), ("1.5", 1.5), ("99999", 300.0)],
)
def test_retry_after_seconds_form(value: str, expected: float) -> None:
    assert parse_retry_after(value, NOW_WALL, max_s=300.0) == expected


def test_retry_after_http_date_form() -> None:
    future = formatdate(NOW_WALL + 42, usegmt=True)  # "Tue, 14 Nov 2023 22:14:02 GMT"
    assert parse_retry_after(future, NOW_WALL, max_s=300.0) == pytest.approx(42.0)
    far = formatdate(NOW_WALL + 86_400, usegmt=True)
    assert parse_retry_after(far, NOW_WALL, max_s=300.0) == 300.0


def test_retry_after_past_date_means_now() -> None:
    past = formatdate(NOW_WALL - 3600, usegmt=True)
    assert parse_retry_after(past, NOW_WALL, max_s=300.0) == 0.0


def test_retry_after_naive_date_is_gmt() -> None:
    # formatdate without usegmt writes "-0000" (zone unknown), which parses as a naive time;
    # RFC 9110 dates are GMT, so it is read as GMT.
    value = formatdate(NOW_WALL + 10)
    assert value.endswith("-0000")
    assert parse_retry_after(value, NOW_WALL, max_s=300.0) == pytest.approx(10.0)


@pytest.mark.parametrize(
    "value", [None, "", "   ", "soon", "-5", "nan", "inf", "1e3", "1_000", "+5", "3 s"]
)
def test_retry_after_garbage_is_none(value: str | None) -> None:
    assert parse_retry_after(value, NOW_WALL, max_s=300.0) is None


@given(st.text(max_size=40))
def test_retry_after_never_raises_and_stays_in_range(value: str) -> None:
    result = parse_retry_after(value, NOW_WALL, max_s=60.0)
    assert result is None or 0.0 <= result <= 60.0


# ---- Backoff ---------------------------------------------------------------------------------


def test_backoff_without_rng_is_the_exponential_ceiling() -> None:
    backoff = Backoff(base_s=1.0, cap_s=10.0)
    assert [backoff.delay(k) for k in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.delay(10_000) == 10.0  # no overflow on absurd attempt numbers


def test_backoff_full_jitter_is_seeded_and_bounded() -> None:
    first = Backoff(0.5, 30.0, random.Random(7))
    second = Backoff(0.5, 30.0, random.Random(7))
    delays = [first.delay(k) for k in range(1, 12)]
    assert delays == [second.delay(k) for k in range(1, 12)]
    for attempt, delay in enumerate(delays, start=1):
        assert 0.0 <= delay <= min(30.0, 0.5 * 2 ** (attempt - 1))
    # Full jitter spreads over the whole window rather than clustering at its top.
    many = [Backoff(1.0, 64.0, random.Random(s)).delay(7) for s in range(200)]
    assert min(many) < 16.0 < 48.0 < max(many)


@pytest.mark.parametrize(("base", "cap"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 5.0)])
def test_backoff_rejects_bad_parameters(base: float, cap: float) -> None:
    with pytest.raises(ValueError):
        Backoff(base, cap)


# ---- retry policy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "retry"),
    [
        (429, None, True),
        (503, None, True),
        (500, None, True),
        (502, None, True),
        (504, None, True),
        (408, None, True),
        (None, "read_timeout: HTTPConnectionPool read timed out", True),
        (None, "connect_timeout: ...", True),
        (None, "connection_error: reset by peer", True),
        (None, None, True),
        (200, "connection_error: dropped mid-body", True),
        (None, "invalid_url: bad host", False),
        (200, "body_too_large: more than 10 bytes", False),
        (200, None, False),
        (301, None, False),
        (404, None, False),
        (501, None, False),
    ],
)
def test_what_is_retryable(status: int | None, error: str | None, retry: bool) -> None:
    assert is_retryable(status, error) is retry


def retry_policy(rng: random.Random | None = None, **settings: float) -> RetryPolicy:
    return RetryPolicy(RetrySettings.model_validate(settings), rng)


def test_retry_policy_gives_up_after_max_retries() -> None:
    policy = retry_policy(max_retries=3, backoff_base_s=1.0, backoff_cap_s=60.0)
    decisions = [policy.decide(attempt, 503) for attempt in range(1, 6)]
    assert [d.retry for d in decisions] == [True, True, True, False, False]
    assert policy.retry_delay(4, 503) is None
    assert retry_policy(max_retries=0).retry_delay(1, 503) is None


def test_retry_policy_prefers_retry_after_clamped_where_it_is_read() -> None:
    policy = retry_policy(max_retries=3)
    assert policy.retry_delay(1, 429, None, 7.0) == 7.0
    assert policy.retry_delay(1, 429, None, parse_retry_after("900", NOW_WALL, 30.0)) == 30.0
    assert policy.retry_delay(1, 404, None, 7.0) is None  # Retry-After alone is no reason


def test_retry_policy_from_config() -> None:
    config = config_from_dict({"retry": {"max_retries": 1, "retry_after_max_s": 10.0}})
    policy = RetryPolicy(config.retry, random.Random(1))
    retry_after = parse_retry_after("99", NOW_WALL, config.retry.retry_after_max_s)
    assert policy.retry_delay(1, 429, None, retry_after) == 10.0
    assert policy.retry_delay(2, 429, None, 1.0) is None


def test_retry_policy_backoff_is_jittered_within_the_exponential_window() -> None:
    policy = retry_policy(random.Random(3), max_retries=5, backoff_base_s=2.0, backoff_cap_s=10.0)
    for attempt in range(1, 6):
        delay = policy.retry_delay(attempt, None, "read_timeout: x")
        assert delay is not None
        assert 0.0 <= delay <= min(10.0, 2.0 * 2 ** (attempt - 1))


def test_retry_policy_default_rng_is_reproducible() -> None:
    first = [retry_policy().retry_delay(k, 500) for k in (1, 2, 3)]
    assert first == [retry_policy().retry_delay(k, 500) for k in (1, 2, 3)]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"max_retries": True}, "retry.max_retries: Input should be a valid integer"),
        ({"max_retries": 2.5}, "retry.max_retries: Input should be a valid integer"),
        ({"max_retries": -1}, "retry.max_retries: Input should be greater than or equal to 0"),
        ({"retry_after_max_s": 0}, "retry.retry_after_max_s: Input should be greater than 0"),
        ({"backoff_base_s": 9, "backoff_cap_s": 8}, "need backoff_base_s <= backoff_cap_s"),
        ({"retries": 3}, "unknown key retry.retries (did you mean max_retries?)"),
    ],
)
def test_retry_settings_reject_bad_input_with_one_line(data: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"retry": data})
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


# ---- robots.txt ------------------------------------------------------------------------------

ROBOTS = """
User-agent: *
Disallow: /private/
Crawl-delay: 2

User-agent: slowbot
Disallow: /
Request-rate: 1/10
"""


def test_robots_rules_from_text() -> None:
    rules = RobotsRules.from_text(ROBOTS)
    assert rules.allowed("http://h.test/page", "crawlflow/0.1")
    assert not rules.allowed("http://h.test/private/x", "crawlflow/0.1")
    assert not rules.allowed("http://h.test/page", "slowbot")
    assert rules.crawl_delay("crawlflow/0.1") == 2.0
    # Request-rate 1 per 10 s is a 10 s delay.
    assert rules.crawl_delay("slowbot") == 10.0
    assert not rules.is_unreachable


def test_robots_without_delay_has_none() -> None:
    assert RobotsRules.from_text("User-agent: *\nDisallow: /x\n").crawl_delay("a") is None


def test_robots_crawl_delay_takes_the_longer_of_delay_and_rate() -> None:
    rules = RobotsRules.from_text("User-agent: *\nCrawl-delay: 3\nRequest-rate: 1/2\n")
    assert rules.crawl_delay("a") == 3.0


def test_robots_missing_allows_all() -> None:
    rules = RobotsRules.allow_all()
    assert rules.allowed("http://h.test/private/x", "a")
    assert rules.crawl_delay("a") is None


@pytest.mark.parametrize(
    "garbage",
    ["<html><body>Oops</body></html>", "\x00\xff\xfe binary {]", "Disallow /no-colon\n:::\n"],
)
def test_robots_garbage_allows_all(garbage: str) -> None:
    rules = RobotsRules.from_text(garbage)
    assert rules.allowed("http://h.test/anything", "a")
    assert rules.crawl_delay("a") is None


def test_robots_unreachable_disallows_all_until_refetched() -> None:
    rules = RobotsRules.unreachable(now=100.0, retry_in_s=30.0)
    assert rules.is_unreachable
    assert not rules.allowed("http://h.test/", "a")
    assert rules.retry_at == 130.0
    assert rules.crawl_delay("a") is None


@pytest.mark.parametrize(
    ("status", "allowed_private", "unreachable"),
    [
        (200, False, False),
        (404, True, False),
        (410, True, False),
        (403, True, False),
        (301, True, False),
        (429, False, True),
        (500, False, True),
        (503, False, True),
        (None, False, True),
    ],
)
def test_robots_from_response(status: int | None, allowed_private: bool, unreachable: bool) -> None:
    rules = RobotsRules.from_response(status, ROBOTS, now=0.0, retry_in_s=60.0)
    assert rules.allowed("http://h.test/private/x", "a") is allowed_private
    assert rules.is_unreachable is unreachable
    assert rules.allowed("http://h.test/ok", "a") is not unreachable


def test_robots_text_past_500_kib_is_ignored() -> None:
    padding = "# " + "x" * 1000 + "\n"
    text = "User-agent: *\n" + padding * 600 + "Disallow: /late/\n"
    assert RobotsRules.from_text(text).allowed("http://h.test/late/x", "a")
