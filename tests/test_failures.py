"""Whose failure it is (crawler/scheduling/failures.py), and where a server keeps the retries
of URLs that failed on their own (crawler/scheduling/server.py)."""

from __future__ import annotations

import pytest

from crawler.scheduling.failures import FailureLedger, is_failure
from crawler.scheduling.server import ServerState
from crawler.scheduling.urlqueue import UrlTask
from errors import ErrorClass, FetchError

TIMEOUT = FetchError(ErrorClass.READ_TIMEOUT, "15 s")
BUDGET_S = 100.0


def answered(ledger: FailureLedger, url: str, status: int | None, seconds: float = 0.1) -> bool:
    error = TIMEOUT if status is None else None
    return ledger.record(url, status, error, seconds, BUDGET_S)


@pytest.mark.parametrize(
    ("status", "error", "failure"),
    [(200, None, False), (404, None, False), (429, None, True), (503, None, True),
     (500, None, True), (None, TIMEOUT, True),
     (None, FetchError(ErrorClass.BODY_TOO_LARGE), False),
     (200, FetchError(ErrorClass.FETCH_TIMEOUT), True)],  # headers, then a drip
)  # fmt: skip
def test_what_counts_against_a_server(status, error, failure):
    assert is_failure(status, error) is failure


def test_a_failure_is_the_urls_own_only_while_the_other_urls_are_answered():
    ledger = FailureLedger()
    assert not ledger.about_url("/a")  # nothing known yet: the server's, to be polite
    answered(ledger, "/x", 200)
    assert not ledger.about_url("/a")  # one fine answer is not enough
    answered(ledger, "/y", 200)
    assert ledger.about_url("/a")
    answered(ledger, "/a", 429)
    answered(ledger, "/a", 429)
    assert ledger.about_url("/a")  # its own failures say nothing about the others
    answered(ledger, "/b", 429)
    assert not ledger.about_url("/c")  # the latest answer to another URL failed: the server
    answered(ledger, "/z", 200)
    assert not ledger.about_url("/c")  # of the last three others, two failed
    answered(ledger, "/w", 200)
    assert ledger.about_url("/c")


def test_slow_failures_get_half_the_time_each_and_the_budget_ends_them():
    ledger = FailureLedger()
    assert ledger.time_limit("/hang", 60.0, 5.0, BUDGET_S) == 60.0
    assert not answered(ledger, "/hang", None, 40.0)
    assert ledger.time_limit("/hang", 60.0, 5.0, BUDGET_S) == 20.0
    assert not answered(ledger, "/hang", None, 20.0)
    assert ledger.time_limit("/hang", 60.0, 5.0, BUDGET_S) == 10.0
    assert ledger.time_limit("/new", 60.0, 5.0, BUDGET_S) == 60.0
    assert answered(ledger, "/drip", None, 40.0)  # 100 s of failures: the budget is spent
    assert not answered(ledger, "/drip", None, 30.0)  # spent once, reported once
    assert ledger.time_limit("/new", 60.0, 5.0, BUDGET_S) == 15.0  # a quarter for new URLs
    assert "100 s" in ledger.budget_reason(BUDGET_S)
    answered(ledger, "/hang", 200)
    assert "/hang" not in ledger.timed_out  # answered at last: no longer failing
    answered(ledger, "/reset", 503)
    ledger.record("/reset", None, FetchError(ErrorClass.CONNECTION_ERROR), 0.01, BUDGET_S)
    assert ledger.time_limit("/reset", 60.0, 5.0, 1e9) == 60.0  # only timeouts are halved
    assert ledger.time_limit("/hang", 60.0, 5.0, BUDGET_S) == 15.0
    answered(ledger, "/hang", None, 6.0)
    assert ledger.time_limit("/hang", 60.0, 5.0, BUDGET_S) == 5.0  # never below the floor


def test_a_big_servers_answers_earn_it_failure_time():
    ledger = FailureLedger()
    for n in range(1000):
        answered(ledger, f"/p{n}", 200, 2.0)  # 2,000 s of answers: 200 s more budget
    assert not answered(ledger, "/slow", None, 250.0)
    assert answered(ledger, "/slow", None, 60.0)


def test_late_retries_wait_behind_the_new_urls():
    server = ServerState("a")
    server.retry_later(UrlTask("http://a/limited", 0, attempt=2), 0.0, late=True)
    server.retry_later(UrlTask("http://a/flaky", 0, attempt=2), 0.0)
    server.queue.push(UrlTask("http://a/new", 0))
    order = [server.next_task(1.0, new_allowed=True) for _ in range(4)]
    assert [t.url if t else None for t in order] == [
        "http://a/flaky",  # an ordinary retry that is due goes first, as before
        "http://a/new",
        "http://a/limited",
        None,
    ]
    server.retry_later(UrlTask("http://a/x", 0, attempt=2), 5.0, late=True)
    server.retry_later(UrlTask("http://a/y", 0, attempt=2), 5.0)
    assert server.pending() == 2
    assert {t.url for t in server.drain_retries()} == {"http://a/x", "http://a/y"}
    assert server.pending() == 0
