"""Incremental recrawl: what earlier nights know of each URL, and which URLs to revisit first.

A recrawl seeds every URL the earlier crawls of its deployment fetched, sends back the
validators the server gave last time (`If-None-Match`, `If-Modified-Since`), and ranks the URLs
by the probability that they changed since their last visit, so that a crawl with a page
budget spends it where the changes are.

Change rate (Cho and Garcia-Molina, "Estimating frequency of change", ACM TOIT 2003). A page is
modelled as a Poisson process of changes with rate `lambda` per night. Two estimators, by what
the server gives:

- Last-modified dates (their estimator for when the last-modified date is known), for
  servers whose `Last-Modified` can be trusted (below). The age of a page when fetched (time
  since its last change) is informative of its rate: for a Poisson process it is
  `Exp(lambda)`, so a page dated an hour before the crawl most likely changes often and one
  dated a year before rarely. Each visit gives a factor of the likelihood: the first, or one
  that saw a change (`content_digest` differs), "a change `a` nights before the fetch and none
  since" (`lambda * exp(-lambda * a)`); one that saw none, "no change over the `d` nights since
  the visit before" (`exp(-lambda * d)`). Over a page's visits that is
  `lambda^X * exp(-lambda * T)`: `X` changes detected, `T` nights known to be without a
  change. With a gamma prior from the page's server, the posterior mean is

      lambda = (m * PRIOR_NIGHTS + X) / (PRIOR_NIGHTS + T)

  `m` being the server's pooled rate (its pages' `X` over their `T`): one night at the server's
  rate, so that a single date ranks the pages of night 2 and many visits outweigh the server.
  Ages are measured on the servers' clock: the newest date a trusted server gave in the same
  crawl (on a web of thousands of pages, minutes before the crawl), so neither the crawler's
  clock nor a common offset of the servers' clocks matters; one night is a day.
- Visits and changes only (their estimator for when only the existence of a change is
  known), for every other page: over `n` intervals between
  visits, `X` of which saw a change, the bias-reduced estimate

      r = -ln((n - X + 0.5) / (n + 0.5))

  changes per interval, divided by the mean interval `T / n` (`T`: nights covered; a budget
  skips URLs some nights). The page borrows strength from its server: one pseudo-interval of
  one night whose "changes" are the share of intervals that saw a change on the whole server
  (with none seen yet, the chance of a change in one night that the dated pages show across
  the deployment, else 0.5), so a page never seen changing keeps a small rate instead of zero.

A server's dates are ignored (its pages use visit counts) when they cannot be true: no
`Last-Modified` on most answers; one date on every page (a date that never changes); most
dates at or after the fetch time (a server that stamps "now", or a clock ahead); most of the
changes seen by digest without a newer date.

The revisit priority is the probability of at least one change since the last visit,
`1 - exp(-lambda * age)`, `age` in nights; URLs never fetched get 1. Time between visits is
counted in crawls of the deployment (a nightly deployment: nights).

What "changed" means never rests on the validators alone: a 304 says "unchanged", every 200 is
compared by `content_digest`, so a server whose ETag changes on every answer, or whose
Last-Modified never changes, still has its changes caught (it costs a full download).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import duckdb

from crawler.fetching.headers import parse_http_date
from crawler.scope.urls import server_of
from storage.files import parquet_files
from storage.manifest import Manifest

NEW_URL_PRIORITY = 1.0
RANKING_POLICIES = ("quality", "capability")  # the policies that rank URLs by their score
PRIOR_CHANGE_SHARE = 0.5  # a server with no intervals observed yet, on a web with no dates
PRIOR_NIGHTS = 1.0  # weight of the server's rate in a dated page's estimate
NIGHT_S = 86_400.0
STAMPED_NOW_S = 60.0  # a Last-Modified this close to the fetch time is the server's "now"


class RecrawlError(ValueError):
    """`since` names no earlier crawl in the output root; the message is one line."""


def require_earlier_crawl(out_dir: Path, since: str) -> None:
    """Raise RecrawlError unless `out_dir/since` holds a crawl's output."""
    if not (out_dir / since / "fetches").is_dir():
        raise RecrawlError(f"--since {since}: no crawl output in {out_dir / since}")


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


def start_depths(seeds: list[str], revisits: Revisits | None) -> dict[str, int]:
    """The depth each known URL of a recrawl starts at: the one the earlier crawls found it at,
    so `--max-depth` and `max_depth_per_host` count from the seeds night after night instead of
    again from every revisited URL. This crawl's own seeds start at 0; absent URLs too."""
    if revisits is None:
        return {}
    given = set(seeds)
    return {
        url: known.depth
        for url, known in revisits.urls.items()
        if known.depth > 0 and url not in given
    }


def change_rate(intervals: int, changes: float, nights: float) -> float:
    """Cho and Garcia-Molina's bias-reduced estimate, in changes per night."""
    if intervals <= 0 or nights <= 0:
        return 0.0
    per_interval = -math.log((intervals - changes + 0.5) / (intervals + 0.5))
    return per_interval * intervals / nights


@dataclass(slots=True, frozen=True)
class Observation:
    """One visit: when (crawl index, fetch time) and what the server said of the last change."""

    index: int
    fetched: float  # epoch seconds
    modified: float | None  # the Last-Modified, epoch seconds; None: none or malformed
    changed: bool  # the digest differs from the visit before's (False on the first visit)


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
    observations: list[Observation] = field(default_factory=list)

    def visit(
        self, index: int, digest: str | None, fetch_time: datetime, last_modified: str | None = None
    ) -> None:
        changed = False
        if self.last_index >= 0:
            changed = digest != self.digest
            self.intervals += 1
            self.nights += index - self.last_index
            self.changes += changed
        self.last_index, self.digest, self.fetch_time = index, digest, fetch_time
        self.last_modified = last_modified
        self.observations.append(
            Observation(index, _epoch(fetch_time), _parse_http_date(last_modified), changed)
        )


def _epoch(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _parse_http_date(value: str | None) -> float | None:
    when = parse_http_date(value)
    return None if when is None else when.timestamp()


def dates_trusted(pages: list[list[Observation]]) -> bool:
    """Whether a server's Last-Modified dates can be true (the module doc says when not)."""
    dated = [(o.modified, o.fetched) for page in pages for o in page if o.modified is not None]
    answers = sum(len(page) for page in pages)
    if not dated or 2 * len(dated) < answers:
        return False
    dated_pages = sum(any(o.modified is not None for o in page) for page in pages)
    if dated_pages > 1 and len({modified for modified, _ in dated}) == 1:
        return False
    if 2 * sum(modified >= fetched - STAMPED_NOW_S for modified, fetched in dated) > len(dated):
        return False
    changes = [(a, b) for page in pages for a, b in pairwise(page) if b.changed]
    undated = sum(
        a.modified is not None and b.modified is not None and b.modified <= a.modified
        for a, b in changes
    )
    return 2 * undated <= len(changes)


def dated_evidence(
    observations: list[Observation], clock: dict[int, float]
) -> tuple[int, float] | None:
    """(changes detected `X`, nights known without a change `T`) of a page from its dates and
    `clock` (crawl index -> the servers' time of that crawl); None if a visit had no date."""
    dates: list[float] = []
    for o in observations:
        if o.modified is None:
            return None
        dates.append(o.modified)
    changes, quiet = 1, max(0.0, clock[observations[0].index] - dates[0])
    for (before, visit), modified in zip(pairwise(observations), dates[1:], strict=True):
        if visit.changed:
            changes += 1
            quiet += max(0.0, clock[visit.index] - modified)
        else:
            quiet += max(0.0, clock[visit.index] - clock[before.index])
    return changes, quiet / NIGHT_S


def dated_rate(server_rate: float, changes: int, quiet_nights: float) -> float:
    """Posterior mean of a page's rate (gamma prior: `PRIOR_NIGHTS` at the server's rate)."""
    return (server_rate * PRIOR_NIGHTS + changes) / (PRIOR_NIGHTS + quiet_nights)


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
        # A malformed or missing date: the fetch time.
        seen = parse_http_date(known.last_modified) or known.fetch_time
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
    by_host: dict[str, list[str]] = defaultdict(list)
    for url, visits in history.items():
        if visits.observations:
            by_host[server_of(url)].append(url)
    trusted = {
        host
        for host, urls in by_host.items()
        if dates_trusted([history[url].observations for url in urls])
    }
    clock: dict[int, float] = {}  # crawl index -> newest trusted date, capped at its fetch
    for host in trusted:
        for url in by_host[host]:
            for o in history[url].observations:
                if o.modified is not None:
                    clock[o.index] = max(clock.get(o.index, -math.inf), min(o.modified, o.fetched))

    rates: dict[str, float] = {}
    for host in trusted:
        evidence = {url: dated_evidence(history[url].observations, clock) for url in by_host[host]}
        dated = [e for e in evidence.values() if e is not None]
        quiet = sum(e[1] for e in dated)
        server_rate = sum(e[0] for e in dated) / quiet if quiet else 0.0
        for url, e in evidence.items():
            if e is not None:
                rates[url] = dated_rate(server_rate, *e)
    unseen_share = (
        sum(1.0 - math.exp(-rate) for rate in rates.values()) / len(rates)
        if rates
        else PRIOR_CHANGE_SHARE
    )

    per_host: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for url, visits in history.items():
        tally = per_host[server_of(url)]
        tally[0] += visits.intervals
        tally[1] += visits.changes
    overall = [sum(t[0] for t in per_host.values()), sum(t[1] for t in per_host.values())]
    revisits = Revisits(since)
    for url, visits in history.items():
        if visits.last_index < 0:
            priority = NEW_URL_PRIORITY
        else:
            rate = rates.get(url)
            if rate is None:
                intervals, changed = per_host[server_of(url)]
                if not intervals:
                    intervals, changed = overall
                share = changed / intervals if intervals else unseen_share
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
        fetches = parquet_files(crawl_dir / "fetches")
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
                visits.visit(index, digest, fetch_time, last_modified)
                visits.etag = etag
        discovered = parquet_files(crawl_dir / "discovered")
        if discovered:
            for url, depth in con.execute(
                "SELECT url, min(depth) FROM read_parquet(?) GROUP BY url ORDER BY 2, 1",
                [discovered],
            ).fetchall():
                discovered_urls.add(url)
                if url not in history:
                    history[url] = Visits(depth, datetime.max.replace(tzinfo=UTC))
    return {url: visits for url, visits in history.items() if url in discovered_urls}
