"""Parquet schemas of the crawl output: the stable, documented column names.

Column names follow Common Crawl's columnar URL index where it has the same thing
(`url`, `url_host_name`, `url_path`, `fetch_time`, `fetch_status`, `fetch_redirect`,
`content_mime_type`, `content_charset`, `content_length`, `content_digest`).
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
    ]
)

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
}
# Written in step by each node, in this order; the last one's file commits a batch.
COMMITTED_DATASETS = ("discovered", "pages", "fetches")


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
    content: str


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
}
