"""Serving the hostile hosts: each scenario on its own socket, requests parsed off each
connection and answered by the scenario's handler, or else by the pages every hostile host
has (the root, the good pages, 404)."""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from collections.abc import Callable

from websim.hostile.exchange import GOOD_PAGES, Exchange, HostState, Request, page
from websim.hostile.scenarios import SCENARIOS, Scenario
from websim.spec import WebSpec, host_address

_MAX_HEAD = 16 * 1024


def addresses(spec: WebSpec) -> list[str]:
    """Loopback addresses of the hostile hosts, in `spec.hostile` order, after the web's."""
    return [host_address(spec.hosts + i) for i in range(len(spec.hostile))]


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
            functools.partial(serve_connection, scenario, state),
            sock=sock,
            limit=_MAX_HEAD,
        )
        servers.append((server, state))
    return servers
