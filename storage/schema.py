"""Parquet schemas of the crawl output: the stable, documented column names.

Column names follow Common Crawl's columnar URL index (cc-index-table) where it has the same
thing (`url`, `url_surtkey`, `url_host_name`, `url_host_tld`, `url_host_registered_domain`,
`url_protocol`, `url_port`, `url_path`, `url_query`, `fetch_time`, `fetch_status`,
`fetch_redirect`, `content_mime_type`, `content_mime_detected`, `content_charset`,
`content_languages`, `content_truncated`, `content_length`, `content_digest`,
`warc_filename`, `warc_record_offset`, `warc_record_length`, `warc_record_id`).
`url_host_name` is the host without the port, as there; the server (`host[:port]`, what
`url_host_name` held before) is `url_server`.
"""

from __future__ import annotations

from datetime import datetime
from typing import NotRequired, TypedDict

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")


def _schema(columns: list[tuple[str, pa.DataType]]) -> pa.Schema:
    # pa.schema takes a union of column forms, against which mypy cannot type a list literal.
    return pa.schema(columns)


FETCHES = _schema(
    [
        ("crawl_id", pa.string()),
        ("url", pa.string()),
        ("url_host_name", pa.string()),
        ("url_path", pa.string()),
        ("fetch_time", TIMESTAMP),
        ("fetch_status", pa.int32()),  # null when no HTTP response arrived
        ("fetch_redirect", pa.string()),  # Location of a 3xx
        ("error", pa.string()),  # null on an HTTP response; else "class: detail"
        ("content_mime_type", pa.string()),
        ("content_charset", pa.string()),
        ("content_length", pa.int64()),  # bytes of body received
        ("content_digest", pa.string()),  # SHA-1 of the body, base32, as Common Crawl
        ("rtt_ms", pa.float64()),  # request sent to response headers received
        # The TCP handshake's round trip as the kernel timed it, when this request opened its
        # connection (the handshake is in rtt_ms too): the network's round trip, which a
        # server's load does not stretch.
        ("connect_ms", pa.float64()),
        ("node_id", pa.string()),
        ("depth", pa.int32()),
        ("attempt", pa.int32()),  # 1 for the first try of a URL, 2 for its first retry...
        # Validators the server sent (a 304 that sends none keeps the earlier ones): what the
        # next night's conditional GET sends back (crawler/scheduling/recrawl.py).
        ("etag", pa.string()),
        ("last_modified", pa.string()),
        # Where the response (or 304 revisit) record is, as Common Crawl's index says it.
        ("warc_filename", pa.string()),  # relative to the crawl directory
        ("warc_record_offset", pa.int64()),
        ("warc_record_length", pa.int64()),
        # Added with issue 31: Common Crawl's index columns, and the server as the crawler
        # keys it (host[:port], what url_host_name held before).
        ("url_server", pa.string()),
        ("url_surtkey", pa.string()),
        ("url_host_registered_domain", pa.string()),  # null for an address or a bare name
        ("url_host_tld", pa.string()),
        ("url_protocol", pa.string()),
        ("url_port", pa.int32()),  # null for the scheme's default port
        ("url_query", pa.string()),
        ("content_mime_detected", pa.string()),  # from the body's first bytes
        ("content_languages", pa.string()),  # of a page's main text, ISO 639-1, comma-separated
        ("content_truncated", pa.string()),  # length, time, disconnect: why the body is cut
        ("warc_record_id", pa.string()),  # WARC-Record-ID of the response or revisit record
    ]
)

HREFLANG = pa.list_(pa.struct([("lang", pa.string()), ("url", pa.string())]))

PAGES = _schema(
    [
        ("crawl_id", pa.string()),
        ("url", pa.string()),
        ("url_host_name", pa.string()),
        ("fetch_time", TIMESTAMP),
        ("content_digest", pa.string()),
        ("content_length", pa.int64()),
        ("title", pa.string()),
        ("outlink_count", pa.int32()),
        ("depth", pa.int32()),
        ("node_id", pa.string()),
        ("content", pa.large_string()),  # the body decoded as text
        # Added with issue 31 (crawler/content/): what decoded the body, its main text, and
        # what its head says.
        ("url_server", pa.string()),
        ("content_charset", pa.string()),  # the Encoding Standard's name of what decoded it
        ("content_languages", pa.string()),
        ("text", pa.large_string()),  # the main text, boilerplate removed
        ("text_simhash", pa.int64()),  # 64-bit simhash of `text` (bits as a signed integer)
        ("canonical", pa.string()),  # <link rel=canonical>, absolute
        ("meta_description", pa.string()),
        ("meta_robots", pa.string()),  # <meta name=robots> (and name=<our robot>), as written
        ("x_robots_tag", pa.string()),  # the X-Robots-Tag header
        ("noindex", pa.bool_()),  # either says noindex (or none)
        ("nofollow", pa.bool_()),  # either says nofollow (or none)
        ("hreflang", HREFLANG),  # <link rel=alternate hreflang>
        ("meta_refresh", pa.string()),  # the URL a <meta http-equiv=refresh> sends to
    ]
)

# The fields of [extract]: one row per page and field, its value or why there is none.
EXTRACTS = _schema(
    [
        ("crawl_id", pa.string()),
        ("url", pa.string()),
        ("fetch_time", TIMESTAMP),
        ("node_id", pa.string()),
        ("field", pa.string()),
        ("value", pa.large_string()),  # null when the field failed or matched nothing
        ("error", pa.string()),  # why a field has no value: "timeout: ...", "ValueError: ..."
    ]
)

METRICS = _schema(
    [
        ("crawl_id", pa.string()),
        ("node_id", pa.string()),
        ("time", TIMESTAMP),
        ("host", pa.string()),  # null for node-level rows
        ("metric", pa.string()),
        ("value", pa.float64()),
    ]
)

# URLs a node discovered (in scope, new to it) and the depth they were found at: with the
# fetches, the checkpoint a resumed crawl rebuilds its frontier from.
DISCOVERED = _schema(
    [
        ("crawl_id", pa.string()),
        ("url", pa.string()),
        ("depth", pa.int32()),
        ("node_id", pa.string()),
    ]
)

# The plan step's allocation: each solver's plan cost, which was chosen, how many nodes ran.
ALLOCATION = _schema(
    [
        ("crawl_id", pa.string()),
        ("solver", pa.string()),
        ("chosen", pa.bool_()),
        ("total_cost", pa.float64()),
        ("reserved_cost", pa.float64()),
        ("usage_cost", pa.float64()),
        ("surcharge_cost", pa.float64()),
        ("nodes", pa.int32()),
        ("solve_seconds", pa.float64()),
        ("nodes_used", pa.int32()),
    ]
)

DATASETS: dict[str, pa.Schema] = {
    "fetches": FETCHES,
    "pages": PAGES,
    "metrics": METRICS,
    "discovered": DISCOVERED,
    "allocation": ALLOCATION,
    "extracts": EXTRACTS,
}
# Written in step by each node, in this order; the last one's file commits a batch.
COMMITTED_DATASETS = ("discovered", "pages", "extracts", "fetches")


# The rows a node writes, one type per dataset, key for key its schema's columns (checked by
# tests/test_node_units.py).
class FetchRow(TypedDict):
    crawl_id: str
    url: str
    url_host_name: str
    url_path: str
    fetch_time: datetime
    fetch_status: int | None
    fetch_redirect: str | None
    error: str | None  # str(errors.FetchError)
    content_mime_type: str | None
    content_charset: str | None
    content_length: int | None
    content_digest: str | None
    rtt_ms: float | None
    connect_ms: float | None
    node_id: str
    depth: int
    attempt: int
    etag: str | None
    last_modified: str | None
    # Set by the writer when the response is archived (storage.writer.CommitGroupWriter).
    warc_filename: NotRequired[str]
    warc_record_offset: NotRequired[int]
    warc_record_length: NotRequired[int]
    url_server: str
    url_surtkey: str | None
    url_host_registered_domain: str | None
    url_host_tld: str | None
    url_protocol: str | None
    url_port: int | None
    url_query: str | None
    content_mime_detected: str | None
    content_languages: str | None
    content_truncated: str | None
    warc_record_id: NotRequired[str]  # set with the other warc_ columns


class PageRow(TypedDict):
    crawl_id: str
    url: str
    url_host_name: str
    fetch_time: datetime
    content_digest: str | None
    content_length: int
    title: str | None
    outlink_count: int
    depth: int
    node_id: str
    content: str | None  # None for a noindex page, when [content] honours it
    url_server: str
    content_charset: str
    content_languages: str | None
    text: str | None
    text_simhash: int | None
    canonical: str | None
    meta_description: str | None
    meta_robots: str | None
    x_robots_tag: str | None
    noindex: bool
    nofollow: bool
    hreflang: list[dict[str, str]]
    meta_refresh: str | None


class ExtractRow(TypedDict):
    crawl_id: str
    url: str
    fetch_time: datetime
    node_id: str
    field: str
    value: str | None
    error: str | None


class DiscoveredRow(TypedDict):
    crawl_id: str
    url: str
    depth: int
    node_id: str


class MetricRow(TypedDict):
    crawl_id: str
    node_id: str
    time: datetime
    host: str | None
    metric: str
    value: float


ROW_TYPES: dict[str, type] = {
    "fetches": FetchRow,
    "pages": PageRow,
    "discovered": DiscoveredRow,
    "metrics": MetricRow,
    "extracts": ExtractRow,
}
