"""The shapes of URLs and pages that trap defences, fairness and error budgets are kept by.

Cheap functions of a URL or a body, each run once per discovered link or fetched page:

- `ParamStripper`: a URL without its session-id and tracking parameters (one page under many
  session ids, or reached from many campaigns, is one URL);
- `url_family`: the group a URL is scheduled and error-counted with inside its server: its
  directory with numbered segments masked, plus the last segment when there is a query
  (`/cal/2024/5` and `/cal/1999/12` are `/cal/*/`; `/cal?d=5` is `/cal?`; `/about` is `/`);
- `descends`: whether a page's new links lead only ever deeper under its own directory, the
  mark of a generator of fresh paths (`/t/ax/` linking `/t/ax/bq/`, `/t/ax/kz/`...); URLs
  reached through a run of such pages are scheduled as one family per section
  (`descending_family`) and share one budget (crawler/scope/limits.py), whatever their words;
- `content_shape`: a page's body with what varies in generated pages removed (numbers, query
  strings, path parameters), hashed: the pages of an endless calendar all have one shape, the
  pages of a documentation directory each have their own.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

# Session ids (Java, PHP, ASP, ColdFusion, osCommerce, Zen Cart and the generic names) and
# tracking parameters (Google Analytics and Ads, Facebook, Microsoft, Mailchimp, HubSpot, Matomo,
# Yandex). A trailing `*` makes a name a prefix. Compared case-insensitively.
DEFAULT_STRIP_PARAMS: tuple[str, ...] = (
    "jsessionid",
    "phpsessid",
    "aspsessionid*",
    "sid",
    "sessid",
    "sessionid",
    "session_id",
    "cfid",
    "cftoken",
    "oscsid",
    "zenid",
    "utm_*",
    "gclid",
    "gclsrc",
    "dclid",
    "gbraid",
    "wbraid",
    "fbclid",
    "msclkid",
    "mc_cid",
    "mc_eid",
    "_hsenc",
    "_hsmi",
    "mtm_*",
    "pk_campaign",
    "pk_kwd",
    "yclid",
)
_HAS_DIGIT = re.compile(r"[^/]*\d[^/]*")
# What a generated page changes from one URL to the next besides numbers: the query strings and
# path parameters (session ids) in its links.
_VOLATILE = re.compile(rb"[?;][^\"'\s<>]*")
# A match of _VOLATILE after its first byte. The matches are found by `bytes.find` for their
# first byte (memchr, a few microseconds a page) rather than by the regex's scan (about 10 ns a
# byte: 0.4 ms a 40-KB page); past this many matches the regex takes the rest.
_VOLATILE_RUN = re.compile(rb"[^\"'\s<>]*")
_VOLATILE_FOUND_MAX = 64
_DIGITS = b"0123456789"
# Of a body, what its shape is taken from: bounded work per page, and past the boilerplate
# (inline styles and scripts, navigation) that pages of one site share.
SHAPE_BYTES = 131072


class ParamStripper:
    """Removes whole query parameters and `;name=value` path parameters by name.

    w3lib's `url_query_cleaner` removes query parameters by exact, case-sensitive name; this
    also needs prefixes (`utm_*`), any case (`PHPSESSID`) and path parameters (`;jsessionid=`),
    so it is done here, in one pass, leaving everything else as written: a canonical URL stays
    canonical.
    """

    def __init__(self, names: Iterable[str]) -> None:
        names = [name.lower() for name in names]
        self._exact = frozenset(name for name in names if not name.endswith("*"))
        self._prefixes = tuple(name[:-1] for name in names if name.endswith("*"))
        alternatives = [re.escape(name) for name in sorted(self._exact)]
        alternatives += [re.escape(prefix) + r"[^=;/?#]*" for prefix in self._prefixes]
        self._path_params = (
            re.compile(r";(?:" + "|".join(alternatives) + r")=[^/;?#]*", re.IGNORECASE)
            if alternatives
            else None
        )

    def _strips(self, pair: str) -> bool:
        name = pair.split("=", 1)[0].lower()
        return name in self._exact or name.startswith(self._prefixes)

    def __call__(self, url: str) -> str:
        if "?" not in url and ";" not in url:
            return url  # no query and no path parameters (the common case): nothing to do
        parts = urlsplit(url)
        path = self._path_params.sub("", parts.path) if self._path_params else parts.path
        query = "&".join(pair for pair in parts.query.split("&") if pair and not self._strips(pair))
        if path == parts.path and query == parts.query:
            return url
        return urlunsplit((parts.scheme, parts.netloc, path, query, parts.fragment))


def path_pattern(path: str, query: str) -> str:
    """The shape of a URL: path segments with a digit masked, query values dropped.
    `/cal/2024/5?view=week` and `/cal/1999/12?view=day` are both `/cal/*/*?`."""
    return _HAS_DIGIT.sub("*", path) + ("?" if query else "")


def url_family(url: str) -> str:
    """The group of a canonical URL inside its server (see the module docstring)."""
    path, _, query = url.split("/", 3)[3].partition("?")
    directory, _, last = path.rpartition("/")
    family = "/" + _HAS_DIGIT.sub("*", directory) + "/" if directory else "/"
    if query:
        family += _HAS_DIGIT.sub("*", last) + "?"
    return family


def url_section(url: str) -> str:
    """The top directory of a canonical URL's path, numbered segments masked (`/t/` for
    `/t/a/b`; `/` for `/about`): the part of a server that one generator of paths fills."""
    path = url.split("/", 3)[3].partition("?")[0]
    top, slash, _ = path.partition("/")
    return "/" + _HAS_DIGIT.sub("*", top) + "/" if slash else "/"


def descending_family(url: str) -> str:
    """The one family of every URL of a section reached through descending pages."""
    return url_section(url) + "\N{HORIZONTAL ELLIPSIS}"


def descends(page_url: str, new_links: Iterable[str]) -> bool:
    """Whether a page's new links (of its own server) go mostly deeper under its directory:
    at least one does, and at least half of them do. A page in the root directory never
    descends (every path is under `/`). Ordinary pages link across (siblings, navigation);
    an index page descends once, and a run of descending pages is what a generator of fresh
    paths makes: `crawler.scope.limits` budgets what such a run reaches."""
    directory = page_url.split("?", 1)[0].rpartition("/")[0] + "/"
    if directory.count("/") <= 3:  # scheme://host/: the root directory
        return False
    deeper = total = 0
    for link in new_links:
        total += 1
        if link.startswith(directory) and "/" in link[len(directory) :].split("?", 1)[0]:
            deeper += 1
    return deeper > 0 and 2 * deeper >= total


def content_shape(body: bytes) -> int:
    """A 32-bit hash of the body's first `SHAPE_BYTES` without query strings, path parameters
    and digits: alike for pages generated from one template with different numbers or ids."""
    head = body[:SHAPE_BYTES]
    kept: list[bytes] = []  # `head` but the matches of _VOLATILE
    position = 0  # where the last match ended
    question, semicolon = head.find(b"?"), head.find(b";")
    while question >= 0 or semicolon >= 0:
        if len(kept) == _VOLATILE_FOUND_MAX:
            kept.append(_VOLATILE.sub(b"", head[position:]))
            return zlib.crc32(b"".join(kept).translate(None, _DIGITS))
        start = semicolon if question < 0 or 0 <= semicolon < question else question
        match = _VOLATILE_RUN.match(head, start + 1)
        assert match is not None  # it matches the empty string
        kept.append(head[position:start])
        position = match.end()
        if 0 <= question < position:
            question = head.find(b"?", position)
        if 0 <= semicolon < position:
            semicolon = head.find(b";", position)
    kept.append(head[position:])
    return zlib.crc32(b"".join(kept).translate(None, _DIGITS))
