"""Link extraction with a real HTML parser (lxml), resolving `<base href>` and relative URLs;
the head facts of the page (crawler/content/head.py) from the same parse."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urljoin, urlsplit

import lxml.html
from lxml import etree
from lxml.html import HtmlElement

from crawler.content.head import HeadFacts, head_facts, robots_directives
from crawler.scope.urls import DEFAULT_PORTS, MAX_URL_LENGTH, BadUrl, canonical_url

# Compiled once, and plain strings: lxml's default "smart" results carry a link back to their
# element, which costs more than the search itself. Over the whole document, not root.iter():
# broken markup can leave links where iterating the root element does not reach them.
_HREFS = etree.XPath("//a/@href | //area/@href", smart_strings=False)
# The hrefs of links marked rel=nofollow (rel is a set of space-separated keywords, of any case).
# [@rel] first: most links have none, and the string functions would run on each of them.
_NOFOLLOW_HREFS = etree.XPath(
    "//a[@rel][contains(concat(' ', translate(normalize-space(@rel), 'NOFLW', 'noflw'), ' '),"
    " ' nofollow ')]/@href"
    " | //area[@rel][contains(concat(' ', translate(normalize-space(@rel), 'NOFLW', 'noflw'),"
    " ' '), ' nofollow ')]/@href",
    smart_strings=False,
)

# Pages of a site link the same URLs over and over (menus, popular pages), so the general
# path's answers are remembered (failures are not).
_canonical = lru_cache(maxsize=1 << 16)(canonical_url)

# A plain href: perhaps an http(s) scheme and a lower-case host[:port], then a path made only
# of characters that canonicalization leaves as they are, perhaps a fragment. Most links on
# real sites are plain; resolving them is string work on the page's canonical base.
_PLAIN_HREF = re.compile(
    r"(?:(https?):)?(?://([a-z0-9.-]+)(?::([0-9]{1,5}))?)?([A-Za-z0-9._~/-]*)(?:#.*)?",
    re.ASCII | re.DOTALL,
)


@lru_cache(maxsize=1 << 10)
def _origin(scheme: str, host: str, port: str | None) -> str:
    """`scheme://server` as canonical_url spells it (default port dropped)."""
    return canonical_url(f"{scheme}://{host}{':' + port if port else ''}/")[:-1]


class LinkResolver:
    """Turns the hrefs of one page into canonical absolute URLs, as
    `canonical_url(urljoin(base, href))` does, but without its cost for plain hrefs.

    Link resolution is most of a crawler's CPU per page (a documentation page has hundreds of
    links): the general path parses and re-encodes every URL, about 30 µs a link. A plain href
    against a canonical base needs neither; it follows urljoin's own rules (which differ from
    RFC 3986 on empty segments), and everything else takes the general path.
    """

    def __init__(self, base: str) -> None:
        self.base = base
        try:
            self._plain_base = _canonical(base) == base
        except BadUrl:
            self._plain_base = False
        if self._plain_base:
            parts = urlsplit(base)
            self._scheme = parts.scheme
            self._server = f"{parts.scheme}://{parts.netloc}"
            self._base_dir = parts.path.split("/")[:-1]  # the last segment is not a directory
        self._room = MAX_URL_LENGTH - len(base)

    def __call__(self, href: str) -> str:
        """The canonical URL of `href`; BadUrl when it cannot be fetched."""
        plain = _PLAIN_HREF.fullmatch(href) if self._plain_base and len(href) < self._room else None
        resolved = self._resolve_plain(*plain.groups()) if plain else None
        return resolved if resolved is not None else _canonical(urljoin(self.base, href))

    def _resolve_plain(
        self, scheme: str | None, host: str | None, port: str | None, path: str
    ) -> str | None:
        if host is not None:  # //server/path: urljoin keeps the path as it is
            if (path and path[0] != "/") or "/." in path or not _plain_host(host):
                return None
            if port is not None and int(port) > 65535:
                return None
            scheme = scheme or self._scheme
            if port is not None and int(port) == DEFAULT_PORTS[scheme]:
                port = None
            return _origin(scheme, host, port) + (path or "/")
        if scheme is not None or path[:2] == "//":  # "http:x", "///x": the general path
            return None
        if not path:  # "" or "#fragment": the page itself
            return self.base
        if path[0] == "/":
            segments = path.split("/")
        else:
            segments = self._base_dir + path.split("/")
            segments[1:-1] = filter(None, segments[1:-1])
        resolved: list[str] = []
        for segment in segments:
            if segment == "..":
                if resolved:
                    resolved.pop()
            elif segment != ".":
                resolved.append(segment)
        if segments[-1] in (".", ".."):
            resolved.append("")
        joined = "/".join(resolved)
        return f"{self._server}{'' if joined[:1] == '/' else '/'}{joined}"


def _plain_host(host: str) -> bool:
    """Labels of letters, digits and inner hyphens: a name IDNA leaves as it is."""
    return all(
        0 < len(label) <= 63 and label[0] != "-" and label[-1] != "-" for label in host.split(".")
    )


@dataclass(frozen=True)
class ParsedPage:
    title: str | None
    links: list[str]  # canonical, de-duplicated, in document order
    # Of `links`, those every link to which is marked rel=nofollow.
    nofollow_links: frozenset[str] = frozenset()
    head: HeadFacts = HeadFacts()
    # The page's robots directives: its meta robots and X-Robots-Tag header (noindex, ...).
    robots: frozenset[str] = frozenset()
    # The parsed document, for the [extract] fields (crawler/content/extract.py).
    root: HtmlElement | None = field(default=None, compare=False, repr=False)

    def followed_links(self, honour_nofollow: bool) -> list[str]:
        """The links to follow: all of them, or, honouring nofollow, none when the page as a
        whole says `nofollow` (its meta robots or X-Robots-Tag) and else those not marked
        rel=nofollow."""
        if not honour_nofollow:
            return self.links
        if "nofollow" in self.robots:
            return []
        if not self.nofollow_links:
            return self.links
        return [link for link in self.links if link not in self.nofollow_links]


def parse_html(
    body: bytes, url: str, encoding: str | None = None, x_robots_tag: str | None = None
) -> ParsedPage:
    """Parse an HTML body fetched from `url`: its title, its canonical out-links and its head
    facts. `x_robots_tag`: the response's X-Robots-Tag header.

    Links that cannot be made into an http(s) URL (mailto:, javascript:, garbage) are skipped;
    a page is never rejected because some of its links are bad.
    """
    if not body.strip():
        return ParsedPage(title=None, links=[], robots=robots_directives(None, x_robots_tag))
    try:
        parser = lxml.html.HTMLParser(encoding=encoding) if encoding else None
        root = lxml.html.document_fromstring(body, parser=parser)
    except (etree.ParserError, ValueError, LookupError):
        return ParsedPage(title=None, links=[], robots=robots_directives(None, x_robots_tag))
    base = url
    for href in root.xpath("//base/@href"):
        base = urljoin(url, href.strip())
        break
    resolve = LinkResolver(base)
    links: dict[str, None] = {}
    hrefs = _HREFS(root)
    for href in hrefs:
        try:
            links[resolve(href.strip())] = None
        except (BadUrl, ValueError):
            continue
    title_text = root.findtext(".//title")
    title = " ".join(title_text.split()) if title_text else None
    head = head_facts(root, resolve)
    return ParsedPage(
        title=title,
        links=list(links),
        nofollow_links=_nofollow_only(hrefs, _NOFOLLOW_HREFS(root), resolve),
        head=head,
        robots=robots_directives(head.meta_robots, x_robots_tag),
        root=root,
    )


def _nofollow_only(hrefs: list[str], nofollow: list[str], resolve: LinkResolver) -> frozenset[str]:
    """The URLs that only rel=nofollow links point to."""
    if not nofollow:
        return frozenset()
    marked: set[str] = set()
    unmarked: set[str] = set()
    counts = Counter(hrefs)
    counts.subtract(nofollow)
    for href, followed in counts.items():
        try:
            url = resolve(href.strip())
        except (BadUrl, ValueError):
            continue
        (unmarked if followed > 0 else marked).add(url)
    return frozenset(marked - unmarked)
