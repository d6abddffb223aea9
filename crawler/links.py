"""Link extraction with a real HTML parser (lxml), resolving `<base href>` and relative URLs."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urljoin

import lxml.html
from lxml import etree

from crawler.urls import BadUrl, canonical_url


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
    for href in root.xpath("//a/@href | //area/@href"):
        try:
            links[canonical_url(urljoin(base, href.strip()))] = None
        except (BadUrl, ValueError):
            continue
    title_text = root.findtext(".//title")
    title = " ".join(title_text.split()) if title_text else None
    return ParsedPage(title=title, links=list(links))
