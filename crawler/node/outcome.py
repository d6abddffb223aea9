"""What a fetch comes to: a pure function from its result to the node's next steps.

Retry it later, give it up, follow its redirect, or keep its page and links; and whether the
connection stays open. No clock, no server, no shared state: the retry policy's answer comes
in as an argument (`retry_in`), and the node applies the outcome (crawler/node/fetchloop.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.fetching.fetcher import FetchResult
from crawler.fetching.links import ParsedPage, parse_html
from errors import ErrorClass, FetchError, is_retryable

DEAD_LINK_STATUSES = (404, 410)


@dataclass(frozen=True)
class Outcome:
    error: FetchError | None  # what the fetches row says (given up, too many redirects...)
    retry_in: float | None = None  # seconds until the next try; None: this try was the last
    # Whether the URL counts as a failure of its URL family (crawler.scope.limits); None while a
    # retry is to come.
    failed: bool | None = None
    # A redirect's Location or a meta refresh's URL, to queue one redirect further.
    follow: str | None = None
    page: ParsedPage | None = None  # a fetched HTML page: its title and canonical links
    keep_connection: bool = False


def outcome_of(
    result: FetchResult,
    attempt: int,
    retry_in: float | None,
    hops: int,
    max_redirects: int,
    given_up: str | None = None,
) -> Outcome:
    """`attempt`: which try of the URL this was; `retry_in`: the retry policy's answer for it;
    `hops`: redirects in a row that led to the URL; `given_up`: why a retryable failure is not
    tried again before its tries are used up (crawler/scheduling/failures.py)."""
    if retry_in is not None:
        # The URL waits; the server's own pause (Retry-After, a run of failures) is the rate
        # controller's business. The connection ends: the server pushed back.
        return Outcome(result.error, retry_in=retry_in)
    error = result.error
    if is_retryable(result.status, error):
        # The last try of a URL that kept failing: the row says it was given up.
        detail = f"{error or result.status} after {attempt} tries"
        error = FetchError(ErrorClass.GAVE_UP, f"{detail}; {given_up}" if given_up else detail)
    # A dead link, or no answer at all (given up): what a run of dead URLs gives.
    failed = (
        result.status in DEAD_LINK_STATUSES
        or (result.status is None and error is not None)
        or (error is not None and error.kind is ErrorClass.GAVE_UP)
    )
    keep = result.headers.get("connection", "").lower() != "close"
    if result.status is not None and 300 <= result.status < 400:
        location = result.headers.get("location")
        if location and hops >= max_redirects:
            error = FetchError(
                ErrorClass.TOO_MANY_REDIRECTS, f"{hops} in a row, not to {location[:200]}"
            )
            return Outcome(error, failed=failed, keep_connection=keep)
        return Outcome(error, failed=failed, follow=location or None, keep_connection=keep)
    if result.status == 200 and error is None and result.is_html:
        body, encoding = result.html_source()
        page = parse_html(body, result.url, encoding, result.headers.get("x-robots-tag"))
        refresh = page.head.meta_refresh
        if refresh is not None and refresh != result.url:
            # A meta refresh is followed as a redirect is, within the same limit.
            if hops >= max_redirects:
                error = FetchError(
                    ErrorClass.TOO_MANY_REDIRECTS, f"{hops} in a row, not to {refresh[:200]}"
                )
                return Outcome(error, failed=failed, page=page, keep_connection=keep)
            return Outcome(None, failed=failed, follow=refresh, page=page, keep_connection=keep)
        return Outcome(None, failed=failed, page=page, keep_connection=keep)
    return Outcome(error, failed=failed, keep_connection=keep)
