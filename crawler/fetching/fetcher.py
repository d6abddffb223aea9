"""HTTP fetching over persistent per-server sessions (requests), bounded in size and in time.

A fetch stops, with an error class in `FetchResult.error`, when the server sends more than
`max_body_bytes` on the wire, when undoing its Content-Encoding (gzip or deflate, all it asks
for) would give more than `max_decoded_bytes`, or when the whole exchange (connect, headers,
body) outlasts `fetch_timeout_s`. urllib3 decodes in bounded steps (at most one chunk of output
per read), so a gzip bomb costs no more memory than its limit.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import hashlib
import http.client
import io
import itertools
import math
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import requests
import webencodings
from requests.adapters import HTTPAdapter
from requests.cookies import RequestsCookieJar, merge_cookies
from requests.structures import CaseInsensitiveDict
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ReadTimeoutError

from crawler.content.decoding import Decoded, decode_html
from crawler.fetching.settings import FetchSettings
from errors import ErrorClass, FetchError

HTML_TYPES = ("text/html", "application/xhtml+xml")
_CHUNK = 64 * 1024
# How much of a body content sniffing looks at: the "resource header" of the WHATWG MIME
# Sniffing standard.
_SNIFF_BYTES = 1445
# WHATWG "binary data bytes": control characters that never occur in text.
_BINARY_BYTES = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")
# WHATWG's HTML signatures: what an unlabelled body starts with if it is HTML.
_HTML_START = re.compile(
    rb"\s*<(?:!doctype html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body|br|p"
    rb"|!--)[ >]",
    re.IGNORECASE,
)
# Error classes that end a body early for reasons of the transport, not of a size limit.
_CUT_SHORT = frozenset(
    {
        ErrorClass.READ_TIMEOUT,
        ErrorClass.CONNECTION_ERROR,
        ErrorClass.FETCH_TIMEOUT,
        ErrorClass.DECODING_ERROR,
    }
)
_UNICODE_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class _WireLimitReached(Exception):
    """The body passed `max_body_bytes` on the wire (raised inside urllib3's read)."""


class _WireCounter:
    """Counts the bytes of a response body read from the connection, whatever its framing,
    and stops the read past `limit`.

    urllib3 counts the bytes it reads (`tell()`) only for bodies of known length, so a chunked
    body passed the wire limit uncounted; and a body of endless gzip members that decode to
    nothing yields no data at all to the loop that checks it. So the counter sits between
    http.client and the connection's buffered reader, where every body byte and every byte of
    chunk framing passes, and raises there.
    """

    def __init__(self, reader: Any, limit: int) -> None:
        self._reader = reader
        self._limit = limit
        self.bytes_read = 0

    @classmethod
    def install(cls, response: requests.Response, limit: int) -> _WireCounter:
        http_response = response.raw._fp  # the http.client response urllib3 reads from
        counter = cls(http_response.fp, limit)
        http_response.fp = counter
        return counter

    def _count(self, data: bytes) -> bytes:
        self.bytes_read += len(data)
        if self.bytes_read > self._limit:
            raise _WireLimitReached
        return bytes(data)

    def read(self, size: int | None = -1) -> bytes:
        return self._count(self._reader.read(size))

    def read1(self, size: int = -1) -> bytes:
        return self._count(self._reader.read1(size))

    def readline(self, limit: int = -1) -> bytes:
        return self._count(self._reader.readline(limit))

    def readinto(self, buffer: Any) -> int:
        count = int(self._reader.readinto(buffer) or 0)
        self.bytes_read += count  # the bytes are in `buffer`: counted without a copy
        if self.bytes_read > self._limit:
            raise _WireLimitReached
        return count

    def __getattr__(self, name: str) -> Any:  # close, flush, peek, ...: the reader's own
        return getattr(self._reader, name)


@dataclass
class FetchResult:
    url: str
    status: int | None = None
    error: FetchError | None = None  # when no usable response arrived
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    rtt_s: float | None = None
    # From just before the request is written (the connection already up) to the response's
    # head read: the server's response time and the network's round trip, without the client's
    # own work around the exchange (preparing the request, connecting, building the response
    # object).
    wire_rtt_s: float | None = None
    # The TCP handshake's round trip as the kernel timed it, when this request opened the
    # connection: the network's round trip to the server (the server's kernel answers it, so
    # the server's load does not stretch it).
    handshake_s: float | None = None
    # The least RTT the kernel has measured on the connection so far (TCP_INFO's min_rtt): the
    # handshake and every acknowledgement the server's kernel sent at once, none of which waits
    # for the server's work, so the network's round trip and what queued on the way. Each
    # exchange adds samples, so a handshake that met a queue (many connections opened at
    # once) is outdone by the next quick acknowledgement.
    network_rtt_s: float | None = None
    request_headers: dict[str, str] = field(default_factory=dict)  # as sent, for the WARC
    ip_address: str | None = None  # the server's address the answer came from (WARC-IP-Address)

    @property
    def not_modified(self) -> bool:
        """A 304 that stands for an earlier capture: one answering a conditional request."""
        return self.status == 304 and self.error is None

    @property
    def mime_type(self) -> str | None:
        value = self.headers.get("content-type")
        return value.split(";", 1)[0].strip().lower() or None if value else None

    @property
    def charset(self) -> str | None:
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.partition("=")
            if key.strip().lower() == "charset":
                return value.strip().strip('"').lower() or None
        return None

    @property
    def encoding(self) -> str | None:
        """The declared charset as a Python codec name, or None when there is none or it is not
        a label of the Encoding Standard browsers follow (`x-nope`, `hex`, and Python's own
        codecs such as `utf-7`, `idna` or `punycode`, which no browser honours): a bogus label
        is ignored, as browsers do."""
        label = self.charset
        encoding = webencodings.lookup(label) if label is not None else None
        # `replacement` and `x-user-defined` have no Python codec: read as undeclared.
        if encoding is None or encoding.name in ("replacement", "x-user-defined"):
            return None
        return str(encoding.codec_info.name)

    @cached_property
    def decoded(self) -> Decoded:
        """The body as text, decoded as browsers decode HTML (crawler/content/decoding.py): a
        byte order mark, the usable declared charset, a `<meta>` charset, detection; bad bytes
        replaced. `decoded.charset` names what decoded it."""
        return decode_html(self.body, self.encoding)

    @property
    def text(self) -> str:
        return self.decoded.text

    def html_source(self) -> tuple[bytes, str | None]:
        """The body and encoding to give the HTML parser: the decoded text as UTF-8 (lxml does
        not know every codec Python does)."""
        return self.text.encode("utf-8"), "utf-8"

    @property
    def is_html(self) -> bool:
        """Labelled as HTML, or unlabelled and starting like HTML (browsers sniff it too)."""
        if self.mime_type is None:
            return _HTML_START.match(self.body[:_SNIFF_BYTES]) is not None
        return self.mime_type in HTML_TYPES

    @property
    def cut_short(self) -> bool:
        """An answer that started but whose body broke off (network, timeout, bad encoding):
        what arrived is not what the server meant to send."""
        return self.status is not None and self.error is not None and self.error.kind in _CUT_SHORT

    @property
    def digest(self) -> str | None:
        """SHA-1 of the body in base32, the form Common Crawl's `content_digest` uses."""
        if self.status is None:
            return None
        return base64.b32encode(hashlib.sha1(self.body).digest()).decode("ascii")


def looks_binary(body: bytes) -> bool:
    """Binary data (an image, an archive): control bytes in the first bytes and no sign of
    HTML. UTF-16 text has NUL bytes, so a body with a byte order mark is text."""
    head = body[:_SNIFF_BYTES]
    if head.startswith(_UNICODE_BOMS) or _HTML_START.match(head):
        return False
    return _BINARY_BYTES.search(head) is not None


def classify(exc: requests.RequestException, url: str) -> FetchError:
    """The error of a failed request to `url`: its class, and what happened in words for a
    person (the libraries' messages name their own classes: `HTTPConnectionPool(...)`, "Max
    retries exceeded")."""
    server = url.split("/", 3)[2] if url.count("/") >= 2 else url
    cause = _os_error(exc)
    if isinstance(exc, requests.ConnectTimeout):
        return FetchError(ErrorClass.CONNECT_TIMEOUT, f"no connection to {server} in time")
    if isinstance(exc, requests.ReadTimeout) or isinstance(
        exc.args[0] if exc.args else None, ReadTimeoutError
    ):
        # requests reports a timeout while streaming as ConnectionError
        return FetchError(ErrorClass.READ_TIMEOUT, f"{server} stopped sending in time")
    if isinstance(exc, requests.exceptions.ContentDecodingError):
        return FetchError(ErrorClass.DECODING_ERROR, "the body does not decode as its encoding")
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return FetchError(ErrorClass.CONNECTION_ERROR, "the connection broke off mid-body")
    if isinstance(exc, requests.ConnectionError):
        if isinstance(cause, ConnectionRefusedError):
            return FetchError(ErrorClass.CONNECTION_REFUSED, f"{server} refused the connection")
        if isinstance(cause, socket.gaierror):
            host = server.rsplit(":", 1)[0] if not server.endswith("]") else server
            return FetchError(ErrorClass.CONNECTION_ERROR, f"the name lookup of {host} failed")
        if isinstance(cause, TimeoutError | socket.timeout):
            return FetchError(ErrorClass.CONNECT_TIMEOUT, f"no connection to {server} in time")
        reason = _reason(cause)
        return FetchError(
            ErrorClass.CONNECTION_ERROR,
            f"connection to {server} failed" + (f": {reason}" if reason else ""),
        )
    if isinstance(exc, requests.TooManyRedirects | requests.exceptions.InvalidURL):
        return FetchError(ErrorClass.INVALID_URL, "not a URL a request can be made to")
    reason = _reason(cause)
    return FetchError(ErrorClass.HTTP_ERROR, reason or "the exchange failed")


def _os_error(exc: BaseException) -> OSError | None:
    """The operating system's error at the root of a library exception, if there is one:
    requests wraps urllib3's, which wraps the socket's (in `args`, `reason` or the chain)."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        if isinstance(current, socket.gaierror | TimeoutError):
            return current
        pending += [
            linked
            for linked in (
                *current.args[:1],
                getattr(current, "reason", None),
                current.__cause__,
                current.__context__,
            )
            if isinstance(linked, BaseException)
        ]
    return None


def _reason(error: OSError | None) -> str | None:
    """An OS error in words (`Connection reset by peer`), lower case; None if there is none."""
    if error is None:
        return None
    text = error.strerror or (str(error.args[0]) if error.args else "")
    return text[:1].lower() + text[1:] if text else None


class _Watchdog:
    """Cuts connections whose fetch passed its deadline.

    urllib3's timeouts apply to each socket operation, so a server that sends a byte every few
    seconds (headers included) holds a connection forever without tripping them; urllib3's
    documentation suggests a watcher thread for a wall-clock limit. One thread serves every
    session of the process and sleeps until the earliest deadline. It is woken only for a
    deadline before the time it sleeps until: fetches one after another, each with the same
    limit, let it sleep until a deadline that has since been released, look once and sleep
    again, rather than waking it for every fetch (a thread switch and the GIL's handover each).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Callable[[], None]]] = {}
        self._keys = itertools.count()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf  # when the thread looks next, unless woken

    def watch(self, deadline: float, cut: Callable[[], None]) -> int:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():  # not yet, or forked
                self._thread = threading.Thread(target=self._run, name="fetch-watchdog")
                self._thread.daemon = True
                self._thread.start()
                self._wakes_at = math.inf
            if deadline < self._wakes_at:
                self._wakes_at = deadline
                self._cond.notify()  # the thread sleeps until a later time
            key = next(self._keys)
            self._due[key] = (deadline, cut)
            return key

    def release(self, key: int) -> bool:
        """Stop watching; True if the deadline had come and the connection was cut."""
        with self._cond:
            return self._due.pop(key, None) is None

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for key, (deadline, cut) in list(self._due.items()):
                    if deadline <= now:
                        del self._due[key]
                        cut()  # under the lock: `release` cannot return in between
                self._wakes_at = min((due for due, _ in self._due.values()), default=math.inf)
                self._cond.wait(None if self._wakes_at == math.inf else self._wakes_at - now)


_WATCHDOG = _Watchdog()


# struct tcp_info (linux/tcp.h), in microseconds: tcpi_rtt, the smoothed RTT, after 8 one-byte
# fields and 15 four-byte ones; tcpi_min_rtt, the least RTT sample, further on (Linux 4.9+).
_TCPI_RTT_OFFSET = 68
_TCPI_MIN_RTT_OFFSET = 148


def _kernel_rtt_s(sock: socket.socket, offset: int) -> float | None:
    """An RTT of `sock` as the kernel measured it (TCP_INFO). The kernel's clock, not ours: a
    thread that waits for the GIL once a call returns, or a process descheduled on a loaded
    machine, would read it long by as much, and a retransmitted segment is timed by its echoed
    timestamp. None where the kernel does not say (not Linux, an older kernel)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except (AttributeError, OSError):
        return None
    if len(info) < offset + 4:
        return None
    (rtt_us,) = struct.unpack_from("I", info, offset)
    return rtt_us / 1e6 if rtt_us else None


class _WholeAnswerResponse(http.client.HTTPResponse):
    """Reads its connection through a buffer of _CHUNK bytes, not io's 8 KB: the first read
    takes what has arrived of the answer, head and body (a whole 40-KB page over loopback),
    where an 8-KB buffer reads the head and the body's first bytes, then the rest in more
    reads. Each read of a socket with a timeout is a poll and a recv, and each releases the
    GIL: with a node's threads waiting for it, a handover and a thread switch. Over loopback
    this saves about 4 of a request's 10 such calls (bench/results/cpu_per_page/NOTES.md).
    No request is pipelined, so nothing past the answer is in the buffer."""

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # the 8-KB reader http.client opened (the socket stays open)
        self.fp = cast(io.BufferedReader, sock.makefile("rb", _CHUNK))  # "rb", buffered


class _WireTimedConnection(HTTPConnection):
    """Stamps each exchange close to the socket: as the request is about to be written (once
    the connection is up), and once the response's status line and headers are read (before
    urllib3 and requests build their response objects on top). The time between is what the
    server and the network took, without the client's own work around the exchange. The first
    stamp comes before the write on purpose: taken after it, a thread that waits for the GIL
    once its bytes are out would stamp late, by as much as the server's whole answer."""

    response_class = _WholeAnswerResponse
    request_sent_at: float | None = None
    response_read_at: float | None = None
    handshake_s: float | None = None  # this connection's TCP handshake, until taken
    network_rtt_s: float | None = None  # the kernel's least RTT on it, at the last answer
    peer_address: str | None = None  # the address the last answer came from
    pinned_address: str | None = None  # connect here instead of resolving the server's name
    connected_to: str | None = None  # the address of the socket's peer, read once it connects

    def _new_conn(self) -> socket.socket:
        # The TCP connect only: TLS, if any, comes after. urllib3 connects to `_dns_host`,
        # which is also what `host` (the Host header, the TLS server name) reads: pinned, it
        # is the address for the connect alone.
        name = self._dns_host
        if self.pinned_address is not None:
            self._dns_host = self.pinned_address
        try:
            sock = super()._new_conn()
        finally:
            self._dns_host = name
        # Right after the connect, the kernel's only RTT sample is the handshake's.
        self.handshake_s = _kernel_rtt_s(sock, _TCPI_RTT_OFFSET)
        # A connected socket's peer does not change: read once, not at every answer
        # (getpeername releases the GIL, a handover on a busy node).
        self.connected_to = None
        with contextlib.suppress(OSError, IndexError):
            self.connected_to = str(sock.getpeername()[0])
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        self.request_sent_at = self.response_read_at = self.network_rtt_s = None
        self.peer_address = None
        if self.sock is None:
            self.connect()  # what http.client would do inside the write: not server time
        self.request_sent_at = time.monotonic()
        super().request(*args, **kwargs)

    def getresponse(self) -> Any:
        sock = self.sock  # held: an answer that closes the connection takes it from self
        response = super().getresponse()
        self.response_read_at = time.monotonic()
        self.network_rtt_s = _kernel_rtt_s(sock, _TCPI_MIN_RTT_OFFSET)
        self.peer_address = self.connected_to
        return response

    @property
    def wire_rtt_s(self) -> float | None:
        if self.request_sent_at is None or self.response_read_at is None:
            return None
        return self.response_read_at - self.request_sent_at

    def take_handshake_s(self) -> float | None:
        """The handshake if it has not been taken yet: once per connection, so an exchange on
        a reused one reports none."""
        seconds, self.handshake_s = self.handshake_s, None
        return seconds


class _WireTimedHTTPSConnection(HTTPSConnection, _WireTimedConnection):
    pass


class _TrackingPool(HTTPConnectionPool):
    """Remembers the connection it handed out last: with one connection per pool, the one a
    request in flight uses. Connects to `pinned_address` when set: the Host header, TLS
    server name and certificate check still use the server's name."""

    ConnectionCls = _WireTimedConnection
    in_use: HTTPConnection | None = None
    pinned_address: str | None = None

    def _get_conn(self, timeout: float | None = None) -> HTTPConnection:
        conn = super()._get_conn(timeout)
        assert isinstance(conn, _WireTimedConnection)  # an instance of ConnectionCls
        conn.pinned_address = self.pinned_address  # for when it connects
        self.in_use = conn
        return conn


class _TrackingHTTPSPool(HTTPSConnectionPool, _TrackingPool):
    ConnectionCls = _WireTimedHTTPSConnection


class _CuttableAdapter(HTTPAdapter):
    """One keep-alive connection, which the watchdog can cut while a request waits on it."""

    def __init__(self) -> None:
        self._pool: HTTPConnectionPool | None = None
        self.pinned_address: str | None = None
        super().__init__(pool_connections=1, pool_maxsize=1)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _TrackingPool,
            "https": _TrackingHTTPSPool,
        }

    def get_connection_with_tls_context(self, *args: Any, **kwargs: Any) -> HTTPConnectionPool:
        self._pool = super().get_connection_with_tls_context(*args, **kwargs)
        if isinstance(self._pool, _TrackingPool):
            self._pool.pinned_address = self.pinned_address
        return self._pool

    @property
    def _in_use(self) -> HTTPConnection | None:
        """The connection of the request in flight, or of the last one."""
        return self._pool.in_use if isinstance(self._pool, _TrackingPool) else None

    @property
    def timed_in_use(self) -> _WireTimedConnection | None:
        """The connection of the request in flight, or of the last one, with its timings."""
        conn = self._in_use
        return conn if isinstance(conn, _WireTimedConnection) else None

    def cut(self) -> None:
        """Shut the socket of the request in flight: a read blocked on it returns at once."""
        sock = getattr(self._in_use, "sock", None)  # None while still connecting: connect_timeout
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)


_CONDITIONAL_HEADERS = frozenset({"if-none-match", "if-modified-since"})


def _is_conditional(headers: dict[str, str] | None) -> bool:
    return any(name.lower() in _CONDITIONAL_HEADERS for name in headers or ())


class _NoRedirectSession(requests.Session):
    """The node follows redirects itself (a Location is a new URL, checked like any link), so
    requests must not even parse one: with `allow_redirects=False` it still works out the next
    request, and a malformed Location ("http://[::1") raises out of `get`."""

    def get_redirect_target(self, resp: requests.Response) -> None:
        return None


class ServerSession:
    """One keep-alive connection's worth of state for one server.

    The pool holds a single connection and requests over it are sequential; a node opens a
    second session to a server only where its rate controller allows two requests in flight.
    """

    def __init__(self, settings: FetchSettings) -> None:
        self._settings = settings
        self._session = _NoRedirectSession()
        # Not the environment's proxies or ~/.netrc: a proxy would connect where the address
        # guard never looked, and netrc would hand credentials to crawled servers. (It also
        # saves reading the environment on every request.)
        self._session.trust_env = False
        self._session.headers["User-Agent"] = settings.user_agent
        # Ask only for what the crawl needs and the limits were measured on; urllib3 would add
        # br (and zstd) whenever a decoder happens to be installed. A server that sends another
        # encoding anyway is still held by the bounded decoding and `max_decoded_bytes`.
        self._session.headers["Accept-Encoding"] = "gzip, deflate"
        self._adapter = _CuttableAdapter()
        self._session.mount("http://", self._adapter)
        self._session.mount("https://", self._adapter)

    def pin(self, address: str | None) -> None:
        """Connect to `address` (checked by the address guard) instead of resolving the
        server's name again; None resolves as usual."""
        self._adapter.pinned_address = address

    @property
    def pinned_address(self) -> str | None:
        return self._adapter.pinned_address

    def get(
        self, url: str, headers: dict[str, str] | None = None, time_limit_s: float | None = None
    ) -> FetchResult:
        """GET `url`; `headers`: added to the request (a conditional GET's validators);
        `time_limit_s`: a shorter limit than the settings' for this fetch and each of its
        steps (a URL that failed slowly before, crawler/scheduling/failures.py)."""
        settings = self._settings
        limit = settings.fetch_timeout_s if time_limit_s is None else time_limit_s
        limit = min(limit, settings.fetch_timeout_s)
        started = time.monotonic()
        result = FetchResult(url=url)
        watch = _WATCHDOG.watch(started + limit, self._adapter.cut)
        response: requests.Response | None = None
        try:
            response = self._session.send(
                self._prepare(url, headers),
                stream=True,
                allow_redirects=False,
                timeout=(
                    min(settings.connect_timeout_s, limit),
                    min(settings.read_timeout_s, limit),
                ),
                # What `Session.request` passes with trust_env off: the session's own.
                proxies=self._session.proxies,
                verify=self._session.verify,
                cert=self._session.cert,
            )
            result.status = response.status_code
            result.headers = {k.lower(): v for k, v in response.headers.items()}
            # As sent: http.client writes str values as Latin-1 and bytes values as they are.
            result.request_headers = {
                name: value.decode("latin-1") if isinstance(value, bytes) else value
                for name, value in response.request.headers.items()
            }
            result.rtt_s = time.monotonic() - started
            timed = self._adapter.timed_in_use
            if timed is not None:
                result.wire_rtt_s = timed.wire_rtt_s
                result.handshake_s = timed.take_handshake_s()
                result.network_rtt_s = timed.network_rtt_s
                result.ip_address = timed.peer_address
            self._read_body(response, result)
        except requests.RequestException as exc:
            result.error = classify(exc, url)
        finally:
            # Released before the response is closed, so the watchdog never shuts a socket
            # that is already closed (its descriptor may belong to a new one by then).
            cut = _WATCHDOG.release(watch)
            if response is not None:
                response.close()
        if cut:
            result.error = FetchError(
                ErrorClass.FETCH_TIMEOUT,
                f"no complete answer within {limit:g} s",
            )
        elif result.status == 304 and not _is_conditional(headers):
            # "Not modified" since nothing: no earlier capture stands behind it, so it confirms
            # nothing (taken as unchanged, it would pass the trap budget and mark done a page
            # never stored).
            result.error = FetchError(
                ErrorClass.HTTP_ERROR, "304 Not Modified to a request that was not conditional"
            )
        elif (
            result.error is None
            and result.status is not None
            and 200 <= result.status < 300
            and result.mime_type in HTML_TYPES
            and looks_binary(result.body)
        ):
            result.error = FetchError(
                ErrorClass.NOT_HTML, f"binary data labelled {result.mime_type}"
            )
        return result

    def _prepare(self, url: str, headers: dict[str, str] | None) -> requests.PreparedRequest:
        """The GET `Session.request` would prepare (the session's headers, then `headers`; its
        cookies; its hooks), without its general merging of settings a crawl never sets
        (params, auth, proxies, a body): with its `runtime_checkable` Protocol checks, about a
        sixth of a request's CPU (bench/results/cpu_per_page/NOTES.md)."""
        session = self._session
        merged = CaseInsensitiveDict(session.headers)
        if headers:
            merged.update(headers)
        prepared = requests.PreparedRequest()
        prepared.prepare(
            method="GET",
            url=url,
            headers=merged,
            cookies=merge_cookies(RequestsCookieJar(), session.cookies),
            hooks=session.hooks,
        )
        return prepared

    def _read_body(self, response: requests.Response, result: FetchResult) -> None:
        """Read the body into `result` within the size limits (`result.error` says which one
        stopped it); what arrived before the stop is kept, up to the decoded limit."""
        max_wire, max_decoded = self._settings.max_body_bytes, self._settings.max_decoded_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_wire:
            result.error = FetchError(
                ErrorClass.BODY_TOO_LARGE, f"Content-Length {declared}, the limit is {max_wire}"
            )
            return
        body = bytearray()
        _WireCounter.install(response, max_wire)
        try:
            for chunk in response.iter_content(chunk_size=_CHUNK):
                body += chunk
                if len(body) > max_decoded:
                    encoding = response.headers.get("content-encoding", "identity")
                    result.error = FetchError(
                        ErrorClass.DECODED_TOO_LARGE,
                        f"more than {max_decoded} bytes once {encoding} is decoded",
                    )
                    return
        except _WireLimitReached:
            result.error = FetchError(ErrorClass.BODY_TOO_LARGE, f"more than {max_wire} bytes")
        finally:
            result.body = bytes(body[:max_decoded])

    def close(self) -> None:
        self._session.close()
