"""Scenarios whose bodies or encodings are hostile: too big, compressed into a bomb, dripping,
hanging, cut by a reset, mislabelled, badly encoded, broken HTML, empty. Bodies of any size
are generated while they are sent, never held in memory."""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Iterator

from websim.hostile.exchange import BLOCK, GOOD_PAGES, HTML, Exchange, page

_RESET_AFTER = 10_000  # bytes of /reset's body sent before the connection is reset
_BINARY_BYTES = 50_000


def _filler(total: int) -> Iterator[bytes]:
    block = b"<p>" + b"all work and no play " * (BLOCK // 21) + b"</p>\n"
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


def _chunked(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """`chunks` in HTTP/1.1 chunked framing, ended by the last (empty) chunk."""
    for chunk in chunks:
        if chunk:
            yield b"%x\r\n%s\r\n" % (len(chunk), chunk)
    yield b"0\r\n\r\n"


def _empty_gzip_members(wire: int) -> Iterator[bytes]:
    """About `wire` bytes of gzip members that each decode to nothing: a body that costs the
    wire and never grows once decoded."""
    member = zlib.compress(b"", wbits=31)
    block = member * (BLOCK // len(member))
    for _ in range(max(1, wire // len(block))):
        yield block


async def huge_body(ex: Exchange) -> bool | None:
    size = ex.state.spec.hostile_body_bytes
    if ex.request.path == "/huge":
        headers = [("Content-Type", HTML), ("Content-Length", str(size))]
        return await ex.stream(headers, _filler(size))
    if ex.request.path == "/huge-stream":  # no length: the body ends when the server closes
        return await ex.stream([("Content-Type", HTML)], _filler(size))
    if ex.request.path == "/huge-chunked":  # no length either: chunked transfer encoding
        headers = [("Content-Type", HTML), ("Transfer-Encoding", "chunked")]
        return await ex.stream(headers, _chunked(_filler(size)))
    if ex.request.path == "/empty-members":  # on the wire without end, decoding to nothing
        headers = [
            ("Content-Type", HTML),
            ("Content-Encoding", "gzip"),
            ("Transfer-Encoding", "chunked"),
        ]
        return await ex.stream(headers, _chunked(_empty_gzip_members(size)))
    return None


async def gzip_bomb_host(ex: Exchange) -> bool | None:
    if ex.request.path == "/bomb":
        headers = [("Content-Type", HTML), ("Content-Encoding", "gzip")]
        return await ex.stream(headers, _gzip_bomb(ex.state.spec.hostile_body_bytes))
    return None


async def drip(ex: Exchange) -> bool | None:
    body = page("drip", GOOD_PAGES)
    if ex.request.path == "/drip":
        head = ex.head(200, [("Content-Type", HTML), ("Content-Length", str(len(body)))])
        ex.writer.write(head)
        return await ex.drip(body)
    if ex.request.path == "/drip-head":  # even the status line and headers come byte by byte
        head = ex.head(200, [("Content-Type", HTML), ("Content-Length", str(len(body)))])
        return await ex.drip(head + body)
    return None


async def hang_after_headers(ex: Exchange) -> bool | None:
    if ex.request.path == "/hang":
        return await ex.hang(ex.head(200, [("Content-Type", HTML), ("Content-Length", "1000")]))
    return None


async def reset_mid_body(ex: Exchange) -> bool | None:
    if ex.request.path == "/reset":
        head = ex.head(200, [("Content-Type", HTML), ("Content-Length", str(10 * _RESET_AFTER))])
        return await ex.reset(head, next(_filler(_RESET_AFTER)))
    return None


async def content_type(ex: Exchange) -> bool | None:
    if ex.request.path == "/no-type":  # HTML without a Content-Type: a crawler may sniff it
        return await ex.send(200, page("untyped", ["/via-no-type"]), content_type=None)
    if ex.request.path == "/wrong-type":  # HTML labelled as an image: not a page
        return await ex.send(200, page("mislabelled", ["/via-wrong-type"]), "image/png")
    return None


async def binary_html(ex: Exchange) -> bool | None:
    if ex.request.path == "/binary":
        rnd = random.Random(7)
        body = b"\x89PNG\r\n\x1a\n" + rnd.randbytes(_BINARY_BYTES)
        return await ex.send(200, body, "text/html")
    return None


async def bad_charset(ex: Exchange) -> bool | None:
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


async def broken_html(ex: Exchange) -> bool | None:
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


async def empty_body(ex: Exchange) -> bool | None:
    if ex.request.path == "/empty":
        return await ex.send(200, b"")
    if ex.request.path == "/empty-close":
        return await ex.stream([("Content-Type", HTML)], iter(()))
    if ex.request.path == "/not-modified":  # whatever the request asked: not modified
        return await ex.send(304, b"", content_type=None)
    return None
