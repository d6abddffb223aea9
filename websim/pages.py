"""Response bodies: page HTML, PDFs, the hub page and robots.txt.

A page's links are fixed by the graph; only how each link is *written* is drawn here, from a
generator seeded by (web seed, page id), so a page renders to the same bytes every time. The
forms are chosen to exercise a real parser: relative (`a/b`, `../x`, `./y`), root-relative,
absolute, protocol-relative, cross-host, `#fragments`, query parameters out of canonical
order, and `<base href>`. Every form resolves (urljoin against the base, then
canonicalization) to the target's canonical URL.
"""

from __future__ import annotations

import random
from functools import lru_cache

from websim.graph import LISTING, PDF, ROOT, Web

_WORDS = [
    *("crawl", "frontier", "server", "queue", "latency", "robots", "page", "link", "index"),
    *("quality", "rank", "host", "fetch", "parse", "schedule", "budget", "token", "bucket"),
    *("delay", "window", "policy", "breadth", "depth", "anchor", "text", "web", "graph"),
    *("node", "edge", "batch", "cache", "filter", "bloom", "sample", "metric", "socket"),
]
# Deterministic padding text; pages take slices of it at random offsets.
_FILLER = " ".join(random.Random(0).choices(_WORDS, k=40_000))
_FRAGMENTS = ("top", "intro", "details", "comments", "section-2")
_FRAGMENT_SHARE = 0.1  # links that carry a #fragment
# Directories a <base href> may point at (they need not exist: only resolution matters).
_BASE_DIRS = ("/", "/docs/", "/docs/guide/", "/static/assets/")
_LINKS_PER_PARAGRAPH = 8


class Renderer:
    """Renders the bodies of one web served on one port."""

    def __init__(self, web: Web, port: int) -> None:
        self.web = web
        self.origins = [f"http://{h.address}:{port}" for h in web.hosts]
        self._host_of = web.host_of.tolist()
        self._paths = web.paths
        self._kind = web.kind.tolist()
        self._size = web.size.tolist()
        self._host_first = web.host_start[web.host_of].tolist()  # for local page numbers

    def page(self, page: int) -> bytes:
        rnd = random.Random(self.web.spec.seed * 1_000_003 + page)
        if self._kind[page] == PDF:
            return self._pdf(page, rnd)
        spec = self.web.spec
        host = self._host_of[page]
        path = self.web.paths[page]
        base_dir = path.split("?", 1)[0].rsplit("/", 1)[0] + "/"
        head = ""
        if self._kind[page] != ROOT and rnd.random() < spec.base_href_share:
            base_dir = rnd.choice(_BASE_DIRS)
            href = base_dir if rnd.random() < 0.5 else self.origins[host] + base_dir
            head = f'<base href="{href}">'
        anchors = [self._anchor(rnd, host, base_dir, t) for t in self.web.out_links(page).tolist()]
        if rnd.random() < spec.mailto_share:
            mailto = '<a href="mailto:webmaster@example.invalid">Write to us</a>'
            anchors.insert(rnd.randrange(len(anchors) + 1), mailto)
        groups = [
            " | ".join(anchors[i : i + _LINKS_PER_PARAGRAPH])
            for i in range(0, len(anchors), _LINKS_PER_PARAGRAPH)
        ]
        number = page - self._host_first[page]
        top = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{head}'
            f"<title>Page {number} \u2014 {self.web.hosts[host].address}</title></head>\n"
            f"<body><h1>Caf\u00e9 page {number}</h1>\n"
        )
        bottom = "</body></html>\n"
        fixed = len(top) + len(bottom) + sum(len(g) + 12 for g in groups)
        slots = len(groups) + 1
        pad = max(0, self._size[page] - fixed) // slots
        parts = [top]
        for group in groups:
            parts.append(_paragraph(rnd, pad))
            parts.append(f"<p>{group}</p>\n")
        parts.append(_paragraph(rnd, pad))
        parts.append(bottom)
        return "".join(parts).encode()

    def _anchor(self, rnd: random.Random, host: int, base_dir: str, target: int) -> str:
        # Hot path for pages with hundreds of links: plain random() draws, no html.escape
        # (paths hold no characters that need escaping but the query's "&").
        written = self._paths[target]
        if self._kind[target] == LISTING and rnd.random() < 0.5:
            written = _reorder_query(written)
        target_host = self._host_of[target]
        draw = rnd.random()
        if target_host != host:
            origin = self.origins[target_host]
            href = (origin[5:] if draw < 0.2 else origin) + written  # [5:]: protocol-relative
        elif draw < 0.35:
            href = written
        elif draw < 0.5:
            href = self.origins[host] + written
        else:
            href = _relative(base_dir, written)
            if draw < 0.6 and not href.startswith("."):
                href = "./" + href
        draw = rnd.random()
        if draw < _FRAGMENT_SHARE:
            href += "#" + _FRAGMENTS[int(draw / _FRAGMENT_SHARE * len(_FRAGMENTS))]
        return f'<a href="{href.replace("&", "&amp;")}">page {target}</a>'

    def _pdf(self, page: int, rnd: random.Random) -> bytes:
        head = f"%PDF-1.4\n% websim document {page}\n"
        tail = "\n%%EOF\n"
        return (head + _filler(rnd, self._size[page] - len(head) - len(tail)) + tail).encode()

    def hub(self) -> bytes:
        items = "\n".join(f'<li><a href="{o}/">{o}/</a></li>' for o in self.origins)
        return (
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>websim hub</title>'
            f"</head>\n<body><h1>websim hub</h1><ul>\n{items}\n</ul></body></html>\n"
        ).encode()

    def robots(self, host: int) -> bytes | None:
        """robots.txt of a host, or None when it has none (served as a 404)."""
        profile = self.web.hosts[host]
        if profile.robots_disallow is None and profile.crawl_delay_s is None:
            return None
        lines = ["User-agent: *"]
        if profile.robots_disallow is not None:
            lines = [
                "User-agent: BadBot",
                "Disallow: /",
                "",
                "User-agent: *",
                f"Disallow: {profile.robots_disallow}",
            ]
        if profile.crawl_delay_s is not None:
            lines.append(f"Crawl-delay: {profile.crawl_delay_s:g}")
        return ("\n".join(lines) + "\n").encode()


def _paragraph(rnd: random.Random, length: int) -> str:
    return f"<p>{_filler(rnd, length - 8)}</p>\n" if length > 8 else ""


def _filler(rnd: random.Random, length: int) -> str:
    if length <= 0:
        return ""
    if length >= len(_FILLER):
        return (_FILLER * (length // len(_FILLER) + 1))[:length]
    start = rnd.randrange(len(_FILLER) - length)
    return _FILLER[start : start + length]


def _reorder_query(path: str) -> str:
    """Same URL, query parameters out of canonical (sorted) order."""
    base, query = path.split("?", 1)
    return base + "?" + "&".join(reversed(query.split("&")))


def _relative(base_dir: str, path: str) -> str:
    """A relative reference from directory base_dir (ending in /) to a root-relative path."""
    directory, _, name = path.partition("?")[0].rpartition("/")
    query = path[len(directory) + 1 + len(name) :]
    href = _dir_prefix(base_dir, directory + "/") + name + query
    return href or "./"


@lru_cache(maxsize=4096)
def _dir_prefix(base_dir: str, target_dir: str) -> str:
    base = [s for s in base_dir.split("/") if s]
    target = [s for s in target_dir.split("/") if s]
    common = 0
    while common < min(len(base), len(target)) and base[common] == target[common]:
        common += 1
    return "../" * (len(base) - common) + "".join(s + "/" for s in target[common:])
