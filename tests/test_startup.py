"""How a crawl command starts and stops what it runs on: its own temporary Prefect server (or
the one the settings name), a local Ray, and node actors that do not import Prefect."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from websim import WebSim, WebSpec

pytestmark = pytest.mark.integration  # the CLI with its Prefect server, Ray and websim

CRAWLFLOW = str(Path(sys.executable).with_name("crawlflow"))
TASKS = {
    "scope",
    "checkpoint",
    "allocate",
    "launch nodes",
    "crawl",
    "close nodes",
    "collect",
    "report",
}


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_actor_processes_import_no_prefect():
    """Ray imports runtime.ray_backend in every actor process; Prefect would cost each a
    second."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, runtime.ray_backend; print('prefect' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False"


def test_the_temporary_servers_app_is_built_with_the_collector_paused_then_running():
    """Prefect's app, its heap frozen out of the collector's reach, the collector on again."""
    script = (
        "import gc\n"
        "from crawlflow.prefect_app import create_app\n"
        "app = create_app()\n"
        "paths = {route.path for route in app.routes}\n"
        "print(type(app).__name__, '/api' in paths, gc.isenabled(), gc.get_freeze_count())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    kind, api_mounted, collecting, frozen = done.stdout.split()
    assert (kind, api_mounted, collecting) == ("FastAPI", "True", "True")
    assert int(frozen) > 100_000


def test_a_server_the_settings_name_is_used_as_it_is(prefect_api):
    from prefect.settings import get_current_settings

    from crawlflow.boot import start_prefect_server

    assert get_current_settings().api.url  # set by the test harness
    assert start_prefect_server() is None


def test_crawl_command_runs_on_its_own_server_which_keeps_the_run(tmp_path):
    spec = WebSpec(hosts=1, pages=40, seed=2, rate_limit_rps=None, latency_ms=(1.0, 2.0))
    home = tmp_path / "prefect-home"
    env = {**os.environ, "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    with WebSim(spec) as sim:
        done = subprocess.run(
            [
                CRAWLFLOW,
                "crawl",
                sim.host_urls[0],
                "--allow-private",
                "--out",
                str(tmp_path / "out"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    # The command ends its process without the interpreter's teardown, and says nothing more:
    # a teardown skipped half-way (a frozen heap) had DuckDB's bindings report leaks.
    assert "leaked" not in done.stderr
    assert done.stdout.rstrip().endswith("host_rates.png")
    # Drawn by the flow's report step, whose path the summary prints.
    assert Path(done.stdout.rstrip().rsplit(": ", 1)[1]).stat().st_size > 0
    match = re.search(
        r"Starting temporary Prefect server on http://127\.0\.0\.1:(\d+)/api", done.stderr
    )
    assert match, done.stderr[-2000:]
    assert any("pages" in path.parts for path in (tmp_path / "out").rglob("*.parquet"))
    # The server stops by itself once the command has exited, keeping what it recorded.
    port = int(match.group(1))
    deadline = time.monotonic() + 60
    while _listening(port):
        assert time.monotonic() < deadline, "the temporary Prefect server is still running"
        time.sleep(0.2)
    # Its port closes first; what it received is written in its shutdown, which follows.
    deadline = time.monotonic() + 30
    while True:
        with sqlite3.connect(home / "prefect.db") as con:
            flow_runs = con.execute("SELECT state_type FROM flow_run").fetchall()
            task_runs = con.execute("SELECT name FROM task_run").fetchall()
            events = {event for (event,) in con.execute("SELECT event FROM events")}
        if "prefect.flow-run.Completed" in events or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert flow_runs == [("COMPLETED",)]
    # The run's events are kept, but no heartbeat: the temporary server dies with the command.
    assert "prefect.flow-run.Completed" in events
    assert "prefect.flow-run.heartbeat" not in events
    assert {name.rsplit("-", 1)[0] for (name,) in task_runs} >= TASKS


def _processes_with_environment(entry: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and entry.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue  # ended meanwhile, or not ours
    return found


def test_a_crawl_command_line_that_turns_out_wrong_leaves_no_server_running(tmp_path):
    """The entry point starts a crawl's server before the command line is parsed; a wrong
    one still ends in one line and exit code 2, and the server is stopped with the command."""
    marker = f"CRAWLFLOW_TEST_RUN=wrong-seed-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path), marker.split("=")[0]: marker.split("=")[1]}
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run(
        [CRAWLFLOW, "crawl", "ht!tp://nowhere"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "crawlflow: error: bad seed: unsupported scheme in 'ht!tp://nowhere' (only http and https)"
    ]
    deadline = time.monotonic() + 30
    while _processes_with_environment(marker):
        assert time.monotonic() < deadline, "the temporary Prefect server is still running"
        time.sleep(0.2)


def test_stopping_a_local_ray_ends_all_its_processes():
    """The monitor is stopped first (a second faster); nothing of that Ray is left running."""
    script = (
        "import ray\n"
        "from runtime.ray_backend import ensure_ray, stop_local_ray\n"
        "ensure_ray()\n"
        "node = ray._private.worker._global_node\n"
        "print(' '.join(str(info.process.pid) for infos in node.all_processes.values()"
        " for info in infos))\n"
        "stop_local_ray()\n"
        "assert not ray.is_initialized()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) >= 3  # GCS, raylet, monitor at least
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert alive == []


def test_a_commands_ray_stops_once_the_fleet_launched_on_it_has_stopped(tmp_path):
    """The command's Ray is stopped in the background as soon as its crawl's fleet has
    stopped (the flow compacts and reports meanwhile), every process of its head with it."""
    script = (
        "import sys, threading, ray\n"
        "from crawler.config import CrawlConfig\n"
        "from runtime.fleet import single_node\n"
        "from runtime.ray_backend import COMMAND_RAY, RayFleet, ensure_ray\n"
        "assert ensure_ray()\n"
        "COMMAND_RAY.hold()\n"
        "node = ray._private.worker._global_node\n"
        "pids = [info.process.pid for infos in node.all_processes.values() for info in infos]\n"
        "fleet = RayFleet(single_node('c', sys.argv[1], CrawlConfig(), ['127.0.0.1:9']))\n"
        "assert ray.is_initialized()\n"
        "fleet.stop()\n"
        "(shutdown,) = [t for t in threading.enumerate() if t.name == 'ray-shutdown']\n"
        "shutdown.join()\n"
        "print(ray.is_initialized(), ' '.join(map(str, pids)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    initialized, *pids = done.stdout.split()
    assert initialized == "False"
    assert len(pids) >= 3
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []


def test_a_fleet_leaves_running_a_ray_it_was_not_started_for(ray_session, tmp_path):
    """Tests, and a flow run by a Prefect worker, share a Ray that outlives each crawl."""
    from crawler.config import CrawlConfig
    from runtime.fleet import single_node
    from runtime.ray_backend import RayFleet

    fleet = RayFleet(single_node("c", str(tmp_path), CrawlConfig(), ["127.0.0.1:9"]))
    fleet.stop()
    assert ray_session.is_initialized()
    assert ray_session.cluster_resources().get("CPU") == 2
