"""WebSim: a synthetic web served on loopback by a child process, plus its ground truth."""

from __future__ import annotations

import multiprocessing
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import TracebackType
from typing import TypedDict

import numpy as np
from w3lib.url import canonicalize_url

from websim import hostile, truth
from websim.changes import ChangeModel
from websim.graph import Web, build_web
from websim.server import child_main
from websim.spec import WebSpec

_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 5.0


class LoggedRequest(TypedDict):
    """One request a server of the web received (`WebSim.request_log`)."""

    host: str  # "ip:port"
    path: str  # the request target as sent
    status: int
    time: float  # epoch seconds
    method: str
    conn: int  # the connection's id


class QueuedRequest(TypedDict):
    """One request a physical queue host served (`WebSim.queue_log`)."""

    host: str  # "ip:port"
    path: str | None  # None: a background user's request
    time: float  # arrival, epoch seconds
    wait_s: float  # waiting for a worker
    service_s: float  # holding one


class WebSim:
    """Serves `build_web(spec)` on 127.0.x.y:port, one address per host, from a child process
    (spawned, so it does not share the GIL with the crawler under test)."""

    def __init__(self, spec: WebSpec | None = None, port: int = 0) -> None:
        self.spec = spec or WebSpec()
        hostile.check_scenarios(self.spec.hostile)
        self.web: Web = build_web(self.spec)
        self.changes = ChangeModel(self.web)  # the ground truth of the nights, as served
        self._requested_port = port
        self._port: int | None = None
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._urls: list[str] = []  # canonical URL of each page, once the port is known
        self._url_index: dict[str, int] = {}
        self._lock = threading.Lock()  # one pipe conversation at a time

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> WebSim:
        """Start the server process; returns once every host accepts connections."""
        if self._process is not None:
            raise RuntimeError("WebSim already started")
        context = multiprocessing.get_context("spawn")
        parent_conn, child_conn = context.Pipe()
        process = context.Process(
            target=child_main,
            args=(self.web, self._requested_port, child_conn),
            name="websim",
            daemon=True,  # and it exits by itself when the pipe to the parent closes
        )
        process.start()
        child_conn.close()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not parent_conn.poll(0.1):
            if not process.is_alive() or time.monotonic() > deadline:
                process.kill()
                process.join()
                raise RuntimeError(f"websim server did not start (exit code {process.exitcode})")
        try:
            message = parent_conn.recv()
        except EOFError:  # died before reporting, e.g. a script without a __main__ guard
            message = ("error", f"websim server process exited ({process.exitcode})")
        if message[0] != "ready":
            process.join(_STOP_TIMEOUT_S)
            raise RuntimeError(message[1])
        self._process, self._conn, self._port = process, parent_conn, message[1]
        self._urls = truth.page_urls(self.web, self.port)
        self._url_index = {url: i for i, url in enumerate(self._urls)}
        return self

    def stop(self) -> None:
        """Stop the server process (idempotent)."""
        process, conn = self._process, self._conn
        if process is None or conn is None:
            return
        with self._lock:
            try:
                conn.send(("stop",))
                if conn.poll(_STOP_TIMEOUT_S):
                    conn.recv()
            except (OSError, EOFError):
                pass  # already dead
            conn.close()
        process.join(_STOP_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()
        self._process = self._conn = None

    def __enter__(self) -> WebSim:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.is_alive()

    @property
    def pid(self) -> int | None:
        """Process id of the server process while it runs."""
        return self._process.pid if self._process is not None else None

    # -- addresses -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("WebSim not started: the port is not known yet")
        return self._port

    @property
    def hub_url(self) -> str:
        return truth.hub_url(self.web, self.port)

    @property
    def host_urls(self) -> list[str]:
        return [origin + "/" for origin in truth.origins(self.web, self.port)]

    @property
    def servers(self) -> list[str]:
        """The web's servers as `host:port`: what `--allow` and the allocation take."""
        return [url.split("/")[2] for url in self.host_urls]

    def hostile_host(self, scenario: str) -> str:
        """The server (`ip:port`) of a hostile scenario named in `spec.hostile`."""
        return f"{hostile.addresses(self.spec)[self.spec.hostile.index(scenario)]}:{self.port}"

    def hostile_url(self, scenario: str) -> str:
        """Root URL of a hostile host: the seed of a crawl that meets the scenario."""
        return f"http://{self.hostile_host(scenario)}/"

    def hostile_expected(self, scenario: str) -> set[str]:
        """Canonical URLs of the hostile host that a robust crawler fetches successfully."""
        origin = f"http://{self.hostile_host(scenario)}"
        return {origin + path for path in hostile.SCENARIOS[scenario].expected}

    def url_of(self, page_id: int) -> str:
        host = self.web.hosts[int(self.web.host_of[page_id])]
        return f"http://{host.address}:{self.port}{self.web.paths[page_id]}"

    def _page_urls(self) -> list[str]:
        if not self._urls:
            raise RuntimeError("WebSim not started: the URLs are not known yet")
        return self._urls

    # -- ground truth ----------------------------------------------------------------------

    def reachable_allowed_urls(self, seeds: list[str] | None = None) -> set[str]:
        """Canonical URLs a polite crawler fetches from the seeds (default: the hub): pages
        reachable by links, where robots-disallowed pages are neither fetched nor expanded.
        Includes the hub when it is a seed; seeds that are not pages are ignored."""
        urls = self._page_urls()
        hub = self.hub_url
        start: list[int] = []
        with_hub = False
        for seed in [hub] if seeds is None else seeds:
            url = canonicalize_url(seed)
            if url == hub:
                with_hub = True
                start.extend(self.web.host_start[:-1].tolist())  # the hub links every root
            elif url in self._url_index:
                start.append(self._url_index[url])
        mask = truth.reachable_pages(self.web, np.array(start, dtype=np.int64))
        reached = {urls[i] for i in np.flatnonzero(mask).tolist()}
        return reached | {hub} if with_hub else reached

    def disallowed_urls(self) -> set[str]:
        """URLs robots.txt disallows: a polite crawler never requests them."""
        urls = self._page_urls()
        return {urls[i] for i in np.flatnonzero(~self.web.allowed).tolist()}

    def export(self, directory: str | Path) -> None:
        """Write pages.parquet, links.parquet and hosts.parquet (zstd) into directory."""
        truth.export(self.web, self.port, directory)

    def advance_night(self) -> set[str]:
        """Move the web to the next night (websim/changes.py); returns the URLs of the pages
        that changed."""
        if self._conn is None:
            raise RuntimeError("WebSim not running")
        with self._lock:
            self._conn.send(("night",))
            served = self._conn.recv()
        changed = self.changes.advance()
        assert served == self.changes.night, "server and ground truth out of step"
        urls = self._page_urls()
        return {urls[i] for i in changed.tolist()}

    def queue_log(self, clear: bool = False) -> list[QueuedRequest]:
        """Every request the physical queue hosts (websim/physical.py) served so far, oldest
        first, with its time at the server: waiting for a worker, then served. With
        clear=True the server forgets them afterwards."""
        if self._conn is None:
            raise RuntimeError("WebSim not running")
        with self._lock:
            self._conn.send(("queue_log", clear))
            entries = self._conn.recv()
        return [
            QueuedRequest(host=host, path=path, time=at, wait_s=wait, service_s=service)
            for host, path, at, wait, service in entries
        ]

    def request_log(self, clear: bool = False) -> list[LoggedRequest]:
        """Every request the servers received so far, oldest first. With clear=True the server
        forgets them afterwards."""
        if self._conn is None:
            raise RuntimeError("WebSim not running")
        with self._lock:
            self._conn.send(("log", clear))
            entries = self._conn.recv()
        return [
            LoggedRequest(host=host, path=path, status=status, time=at, method=method, conn=conn)
            for host, path, status, at, method, conn in entries
        ]


def requested_again(entries: list[LoggedRequest]) -> list[tuple[str, str]]:
    """(host, target) of the requests in `entries` (a `request_log`) for a target that had
    already been answered finally: anything but 429 or 5xx, which invite a retry. What a
    crawler asks again that it had already got (robots.txt aside: each run reads it afresh)."""
    answered: set[tuple[str, str]] = set()
    again = []
    for entry in entries:
        key = (entry["host"], entry["path"])
        if entry["path"] == "/robots.txt":
            continue
        if key in answered:
            again.append(key)
        if entry["status"] != 429 and entry["status"] < 500:
            answered.add(key)
    return again


def serve_forever(spec: WebSpec, port: int, export_dir: str | None) -> None:
    """Serve a web until Ctrl-C (the `crawlflow websim` command), optionally exporting its
    ground truth first."""
    with WebSim(spec, port=port) as sim:
        if export_dir:
            sim.export(export_dir)
            print(f"ground truth written to {export_dir}", flush=True)
        print(f"websim hub: {sim.hub_url}", flush=True)
        print(
            f"hosts: {len(sim.host_urls)} on port {sim.port}, pages: {sim.web.n_pages}", flush=True
        )
        try:
            while sim.running:
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("stopping websim", flush=True)
            return
        raise RuntimeError("websim server process died")
