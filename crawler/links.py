"""Link extraction with a real HTML parser (lxml), resolving `<base href>` and relative URLs."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urljoin, urlsplit

import lxml.html
from lxml import etree

from crawler.urls import BadUrl, canonical_url

# Pages of a site link the same URLs over and over (menus, popular pages): resolving and
# canonicalizing are the costliest steps of link extraction, so answers are remembered
# (failures are not).
_canonical = lru_cache(maxsize=1 << 16)(canonical_url)


@lru_cache(maxsize=1 << 16)
def _resolve_from_origin(origin: str, href: str) -> str:
    return canonical_url(urljoin(origin, href))


def _base_part(href: str) -> str | None:
    """What of the base urljoin(base, href) depends on: "server" for `/path` (the base's
    scheme and server), "scheme" for `//server/...` and `http(s)://server...` (the server not
    empty); None when the base's path counts too."""
    if not href.isprintable():
        return None  # urljoin drops tabs and newlines first
    if href[:1] == "/" and href[1:2] != "/":
        return "server"
    head = href[:8].lower()
    if head == "https://":
        rest = href[8:]
    elif head[:7] == "http://":
        rest = href[7:]
    else:
        rest = href[2:] if head[:2] == "//" else ""
    # An empty server would take the base's path too (urljoin's rules).
    return None if rest[:1] in ("", "/", "?", "#", ";") else "scheme"


@dataclass(frozen=True)
class ParsedPage:
    title: str | None
    links: list[str]  # canonical, de-duplicated, in document order


def parse_html(body: bytes, url: str, encoding: str | None = None) -> ParsedPage:
    """Parse an HTML body fetched from `url`: its title and its canonical out-links.

    Links that cannot be made into an http(s) URL (mailto:, javascript:, garbage) are skipped;
    a page is never rejected because some of its links are bad.
    """
    if not body.strip():
        return ParsedPage(title=None, links=[])
    try:
        parser = lxml.html.HTMLParser(encoding=encoding) if encoding else None
        root = lxml.html.document_fromstring(body, parser=parser)
    except (etree.ParserError, ValueError, LookupError):
        return ParsedPage(title=None, links=[])
    base = url
    for href in root.xpath("//base/@href"):
        base = urljoin(url, href.strip())
        break
    links: dict[str, None] = {}
    try:
        parts = urlsplit(base)
        # Stand-ins for the base that give urljoin the same answer, and are shared by pages.
        origins = {"server": f"{parts.scheme}://{parts.netloc}/", "scheme": f"{parts.scheme}://_/"}
    except ValueError:
        origins = {}
    # XPath over the whole document, not root.iter(): broken markup can leave links where
    # iterating the root element does not reach them.
    for raw_href in root.xpath("//a/@href | //area/@href"):
        href = raw_href.strip()
        try:
            part = _base_part(href)
            origin = origins.get(part) if part else None
            if origin is not None:
                links[_resolve_from_origin(origin, href)] = None
            else:
                links[_canonical(urljoin(base, href))] = None
        except (BadUrl, ValueError):
            continue
    title_text = root.findtext(".//title")
    title = " ".join(title_text.split()) if title_text else None
    return ParsedPage(title=title, links=list(links))
