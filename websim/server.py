"""The HTTP side: one asyncio event loop, in a child process, serving every host of a web.

Each host listens on its own loopback address, all on one port. A minimal HTTP/1.1 server
written against asyncio.Protocol keeps the per-request cost low so the simulator is not the
bottleneck of the crawler it measures. Per host it applies what real servers do to crawlers:
response latency (a timer, so slow hosts never block others), a keep-alive request limit, a
hidden token-bucket rate limit answered with 429/503 and Retry-After, response times that grow
with the request rate on degrading hosts (websim/queueing.py), requests that wait for one of a
few workers on physical queue hosts (websim/physical.py), and robots.txt.

The parent talks to the child over a multiprocessing pipe: ("log", clear) returns the request
log, ("queue_log", clear) the physical queue hosts' response times, ("stop",) shuts down. End
of file on the pipe means the parent died, and the child exits.

Over 400 lines because it is one request path: the connection protocol, the per-host state it
answers from (tokens, latency, keep-alive limit) and the response it writes are read together;
split, one request's handling would be spread over modules that only each other import.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import math
import random
import resource
import signal
import socket
import time
from multiprocessing.connection import Connection

from websim import hostile
from websim.changes import ChangeModel
from websim.graph import PDF, Web
from websim.pages import Renderer
from websim.physical import WorkerPool
from websim.queueing import ArrivalRate

HUB_PATH = "/hub"
_MAX_HEAD = 16 * 1024
_BIND_ATTEMPTS = 20
_FD_LIMIT = 1 << 16
_REASONS = {
    200: "OK",
    304: "Not Modified",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
_HTML = "text/html; charset=utf-8"
_TEXT = "text/plain; charset=utf-8"
_PDF = "application/pdf"


def child_main(web: Web, port: int, conn: Connection) -> None:
    """Entry point of the server process: serve until told to stop or the parent is gone."""
    # Ctrl-C reaches the whole process group; the parent decides when the child stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # One listening socket per host plus the clients' connections: take all the fds allowed.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _FD_LIMIT if hard == resource.RLIM_INFINITY else min(hard, _FD_LIMIT)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        sockets = _bind_all([h.address for h in web.hosts] + hostile.addresses(web.spec), port)
    except OSError as exc:
        conn.send(("error", f"cannot bind the websim hosts: {exc}"))
        return
    asyncio.run(_serve(web, sockets, conn))


def _bind_all(addresses: list[str], port: int) -> list[socket.socket]:
    """Listening sockets for every address on one port. With port 0 the first bind picks the
    port; if another address already has it taken, start over with a fresh port."""
    for _ in range(_BIND_ATTEMPTS):
        bound: list[socket.socket] = []
        chosen = port
        try:
            for address in addresses:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                bound.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((address, chosen))
                sock.listen(1024)
                sock.setblocking(False)
                chosen = sock.getsockname()[1]
            return bound
        except OSError as exc:
            for sock in bound:
                sock.close()
            if port != 0 or exc.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, "no port free on every websim address")


class _Host:
    """Per-host serving state: the profile's numbers plus the token bucket."""

    def __init__(self, web: Web, index: int, port: int) -> None:
        profile = web.hosts[index]
        self.index = index
        self.name = f"{profile.address}:{port}"
        self.keepalive_max = profile.keepalive_max
        self.ban_status = profile.ban_status
        median_s = profile.latency_ms_median / 1000
        # On the wire, the network's part is the delay line's, not the server's.
        self.wire_s = median_s if web.spec.latency_on_wire else 0.0
        server_s = median_s - self.wire_s
        self.latency_mu = math.log(server_s) if server_s > 0 else None  # of the lognormal
        self.rate = profile.rate_limit_rps
        # A degrading host: its median latency follows the arrival rate it sees.
        self.queueing = profile.queueing()
        self.arrivals = ArrivalRate()
        # A physical queue host: every request waits for one of its workers.
        rng = random.Random(web.spec.seed * 1_000_003 + index)
        self.pool = None if profile.queue is None else WorkerPool(profile.queue, rng)
        self.capacity = max(1.0, (self.rate or 0.0) * web.spec.rate_limit_burst_s)
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        first, last = web.host_start[index], web.host_start[index + 1]
        self.pages = {web.paths[p]: p for p in range(first, last)}

    def take_token(self) -> float:
        """0 if the request may proceed, else the seconds until a token is available."""
        if self.rate is None:
            return 0.0
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class _Sim:
    """Everything the connections share."""

    def __init__(self, web: Web, port: int) -> None:
        self.web = web
        self.renderer = Renderer(web, port)
        static = web.spec.static
        self._bodies = [self.renderer.page(p) for p in range(web.n_pages)] if static else []
        self.hosts = [_Host(web, i, port) for i in range(len(web.hosts))]
        self.changes = ChangeModel(web)
        self.latency_sigma = web.spec.latency_sigma
        self.idle_timeout = web.spec.idle_timeout_s
        self.random = random.Random(web.spec.seed)
        self.log: list[tuple[str, str, int, float, str, int]] = []
        # Per request to a physical queue host: host, target (None: a background user's),
        # arrival (epoch s), seconds it waited for a worker, seconds of service (its response
        # time at the server is the sum).
        self.queue_log: list[tuple[str, str | None, float, float, float]] = []
        self.connections: set[_Connection] = set()
        self.next_connection_id = 0

    def log_background(self, host: str, wait: float, service: float) -> None:
        self.queue_log.append((host, None, time.time() - wait - service, wait, service))

    def page(self, page: int) -> bytes:
        return self._bodies[page] if self._bodies else self.renderer.page(page)

    def new_connection_id(self) -> int:
        self.next_connection_id += 1
        return self.next_connection_id - 1

    def latency(self, host: _Host) -> float:
        if host.queueing is not None:
            median = host.queueing.median_rtt_s(host.arrivals.arrive(time.monotonic()))
            return self.random.lognormvariate(math.log(median - host.wire_s), self.latency_sigma)
        if host.latency_mu is None:
            return 0.0
        return self.random.lognormvariate(host.latency_mu, self.latency_sigma)


class _Connection(asyncio.Protocol):
    """One client connection: parses requests in order, answers each after its latency."""

    def __init__(self, sim: _Sim, host: _Host) -> None:
        self.sim = sim
        self.host = host
        self.buffer = bytearray()
        self.requests = 0
        self.busy = False  # a response is waiting on its latency timer
        self.paused = False  # the client is not reading; stop producing responses
        self.closed = False
        self.timer: asyncio.TimerHandle | None = None
        self.last_active = time.monotonic()
        self.transport: asyncio.Transport | None = None
        self.id = sim.new_connection_id()
        self.target = ""  # of the request being answered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.sim.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        self.sim.connections.discard(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._drain()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.last_active = time.monotonic()
        self._drain()

    def _drain(self) -> None:
        """Answer the buffered requests in order until one has to wait."""
        while not (self.busy or self.paused or self.closed):
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > _MAX_HEAD:
                    self._send(_response(431, _TEXT, b""), close=True)
                return
            head = bytes(self.buffer[:end])
            del self.buffer[: end + 4]
            response, delay, close = self._handle(head)
            if self.host.pool is not None:
                self.busy = True
                served = functools.partial(
                    self._served, response, delay, close, self.target, time.time()
                )
                self.host.pool.submit(served)
            elif delay > 0:
                self.busy = True
                loop = asyncio.get_running_loop()
                self.timer = loop.call_later(delay, self._send_later, response, close)
            else:
                self._send(response, close)

    def _served(
        self,
        response: bytes,
        delay: float,
        close: bool,
        target: str,
        arrived: float,
        wait: float,
        service: float,
    ) -> None:
        """A physical queue host's worker is done with the request: log its time at the
        server, then answer after the host's latency (if any is in the server's timer)."""
        self.sim.queue_log.append((self.host.name, target, arrived, wait, service))
        if delay > 0 and not self.closed:
            self.timer = asyncio.get_running_loop().call_later(
                delay, self._send_later, response, close
            )
        else:
            self._send_later(response, close)

    def _send_later(self, response: bytes, close: bool) -> None:
        self.busy = False
        self.timer = None
        if not self.closed:
            self._send(response, close)
            self._drain()

    def _send(self, response: bytes, close: bool) -> None:
        assert self.transport is not None
        self.transport.write(response)
        self.last_active = time.monotonic()
        if close:
            self.closed = True
            self.transport.close()  # sends what is buffered first

    def _handle(self, head: bytes) -> tuple[bytes, float, bool]:
        """The response to one request head, its latency and whether to close after it."""
        lines = head.decode("latin-1").split("\r\n")
        request_line = lines[0].split(" ")
        host = self.host
        if len(request_line) != 3:
            return self._log("?", lines[0], 400, _response(400, _TEXT, b""), True)
        method, target, version = request_line
        keep_alive = version == "HTTP/1.1"
        has_body = False
        conditional: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "connection":
                value = value.lower()
                keep_alive = "close" not in value and (keep_alive or "keep-alive" in value)
            elif name == "transfer-encoding" or (name == "content-length" and value.strip() != "0"):
                has_body = True
            elif name in ("if-none-match", "if-modified-since"):
                conditional[name] = value.strip()

        self.requests += 1
        remaining = host.keepalive_max - self.requests
        close = not keep_alive or remaining <= 0
        if method not in ("GET", "HEAD") or has_body:
            # Request bodies are never read, so the connection cannot be reused.
            status = 400 if has_body else 405
            return self._log(method, target, status, _response(status, _TEXT, b""), True)
        if target.startswith("http://"):  # absolute-form request target
            target = "/" + target.split("/", 3)[-1] if target.count("/") >= 3 else "/"
        path, _, query = target.partition("#")[0].partition("?")
        head_only = method == "HEAD"

        if path == "/robots.txt":  # exempt from the rate limit: a crawler must be able to ask
            body = self.sim.renderer.robots(host.index)
            origin = self.sim.renderer.origins[host.index]
            if body is not None and (entry := self.sim.changes.sitemap_line(host.index, origin)):
                body += f"{entry}\n".encode()
            status = 200 if body is not None else 404
            response = _response(status, _TEXT, body or b"", head_only, remaining, close=close)
            return self._log(method, target, status, response, close, self.sim.latency(host))

        wait = host.take_token()
        if wait > 0:
            retry_after = max(1, math.ceil(wait))
            response = _response(
                host.ban_status, _TEXT, b"slow down\n", head_only, remaining, retry_after, close
            )
            return self._log(method, target, host.ban_status, response, close)

        validators: list[tuple[str, str]] = []
        if host.index == 0 and path == HUB_PATH:
            status, ctype, body = 200, _HTML, self.sim.renderer.hub()
        else:
            key = path + "?" + "&".join(sorted(query.split("&"))) if query else path
            page = host.pages.get(key)
            changes = self.sim.changes
            origin = self.sim.renderer.origins[host.index]
            has_robots = self.sim.web.hosts[host.index].robots_disallow is not None
            if page is None:
                sitemap = changes.sitemap_file(host.index, path, origin, has_robots)
                if sitemap is None:
                    status, ctype, body = 404, _HTML, b"<html><body>not found</body></html>\n"
                else:
                    status, body = 200, sitemap
                    ctype = "application/gzip" if path.endswith(".gz") else "application/xml"
            else:
                ctype = _PDF if self.sim.web.kind[page] == PDF else _HTML
                status, body = 200, changes.body(page, self.sim.page(page))
                not_modified, validators = changes.answer(
                    host.index,
                    page,
                    conditional.get("if-none-match"),
                    conditional.get("if-modified-since"),
                )
                if not_modified:
                    status, body = 304, b""
        response = _response(
            status, ctype, body, head_only, remaining, close=close, extra=validators
        )
        return self._log(method, target, status, response, close, self.sim.latency(host))

    def _log(
        self,
        method: str,
        target: str,
        status: int,
        response: bytes,
        close: bool,
        delay: float = 0.0,
    ) -> tuple[bytes, float, bool]:
        """Record the request (at its arrival) in the log; pass the answer through."""
        self.target = target
        self.sim.log.append((self.host.name, target, status, time.time(), method, self.id))
        return response, delay, close


def _response(
    status: int,
    content_type: str,
    body: bytes,
    head_only: bool = False,
    remaining: int = 0,
    retry_after: int | None = None,
    close: bool = True,
    extra: list[tuple[str, str]] | None = None,
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        "Server: websim",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in extra or ()),
    ]
    if retry_after is not None:
        lines.append(f"Retry-After: {retry_after}")
    if close:
        lines.append("Connection: close")
    else:
        # Like Apache: tell the client how many more requests this connection takes.
        lines.append("Connection: keep-alive")
        lines.append(f"Keep-Alive: max={remaining}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


async def _serve(web: Web, sockets: list[socket.socket], conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    port = sockets[0].getsockname()[1]
    sim = _Sim(web, port)
    servers = []
    for host, sock in zip(sim.hosts, sockets[: len(sim.hosts)], strict=True):
        protocol = functools.partial(_Connection, sim, host)
        servers.append(await loop.create_server(protocol, sock=sock))
    hostiles = await hostile.start(
        web.spec,
        sockets[len(sim.hosts) :],
        port,
        offsite=sim.hosts[0].name,
        log=lambda *entry: sim.log.append(entry),
        next_connection=sim.new_connection_id,
    )
    servers += [server for server, _ in hostiles]
    pools = [host.pool for host in sim.hosts if host.pool is not None]
    for host in sim.hosts:
        if host.pool is not None:
            host.pool.start(loop, functools.partial(sim.log_background, host.name))
    stopped = loop.create_future()

    def on_command() -> None:
        try:
            command = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            command = ("stop",)
        if command[0] == "night":
            sim.changes.advance()
            conn.send(sim.changes.night)
        elif command[0] == "queue_log":
            conn.send(sim.queue_log)
            if command[1]:
                sim.queue_log = []
        elif command[0] == "log":
            conn.send(sim.log)
            if command[1]:
                sim.log = []
        elif not stopped.done():
            stopped.set_result(None)

    loop.add_reader(conn.fileno(), on_command)
    sweeper = asyncio.create_task(_close_idle(sim))
    conn.send(("ready", port))
    await stopped

    loop.remove_reader(conn.fileno())
    sweeper.cancel()
    for pool in pools:
        pool.stop()
    for server in servers:
        server.close()
    for connection in list(sim.connections):
        if connection.transport is not None:
            connection.transport.abort()
    for _, state in hostiles:
        for writer in list(state.writers):
            writer.transport.abort()
    for server in servers:
        await server.wait_closed()
    with contextlib.suppress(OSError):  # nobody may be listening any more
        conn.send(("stopped",))


async def _close_idle(sim: _Sim) -> None:
    """Close keep-alive connections that have been idle too long, as real servers do."""
    while True:
        await asyncio.sleep(min(1.0, sim.idle_timeout))
        deadline = time.monotonic() - sim.idle_timeout
        for connection in list(sim.connections):
            if not connection.busy and connection.last_active < deadline:
                connection.closed = True
                if connection.transport is not None:
                    connection.transport.close()
