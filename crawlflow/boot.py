"""The Prefect API and the Ray a command's crawl runs on, started side by side.

Left to itself, Prefect starts its temporary server when the flow first calls the API (and
imports the whole server into this process to do so), and the launch task starts Ray only
once the plan is made: one after the other, several seconds each. Here the server process is
started first, so that it boots while this process imports the flow and starts Ray. It is the
server Prefect's ephemeral mode runs (`prefect.server.api.server:create_app` under uvicorn, no
UI, only the services an ephemeral server runs, the database in PREFECT_HOME; built with the
garbage collector paused, crawlflow/prefect_app.py), and it stops when the command exits. A
server the settings already name (PREFECT_API_URL, in the environment or the active profile)
is used as it is.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.request import CrawlRequest

STARTUP_TIMEOUT_S = 60.0  # a fresh PREFECT_HOME runs the database migrations first
BIND_ATTEMPTS = 3  # the free port found may be taken before the server binds it
# The flow's settings on a temporary server. It serves no UI: no "View at" link to one in the
# flow's log. No flow run heartbeat: heartbeats let a server mark a run whose process died as
# crashed, but this server dies with the command, and the heartbeat thread costs the flow's
# end up to a second (it looks for the stop signal once a second; Prefect waits for it).
TEMPORARY_SERVER_SETTINGS: dict[str, Any] = {"ui_url": "", "flows.heartbeat_frequency": None}


class PrefectServerFailed(RuntimeError):
    """The temporary server did not start; the message says where its log is."""


class PrefectServer:
    """A temporary Prefect server on a free loopback port, in a child process. What it prints
    goes to a log file, kept if it is not empty: the command's own output stays its own (a
    command that stops at once, a second run refused, must not print the server's end)."""

    def __init__(self) -> None:
        self.port = _free_loopback_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115  # closed by `stop`
            prefix="crawlflow-prefect-server-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "crawlflow.prefect_app:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "error",
                "--lifespan",
                "on",
            ],
            # Out of the command's process group: SIGTERM to the group (timeout, systemd, a
            # container runtime) must not stop the server before the command has said its last
            # to it; the command stops it on its way out (`stop`, at exit).
            start_new_session=True,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            # What Prefect's own ephemeral mode sets: no UI, ephemeral services only.
            env={
                **os.environ,
                "PREFECT_UI_ENABLED": "0",
                "PREFECT__SERVER_EPHEMERAL": "1",
                "PREFECT__SERVER_FINAL": "1",
            },
        )
        # Registered before Prefect registers its own exit handlers (they run in reverse
        # order): the server stops after Prefect has sent its last logs and events.
        atexit.register(self.stop)

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> bool:
        """True once the API answers; False if the process exited first (port taken)."""
        import urllib.request  # only here: the command starts the server before anything else

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with opener.open(f"{self.api_url}/health", timeout=1) as response:
                    if response.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise PrefectServerFailed(
            f"the temporary Prefect server did not start within {timeout_s:.0f} s; "
            f"its log: {self.log.name}"
        )

    def stop(self) -> None:
        """Ask the server to stop, without waiting: it finishes its own shutdown (flushing
        what it received) after the command has returned."""
        if self.process.poll() is None:
            self.process.terminate()
        self.log.close()
        with contextlib.suppress(FileNotFoundError):  # stopped twice: removed already
            if os.path.getsize(self.log.name) == 0:
                os.unlink(self.log.name)


def boot_prefect_server() -> PrefectServer | None:
    """The temporary server's process (the one the command's entry point started, if it did),
    started at once unless the environment names a server or Prefect is imported already (a
    test harness): it boots while the command reads Prefect's settings (importing Prefect,
    about a second) and starts Ray."""
    global _booted_by_entry_point
    if _booted_by_entry_point is not None:
        server, _booted_by_entry_point = _booted_by_entry_point, None
        return server
    if os.environ.get("PREFECT_API_URL") or "prefect" in sys.modules:
        return None
    return PrefectServer()


def boot_for_the_command() -> None:
    """Start the temporary server's process now, for the command's crawl to run on
    (crawlflow/entry.py)."""
    global _booted_by_entry_point
    _booted_by_entry_point = boot_prefect_server()


_booted_by_entry_point: PrefectServer | None = None
# The temporary server the process's crawls run on, once one has started.
_serving: PrefectServer | None = None


def start_prefect_server(booting: PrefectServer | None = None) -> PrefectServer | None:
    """The temporary server to run on (`booting`, or one started now), unless the settings
    name a server (the active profile, a settings file): `booting` is stopped then. It
    stops when the command exits."""
    if os.environ.get("PREFECT_API_URL"):
        return None
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:
        if booting is not None:
            booting.stop()
        return None
    if _serving is not None and _serving.process.poll() is None:
        if booting is not None:
            booting.stop()
        return _serving  # an earlier crawl's (the Python API's crawls, one process)
    server = booting or PrefectServer()
    print(f"Starting temporary Prefect server on {server.api_url}", file=sys.stderr, flush=True)
    return server


def wait_for_server(server: PrefectServer) -> PrefectServer:
    """The server once it answers, started again on another port if its port was taken."""
    for _ in range(BIND_ATTEMPTS - 1):
        if server.wait_ready():
            return server
        server = PrefectServer()
    if server.wait_ready():
        return server
    raise PrefectServerFailed(
        f"the temporary Prefect server exited with code {server.process.returncode}; "
        f"its log: {server.log.name}"
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while Prefect, Ray and the crawler are
    imported (about 1.4 s of CPU beside the server's boot and Ray's processes, a tenth of it
    the collector walking what they build again and again). What they built lives as long as
    the command: it is moved out of the collector's reach (`gc.freeze`), which would
    otherwise walk it all at its next collections, during the flow."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


@contextmanager
def crawl_runtime() -> Iterator[None]:
    """Inside: a Prefect API to run the flow on, a local Ray started, and the flow imported.
    A Ray started here is shut down in the background once the crawl's fleet has stopped, or
    on the way out (runtime.ray_backend.CommandRay). A temporary server started here serves
    the process's later crawls too, and stops when the process exits."""
    global _serving
    booting = boot_prefect_server()
    # Ray and the crawler (requests) are imported before the thread below starts: imports
    # racing with each other's warning filters let urllib3 print a stray warning.
    with _collector_paused():
        from runtime.ray_backend import COMMAND_RAY, ensure_ray
    from concurrent.futures import ThreadPoolExecutor

    try:
        with _collector_paused(), ThreadPoolExecutor(max_workers=1) as pool:
            # Prefect's settings and the flow's imports keep a core busy while Ray's start,
            # begun at once, mostly waits for the processes it starts.
            prefect_ready = pool.submit(_prepare_prefect, booting)
            # A cluster (RAY_ADDRESS) is joined by the launch task, which retries passing
            # failures.
            if not os.environ.get("RAY_ADDRESS") and ensure_ray():
                COMMAND_RAY.hold()
            server = prefect_ready.result()
        if server is None:
            yield
        else:
            from prefect.settings import temporary_settings

            server = _serving = wait_for_server(server)
            # In the environment too, for a crawl_runtime entered again inside this one.
            os.environ["PREFECT_API_URL"] = server.api_url
            try:
                with temporary_settings(TEMPORARY_SERVER_SETTINGS | {"api.url": server.api_url}):
                    yield
            finally:
                del os.environ["PREFECT_API_URL"]
    finally:
        COMMAND_RAY.release()


def _prepare_prefect(booting: PrefectServer | None) -> PrefectServer | None:
    """The server to run on (see start_prefect_server), with the flow imported, and what
    Prefect imports only once the flow is called: FastAPI's encoders, for the flow's
    parameters (0.13 s, all of FastAPI), and its engine."""
    server = start_prefect_server(booting)
    for module in ("flows.crawl", "fastapi.encoders", "prefect.flow_engine"):
        importlib.import_module(module)
    return server


def run_crawl(request: CrawlRequest) -> dict[str, Any]:
    """Run the `crawl` flow on `request` (inside a crawl_runtime, started here unless this
    process is in one already) and return its summary."""
    with crawl_runtime():
        from flows.crawl import crawl

        return crawl(request)


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
