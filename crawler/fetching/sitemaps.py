"""Sitemaps: the `Sitemap:` lines of robots.txt, else `/sitemap.xml`, read with
ultimate-sitemap-parser (usp) through the node's own fetch.

usp parses sitemaps, sitemap indexes, gzip and the text and feed forms, and follows an index
to its children. It fetches through a web client we give it, so every request goes through
the node's keep-alive session of the server (the address guard's pinned address, the size and
time limits, the WARC and the `fetches` rows), never through usp's own HTTP client. Only the
server's own sitemaps are read (a sitemap on another server is not fetched), at most
`MAX_SITEMAP_FILES` files per server per crawl, so an index cannot make the crawler fetch
without end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from usp.fetch_parse import SitemapFetcher
from usp.web_client.abstract_client import (
    AbstractWebClient,
    AbstractWebClientResponse,
    AbstractWebClientSuccessResponse,
    WebClientErrorResponse,
)

from crawler.fetching.fetcher import FetchResult
from crawler.scope.urls import host_key

MAX_SITEMAP_FILES = 20
WELL_KNOWN = "/sitemap.xml"
# usp logs every fetch at INFO and every failed one (a 404 for a missing /sitemap.xml) at
# WARNING; the node records each fetch in `fetches` anyway.
logging.getLogger("usp").setLevel(logging.ERROR)


@dataclass(frozen=True)
class SitemapEntry:
    url: str
    lastmod: datetime | None  # UTC


def sitemap_urls(origin: str, robots_sitemaps: list[str]) -> list[str]:
    """Where a server's sitemaps are: its robots.txt's `Sitemap:` lines on the server itself,
    else the well-known `/sitemap.xml`."""
    host = host_key(origin)
    own = [url for url in robots_sitemaps if host_key(url) == host]
    return own or [origin + WELL_KNOWN]


class _Answer(AbstractWebClientSuccessResponse):
    def __init__(self, result: FetchResult) -> None:
        self._result = result

    def status_code(self) -> int:
        return self._result.status or 0

    def status_message(self) -> str:
        return "OK"

    def header(self, case_insensitive_name: str) -> str | None:
        return self._result.headers.get(case_insensitive_name.lower())

    def raw_data(self) -> bytes:
        return self._result.body

    def url(self) -> str:
        return self._result.url


class _ServerClient(AbstractWebClient):
    """usp's web client for one server: the node's fetch, within the file limit."""

    def __init__(self, host: str, fetch: Callable[[str], FetchResult]) -> None:
        self._host = host
        self._fetch = fetch
        self.files = 0

    def set_max_response_data_length(self, max_response_data_length: int | None) -> None:
        pass  # the fetcher's own body limits apply

    def get(self, url: str) -> AbstractWebClientResponse:
        if host_key(url) != self._host:
            return WebClientErrorResponse("a sitemap on another server: not fetched", False)
        if self.files >= MAX_SITEMAP_FILES:
            return WebClientErrorResponse("sitemap file limit reached", False)
        self.files += 1
        result = self._fetch(url)
        if result.status != 200 or result.error is not None:
            return WebClientErrorResponse(f"{result.error or result.status}", False)
        return _Answer(result)


def read_sitemaps(
    host: str, urls: list[str], fetch: Callable[[str], FetchResult]
) -> list[SitemapEntry]:
    """The pages the sitemaps at `urls` list, each once, with its newest `lastmod`."""
    client = _ServerClient(host, fetch)
    entries: dict[str, datetime | None] = {}
    for url in urls:
        tree = SitemapFetcher(url, recursion_level=0, web_client=client, quiet_404=True).sitemap()
        for page in tree.all_pages():
            lastmod = page.last_modified
            if lastmod is not None and lastmod.tzinfo is None:
                lastmod = lastmod.replace(tzinfo=UTC)
            known = entries.get(page.url)
            entries[page.url] = lastmod if known is None or (lastmod and lastmod > known) else known
    return [SitemapEntry(url, lastmod) for url, lastmod in entries.items()]
