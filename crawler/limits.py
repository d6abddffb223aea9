"""Which URLs a crawl fetches at all: URL length, per-server page budget, and trap heuristics.

A server can mint URLs without end: a calendar whose "next month" link never runs out, a fresh
session id in every link, a relative link that nests itself (`x/` on `/a/x/` gives `/a/x/x/`).
No single fetch fails; the harm is an ever-growing set of URLs on one server. Session ids are
removed from discovered URLs (one page under many session ids is one URL); every other rule is
checked by the node just before a URL's first fetch, and a refusal is recorded as a fetches row
like any other failure.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from crawler.config import CrawlConfig

# Query and path parameter names that carry session ids (Java, PHP, ASP, ColdFusion, and the
# generic ones), compared case-insensitively.
SESSION_PARAMS = frozenset(
    {
        "jsessionid",
        "phpsessid",
        "aspsessionid",
        "sid",
        "sessid",
        "sessionid",
        "session_id",
        "cfid",
        "cftoken",
        "oscsid",
        "zenid",
    }
)
_PATH_SESSION = re.compile(
    r";(?:" + "|".join(sorted(SESSION_PARAMS)) + r")=[^/;?#]*", re.IGNORECASE
)
_HAS_DIGIT = re.compile(r"[^/]*\d[^/]*")


def strip_session_ids(url: str) -> str:
    """The URL without session-id query parameters or `;jsessionid=`-style path parameters.

    Only whole parameters are dropped and the rest is left as written, so a canonical URL stays
    canonical.
    """
    if "?" not in url and ";" not in url:
        return url  # no query and no path parameters: nothing to strip (the common case, fast)
    parts = urlsplit(url)
    path = _PATH_SESSION.sub("", parts.path)
    query = "&".join(
        pair
        for pair in parts.query.split("&")
        if pair and pair.split("=", 1)[0].lower() not in SESSION_PARAMS
    )
    if path == parts.path and query == parts.query:
        return url
    return urlunsplit((parts.scheme, parts.netloc, path, query, parts.fragment))


def path_pattern(path: str, query: str) -> str:
    """The shape of a URL: path segments with a digit masked, query values dropped.
    `/cal/2024/5?view=week` and `/cal/1999/12?view=day` are both `/cal/*/*?`."""
    return _HAS_DIGIT.sub("*", path) + ("?" if query else "")


# Error classes of URLs refused before any request; like robots.txt refusals, they do not
# spend the --max-pages budget.
REFUSAL_CLASSES = ("url_too_long", "trap", "host_budget")
# Error classes of fetches rows whose URL never passed `UrlLimits.admit`: refused by robots.txt
# or a limit, or failed with their whole server (its address refused, robots.txt unavailable).
NOT_ADMITTED_CLASSES = (
    "robots_disallowed",
    *REFUSAL_CLASSES,
    "address_refused",
    "robots_unavailable",
)


@dataclass
class ServerCounts:
    """What one server has used of the limits: URLs admitted, in all and per URL shape. It
    travels with the server when the server moves to another node."""

    pages: int = 0
    patterns: Counter[str] = field(default_factory=Counter)

    def add(self, other: ServerCounts) -> None:
        self.pages += other.pages
        self.patterns.update(other.patterns)


def counts_of(urls: Iterable[str]) -> dict[str, ServerCounts]:
    """Per server, the counts of URLs already admitted (a resumed crawl, or the servers of a
    dead node, rebuild them from the output)."""
    counts: dict[str, ServerCounts] = {}
    for url in urls:
        parts = urlsplit(url)
        server = counts.setdefault(parts.netloc, ServerCounts())
        server.pages += 1
        server.patterns[path_pattern(parts.path, parts.query)] += 1
    return counts


class UrlLimits:
    """A node's admission rules for first fetches. Counts are per server, and exact because a
    server belongs to one node at a time: they go with it when it moves (`take`, `restore`),
    and a resumed crawl rebuilds them from its output (`counts_of`)."""

    def __init__(self, config: CrawlConfig) -> None:
        self._config = config
        self._servers: dict[str, ServerCounts] = {}
        self._lock = threading.Lock()

    def admit(self, url: str) -> str | None:
        """None if the URL may be fetched (it is then counted), else why not, "class: detail"
        (`url_too_long`, `trap`, `host_budget`)."""
        config = self._config
        if len(url) > config.max_url_length:
            return f"url_too_long: {len(url)} characters, the limit is {config.max_url_length}"
        parts = urlsplit(url)
        segments = Counter(segment for segment in parts.path.split("/") if segment)
        if segments:
            segment, count = segments.most_common(1)[0]
            if count > config.trap_max_segment_repeats:
                return f"trap: path segment {segment[:50]!r} occurs {count} times"
        host = parts.netloc
        pattern = path_pattern(parts.path, parts.query)
        with self._lock:
            counts = self._servers.setdefault(host, ServerCounts())
            if counts.pages >= config.max_pages_per_host:
                return f"host_budget: {config.max_pages_per_host} URLs fetched from {host}"
            if counts.patterns[pattern] >= config.trap_max_urls_per_pattern:
                return (
                    f"trap: {config.trap_max_urls_per_pattern} URLs like {pattern[:100]} "
                    "fetched already"
                )
            counts.pages += 1
            counts.patterns[pattern] += 1
        return None

    def take(self, host: str) -> ServerCounts:
        """A server's counts, which leave with it."""
        with self._lock:
            return self._servers.pop(host, None) or ServerCounts()

    def restore(self, host: str, counts: ServerCounts) -> None:
        """Counts a server brings along, or that a resumed crawl rebuilt."""
        with self._lock:
            self._servers.setdefault(host, ServerCounts()).add(counts)
