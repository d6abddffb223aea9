"""A web that changes between nights: change processes, validators, 304s and sitemaps.

Each page changes as a Poisson process whose rate (changes per night) is drawn from a gamma
distribution with a small shape: most pages hardly ever change and a few change nearly every
night, the skew measured on the real web (Cho and Garcia-Molina 2003; Brewington and Cybenko
2000). The scale is set so that the expected share of pages that change in one night is
`WebSpec.change_share`: with rates `lambda ~ Gamma(k, s)`, `E[1 - exp(-lambda)] = 1 - (1 +
s)^-k`. The web starts at night 0; `WebSim.advance_night()` moves every server (and the
parent's ground truth, drawn from the same seed) to the next night. A changed page is the same
page with a new revision paragraph.

Last change, as `Last-Modified` and sitemap `lastmod` give it. Before night 0 each page has a
history drawn from its own process: it was created up to `CREATED_WITHIN_NIGHTS` before night 0
(uniformly), and its last change is `Exp(rate)` nights before night 0 (the backward recurrence
time of a Poisson process), or its creation if that is earlier; so fast pages carry recent dates
and slow ones old dates, as on the real web. A page that changes during night n last changed at
a time within (n - 1, n] drawn the same way (the time since its last change, given at least one
change in that night). Dates are whole seconds, as HTTP dates are.

Validators per server, as servers really behave:
- `good`: `ETag` (page and revision) and `Last-Modified` (the time of its last change), and
  answers `If-None-Match` (which wins) or `If-Modified-Since` with 304 when they match;
- `none`: no validators, always 200;
- `etag_churn`: an `ETag` that is new on every answer (a per-request id), never 304;
- `lastmod_frozen`: a `Last-Modified` that never changes, never 304.
A crawler must compare content to catch the changes of the last three.

Sitemaps (on `sitemap_share` of the `good` servers): a server with robots.txt rules names
`/sitemap_index.xml` in a `Sitemap:` line, an index pointing at a gzipped `/sitemap-1.xml.gz`;
the others serve a plain `/sitemap.xml`. Entries are the server's pages robots.txt allows,
each with `lastmod` = its last change.
"""

from __future__ import annotations

import gzip
import itertools
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

import numpy as np

from websim.graph import PDF, Web

# Night 0 is 2026-01-01T00:00:00Z; night n is n days later (the web's clock, not the wall's).
NIGHT_ZERO = 1_767_225_600
NIGHT_S = 86_400
CREATED_WITHIN_NIGHTS = 3 * 365
GOOD, NONE, ETAG_CHURN, LASTMOD_FROZEN = "good", "none", "etag_churn", "lastmod_frozen"
_FAULTY = (NONE, ETAG_CHURN, LASTMOD_FROZEN)
SITEMAP_INDEX = "/sitemap_index.xml"
SITEMAP_CHILD = "/sitemap-1.xml.gz"
SITEMAP_PLAIN = "/sitemap.xml"


def http_date(epoch: float) -> str:
    return format_datetime(datetime.fromtimestamp(epoch, UTC), usegmt=True)


def w3c_date(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ChangeModel:
    """The changing state of one web; the same seed gives the same nights in every process."""

    def __init__(self, web: Web) -> None:
        spec = web.spec
        self.web = web
        rng = np.random.default_rng([spec.seed, 14])
        n = web.n_pages
        share = spec.change_share
        if share > 0:
            scale = (1.0 - share) ** (-1.0 / spec.change_shape) - 1.0
            self.rates = rng.gamma(spec.change_shape, scale, n)
        else:
            self.rates = np.zeros(n)
        hosts = len(web.hosts)
        fault = spec.validator_fault_share / len(_FAULTY)
        self.validators: list[str] = rng.choice(
            [GOOD, *_FAULTY], size=hosts, p=[1 - 3 * fault, fault, fault, fault]
        ).tolist()
        draws = rng.random(hosts)
        self.sitemap = [
            kind == GOOD and draw < spec.sitemap_share
            for kind, draw in zip(self.validators, draws, strict=True)
        ]
        self.night = 0
        self.version = np.zeros(n, dtype=np.int64)
        self.changed_night = np.zeros(n, dtype=np.int64)
        history = np.random.default_rng([spec.seed, 14, 0])  # nights >= 1 seed advance()
        created_ago = history.uniform(0.0, CREATED_WITHIN_NIGHTS, n)
        with np.errstate(divide="ignore"):
            changed_ago = history.exponential(1.0, n) / self.rates  # rate 0: never changed
        ago = np.minimum(changed_ago, created_ago)
        self.changed_at = np.floor(NIGHT_ZERO - ago * NIGHT_S).astype(np.int64)
        self._churn = itertools.count()

    def advance(self) -> np.ndarray:
        """Move to the next night; returns the ids of the pages that changed."""
        self.night += 1
        rng = np.random.default_rng([self.web.spec.seed, 14, self.night])
        counts = rng.poisson(self.rates)
        changed = np.flatnonzero(counts)
        self.version += counts
        self.changed_night[changed] = self.night
        # Time from the last change to the night's end, given a change in the night: the
        # exponential truncated to one night, drawn by inversion.
        rates = self.rates[changed]
        ago = -np.log1p(-rng.random(len(changed)) * -np.expm1(-rates)) / rates
        self.changed_at[changed] = np.floor(NIGHT_ZERO + (self.night - ago) * NIGHT_S)
        return changed

    def last_change(self, page: int) -> float:
        return float(self.changed_at[page])

    def body(self, page: int, base: bytes) -> bytes:
        """The page as of tonight: its base rendering plus its revision paragraph."""
        version = int(self.version[page])
        if not version:
            return base
        if self.web.kind[page] == PDF:
            return base.replace(b"%%EOF", f"% revision {version}\n%%EOF".encode())
        note = f"<p>Revision {version}: updated on night {self.changed_night[page]}.</p>\n"
        return base.replace(b"</body>", note.encode() + b"</body>")

    def answer(
        self, host: int, page: int, if_none_match: str | None, if_modified_since: str | None
    ) -> tuple[bool, list[tuple[str, str]]]:
        """(not modified?, validator headers) of a page for a (conditional) GET."""
        kind = self.validators[host]
        if kind == NONE:
            return False, []
        if kind == ETAG_CHURN:
            return False, [("ETag", f'"{page}-r{next(self._churn)}"')]
        if kind == LASTMOD_FROZEN:
            return False, [("Last-Modified", http_date(NIGHT_ZERO))]
        etag = f'"{page}-{int(self.version[page])}"'
        modified = self.last_change(page)
        headers = [("ETag", etag), ("Last-Modified", http_date(modified))]
        if if_none_match is not None:
            tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
            return etag in tags or "*" in tags, headers
        if if_modified_since is not None:
            try:
                since = parsedate_to_datetime(if_modified_since).timestamp()
            except (TypeError, ValueError):
                return False, headers
            return modified <= since, headers
        return False, headers

    # -- sitemaps ------------------------------------------------------------------------

    def sitemap_line(self, host: int, origin: str) -> str | None:
        """The robots.txt `Sitemap:` line of a server that has rules and a sitemap."""
        return f"Sitemap: {origin}{SITEMAP_INDEX}" if self.sitemap[host] else None

    def sitemap_file(self, host: int, path: str, origin: str, has_robots: bool) -> bytes | None:
        """The body of a sitemap path of a server, or None (a 404)."""
        if not self.sitemap[host]:
            return None
        if has_robots and path == SITEMAP_INDEX:
            return (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
                f"<sitemap><loc>{origin}{SITEMAP_CHILD}</loc></sitemap>\n</sitemapindex>\n"
            ).encode()
        if has_robots and path == SITEMAP_CHILD:
            return gzip.compress(self._urlset(host, origin), mtime=0)
        if not has_robots and path == SITEMAP_PLAIN:
            return self._urlset(host, origin)
        return None

    def _urlset(self, host: int, origin: str) -> bytes:
        web = self.web
        first, last = int(web.host_start[host]), int(web.host_start[host + 1])
        allowed = web.allowed
        entries = "".join(
            f"<url><loc>{origin}{web.paths[page].replace('&', '&amp;')}</loc>"
            f"<lastmod>{w3c_date(self.last_change(page))}</lastmod></url>\n"
            for page in range(first, last)
            if allowed[page]
        )
        return (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"{entries}</urlset>\n"
        ).encode()
