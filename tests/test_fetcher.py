"""The fetcher against hostile servers (websim/hostile/ on loopback): every fetch ends within
its limits with an error class, and the session stays usable afterwards."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import tracemalloc

import pytest

from crawler.fetching.fetcher import FetchResult, ServerSession, _Watchdog, looks_binary
from crawler.fetching.settings import FetchSettings
from websim import WebSim, WebSpec
from websim.hostile import SCENARIOS

pytestmark = pytest.mark.integration  # websim's hostile servers

LIMIT = 1_000_000
CONFIG = FetchSettings(
    connect_timeout_s=1.0,
    read_timeout_s=0.5,
    fetch_timeout_s=1.0,
    max_body_bytes=LIMIT,
    max_decoded_bytes=LIMIT,
)
# For the server that drips a byte every 0.2 s: a read timeout far above that, so a stall of a
# loaded test machine cannot end the fetch before its deadline (dripping it all takes ~40 s).
DRIP_CONFIG = CONFIG.model_copy(update={"read_timeout_s": 5.0})


@pytest.fixture(scope="module")
def hostile_web():
    spec = WebSpec(hosts=1, pages=5, hostile=tuple(SCENARIOS), hostile_drip_s=0.2)
    with WebSim(spec) as sim:
        yield sim


@pytest.fixture
def fetch(hostile_web):
    sessions: list[ServerSession] = []

    def get(scenario: str, path: str, config: FetchSettings = CONFIG) -> FetchResult:
        session = ServerSession(config)
        sessions.append(session)
        return session.get(hostile_web.hostile_url(scenario) + path.lstrip("/"))

    yield get
    for session in sessions:
        session.close()


def error_class(result: FetchResult) -> str | None:
    return result.error.kind if result.error else None


def test_declared_huge_body_is_refused_unread(fetch):
    started = time.monotonic()
    result = fetch("huge_body", "/huge")
    assert time.monotonic() - started < 1.0
    assert (result.status, error_class(result)) == (200, "body_too_large")
    assert "Content-Length 1000000000" in result.error.detail
    assert result.body == b""


@pytest.mark.parametrize("path", ["/huge-stream", "/huge-chunked"])
def test_streamed_huge_body_is_cut_at_the_limit(fetch, path):
    result = fetch("huge_body", path)
    assert (result.status, error_class(result)) == (200, "body_too_large")
    assert LIMIT - 65536 < len(result.body) <= LIMIT


def test_a_body_that_decodes_to_nothing_is_cut_on_the_wire(fetch):
    """Endless gzip members of nothing, chunked: no decoded limit is ever reached. (A time
    limit far off, so that only the size can end it.)"""
    roomy = CONFIG.model_copy(update={"fetch_timeout_s": 60.0, "read_timeout_s": 10.0})
    result = fetch("huge_body", "/empty-members", roomy)
    assert (result.status, error_class(result)) == (200, "body_too_large")
    assert result.body == b""


def test_gzip_bomb_is_cut_on_decoded_bytes_in_bounded_memory(fetch):
    tracemalloc.start()
    try:
        result = fetch("gzip_bomb", "/bomb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (result.status, error_class(result)) == (200, "decoded_too_large")
    assert "gzip" in result.error.detail
    assert len(result.body) == LIMIT
    assert peak < 4 * LIMIT  # the body, its copy and a chunk: never the 1 GB behind it


@pytest.mark.parametrize("path", ["/drip", "/drip-head"])
def test_drip_is_cut_at_the_fetch_deadline(fetch, path):
    started = time.monotonic()
    result = fetch("drip", path, DRIP_CONFIG)
    elapsed = time.monotonic() - started
    assert error_class(result) == "fetch_timeout"
    assert DRIP_CONFIG.fetch_timeout_s <= elapsed < DRIP_CONFIG.fetch_timeout_s + 2.0
    # A dripping body started (status known); dripping headers never completed.
    assert result.status == (200 if path == "/drip" else None)


def test_session_is_usable_after_its_connection_was_cut(hostile_web):
    session = ServerSession(DRIP_CONFIG)
    try:
        assert error_class(session.get(hostile_web.hostile_url("drip") + "drip")) == "fetch_timeout"
        result = session.get(hostile_web.hostile_url("drip") + "ok/0")
        assert (result.status, result.error) == (200, None)
    finally:
        session.close()


def test_hang_after_headers_is_a_read_timeout(fetch):
    result = fetch("hang_after_headers", "/hang")
    assert (result.status, error_class(result)) == (200, "read_timeout")


def test_reset_mid_body_is_a_connection_error(fetch):
    result = fetch("reset_mid_body", "/reset")
    assert (result.status, error_class(result)) == (200, "connection_error")


def test_binary_labelled_html_is_not_html(fetch):
    result = fetch("binary_html", "/binary")
    assert (result.status, error_class(result)) == (200, "not_html")


def test_content_type_sniffing(fetch):
    untyped = fetch("content_type", "/no-type")
    assert (untyped.mime_type, untyped.error, untyped.is_html) == (None, None, True)
    mislabelled = fetch("content_type", "/wrong-type")
    assert (mislabelled.mime_type, mislabelled.is_html) == ("image/png", False)


@pytest.mark.parametrize(
    ("path", "encoding"),
    [
        ("/invalid-utf8", "utf-8"),
        ("/unknown-charset", None),  # x-nope: no such codec
        ("/binary-codec-charset", None),  # hex: a codec, but bytes to bytes
        ("/wrong-charset", "cp1252"),  # iso-8859-1 is read as windows-1252, as browsers do
    ],
)
def test_bad_charsets_decode_without_failing(fetch, path, encoding):
    result = fetch("bad_charset", path)
    assert (result.status, result.error, result.encoding) == (200, None, encoding)
    body, parser_encoding = result.html_source()
    assert parser_encoding in (None, "utf-8")
    assert "via-" in result.text
    if path == "/invalid-utf8":
        assert "\ufffd" in result.text


@pytest.mark.parametrize("path", ["/empty", "/empty-close"])
def test_empty_200(fetch, path):
    result = fetch("empty_body", path)
    assert (result.status, result.error, result.body, result.is_html) == (200, None, b"", True)


def test_garbage_location_is_returned_not_raised(fetch):
    result = fetch("garbage_links", "/bad-redirect")
    assert (result.status, result.error) == (302, None)
    assert result.headers["location"] == "http://[::1"


def test_a_pinned_session_connects_to_the_checked_address_not_the_name(hostile_web):
    """Against DNS rebinding: the connection goes to the address the guard checked, whatever
    the name would resolve to now (here localhost, 127.0.0.1, which serves something else)."""
    address, port = hostile_web.hostile_host("empty_body").split(":")
    assert address != "127.0.0.1"
    direct, pinned = ServerSession(CONFIG), ServerSession(CONFIG)
    pinned.pin(address)
    try:
        expected = direct.get(f"http://{address}:{port}/")
        result = pinned.get(f"http://localhost:{port}/")
    finally:
        direct.close()
        pinned.close()
    assert result.status == expected.status == 200
    assert result.body == expected.body


@pytest.fixture
def first_bytes_at_127_0_0_2():
    """A listener on 127.0.0.2 (localhost is 127.0.0.1): its port, and the first bytes of the
    one connection it takes, which it answers with an empty 200."""
    listener = socket.create_server(("127.0.0.2", 0))
    listener.settimeout(10)
    received: list[bytes] = []

    def serve() -> None:
        with contextlib.suppress(OSError), listener.accept()[0] as conn:
            conn.settimeout(10)
            received.append(conn.recv(65536))
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    server = threading.Thread(target=serve)
    server.start()
    yield listener.getsockname()[1], received
    server.join()
    listener.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_pinned_session_names_the_server_not_the_address(first_bytes_at_127_0_0_2, scheme):
    """Pinned, the connection goes to the checked address, and the request still names the
    server: in the Host header (HTTP), in the TLS server name (HTTPS, where the listener's
    plain-text answer then fails the handshake)."""
    port, received = first_bytes_at_127_0_0_2
    session = ServerSession(CONFIG)
    session.pin("127.0.0.2")
    try:
        result = session.get(f"{scheme}://localhost:{port}/")
    finally:
        session.close()
    if scheme == "http":
        assert result.status == 200
        assert f"\r\nHost: localhost:{port}\r\n".encode() in received[0]
    else:
        assert result.error is not None
        assert b"localhost" in received[0]  # the ClientHello's server_name


def test_looks_binary():
    assert looks_binary(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    assert looks_binary(bytes(100))
    assert not looks_binary(b"<html><body>a stray \x00 byte</body></html>")
    assert not looks_binary("<p>caf\u00e9</p>".encode("utf-16"))  # BOM: text
    assert not looks_binary(b"plain text\n")


def test_watchdog_cuts_only_what_outlives_its_deadline():
    watchdog = _Watchdog()
    cut = threading.Event()
    late = watchdog.watch(time.monotonic() + 0.05, cut.set)
    on_time = watchdog.watch(time.monotonic() + 60, lambda: pytest.fail("cut too early"))
    assert cut.wait(2.0)
    assert watchdog.release(late) is True
    assert watchdog.release(on_time) is False


def test_watchdog_wakes_for_a_deadline_before_the_one_it_sleeps_until():
    watchdog = _Watchdog()
    watchdog.release(watchdog.watch(time.monotonic() + 60, lambda: pytest.fail("cut too early")))
    cut = threading.Event()
    late = watchdog.watch(time.monotonic() + 0.05, cut.set)
    assert cut.wait(2.0)
    assert watchdog.release(late) is True


@pytest.fixture(scope="module")
def fetches_from_a_slow_server() -> list[FetchResult]:
    """Three pages over one connection from a server that answers after 40 ms (websim's
    delay, inside the server; no spread)."""
    spec = WebSpec(
        hosts=1,
        pages=5,
        latency_ms=(40.0, 40.0),
        latency_sigma=0.0,
        rate_limit_rps=None,
        keepalive_max=(100,),
        keepalive_weights=(1.0,),
    )
    with WebSim(spec) as sim:
        session = ServerSession(CONFIG)
        try:
            return [session.get(sim.url_of(page)) for page in range(3)]
        finally:
            session.close()


def test_wire_rtt_leaves_out_the_clients_own_work(fetches_from_a_slow_server):
    """The RTT the rate controller reads is stamped at the socket: from the request written to
    the response's head read. It covers the server's delay and leaves out the client's work
    around it, so it is never above the whole exchange's time, on a fresh connection (its
    set-up not counted) or a reused one."""
    for result in fetches_from_a_slow_server:
        assert result.status == 200
        assert result.wire_rtt_s is not None and result.rtt_s is not None
        assert 0.040 <= result.wire_rtt_s <= result.rtt_s


def test_the_handshake_is_reported_once_per_connection_without_the_server_time(
    fetches_from_a_slow_server,
):
    """The TCP handshake times the network alone: the server's 40 ms do not stretch it. A
    reused connection reports none."""
    first, *reused = fetches_from_a_slow_server
    assert first.handshake_s is not None and 0 < first.handshake_s < 0.020
    assert [result.handshake_s for result in reused] == [None, None]
    # The kernel's least RTT on the connection, on every answer: none of the server's 40 ms.
    for result in fetches_from_a_slow_server:
        assert result.network_rtt_s is not None and 0 < result.network_rtt_s < 0.020


def test_no_wire_rtt_without_an_answer():
    session = ServerSession(CONFIG)
    try:
        result = session.get("http://127.0.0.1:9/")  # discard port: nothing listens
    finally:
        session.close()
    assert result.error is not None and result.wire_rtt_s is None


@pytest.mark.parametrize(
    ("label", "encoding"),
    [
        ("utf-7", None),  # Python codecs no browser honours: a link hidden in UTF-7 stays hidden
        ("idna", None),
        ("punycode", None),
        ("undefined", None),
        ("unicode_escape", None),
        ("replacement", None),
        ("x-user-defined", None),
        ("Shift_JIS", "cp932"),
        ("latin1", "cp1252"),
        ("UTF-8", "utf-8"),
    ],
)
def test_only_the_labels_browsers_know_choose_the_encoding(label, encoding):
    page = "<a href='/x'>Gr\u00f6\u00dfe</a>".encode("utf-8")
    result = FetchResult(
        "http://h/", 200, headers={"content-type": f"text/html; charset={label}"}, body=page
    )
    assert result.encoding == encoding
    assert "/x" in result.text  # decoding never fails


def test_a_304_confirms_nothing_unless_the_request_was_conditional(hostile_web):
    session = ServerSession(CONFIG)
    url = hostile_web.hostile_url("empty_body") + "not-modified"
    try:
        unasked = session.get(url)
        asked = session.get(url, {"If-None-Match": '"v1"'})
    finally:
        session.close()
    assert (unasked.status, error_class(unasked)) == (304, "http_error")
    assert (asked.status, asked.error) == (304, None)


def test_the_request_asks_only_for_the_encodings_the_limits_hold_for(hostile_web):
    session = ServerSession(CONFIG)
    try:
        result = session.get(hostile_web.hostile_url("empty_body") + "empty")
    finally:
        session.close()
    assert result.request_headers["Accept-Encoding"] == "gzip, deflate"


@contextlib.contextmanager
def keep_alive_server(answer):
    """A server on loopback that reads each request's head (its request line and headers) over
    keep-alive connections and lets `answer(connection, head)` reply (False: close the
    connection). Its port, and one entry for each connection it took."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    connections: list[int] = []

    def serve_connection(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn, conn.makefile("rb") as reader:
            while True:
                lines = []
                while (line := reader.readline()) not in (b"", b"\r\n"):
                    lines.append(line)
                if not line or not answer(conn, b"".join(lines)):  # closed, or to close
                    return

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn = listener.accept()[0]
                conn.settimeout(10)
                connections.append(1)
                threading.Thread(target=serve_connection, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], connections
    finally:
        listener.close()


@pytest.fixture
def request_heads():
    """A keep-alive server on loopback: its port, and the head of each request it answered
    (those that bring no cookie are answered with one)."""
    heads: list[bytes] = []

    def answer(conn: socket.socket, head: bytes) -> bool:
        heads.append(head)
        cookie = b"" if b"\r\nCookie:" in head else b"Set-Cookie: k=v\r\n"
        conn.sendall(b"HTTP/1.1 200 OK\r\n" + cookie + b"Content-Length: 0\r\n\r\n")
        return True

    with keep_alive_server(answer) as (port, _):
        yield port, heads


def test_requests_are_what_requests_session_get_sends(request_heads):
    """ServerSession prepares its GETs itself (for CPU): the same request heads as
    `requests.Session.get` with the same session, its cookies and a conditional header
    included."""
    port, heads = request_heads
    url = f"http://127.0.0.1:{port}/a%20b/c?q=1"
    conditional = {"If-None-Match": '"v1"'}
    session = ServerSession(CONFIG)
    try:
        for headers in (None, conditional):
            session.get(url, headers)
    finally:
        session.close()
    reference = ServerSession(CONFIG)._session
    try:
        for headers in (None, conditional):
            reference.get(url, headers=headers, allow_redirects=False, timeout=10).close()
    finally:
        reference.close()
    assert len(heads) == 4
    assert heads[0].startswith(b"GET /a%20b/c?q=1 HTTP/1.1\r\n")
    assert b"\r\nCookie: k=v\r\n" in heads[1]
    assert b'\r\nIf-None-Match: "v1"\r\n' in heads[1]
    assert heads[2:] == heads[:2]


@pytest.fixture
def framed_answers():
    """A keep-alive server on loopback whose answers are framed every way the reads must
    undo: a body longer than the client's read buffer, a chunked one, an empty one, and one
    that closes the connection. Its port, and how many connections it took."""

    def answer(conn: socket.socket, head: bytes) -> bool:
        path = head.split()[1].decode()
        if path == "/chunked":
            chunks = [FRAMED_BODIES[path][:10], FRAMED_BODIES[path][10:]]
            framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"
            )
            return True
        body = FRAMED_BODIES[path]
        close = b"Connection: close\r\n" if path == "/close" else b""
        conn.sendall(
            b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (close, len(body), body)
        )
        return not close

    with keep_alive_server(answer) as server:
        yield server


FRAMED_BODIES = {
    "/long": bytes(range(256)) * 600,  # 150 KB: more than one read buffer
    "/chunked": b"0123456789" + b"x" * 70_000,
    "/empty": b"",
    "/close": b"bye",
}


def test_answers_read_whole_over_one_connection_whatever_their_framing(framed_answers):
    """Each answer's body is exactly what the server sent, one after another over the same
    keep-alive connection (nothing of one answer is lost to, or left for, the next), and every
    answer names the address it came from, after a reconnection too."""
    port, connections = framed_answers
    session = ServerSession(CONFIG)
    paths = ["/long", "/chunked", "/empty", "/long", "/close", "/chunked"]
    try:
        results = [session.get(f"http://127.0.0.1:{port}{path}") for path in paths]
    finally:
        session.close()
    assert [(r.status, r.error) for r in results] == [(200, None)] * len(paths)
    assert [r.body for r in results] == [FRAMED_BODIES[path] for path in paths]
    assert [r.ip_address for r in results] == ["127.0.0.1"] * len(paths)
    assert len(connections) == 2  # kept alive until the server closed it
