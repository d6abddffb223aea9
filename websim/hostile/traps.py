"""Scenarios that lead a crawler astray: redirect loops and redirects off the host, link traps
(endless calendars, session ids, self-nesting links), garbage and overlong links, pages of
many or dead links, a trap deep inside a documentation site, and a whole hostile site that
combines them with some of the body scenarios."""

from __future__ import annotations

import random

from websim.hostile.bodies import gzip_bomb_host, huge_body
from websim.hostile.exchange import Exchange, page


async def redirect_loop(ex: Exchange) -> bool | None:
    path = ex.request.path
    if path.startswith("/loop/") and path[6:].isdigit():
        return await ex.send(302, headers=(("Location", f"/loop/{int(path[6:]) + 1}"),))
    if path in ("/cycle/a", "/cycle/b"):
        other = "/cycle/b" if path == "/cycle/a" else "/cycle/a"
        return await ex.send(302, headers=(("Location", other),))
    return None


async def redirect_offsite(ex: Exchange) -> bool | None:
    if ex.request.path == "/away":
        location = f"http://{ex.state.offsite}/from-hostile-redirect"
        return await ex.send(302, headers=(("Location", location),))
    return None


async def link_trap(ex: Exchange) -> bool | None:
    path = ex.request.path
    parts = path.split("/")
    if len(parts) == 4 and parts[1] == "cal" and parts[2].isdigit() and parts[3].isdigit():
        # An endless calendar: every month links to the next and previous month and year.
        year, month = int(parts[2]), int(parts[3])
        nxt = f"/cal/{year + month // 12}/{month % 12 + 1}"
        prev = f"/cal/{year - (month == 1)}/{(month - 2) % 12 + 1}"
        links = [nxt, prev, f"/cal/{year + 1}/{month}", f"/cal/{year - 1}/{month}"]
        return await ex.send(200, page(f"{year}-{month}", links))
    if path == "/session" or path.startswith("/session;"):
        # Every visit hands out a fresh session id in every link.
        sid = f"{random.getrandbits(64):016x}"
        links = [f"/session?sid={sid}", f"/session;jsessionid={sid}", f"/ok/0?PHPSESSID={sid}"]
        return await ex.send(200, page("session", links))
    if path.startswith("/deep/"):  # a relative link that nests itself: /deep/x/x/x/...
        return await ex.send(200, page("deep", ["x/"]))
    return None


_GARBAGE_HREFS = (
    "http://[::1",
    "http://a b/",
    "javascript:alert(1)",
    "%%%zz",
    "http://127.0.0.1:99999/",
    "http://" + "a" * 300 + ".example/",
    "/" + "x" * 10_000,
    "http://\u0000/",
    "ht!tp://x/",
    "//",
    "?q=%ff%fe",
    "data:text/html,<a href=/x>",
    "\t\n /ok/1 \n",
)


async def garbage_links(ex: Exchange) -> bool | None:
    path = ex.request.path
    if path == "/garbage":
        return await ex.send(200, page("garbage", [*_GARBAGE_HREFS, "/via-garbage"]))
    if path == "/bad-redirect":
        return await ex.send(302, headers=(("Location", "http://[::1"),))
    if path == "/long-redirect":
        return await ex.send(302, headers=(("Location", "/" + "y" * 10_000),))
    return None


async def many_links(ex: Exchange) -> bool | None:
    path = ex.request.path
    if path == "/many":
        links = "".join(
            f'<a href="/many/{i}">{i}</a>\n' for i in range(ex.state.spec.hostile_many_links)
        )
        return await ex.send(200, page("many links", extra=links))
    if path.startswith("/many/"):
        return await ex.send(200, page(path))
    return None


def _sid() -> str:
    return f"{random.getrandbits(64):016x}"


def _query_int(query: str, name: str) -> int:
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key == name and value.lstrip("-").isdigit():
            return int(value)
    return 0


async def calendar_sid(ex: Exchange) -> bool | None:
    """An endless calendar of days whose every link carries a fresh session id."""
    if ex.request.path != "/events":
        return None
    day = _query_int(ex.request.query, "d")
    links = [f"/events?d={day + step}&sid={_sid()}" for step in (-1, 1, 7, 30)]
    return await ex.send(200, page(f"events of day {day}", [*links, f"/ok/1?sid={_sid()}"]))


async def dead_links(ex: Exchange) -> bool | None:
    """One page linking to `hostile_many_links` URLs that all answer 404."""
    if ex.request.path == "/links":
        links = "".join(
            f'<a href="/gone/{i}">{i}</a>\n' for i in range(ex.state.spec.hostile_many_links)
        )
        return await ex.send(200, page("links", extra=links))
    return None  # /gone/N: the common 404


# A small documentation site: sections of named pages, every page its own text.
DOC_SECTIONS = {
    "guide": ("install", "configure", "first-crawl", "scheduling", "politeness", "output", "faq"),
    "reference": ("cli", "config", "flows", "storage", "queries", "schema", "archive"),
    "howto": ("resume", "deploy", "monitor", "tune", "scale", "debug", "upgrade"),
    "concepts": ("frontier", "quality", "capability", "traps", "budgets", "nodes", "exchange"),
}
DOC_PAGES = (
    "/docs/",
    *(f"/docs/{section}/" for section in DOC_SECTIONS),
    *(f"/docs/{section}/{name}.html" for section, names in DOC_SECTIONS.items() for name in names),
)
ARCHIVE = "/docs/reference/archive/"
_TEXT_WORDS = ("crawl", "server", "queue", "page", "link", "budget", "trap", "shape", "family")


def _doc_text(path: str) -> str:
    rnd = random.Random(path)
    return "<p>" + " ".join(rnd.choices(_TEXT_WORDS, k=200)) + "</p>"


async def deep_trap(ex: Exchange) -> bool | None:
    """A documentation site with a trap deep inside: its archive page starts an endless,
    branching chain of archive pages from one template."""
    path = ex.request.path
    if path == "/docs/":
        links = [f"/docs/{section}/" for section in DOC_SECTIONS]
        return await ex.send(200, page("docs", links, _doc_text(path)))
    parts = path.split("/")
    if len(parts) == 4 and parts[1] == "docs" and parts[2] in DOC_SECTIONS and not parts[3]:
        links = [f"{name}.html" for name in DOC_SECTIONS[parts[2]]] + [f"/docs/?sid={_sid()}"]
        return await ex.send(200, page(parts[2], links, _doc_text(path)))
    if path in DOC_PAGES:
        links = ["./", "/docs/"] + (["archive/1"] if path.endswith("archive.html") else [])
        return await ex.send(200, page(path, links, _doc_text(path)))
    if path.startswith(ARCHIVE) and path[len(ARCHIVE) :].isdigit():
        n = int(path[len(ARCHIVE) :])
        return await ex.send(200, page(f"archive page {n}", [str(n + 1), str(2 * n + 1)]))
    return None


SITE_PAGES = ("/about", "/contact", "/team", "/blog/") + tuple(
    f"/blog/2024/{month:02d}/post.html" for month in (3, 5, 9)
)


async def hostile_site(ex: Exchange) -> bool | None:
    """About 40 pages worth crawling among the usual pathologies of the real web, on one
    server whose front page links to the traps first."""
    path = ex.request.path
    if path == "/":
        traps = [f"/events?d=0&sid={_sid()}", "/links", "/loop/0", "/away", "/huge", "/bomb"]
        ordinary = ["/about?utm_source=home", "/contact", "/team", "/blog/", "/docs/"]
        return await ex.send(200, page("a hostile site", [*traps, *ordinary]))
    if path in SITE_PAGES:
        links = ["/", f"/about;jsessionid={_sid()}"]
        if path == "/blog/":
            links += [p for p in SITE_PAGES if p.startswith("/blog/2024")]
        return await ex.send(200, page(path, links, _doc_text(path)))
    for handler in (
        calendar_sid,
        dead_links,
        deep_trap,
        redirect_loop,
        redirect_offsite,
        huge_body,
        gzip_bomb_host,
    ):
        answer = await handler(ex)
        if answer is not None:
            return answer
    return None
