"""The crawl's error vocabulary: the classes of the `error` column of `fetches`, the error a
fetch carries, and which statuses and errors are worth another try.

It sits at the bottom of the import graph (as httpx's `_exceptions` and Scrapy's
`exceptions` do), so that the fetcher, politeness, the limits and storage all speak it without
importing each other. The `error` column holds `str(FetchError)`: "class: detail", the class
one of `ErrorClass` (stable output: values are never renamed).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorClass(StrEnum):
    # No usable answer from the server (crawler/fetching/fetcher.py).
    CONNECT_TIMEOUT = "connect_timeout"
    CONNECTION_REFUSED = "connection_refused"  # nothing listens there (the server is down)
    READ_TIMEOUT = "read_timeout"
    CONNECTION_ERROR = "connection_error"  # reset, broken off, no route, a name lookup failing
    DECODING_ERROR = "decoding_error"
    INVALID_URL = "invalid_url"
    HTTP_ERROR = "http_error"
    FETCH_TIMEOUT = "fetch_timeout"
    BODY_TOO_LARGE = "body_too_large"
    DECODED_TOO_LARGE = "decoded_too_large"
    NOT_HTML = "not_html"
    # Decided by the node about an answer.
    TOO_MANY_REDIRECTS = "too_many_redirects"
    GAVE_UP = "gave_up"  # retried as often as allowed; the detail says what the last try got
    INTERNAL_ERROR = "internal_error"  # a bug that some answer set off, costing that URL only
    # Refused before any request (robots.txt, crawler.scope.limits, the whole server).
    ROBOTS_DISALLOWED = "robots_disallowed"
    URL_TOO_LONG = "url_too_long"
    TRAP = "trap"
    HOST_BUDGET = "host_budget"
    SKIPPED = "skipped"  # detail: `DEADLINE_DETAIL`, or `FAMILY_ERRORS_DETAIL` and the family
    ADDRESS_REFUSED = "address_refused"
    DNS_ERROR = "dns_error"  # the server's name does not resolve (crawler/scope/addresses.py)
    ROBOTS_UNAVAILABLE = "robots_unavailable"
    # A sitemap fetch not made because the node is stopping (never written as a row).
    STOPPED = "stopped"

    @classmethod
    def of(cls, error: str | None) -> ErrorClass | None:
        """The class of an `error` column value; None for no error or a class unknown here."""
        if error is None:
            return None
        try:
            return cls(error.split(":", 1)[0].strip())
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class FetchError:
    """Why a fetch gave no usable answer: a class, and a human-readable detail."""

    kind: ErrorClass
    detail: str | None = None

    def __str__(self) -> str:
        return str(self.kind) if self.detail is None else f"{self.kind}: {self.detail}"


# Statuses that say "not now" rather than "never": rate limiting (429), overload (503), and the
# transient server/gateway failures. 501 and 505 are permanent, so they are not retried.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Error classes worth another try: the request may well succeed later. Invalid URLs, redirect
# loops and oversized bodies will fail the same way.
RETRY_ERRORS = frozenset(
    {
        ErrorClass.CONNECT_TIMEOUT,
        ErrorClass.CONNECTION_REFUSED,
        ErrorClass.READ_TIMEOUT,
        ErrorClass.CONNECTION_ERROR,
    }
)
# Classes of URLs refused before any request by crawler.scope.limits; like robots.txt refusals,
# they do not spend the --max-pages budget.
REFUSALS = (ErrorClass.URL_TOO_LONG, ErrorClass.TRAP, ErrorClass.HOST_BUDGET, ErrorClass.SKIPPED)
# Classes of rows whose URL never passed the limits: refused by robots.txt or a limit, or
# failed with their whole server (its address refused, its name unknown, robots.txt
# unavailable).
NOT_ADMITTED = (
    ErrorClass.ROBOTS_DISALLOWED,
    *REFUSALS,
    ErrorClass.ADDRESS_REFUSED,
    ErrorClass.DNS_ERROR,
    ErrorClass.ROBOTS_UNAVAILABLE,
)
# The details of a `skipped` row: the crawl reached its deadline before fetching the URL (a
# resumed crawl fetches it), or its URL family kept failing (final).
DEADLINE_DETAIL = "deadline"
FAMILY_ERRORS_DETAIL = "pattern_errors"
DEADLINE = FetchError(ErrorClass.SKIPPED, DEADLINE_DETAIL)


def family_errors(family: str) -> FetchError:
    """The error of a URL skipped because its URL family kept failing."""
    return FetchError(ErrorClass.SKIPPED, f"{FAMILY_ERRORS_DETAIL}: {family[:100]}")


def internal_error(exc: Exception) -> FetchError:
    """The row of a URL whose handling met a bug: the exception, within the column's size."""
    return FetchError(ErrorClass.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:284])


def is_retryable(status: int | None, error: FetchError | str | None) -> bool:
    """Whether a failed fetch may succeed if tried again later."""
    if status is not None and status in RETRY_STATUSES:
        return True
    if error is None:
        # No status and no error class only happens for a transport failure without details.
        return status is None
    kind = error.kind if isinstance(error, FetchError) else ErrorClass.of(error)
    return kind in RETRY_ERRORS


# The detail of a `skipped` row whose URL was found while its server's or node's queue was full
# (crawler.scheduling.frontier): left for later like the deadline's, a resumed crawl fetches it.
QUEUE_FULL_DETAIL = "queue_full"
