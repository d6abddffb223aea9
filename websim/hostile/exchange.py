"""The answering side of a hostile host: a parsed request, the state a host shares across its
connections, and the ways one exchange can answer (a whole response, a streamed body, a drip,
a hang, a TCP reset), plus the HTML page every scenario builds its answers from."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus

from websim.spec import WebSpec

HTML = "text/html; charset=utf-8"
GOOD_PAGES = tuple(f"/ok/{i}" for i in range(3))
BLOCK = 64 * 1024  # bytes per write of a streamed body


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
        while await self.reader.read(BLOCK):  # whatever the client sends is ignored
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


# A scenario's own answers: True/False once it answered (keep the connection or not), None to
# leave the request to the common pages (root, good pages, 404).
Handler = Callable[[Exchange], Awaitable[bool | None]]
