"""A web that floods a crawler with links: every page of every host carries `links` links to
pages never linked before (fresh words, no digits: each URL its own family, so no pattern
budget applies), and each of those pages does the same. What a crawler holds of such a web
grows with its bounds, not with the web (bench/node_memory.py).

Served from its own process on loopback (`FreshLinksWeb`, a context manager), one address per
host, one port for all; robots.txt is 404 (everything allowed).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import socket
import string
from multiprocessing.connection import Connection
from types import TracebackType

from websim.spec import host_address

_LETTERS = string.ascii_lowercase


def fresh_word(number: int) -> str:
    """A word of letters only, different for every number."""
    word = ""
    number += 1
    while number:
        number, digit = divmod(number - 1, 26)
        word = _LETTERS[digit] + word
    return word


def fresh_page(first: int, links: int) -> bytes:
    """An HTML page of `links` links to the words numbered from `first`."""
    anchors = "".join(f'<a href="/{fresh_word(n)}">x</a>\n' for n in range(first, first + links))
    return f"<html><head><title>fresh</title></head><body>\n{anchors}</body></html>".encode()


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: dict[str, int], links: int
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            if path == b"/robots.txt":
                status, body, kind = b"404 Not Found", b"none\n", b"text/plain"
            else:
                first = state["next"]
                state["next"] = first + links
                status, body, kind = b"200 OK", fresh_page(first, links), b"text/html"
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: "
                + kind
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, IndexError):
        pass  # the client left or sent junk
    except asyncio.CancelledError:
        pass  # the server is stopping: asyncio would log a cancelled handler as an error
    finally:
        writer.close()


def _main(hosts: int, links: int, conn: Connection) -> None:
    async def run() -> None:
        state = {"next": 0}  # shared by the hosts: every link of the web is fresh
        port = 0
        servers = []
        for host in range(hosts):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host_address(host), port))
            port = sock.getsockname()[1]
            servers.append(
                await asyncio.start_server(
                    lambda r, w: _serve(r, w, state, links), sock=sock, limit=16 * 1024
                )
            )
        conn.send(port)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, conn.recv)  # until the parent says stop (or dies)

    with contextlib.suppress(EOFError):
        asyncio.run(run())


class FreshLinksWeb:
    """`hosts` hosts on loopback, every page with `links` fresh links; `.roots` are their
    front pages."""

    def __init__(self, hosts: int, links: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_main, args=(hosts, links, child), daemon=True)
        self._process.start()
        child.close()
        if not self._conn.poll(30):
            self._process.kill()
            raise RuntimeError("the fresh-links web did not start")
        port = self._conn.recv()
        self.roots = [f"http://{host_address(host)}:{port}/" for host in range(hosts)]

    def __enter__(self) -> FreshLinksWeb:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with contextlib.suppress(OSError):
            self._conn.send("stop")
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
