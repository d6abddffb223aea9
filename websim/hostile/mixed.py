"""Hostile servers that are mostly ordinary: a few dozen good pages beside URLs that fail slowly,
or beside a generator of fresh paths. What they test is whether the bad part of a server takes
the good part's turns: the good pages must all be fetched, once, in reasonable time."""

from __future__ import annotations

import random
import string

from websim.hostile import bodies
from websim.hostile.exchange import HTML, Exchange, page

YEAR_S = 365 * 24 * 3600
ARTICLES = tuple(f"/articles/{i}.html" for i in range(20))
# What fails slowly or pushes back, linked from the root before the articles.
SLOW_URLS = ("/hang", "/drip", "/drip-head", "/reset", "/limited", "/busy")


async def slow_failures(ex: Exchange) -> bool | None:
    """Twenty articles beside URLs that hang after their headers, drip, reset, answer 429
    with a Retry-After of a year, or 503 every time: each about its own URL, while the
    articles answer at once."""
    path = ex.request.path
    if path == "/":
        return await ex.send(200, page("slow failures", [*SLOW_URLS, *ARTICLES]))
    if path in ARTICLES:
        n = ARTICLES.index(path)
        return await ex.send(200, page(path, ["/", ARTICLES[(n + 1) % len(ARTICLES)]]))
    if path == "/limited":
        headers = (("Retry-After", str(YEAR_S)),)
        return await ex.send(429, b"slow down\n", "text/plain", headers)
    if path == "/busy":
        return await ex.send(503, b"busy\n", "text/plain")
    for handler in (bodies.drip, bodies.hang_after_headers, bodies.reset_mid_body):
        answer = await handler(ex)
        if answer is not None:
            return answer
    return None


CHAIN = tuple(f"/guide/part-{i}.html" for i in range(30))
TRAP_ROOT = "/explore/"
TRAP_FANOUT = 4
_GUIDE_WORDS = ("install", "configure", "crawl", "seed", "scope", "query", "report", "resume")


def _fresh_words(path: str) -> list[str]:
    """Words never seen before (no digits, none repeated in the path), fixed per path."""
    rnd = random.Random(path)
    return ["".join(rnd.choices(string.ascii_lowercase, k=rnd.randint(5, 9))) for _ in range(4)]


async def fresh_trap(ex: Exchange) -> bool | None:
    """A chain of 30 ordinary pages beside a generator of paths that only grow deeper, each
    level with fresh words: every page under /explore/ links four new subdirectories of
    itself, so no two of its URLs share a directory or a digit-masked pattern."""
    path = ex.request.path
    if path == "/":
        return await ex.send(200, page("fresh trap", [TRAP_ROOT, CHAIN[0]]))
    if path in CHAIN:
        n = CHAIN.index(path)
        links = ["/"] + ([CHAIN[n + 1]] if n + 1 < len(CHAIN) else [])
        text = " ".join(random.Random(path).choices(_GUIDE_WORDS, k=80))
        return await ex.send(200, page(path, links, f"<p>{text}</p>"))
    if path.startswith(TRAP_ROOT) and path.endswith("/"):
        links = [f"{path}{word}/" for word in _fresh_words(path)][:TRAP_FANOUT]
        body = page(path.rstrip("/").rpartition("/")[2], [*links, "/"])
        return await ex.send(200, body, HTML)
    return None
