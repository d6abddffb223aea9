"""Incremental recrawl: what earlier nights know of each URL, and which URLs to revisit first.

A recrawl seeds every URL the earlier crawls of its deployment fetched, sends back the
validators the server gave last time (`If-None-Match`, `If-Modified-Since`), and ranks the URLs
by the probability that they changed since their last visit, so that a crawl with a page
budget spends it where the changes are.

Change rate (Cho and Garcia-Molina, "Estimating frequency of change", ACM TOIT 2003). A page is
modelled as a Poisson process of changes with rate `lambda` per night. A visit sees only
whether the page changed since the visit before (content digests differ), not how often. Over
`n` intervals between visits, `X` of which saw a change, their bias-reduced estimator is

    r = -ln((n - X + 0.5) / (n + 0.5))

changes per interval; with intervals of unequal length (a budget skips URLs some nights) we
divide by the mean interval `T / n` (`T`: nights covered). A URL with few visits borrows
strength from its server: one pseudo-interval of one night whose "changes" are the share of
intervals that saw a change on the whole server (0.5 when nothing is known), so a page never
seen changing keeps a small rate instead of zero. The revisit priority is the probability of at
least one change since the last visit, `1 - exp(-lambda * age)`, `age` in nights; URLs never
fetched get 1. Time is counted in crawls of the deployment (a nightly deployment: nights).

What "changed" means never rests on the validators alone: a 304 says "unchanged", every 200 is
compared by `content_digest`, so a server whose ETag changes on every answer, or whose
Last-Modified never changes, still has its changes caught (it costs a full download).
"""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

import duckdb

from storage.manifest import Manifest

NEW_URL_PRIORITY = 1.0
RANKING_POLICIES = ("quality", "capability")  # the policies that rank URLs by their score
PRIOR_CHANGE_SHARE = 0.5  # a server with no intervals observed yet


class RecrawlError(ValueError):
    """`since` names no earlier crawl in the output root; the message is one line."""


def start_urls(
    seeds: list[str],
    revisits: Revisits | None,
    max_pages: int | None = None,
    policy: str = "capability",
) -> list[str]:
    """A crawl's start: the seeds, and in a recrawl the known URLs after them, breadth-first
    (the FIFO policies keep this order; the others rank by revisit priority). With a page
    budget, only `max_pages` known URLs: those of highest priority under the policies that
    rank URLs (the budget goes to the likeliest changes on every server, instead of being
    split by how fast each server answers), else the first breadth-first."""
    if revisits is None:
        return seeds
    given = set(seeds)
    known = [url for url in revisits.order if url not in given]
    if max_pages is not None:
        if policy in RANKING_POLICIES:
            known.sort(key=lambda url: -revisits.priority(url))  # stable: ties breadth-first
        known = known[:max_pages]
    return seeds + known


def change_rate(intervals: int, changes: float, nights: float) -> float:
    """Cho and Garcia-Molina's bias-reduced estimate, in changes per night."""
    if intervals <= 0 or nights <= 0:
        return 0.0
    per_interval = -math.log((intervals - changes + 0.5) / (intervals + 0.5))
    return per_interval * intervals / nights


@dataclass(slots=True)
class Visits:
    """One URL's record over the earlier crawls of its deployment."""

    depth: int
    first_seen: datetime
    last_index: int = -1  # crawl index of the last visit; -1: never fetched
    digest: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    fetch_time: datetime | None = None  # of the last visit
    intervals: int = 0
    changes: int = 0
    nights: int = 0

    def visit(self, index: int, digest: str | None, fetch_time: datetime) -> None:
        if self.last_index >= 0:
            self.intervals += 1
            self.nights += index - self.last_index
            self.changes += digest != self.digest
        self.last_index, self.digest, self.fetch_time = index, digest, fetch_time


@dataclass(slots=True)
class KnownUrl:
    depth: int
    digest: str | None
    etag: str | None
    last_modified: str | None
    fetch_time: datetime | None
    priority: float


@dataclass
class Revisits:
    """What a recrawl sends the nodes: per URL, its validators, last digest and priority."""

    since: str
    urls: dict[str, KnownUrl] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # breadth-first: depth, then first seen

    def known(self, url: str) -> KnownUrl | None:
        return self.urls.get(url)

    def priority(self, url: str) -> float:
        known = self.urls.get(url)
        return NEW_URL_PRIORITY if known is None else known.priority

    def changed_since(self, url: str, lastmod: datetime | None) -> bool:
        """A sitemap's `lastmod` newer than what the last visit saw: the `Last-Modified` it
        got, else its fetch time."""
        known = self.urls.get(url)
        if known is None or lastmod is None:
            return False
        seen = known.fetch_time
        if known.last_modified:
            with contextlib.suppress(TypeError, ValueError):  # a malformed date: the fetch time
                seen = parsedate_to_datetime(known.last_modified)
        return seen is not None and lastmod > seen

    def conditional_headers(self, url: str) -> dict[str, str]:
        known = self.urls.get(url)
        headers: dict[str, str] = {}
        if known is not None and known.digest is not None:
            if known.etag:
                headers["If-None-Match"] = known.etag
            if known.last_modified:
                headers["If-Modified-Since"] = known.last_modified
        return headers


def plan_revisits(history: dict[str, Visits], crawls: int, since: str) -> Revisits:
    """Rank the URLs of `history` (gathered over `crawls` earlier crawls) for crawl number
    `crawls` (0-based) of the deployment."""
    per_host: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for url, visits in history.items():
        tally = per_host[url.split("/", 3)[2]]
        tally[0] += visits.intervals
        tally[1] += visits.changes
    overall = [sum(t[0] for t in per_host.values()), sum(t[1] for t in per_host.values())]
    revisits = Revisits(since)
    for url, visits in history.items():
        if visits.last_index < 0:
            priority = NEW_URL_PRIORITY
        else:
            intervals, changed = per_host[url.split("/", 3)[2]]
            if not intervals:
                intervals, changed = overall
            share = changed / intervals if intervals else PRIOR_CHANGE_SHARE
            rate = change_rate(visits.intervals + 1, visits.changes + share, visits.nights + 1)
            priority = 1.0 - math.exp(-rate * (crawls - visits.last_index))
        revisits.urls[url] = KnownUrl(
            visits.depth,
            visits.digest,
            visits.etag,
            visits.last_modified,
            visits.fetch_time,
            priority,
        )
    revisits.order = sorted(history, key=lambda u: (history[u].depth, history[u].first_seen))
    return revisits


def read_history(out_dir: Path, chain: list[Manifest]) -> dict[str, Visits]:
    """Every URL the crawls of `chain` (oldest first) discovered (links, redirects, sitemap
    entries: not robots.txt or sitemap files), with its visits: per crawl, its last HTTP
    answer (a 304 row carries the digest it confirms)."""
    history: dict[str, Visits] = {}
    discovered_urls: set[str] = set()
    con = duckdb.connect()
    for index, manifest in enumerate(chain):
        crawl_dir = out_dir / manifest.crawl_id
        fetches = sorted(str(p) for p in (crawl_dir / "fetches").glob("*.parquet"))
        if fetches:
            columns = {
                row[0]
                for row in con.execute(
                    "DESCRIBE SELECT * FROM read_parquet(?, union_by_name = true)", [fetches]
                ).fetchall()
            }
            validators = ", ".join(
                name if name in columns else f"NULL AS {name}" for name in ("etag", "last_modified")
            )
            rows = con.execute(
                f"SELECT url, depth, fetch_time, content_digest, {validators} "
                "FROM read_parquet(?, union_by_name = true) "
                "WHERE error IS NULL AND fetch_status IS NOT NULL "
                "QUALIFY row_number() OVER (PARTITION BY url ORDER BY fetch_time DESC) = 1 "
                "ORDER BY fetch_time",
                [fetches],
            ).fetchall()
            for url, depth, fetch_time, digest, etag, last_modified in rows:
                visits = history.get(url)
                if visits is None:
                    visits = history[url] = Visits(depth, fetch_time)
                visits.depth = min(visits.depth, depth)
                visits.visit(index, digest, fetch_time)
                visits.etag, visits.last_modified = etag, last_modified
        discovered = sorted(str(p) for p in (crawl_dir / "discovered").glob("*.parquet"))
        if discovered:
            for url, depth in con.execute(
                "SELECT url, min(depth) FROM read_parquet(?) GROUP BY url ORDER BY 2, 1",
                [discovered],
            ).fetchall():
                discovered_urls.add(url)
                if url not in history:
                    history[url] = Visits(depth, datetime.max.replace(tzinfo=UTC))
    return {url: visits for url, visits in history.items() if url in discovered_urls}
