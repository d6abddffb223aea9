"""Peak page rate of the websim server: latency 0, no rate limits, keep-alive clients.

Several client processes, each with one raw-socket keep-alive connection at a time, fetch the
web's pages (each client its own share, host by host) as fast as the server answers, for a
fixed time. The table shows what the simulator can serve, so crawler benchmarks know where
the server, and not the crawler, would become the limit.

    .venv/bin/python -m bench.websim_peak [--seconds 3] [--clients 2 4 8] [--json PATH]
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from dataclasses import replace
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import BinaryIO

from bench import harness
from websim import WebSim, WebSpec

# (label, spec overrides): default-sized pages, then the big pages crawler benchmarks use.
_SHAPES = (
    ("4 KB, 12 links", {"page_bytes": 4000, "links_per_page": 12}),
    ("40 KB, 200 links", {"page_bytes": 40_000, "links_per_page": 200}),
)
_BASE = WebSpec(
    hosts=50,
    pages=20_000,
    latency_ms=(0.0, 0.0),
    rate_limit_rps=None,
    keepalive_max=(100,),
    keepalive_weights=(1.0,),
)


def _client(
    targets: list[tuple[str, int, str]],
    seconds: float,
    ready: Barrier,
    results: Queue,
) -> None:
    """Fetch targets (address, port, path) in a loop for `seconds` after every client is
    ready; report (pages, bytes)."""
    ready.wait()
    deadline = time.monotonic() + seconds
    pages = size = 0
    sock: socket.socket | None = None
    reader: BinaryIO | None = None
    current = ""
    i = 0
    while time.monotonic() < deadline:
        address, port, path = targets[i % len(targets)]
        i += 1
        if sock is None or reader is None or current != address:
            if sock is not None:
                sock.close()
            sock = socket.create_connection((address, port))
            reader = sock.makefile("rb")
            current = address
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {address}:{port}\r\n\r\n".encode())
        length, close = 0, False
        for line in iter(reader.readline, b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and b"close" in value.lower():
                close = True
        size += len(reader.read(length))
        pages += 1
        if close:
            sock.close()
            sock = None
    if sock is not None:
        sock.close()
    results.put((pages, size))


def _measure(sim: WebSim, clients: int, seconds: float) -> tuple[float, float]:
    """Pages/s and MB/s with `clients` client processes."""
    web = sim.web
    by_host = sorted(range(web.n_pages), key=lambda p: (int(web.host_of[p]), p))
    targets = [(web.hosts[int(web.host_of[p])].address, sim.port, web.paths[p]) for p in by_host]
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(clients)  # start the clock only once all have imported
    results = context.Queue()
    workers = [
        context.Process(target=_client, args=(targets[k::clients], seconds, ready, results))
        for k in range(clients)
    ]
    for worker in workers:
        worker.start()
    counts = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    pages = sum(c[0] for c in counts)
    size = sum(c[1] for c in counts)
    return pages / seconds, size / seconds / 1e6


def main() -> None:
    parser = harness.arguments(__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args()
    run = harness.start("websim_peak", args)
    print(f"websim peak: {_BASE.hosts} hosts, {_BASE.pages} pages, latency 0, no rate limits")
    rows = []
    for label, overrides in _SHAPES:
        with WebSim(replace(_BASE, **overrides)) as sim:
            for clients in args.clients:
                rate, mbps = _measure(sim, clients, args.seconds)
                rows.append(
                    {
                        "pages": label,
                        "clients": clients,
                        "pages_per_s": round(rate),
                        "mb_per_s": round(mbps, 1),
                    }
                )
                print(f"{label}, {clients} clients: {rate:.0f} pages/s", flush=True)
    harness.print_table(
        None,
        ["pages", "clients", "pages/s", "MB/s"],
        [
            [r["pages"], str(r["clients"]), str(r["pages_per_s"]), f"{r['mb_per_s']:.1f}"]
            for r in rows
        ],
    )
    run.write_json(
        {"seconds": args.seconds, "hosts": _BASE.hosts, "web_pages": _BASE.pages, "rows": rows}
    )


if __name__ == "__main__":
    main()
