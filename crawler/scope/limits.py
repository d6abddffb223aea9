"""Which URLs a crawl fetches at all: URL length, per-server page budget, trap heuristics and
error budgets.

A server can mint URLs without end: a calendar whose "next month" link never runs out, a fresh
session id in every link, a relative link that nests itself (`x/` on `/a/x/` gives `/a/x/x/`).
No single fetch fails; the harm is an ever-growing set of URLs on one server. Session ids are
removed from discovered URLs (crawler/scope/traps.py); every rule here is checked by the node just
before a URL's first fetch, and a refusal is recorded as a fetches row like any other failure:

- a URL pattern (path, numbered segments masked, query values dropped) of a server gets
  `trap_max_urls_per_pattern` URLs, plus one for every page of it fetched whose content shape
  (crawler/scope/traps.py) is new to the pattern: a documentation directory of a thousand distinct
  pages is crawled whole, a thousand calendar months from one template are not;
- a path segment may occur `trap_max_segment_repeats` times in a path;
- a URL may be `max_depth_per_host` links away from where the crawl entered its server;
- the URLs of a section (top directory) reached through two or more descending pages in a row
  (pages whose new links lead only ever deeper under their own directory, crawler/scope/traps.py)
  get `trap_max_descending_urls` URLs in all: a generator of fresh paths makes a new pattern
  at every URL, so no pattern budget holds it, and without this it grows by its fan-out at
  every level;
- after `family_error_budget` failures in a row (404, 410, or given up) in one URL family
  (crawler/scope/traps.py) of a server, that family's other URLs are skipped, not fetched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from crawler.scope.settings import LimitSettings
from crawler.scope.traps import path_pattern, url_family, url_section
from errors import ErrorClass, FetchError

# Descending pages in a row from which on URLs count against the trap budget: one descending
# page is an ordinary index of subdirectories; a run of them is a generator's.
DESCENT_BUDGETED = 2


@dataclass
class ServerCounts:
    """What one server has used of the limits: URLs admitted, in all and per URL pattern; the
    budget its patterns earned; the failure runs of its URL families. It travels with the
    server when the server moves to another node."""

    pages: int = 0
    patterns: Counter[str] = field(default_factory=Counter)
    credits: Counter[str] = field(default_factory=Counter)  # earned budget per pattern
    shapes: dict[str, set[int]] = field(default_factory=dict)  # content shapes per pattern
    failures: Counter[str] = field(default_factory=Counter)  # failures in a row per family
    descending: Counter[str] = field(default_factory=Counter)  # trap-budgeted URLs per section
    closed: set[str] = field(default_factory=set)  # families whose other URLs are skipped

    def add(self, other: ServerCounts) -> None:
        self.pages += other.pages
        self.patterns.update(other.patterns)
        self.credits.update(other.credits)
        for pattern, shapes in other.shapes.items():
            self.shapes.setdefault(pattern, set()).update(shapes)
        self.failures.update(other.failures)
        self.descending.update(other.descending)
        self.closed |= other.closed


def counts_of(urls: Iterable[str]) -> dict[str, ServerCounts]:
    """Per server, the counts of URLs already admitted (a resumed crawl, or the servers of a
    dead node, rebuild them from the output). The content shapes are not in the output: each
    pattern is credited with what it used, so it gets its base budget afresh in the new run.
    How each URL was reached is not in the output either: descending runs are counted afresh."""
    counts: dict[str, ServerCounts] = {}
    for url in urls:
        parts = urlsplit(url)
        server = counts.setdefault(parts.netloc, ServerCounts())
        server.pages += 1
        pattern = path_pattern(parts.path, parts.query)
        server.patterns[pattern] += 1
        server.credits[pattern] += 1
    return counts


class UrlLimits:
    """A node's admission rules for first fetches. The counts they keep are a server's own
    (`ServerState.limits`, passed in by the caller): exact, because a server belongs to one node
    at a time and is served by one worker at a time, they go with it when it moves, and a
    resumed crawl rebuilds them from its output (`counts_of`)."""

    def __init__(self, settings: LimitSettings) -> None:
        self._settings = settings

    def admit(
        self, counts: ServerCounts, url: str, host_depth: int = 0, descent: int = 0
    ) -> FetchError | None:
        """None if the URL may be fetched (it is then counted in its server's `counts`), else
        why not (`url_too_long`, `trap`, `host_budget`). `host_depth`: links from where the
        crawl entered the URL's server; `descent`: descending pages in a row that led to it."""
        settings = self._settings
        if len(url) > settings.max_url_length:
            return FetchError(
                ErrorClass.URL_TOO_LONG,
                f"{len(url)} characters, the limit is {settings.max_url_length}",
            )
        parts = urlsplit(url)
        segments = Counter(segment for segment in parts.path.split("/") if segment)
        if segments:
            segment, count = segments.most_common(1)[0]
            if count > settings.trap_max_segment_repeats:
                return FetchError(
                    ErrorClass.TRAP, f"path segment {segment[:50]!r} occurs {count} times"
                )
        if host_depth > settings.max_depth_per_host:
            return FetchError(
                ErrorClass.TRAP,
                f"{host_depth} links into the server, the limit is {settings.max_depth_per_host}",
            )
        if counts.pages >= settings.max_pages_per_host:
            return FetchError(
                ErrorClass.HOST_BUDGET,
                f"{settings.max_pages_per_host} URLs fetched from {parts.netloc}",
            )
        pattern = path_pattern(parts.path, parts.query)
        budget = settings.trap_max_urls_per_pattern + counts.credits[pattern]
        if counts.patterns[pattern] >= budget:
            return FetchError(
                ErrorClass.TRAP,
                f"{budget} URLs like {pattern[:100]} fetched already, their pages "
                f"of {len(counts.shapes.get(pattern, ()))} shapes",
            )
        section = url_section(url) if descent >= DESCENT_BUDGETED else None
        if section is not None and counts.descending[section] >= settings.trap_max_descending_urls:
            return FetchError(
                ErrorClass.TRAP,
                f"{settings.trap_max_descending_urls} URLs of {section[:100]} fetched already "
                "that pages linking ever deeper led to",
            )
        counts.pages += 1
        counts.patterns[pattern] += 1
        if section is not None:
            counts.descending[section] += 1
        return None

    def wants_shape(self, counts: ServerCounts, url: str) -> bool:
        """Whether the content shape of `url`'s page counts: once its pattern has used half
        its base budget (a pattern that never gets there needs no credit, and most patterns
        of a site with named pages hold one URL), so most pages are not hashed at all."""
        return 2 * counts.patterns[_pattern_of(url)] >= self._settings.trap_max_urls_per_pattern

    def observe(self, counts: ServerCounts, url: str, shape: int) -> None:
        """A page of `url` was fetched with this content shape: a shape new to its pattern
        (past the first) earns the pattern one more URL."""
        pattern = _pattern_of(url)
        shapes = counts.shapes.setdefault(pattern, set())
        if shape not in shapes:
            if shapes:
                counts.credits[pattern] += 1
            shapes.add(shape)

    def credit(self, counts: ServerCounts, url: str) -> None:
        """A revisited page answered 304 (unchanged since an earlier crawl fetched it): it
        earns its pattern one URL, as a page of new content does; it has no body to shape."""
        counts.credits[_pattern_of(url)] += 1

    def outcome(self, counts: ServerCounts, url: str, failed: bool) -> bool:
        """A fetch of `url` ended (finally: no retry to come), failed or not. True when this
        failure closes its URL family: the node then skips the family's queued URLs."""
        family = url_family(url)
        if not failed:
            counts.failures.pop(family, None)
            return False
        counts.failures[family] += 1
        if (
            counts.failures[family] >= self._settings.family_error_budget
            and family not in counts.closed
        ):
            counts.closed.add(family)
            return True
        return False

    @staticmethod
    def closed(counts: ServerCounts, url: str) -> bool:
        """Whether `url`'s family has failed too often to be fetched any more."""
        return bool(counts.closed) and url_family(url) in counts.closed


def _pattern_of(url: str) -> str:
    parts = urlsplit(url)
    return path_pattern(parts.path, parts.query)
