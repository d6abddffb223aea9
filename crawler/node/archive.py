"""What the node archives of a fetch: the WARC exchange of a FetchResult (storage/warc.py)."""

from __future__ import annotations

from datetime import datetime

from crawler.fetching.fetcher import FetchResult
from crawler.scheduling.recrawl import KnownUrl
from errors import ErrorClass
from storage.warc import Exchange

# Error classes of an answer whose body the crawler cut off, as WARC-Truncated reasons.
_TRUNCATED = {
    ErrorClass.BODY_TOO_LARGE: "length",
    ErrorClass.DECODED_TOO_LARGE: "length",
    ErrorClass.FETCH_TIMEOUT: "time",
    ErrorClass.READ_TIMEOUT: "time",
    ErrorClass.CONNECTION_ERROR: "disconnect",
}


def truncation(result: FetchResult) -> str | None:
    """Why the body is cut short, as WARC-Truncated (and Common Crawl's `content_truncated`)
    says it: length, time, disconnect, unspecified; None for a whole body."""
    if result.error is None or result.status is None:
        return None
    return _TRUNCATED.get(result.error.kind, "unspecified" if result.cut_short else None)


def exchange_of(result: FetchResult, date: datetime, earlier: KnownUrl | None) -> Exchange | None:
    """The exchange to archive, or None when no HTTP answer arrived. `earlier`: the capture a
    304 confirms."""
    if result.status is None:
        return None
    truncated = truncation(result)
    confirmed = earlier if result.not_modified else None  # the capture a 304 stands for
    return Exchange(
        url=result.url,
        date=date,
        status=result.status,
        request_headers=result.request_headers,
        response_headers=result.headers,
        body=result.body,
        truncated=truncated,
        ip_address=result.ip_address,
        refers_to_date=confirmed.fetch_time if confirmed is not None else None,
        refers_to_digest=confirmed.digest if confirmed is not None else None,
    )
