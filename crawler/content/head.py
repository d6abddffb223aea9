"""What a page's head says to a crawler and an index: its canonical URL, description, robots
directives (`<meta name=robots>` and the X-Robots-Tag header), language alternates
(hreflang) and a meta refresh, read from the parsed document (lxml)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lxml import etree
from lxml.html import HtmlElement

_METAS_AND_LINKS = etree.XPath("//meta | //link")
# `<meta http-equiv=refresh content="5; url='/next'">`: a delay, then perhaps a URL (the
# HTML standard's "shared declarative refresh steps", leniently).
_REFRESH = re.compile(
    r"\s*\d*(?:\.[\d.]*)?\s*(?:[;,]\s*|\s+)(?:url\s*=\s*)?(?P<quote>['\"]?)(?P<url>.*?)(?P=quote)\s*$",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class HeadFacts:
    canonical: str | None = None  # absolute
    meta_description: str | None = None
    meta_robots: str | None = None  # the content of <meta name=robots>, several joined by ", "
    hreflang: tuple[tuple[str, str], ...] = ()  # (language, absolute URL)
    meta_refresh: str | None = None  # absolute


def head_facts(root: HtmlElement, resolve: Callable[[str], str]) -> HeadFacts:
    """The head facts of a parsed page; `resolve` makes an href an absolute URL (raising
    ValueError when it cannot). A fact given twice counts once, the first."""
    canonical = description = refresh = None
    robots: list[str] = []
    alternates: dict[str, str] = {}
    for element in _METAS_AND_LINKS(root):
        if not isinstance(element, HtmlElement):
            continue
        get = element.get
        if element.tag == "meta":
            name = (get("name") or "").strip().lower()
            content = get("content")
            if content is None:
                continue
            if name == "description" and description is None:
                description = " ".join(content.split()) or None
            elif name == "robots":
                robots.append(content.strip())
            elif (get("http-equiv") or "").strip().lower() == "refresh" and refresh is None:
                match = _REFRESH.match(content)
                refresh = _absolute(resolve, match.group("url").strip()) if match else None
        else:
            rel = (get("rel") or "").lower().split()
            href = get("href")
            if not href:
                continue
            if "canonical" in rel and canonical is None:
                canonical = _absolute(resolve, href.strip())
            elif "alternate" in rel and get("hreflang"):
                lang = get("hreflang", "").strip()
                url = _absolute(resolve, href.strip())
                if lang and url is not None:
                    alternates.setdefault(lang, url)
    return HeadFacts(
        canonical=canonical,
        meta_description=description,
        meta_robots=", ".join(r for r in robots if r) or None,
        hreflang=tuple(alternates.items()),
        meta_refresh=refresh,
    )


def _absolute(resolve: Callable[[str], str], href: str) -> str | None:
    if not href:
        return None
    try:
        return resolve(href)
    except ValueError:
        return None


def robots_directives(meta_robots: str | None, x_robots_tag: str | None) -> frozenset[str]:
    """The directives (lower case: noindex, nofollow, none, ...) of a page's meta robots and
    X-Robots-Tag, less those the header addresses to a named crawler ("googlebot: noindex"):
    a directive for every robot is one for this one too."""
    directives: set[str] = set()
    for value in (meta_robots, x_robots_tag):
        for part in (value or "").split(","):
            directive = part.strip().lower()
            if ":" in directive:
                agent, _, directive = directive.partition(":")
                # "unavailable_after: <date>" is a directive with a value, not an agent.
                if agent.strip() != "unavailable_after":
                    continue
                directive = "unavailable_after"
            if directive:
                directives.add(directive)
    if "none" in directives:
        directives |= {"noindex", "nofollow"}
    return frozenset(directives)
