"""Sitemaps: the `Sitemap:` lines of robots.txt, else `/sitemap.xml`, read with
ultimate-sitemap-parser (usp) through the node's own fetch.

usp parses sitemaps, sitemap indexes, gzip and the text and feed forms, and follows an index
to its children. It fetches through a web client we give it, so every request goes through
the node's keep-alive session of the server (the address guard's pinned address, the size and
time limits, the WARC and the `fetches` rows), never through usp's own HTTP client. Only the
server's own sitemaps are read (a sitemap on another server is not fetched), at most
`MAX_SITEMAP_FILES` files per server per crawl, so an index cannot make the crawler fetch
without end.

usp keeps every entry of every file it read as objects (about 1.6 KB and 80 us of CPU each:
a 200,000-entry sitemap cost 320 MB), so what it is given is bounded first: each file is cut
after its first `[fetch] sitemap_max_entries` entries (50,000 by default, the sitemaps
protocol's own maximum per file) and the server's files together after
`sitemap_max_entries_per_server`; a gzip file is unpacked here, within `MAX_SITEMAP_BYTES`.
usp reads a file that ends early as far as it goes (servers time out on huge sitemaps).
"""

from __future__ import annotations

import logging
import re
import zlib
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
from crawler.fetching.settings import MAX_SITEMAP_ENTRIES, MAX_SITEMAP_ENTRIES_PER_SERVER
from crawler.scope.urls import host_key

MAX_SITEMAP_FILES = 20
MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # unpacked, per file: the protocol's limit too
WELL_KNOWN = "/sitemap.xml"
# The end of an entry: a page (<url> of a sitemap, <item> of RSS, <entry> of Atom), a line of a
# text sitemap, or a child of a sitemap index (<sitemap>), each with any namespace prefix.
_PAGE_END = re.compile(rb"</(?:[\w.-]+:)?(?:url|item|entry)\s*>")
_CHILD_END = re.compile(rb"</(?:[\w.-]+:)?sitemap\s*>")
_LINE_END = re.compile(rb"\n")
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
# usp logs every fetch at INFO, every failed one (a 404 for a missing /sitemap.xml) at
# WARNING, and a file that ends early (every file cut by `bounded_sitemap`) at ERROR; the node
# records each fetch in `fetches` anyway.
logging.getLogger("usp").setLevel(logging.CRITICAL)


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


def _cut_after(data: bytes, pattern: re.Pattern[bytes], count: int) -> tuple[int, int]:
    """Where `data` ends after its first `count` matches of `pattern` (its length if it has
    fewer), and how many matches that keeps."""
    end, found = len(data), 0
    for found, match in enumerate(pattern.finditer(data), 1):
        if found == count:
            return match.end(), found
    return end, found


def bounded_sitemap(data: bytes, max_entries: int) -> tuple[bytes, int]:
    """A sitemap file as usp is given it: unpacked if gzip (at most `MAX_SITEMAP_BYTES`), and
    cut after its first `max_entries` entries and `MAX_SITEMAP_FILES` children; returns it
    and how many entries it keeps."""
    if data.startswith(_GZIP_MAGIC):
        try:
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, MAX_SITEMAP_BYTES)
        except zlib.error:
            return b"", 0
    data = data[:MAX_SITEMAP_BYTES]
    if data.removeprefix(_UTF8_BOM).lstrip()[:1] == b"<":  # usp's own test for XML
        end, entries = _cut_after(data, _PAGE_END, max_entries)
        end = min(end, _cut_after(data, _CHILD_END, MAX_SITEMAP_FILES)[0])
    else:
        end, entries = _cut_after(data, _LINE_END, max_entries)
    return data[:end], entries


class _Answer(AbstractWebClientSuccessResponse):
    """A sitemap fetched, as usp reads it: its body bounded (`bounded_sitemap`)."""

    def __init__(self, result: FetchResult, body: bytes) -> None:
        self._result = result
        self._body = body

    def status_code(self) -> int:
        return self._result.status or 0

    def status_message(self) -> str:
        return "OK"

    def header(self, case_insensitive_name: str) -> str | None:
        if case_insensitive_name.lower() == "content-type":
            return None  # unpacked already: usp must not take a gzip type as a reason to unpack
        return self._result.headers.get(case_insensitive_name.lower())

    def raw_data(self) -> bytes:
        return self._body

    def url(self) -> str:
        return self._result.url


class _ServerClient(AbstractWebClient):
    """usp's web client for one server: the node's fetch, within the file and entry limits."""

    def __init__(
        self,
        host: str,
        fetch: Callable[[str], FetchResult],
        max_entries: int,
        max_entries_per_server: int,
    ) -> None:
        self._host = host
        self._fetch = fetch
        self._max_entries = max_entries
        self.entries_left = max_entries_per_server
        self.files = 0

    def set_max_response_data_length(self, max_response_data_length: int | None) -> None:
        pass  # the fetcher's own body limits apply

    def get(self, url: str) -> AbstractWebClientResponse:
        if host_key(url) != self._host:
            return WebClientErrorResponse("a sitemap on another server: not fetched", False)
        if self.files >= MAX_SITEMAP_FILES:
            return WebClientErrorResponse("sitemap file limit reached", False)
        if self.entries_left <= 0:
            return WebClientErrorResponse("sitemap entry limit reached", False)
        self.files += 1
        result = self._fetch(url)
        if result.status != 200 or result.error is not None:
            return WebClientErrorResponse(f"{result.error or result.status}", False)
        body, entries = bounded_sitemap(result.body, min(self._max_entries, self.entries_left))
        self.entries_left -= entries
        return _Answer(result, body)


def read_sitemaps(
    host: str,
    urls: list[str],
    fetch: Callable[[str], FetchResult],
    max_entries: int = MAX_SITEMAP_ENTRIES,
    max_entries_per_server: int = MAX_SITEMAP_ENTRIES_PER_SERVER,
) -> list[SitemapEntry]:
    """The pages the sitemaps at `urls` list, each once, with its newest `lastmod`: at most
    `max_entries` of each file and `max_entries_per_server` in all, the first ones."""
    client = _ServerClient(host, fetch, max_entries, max_entries_per_server)
    entries: dict[str, datetime | None] = {}
    for url in urls:
        if client.entries_left <= 0:
            break
        tree = SitemapFetcher(url, recursion_level=0, web_client=client, quiet_404=True).sitemap()
        for page in tree.all_pages():
            lastmod = page.last_modified
            if lastmod is not None and lastmod.tzinfo is None:
                lastmod = lastmod.replace(tzinfo=UTC)
            known = entries.get(page.url)
            entries[page.url] = lastmod if known is None or (lastmod and lastmod > known) else known
    return [SitemapEntry(url, lastmod) for url, lastmod in entries.items()]
