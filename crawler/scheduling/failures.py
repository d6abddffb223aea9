"""Whose failure is it, the server's or one URL's? A server's recent answers decide, and what
its failures cost is kept, so that a slow failure costs its own URL and not the server.

A 429 or 503 on a server whose other URLs are answered at once is that URL's problem (a page
that is rate-limited or broken on its own), not the server asking to be left alone; a timeout
on a server whose other URLs are fast is that URL hanging. The node then does not pause the
server (a Retry-After holds only that URL; the rate controller still slows on a 429/503, not
on a URL's own timeout) and puts the URL's retry behind the server's new URLs. The retry of
any slow failure (a timeout, a reset) waits behind them too, and a URL that timed out gets
half the time its last try took (at least the connect timeout). When every URL fails alike,
the failure is the server's, and the usual pause (Retry-After, backoff) holds the whole
server: a server that answers 429 to everything is left alone as long as it asks (up to
`retry_after_max_s`).

The time a server's failed requests take is counted; past `failure_budget_s` (plus a tenth of
the time its answers took, so a big server's rare timeouts never add up to it) the server's
failing URLs are not tried again (each gets its row saying so) and its new URLs get a quarter
of the fetch time limit: a server of hanging URLs cannot hold a connection for hours.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from errors import ErrorClass, FetchError

# The answers to other URLs that decide (the last few, so the verdict follows a change).
RECENT_ANSWERS = 3
# Answers to other URLs that must have been fine, the latest among them, for a failure to be
# the URL's own.
FINE_NEEDED = 2
# Fetch failures without a (complete) answer: a time limit, a connection refused, or one that
# broke off after the request.
SLOW_ERRORS = frozenset(
    {
        ErrorClass.CONNECT_TIMEOUT,
        ErrorClass.CONNECTION_REFUSED,
        ErrorClass.READ_TIMEOUT,
        ErrorClass.FETCH_TIMEOUT,
        ErrorClass.CONNECTION_ERROR,
    }
)
TIMEOUTS = frozenset(
    {ErrorClass.CONNECT_TIMEOUT, ErrorClass.READ_TIMEOUT, ErrorClass.FETCH_TIMEOUT}
)
PUSHBACK_STATUSES = frozenset({429, 503})
# The share of the time a server's answers took that its failures may take besides the budget.
ANSWERED_SHARE = 0.1
# Once a server's failure budget is spent, its new URLs get this share of the fetch time limit.
SPENT_TIME_SHARE = 0.25


def is_slow(error: FetchError | None) -> bool:
    """No complete answer: whatever status came before, the time went to a failure."""
    return error is not None and error.kind in SLOW_ERRORS


def is_failure(status: int | None, error: FetchError | None) -> bool:
    """A slow failure, pushback (429/503) or a server error (5xx): what counts against a
    server. A 404 is an answer, not a failure of the server."""
    if is_slow(error):
        return True
    return status is not None and (status in PUSHBACK_STATUSES or status >= 500)


@dataclass
class FailureLedger:
    """One server's recent answers and what its failures cost; it travels with the server."""

    recent: deque[tuple[str, bool]] = field(default_factory=lambda: deque(maxlen=8))
    failure_s: float = 0.0  # seconds its failed requests took, in all
    answered_s: float = 0.0  # seconds its other requests took
    # Of each URL timing out now, the seconds its last timeout took.
    timed_out: dict[str, float] = field(default_factory=dict)

    def about_url(self, url: str) -> bool:
        """Whether a failure of `url` now would be its own: of the server's last answers to
        other URLs, the latest and at least `FINE_NEEDED` of `RECENT_ANSWERS` were fine."""
        others = [failed for other, failed in reversed(self.recent) if other != url]
        others = others[:RECENT_ANSWERS]
        return bool(others) and not others[0] and others.count(False) >= FINE_NEEDED

    def record(
        self,
        url: str,
        status: int | None,
        error: FetchError | None,
        seconds: float,
        budget_s: float,
    ) -> bool:
        """An answer to `url` that took `seconds`. True when this failure spent the budget
        (the server's failing URLs are then given up)."""
        failed = is_failure(status, error)
        self.recent.append((url, failed))
        if not failed:
            self.answered_s += seconds
            self.timed_out.pop(url, None)
            return False
        if error is not None and error.kind in TIMEOUTS:
            self.timed_out[url] = seconds
        spent_before = self.spent(budget_s)
        self.failure_s += seconds
        return self.spent(budget_s) and not spent_before

    def spent(self, budget_s: float) -> bool:
        return self.failure_s >= budget_s + ANSWERED_SHARE * self.answered_s

    def time_limit(
        self, url: str, fetch_timeout_s: float, floor_s: float, budget_s: float
    ) -> float:
        """The fetch time limit for the next try of `url`: half what its last timeout took,
        and a quarter of the fetch time limit for any URL once the budget is spent; never
        below `floor_s` (the connect timeout: a try must be able to succeed)."""
        limit = fetch_timeout_s
        last = self.timed_out.get(url)
        if last is not None:
            limit = min(limit, last / 2)
        if self.spent(budget_s):
            limit = min(limit, fetch_timeout_s * SPENT_TIME_SHARE)
        return min(fetch_timeout_s, max(limit, floor_s))

    def budget_reason(self, budget_s: float) -> str:
        budget = budget_s + ANSWERED_SHARE * self.answered_s
        return f"the server's failures took {self.failure_s:.0f} s, its budget is {budget:.0f} s"
