"""Hostile hosts: one misbehaving server per scenario, served next to the synthetic web.

A crawler talks to servers nobody controls. Each scenario named in `WebSpec.hostile` gets its
own loopback address (after the web's hosts, on the same port) and answers like one kind of
broken or malicious server: endless redirects, a 1 GB body, a gzip bomb, a body that drips a
byte a second, a connection reset mid-body, binary data labelled HTML, a link trap, ...

Every hostile host serves a root page `/` linking to three good pages `/ok/0` .. `/ok/2` and to
the scenario's own resources. `Scenario.expected` lists the paths a robust crawler fetches
with a 2xx answer and no error: the good pages unless the scenario puts the whole host off
limits (a robots.txt that fails), plus the scenario's pages that are fine despite their
hostility. Bodies of any size are generated while they are sent, never held in memory.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

from websim.spec import WebSpec, host_address

HTML = "text/html; charset=utf-8"
GOOD_PAGES = tuple(f"/ok/{i}" for i in range(3))
_MAX_HEAD = 16 * 1024
_BLOCK = 64 * 1024  # bytes per write of a streamed body
_RESET_AFTER = 10_000  # bytes of /reset's body sent before the connection is reset
_BINARY_BYTES = 50_000
_YEAR_S = 365 * 24 * 3600


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # as sent
    path: str  # without the query
    query: str


@dataclass
class HostState:
    """What one hostile host shares across its connections."""

    spec: WebSpec
    offsite: str  # "ip:port" of a loopback server outside the hostile host, for redirects
    log: Callable[[str, int, str, int], None]  # (target, status, method, connection id)
    next_connection: Callable[[], int]
    writers: set[asyncio.StreamWriter] = field(default_factory=set)  # aborted on shutdown
    hits: Counter[str] = field(default_factory=Counter)  # requests so far per target


class Exchange:
    """One request on one connection: the ways a hostile host can answer it."""

    def __init__(
        self,
        state: HostState,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: int,
    ) -> None:
        self.state = state
        self.request = request
        self.reader = reader
        self.writer = writer
        self.conn = conn

    def head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        """The status line and headers (logged as the answer to the request)."""
        self.state.log(self.request.target, status, self.request.method, self.conn)
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Server: websim-hostile"]
        lines += [f"{name}: {value}" for name, value in headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(
        self,
        status: int,
        body: bytes = b"",
        content_type: str | None = HTML,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> bool:
        """A complete response with a Content-Length, on a connection that stays open."""
        fields = [("Content-Type", content_type)] if content_type else []
        fields += [*headers, ("Content-Length", str(len(body))), ("Connection", "keep-alive")]
        self.writer.write(self.head(status, fields) + body)
        await self.writer.drain()
        return True

    async def stream(self, headers: list[tuple[str, str]], chunks: Iterator[bytes]) -> bool:
        """A 200 whose body is produced while it is sent; the connection closes after it (the
        client has usually hung up long before the end)."""
        self.writer.write(self.head(200, [*headers, ("Connection", "close")]))
        for chunk in chunks:
            self.writer.write(chunk)
            await self.writer.drain()  # raises once the client is gone
            await asyncio.sleep(0)  # a full socket buffer is not needed to let other hosts in
        return False

    async def drip(self, data: bytes) -> bool:
        """Send `data` one byte per `hostile_drip_s`: each byte resets a read timeout."""
        for i in range(len(data)):
            self.writer.write(data[i : i + 1])
            await self.writer.drain()
            await asyncio.sleep(self.state.spec.hostile_drip_s)
        return False

    async def hang(self, head: bytes = b"") -> bool:
        """Send `head` (maybe nothing), then nothing more until the client gives up."""
        self.writer.write(head)
        await self.writer.drain()
        while await self.reader.read(_BLOCK):  # whatever the client sends is ignored
            pass
        return False

    async def reset(self, head: bytes, body: bytes) -> bool:
        """Send part of a response, then abort with a TCP reset (SO_LINGER 0)."""
        self.writer.write(head + body)
        await self.writer.drain()
        await asyncio.sleep(0.05)  # let the bytes reach the client before the reset
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()
        return False


def page(title: str, links: tuple[str, ...] | list[str] = (), extra: str = "") -> bytes:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<!DOCTYPE html><html><head><title>{title}</title></head>"
        f"<body><h1>{title}</h1><ul>{anchors}</ul>{extra}</body></html>\n"
    ).encode()


def _filler(total: int) -> Iterator[bytes]:
    block = b"<p>" + b"all work and no play " * (_BLOCK // 21) + b"</p>\n"
    sent = 0
    while sent < total:
        chunk = block[: total - sent]
        sent += len(chunk)
        yield chunk


def _gzip_bomb(decoded: int) -> Iterator[bytes]:
    """gzip of `decoded` zero bytes (about 1 KB per MB), at once: each 1 MB block is deflated
    with a full flush, which resets the compressor, so every block after the first deflates to
    the same bytes. The stream is the first block, the second repeated, and the trailer (CRC-32
    and length, kept up along the way): no compression work per request."""
    zeros = bytes(1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeated = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    blocks = max(1, decoded // len(zeros))
    crc = zlib.crc32(zeros)
    yield first
    for _ in range(blocks - 1):
        crc = zlib.crc32(zeros, crc)
        yield repeated
    # An empty final deflate block, then the gzip trailer.
    yield b"\x03\x00" + struct.pack("<II", crc, (blocks * len(zeros)) & 0xFFFFFFFF)


# ---- the scenarios --------------------------------------------------------------------------

# A scenario's own answers: True/False once it answered (keep the connection or not), None to
# leave the request to the common pages (root, good pages, 404).
Handler = Callable[[Exchange], Awaitable[bool | None]]


async def _redirect_loop(ex: Exchange) -> bool | None:
    path = ex.request.path
    if path.startswith("/loop/") and path[6:].isdigit():
        return await ex.send(302, headers=(("Location", f"/loop/{int(path[6:]) + 1}"),))
    if path in ("/cycle/a", "/cycle/b"):
        other = "/cycle/b" if path == "/cycle/a" else "/cycle/a"
        return await ex.send(302, headers=(("Location", other),))
    return None


async def _redirect_offsite(ex: Exchange) -> bool | None:
    if ex.request.path == "/away":
        location = f"http://{ex.state.offsite}/from-hostile-redirect"
        return await ex.send(302, headers=(("Location", location),))
    return None


async def _huge_body(ex: Exchange) -> bool | None:
    size = ex.state.spec.hostile_body_bytes
    if ex.request.path == "/huge":
        headers = [("Content-Type", HTML), ("Content-Length", str(size))]
        return await ex.stream(headers, _filler(size))
    if ex.request.path == "/huge-stream":  # no length: the body ends when the server closes
        return await ex.stream([("Content-Type", HTML)], _filler(size))
    return None


async def _gzip_bomb_host(ex: Exchange) -> bool | None:
    if ex.request.path == "/bomb":
        headers = [("Content-Type", HTML), ("Content-Encoding", "gzip")]
        return await ex.stream(headers, _gzip_bomb(ex.state.spec.hostile_body_bytes))
    return None


async def _drip(ex: Exchange) -> bool | None:
    body = page("drip", GOOD_PAGES)
    if ex.request.path == "/drip":
        head = ex.head(200, [("Content-Type", HTML), ("Content-Length", str(len(body)))])
        ex.writer.write(head)
        return await ex.drip(body)
    if ex.request.path == "/drip-head":  # even the status line and headers come byte by byte
        head = ex.head(200, [("Content-Type", HTML), ("Content-Length", str(len(body)))])
        return await ex.drip(head + body)
    return None


async def _hang_after_headers(ex: Exchange) -> bool | None:
    if ex.request.path == "/hang":
        return await ex.hang(ex.head(200, [("Content-Type", HTML), ("Content-Length", "1000")]))
    return None


async def _reset_mid_body(ex: Exchange) -> bool | None:
    if ex.request.path == "/reset":
        head = ex.head(200, [("Content-Type", HTML), ("Content-Length", str(10 * _RESET_AFTER))])
        return await ex.reset(head, next(_filler(_RESET_AFTER)))
    return None


async def _content_type(ex: Exchange) -> bool | None:
    if ex.request.path == "/no-type":  # HTML without a Content-Type: a crawler may sniff it
        return await ex.send(200, page("untyped", ["/via-no-type"]), content_type=None)
    if ex.request.path == "/wrong-type":  # HTML labelled as an image: not a page
        return await ex.send(200, page("mislabelled", ["/via-wrong-type"]), "image/png")
    return None


async def _binary_html(ex: Exchange) -> bool | None:
    if ex.request.path == "/binary":
        rnd = random.Random(7)
        body = b"\x89PNG\r\n\x1a\n" + rnd.randbytes(_BINARY_BYTES)
        return await ex.send(200, body, "text/html")
    return None


async def _bad_charset(ex: Exchange) -> bool | None:
    path = ex.request.path
    if path == "/invalid-utf8":
        body = page("bad \xff bytes", ["/via-invalid-utf8"]).replace(b"\xc3\xbf", b"\xff\xc3\x28")
        return await ex.send(200, body)
    if path == "/unknown-charset":
        return await ex.send(
            200, page("unknown", ["/via-unknown-charset"]), "text/html; charset=x-nope"
        )
    if path == "/binary-codec-charset":  # a Python codec, but not a text encoding
        return await ex.send(200, page("hex", ["/via-hex-charset"]), "text/html; charset=hex")
    if path == "/wrong-charset":  # UTF-8 bytes declared Latin-1: mojibake, links still work
        body = page("caf\u00e9 \u2603", ["/via-wrong-charset"])
        return await ex.send(200, body, "text/html; charset=iso-8859-1")
    return None


async def _broken_html(ex: Exchange) -> bool | None:
    if ex.request.path == "/broken":
        body = (
            b"<html><head><title>broken</title><body><p><b><i>unclosed <a href=/via-broken>x</b>"
            b"<table><tr><td><a href='/via-broken-2'>y</td></p></html></html><html>"
            b'<a href="/via-broken-3" <<<>>> &#xZZZ; &bogus; </table></table>'
            + b"<div>" * 100_000  # deeper than the parser goes: what follows is lost
            + b"<a href='/lost-in-the-depths'> <!-- never closed "
        )
        return await ex.send(200, body)
    if ex.request.path == "/broken-title":  # an unclosed title swallows the whole page
        return await ex.send(200, b"<title>" + page("broken title", ["/via-nowhere"]) * 1000)
    return None


async def _link_trap(ex: Exchange) -> bool | None:
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


async def _garbage_links(ex: Exchange) -> bool | None:
    path = ex.request.path
    if path == "/garbage":
        return await ex.send(200, page("garbage", [*_GARBAGE_HREFS, "/via-garbage"]))
    if path == "/bad-redirect":
        return await ex.send(302, headers=(("Location", "http://[::1"),))
    if path == "/long-redirect":
        return await ex.send(302, headers=(("Location", "/" + "y" * 10_000),))
    return None


async def _many_links(ex: Exchange) -> bool | None:
    path = ex.request.path
    if path == "/many":
        links = "".join(
            f'<a href="/many/{i}">{i}</a>\n' for i in range(ex.state.spec.hostile_many_links)
        )
        return await ex.send(200, page("many links", extra=links))
    if path.startswith("/many/"):
        return await ex.send(200, page(path))
    return None


async def _robots_500(ex: Exchange) -> bool | None:
    if ex.request.path == "/robots.txt":
        return await ex.send(500, b"oops\n", "text/plain")
    return None


async def _robots_timeout(ex: Exchange) -> bool | None:
    if ex.request.path == "/robots.txt":
        # Every other time the headers come first: a robots.txt cut off is no robots.txt.
        if ex.state.hits["/robots.txt"] % 2:
            return await ex.hang()
        return await ex.hang(
            ex.head(200, [("Content-Type", "text/plain"), ("Content-Length", "500")])
        )
    return None


async def _robots_garbage(ex: Exchange) -> bool | None:
    if ex.request.path == "/robots.txt":
        body = b"\x00\xff\xfe<html>User-agent: *\x00Disallow /ok\n" + random.Random(3).randbytes(
            2000
        )
        return await ex.send(200, body, "text/plain")
    return None


def _retry_after(value: Callable[[], str]) -> Handler:
    async def handler(ex: Exchange) -> bool | None:
        if ex.request.path == "/robots.txt" or ex.state.hits[ex.request.target] > 1:
            return None
        # The first request of each URL is turned away.
        return await ex.send(503, b"busy\n", "text/plain", (("Retry-After", value()),))

    return handler


async def _empty_body(ex: Exchange) -> bool | None:
    if ex.request.path == "/empty":
        return await ex.send(200, b"")
    if ex.request.path == "/empty-close":
        return await ex.stream([("Content-Type", HTML)], iter(()))
    return None


def _sid() -> str:
    return f"{random.getrandbits(64):016x}"


def _query_int(query: str, name: str) -> int:
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key == name and value.lstrip("-").isdigit():
            return int(value)
    return 0


async def _calendar_sid(ex: Exchange) -> bool | None:
    """An endless calendar of days whose every link carries a fresh session id."""
    if ex.request.path != "/events":
        return None
    day = _query_int(ex.request.query, "d")
    links = [f"/events?d={day + step}&sid={_sid()}" for step in (-1, 1, 7, 30)]
    return await ex.send(200, page(f"events of day {day}", [*links, f"/ok/1?sid={_sid()}"]))


async def _dead_links(ex: Exchange) -> bool | None:
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


async def _deep_trap(ex: Exchange) -> bool | None:
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


async def _hostile_site(ex: Exchange) -> bool | None:
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
        _calendar_sid,
        _dead_links,
        _deep_trap,
        _redirect_loop,
        _redirect_offsite,
        _huge_body,
        _gzip_bomb_host,
    ):
        answer = await handler(ex)
        if answer is not None:
            return answer
    return None


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    links: tuple[str, ...]  # what the root page links to besides the good pages
    handler: Handler
    good_pages: bool = True  # the root and /ok/* must be fetched
    also_expected: tuple[str, ...] = ()  # more paths that must be fetched

    @property
    def expected(self) -> tuple[str, ...]:
        return (("/", *GOOD_PAGES) if self.good_pages else ()) + self.also_expected


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "redirect_loop",
            "endless redirect chain and a 2-cycle",
            ("/loop/0", "/cycle/a"),
            _redirect_loop,
        ),
        Scenario(
            "redirect_offsite",
            "redirect to a server outside the host",
            ("/away",),
            _redirect_offsite,
        ),
        Scenario(
            "huge_body",
            "1 GB body, with and without Content-Length",
            ("/huge", "/huge-stream"),
            _huge_body,
        ),
        Scenario("gzip_bomb", "1 GB of zeros as about 1 MB of gzip", ("/bomb",), _gzip_bomb_host),
        Scenario(
            "drip", "body, or headers too, at one byte a second", ("/drip", "/drip-head"), _drip
        ),
        Scenario("hang_after_headers", "headers, then silence", ("/hang",), _hang_after_headers),
        Scenario("reset_mid_body", "TCP reset after 10 KB of 100 KB", ("/reset",), _reset_mid_body),
        Scenario(
            "content_type",
            "HTML without Content-Type, HTML labelled image/png",
            ("/no-type", "/wrong-type"),
            _content_type,
            also_expected=("/no-type", "/via-no-type", "/wrong-type"),
        ),
        Scenario("binary_html", "random binary labelled text/html", ("/binary",), _binary_html),
        Scenario(
            "bad_charset",
            "invalid UTF-8, unknown, non-text and wrong charsets",
            ("/invalid-utf8", "/unknown-charset", "/binary-codec-charset", "/wrong-charset"),
            _bad_charset,
            also_expected=(
                "/invalid-utf8",
                "/via-invalid-utf8",
                "/unknown-charset",
                "/via-unknown-charset",
                "/binary-codec-charset",
                "/via-hex-charset",
                "/wrong-charset",
                "/via-wrong-charset",
            ),
        ),
        Scenario(
            "broken_html",
            "unclosed tags, junk, 100,000 nested divs, an unclosed title",
            ("/broken", "/broken-title"),
            _broken_html,
            also_expected=(
                "/broken",
                "/via-broken",
                "/via-broken-2",
                "/via-broken-3",
                "/broken-title",
            ),
        ),
        Scenario(
            "link_trap",
            "endless calendar, session ids, self-nesting relative link",
            ("/cal/2024/1", "/session?sid=0123456789abcdef", "/deep/"),
            _link_trap,
            also_expected=("/cal/2024/1", "/session", "/deep/"),
        ),
        Scenario(
            "garbage_links",
            "malformed and overlong links and Locations",
            ("/garbage", "/bad-redirect", "/long-redirect"),
            _garbage_links,
            also_expected=("/garbage",),
        ),
        Scenario(
            "many_links",
            "one page with 100,000 links",
            ("/many",),
            _many_links,
            also_expected=("/many",),
        ),
        Scenario(
            "calendar_sid",
            "endless calendar of days, a fresh session id in every link",
            ("/events?d=0&sid=0123456789abcdef",),
            _calendar_sid,
            also_expected=("/events?d=0",),
        ),
        Scenario(
            "dead_links",
            "one page with 100,000 links that answer 404",
            ("/links",),
            _dead_links,
            also_expected=("/links",),
        ),
        Scenario(
            "deep_trap",
            "documentation site with an endless branching archive deep inside",
            ("/docs/",),
            _deep_trap,
            also_expected=DOC_PAGES,
        ),
        Scenario(
            "hostile_site",
            "about 40 good pages among calendar, dead links, deep trap, loops, big bodies",
            (),
            _hostile_site,
            good_pages=False,
            also_expected=("/", *SITE_PAGES, *DOC_PAGES),
        ),
        Scenario("robots_500", "robots.txt answers 500", (), _robots_500, good_pages=False),
        Scenario(
            "robots_timeout",
            "robots.txt never answers, or stops after its headers",
            (),
            _robots_timeout,
            good_pages=False,
        ),
        Scenario("robots_garbage", "robots.txt is binary junk", (), _robots_garbage),
        Scenario(
            "retry_after_past",
            "503 once per URL, Retry-After a date in the past",
            (),
            _retry_after(lambda: formatdate(946684800, usegmt=True)),
        ),
        Scenario(
            "retry_after_far",
            "503 once per URL, Retry-After a year away",
            (),
            _retry_after(lambda: str(_YEAR_S)),
        ),
        Scenario(
            "empty_body",
            "200 with an empty body, with and without a length",
            ("/empty", "/empty-close"),
            _empty_body,
            also_expected=("/empty", "/empty-close"),
        ),
    )
}


def check_scenarios(names: tuple[str, ...]) -> None:
    """Raise ValueError unless `names` are distinct scenarios of SCENARIOS."""
    if set(names) - set(SCENARIOS) or len(set(names)) != len(names):
        raise ValueError(f"hostile must name distinct scenarios of {sorted(SCENARIOS)}")


def addresses(spec: WebSpec) -> list[str]:
    """Loopback addresses of the hostile hosts, in `spec.hostile` order, after the web's."""
    return [host_address(spec.hosts + i) for i in range(len(spec.hostile))]


# ---- serving --------------------------------------------------------------------------------


def _parse(head: bytes) -> Request | None:
    request_line = head.decode("latin-1").split("\r\n", 1)[0].split(" ")
    if len(request_line) != 3:
        return None
    method, target, _ = request_line
    path, _, query = target.partition("#")[0].partition("?")
    return Request(method, target, path, query)


async def _answer(scenario: Scenario, ex: Exchange) -> bool:
    ex.state.hits[ex.request.target] += 1
    own = await scenario.handler(ex)
    if own is not None:
        return own
    path = ex.request.path
    if path == "/":
        return await ex.send(200, page(scenario.name, [*GOOD_PAGES, *scenario.links]))
    if path in GOOD_PAGES or path.startswith("/via-"):
        return await ex.send(200, page(path, ["/"]))
    return await ex.send(404, b"not found\n", "text/plain")


async def serve_connection(
    scenario: Scenario,
    state: HostState,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Answer requests on one connection until one of them closes it or the client leaves."""
    state.writers.add(writer)
    conn = state.next_connection()
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request = _parse(head)
            if request is None:
                return
            if not await _answer(scenario, Exchange(state, request, reader, writer, conn)):
                return
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass  # the client left or sent junk: nothing to answer
    except asyncio.CancelledError:
        # The server is stopping mid-drip or mid-hang. Ending quietly: asyncio's stream
        # callback would log a cancelled connection handler as an error.
        pass
    finally:
        state.writers.discard(writer)
        writer.close()


async def start(
    spec: WebSpec,
    sockets: list[socket.socket],
    port: int,
    offsite: str,
    log: Callable[[str, str, int, float, str, int], None],
    next_connection: Callable[[], int],
) -> list[tuple[asyncio.Server, HostState]]:
    """Serve each scenario of `spec.hostile` on its socket."""
    servers = []
    for name, sock in zip(spec.hostile, sockets, strict=True):
        host = f"{sock.getsockname()[0]}:{port}"

        def host_log(target: str, status: int, method: str, conn: int, host: str = host) -> None:
            log(host, target, status, time.time(), method, conn)

        state = HostState(spec, offsite, host_log, next_connection)
        scenario = SCENARIOS[name]
        server = await asyncio.start_server(
            lambda r, w, s=scenario, st=state: serve_connection(s, st, r, w),
            sock=sock,
            limit=_MAX_HEAD,
        )
        servers.append((server, state))
    return servers
