"""A Ray cluster of several raylets on this machine, for tests and benchmarks: a head and more
raylets, each started by its own `ray start` process on loopback, as on separate machines, with
its own CPUs, object store and a custom resource naming it. A raylet can be lost (its processes
killed at once, as when a machine goes down) and the cluster stopped, without touching any other
Ray on the machine (a test session's own, another user's): every raylet runs in a process group
of its own, and only those groups are signalled; `ray stop` would stop every Ray here.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from runtime.environment import LOOPBACK_ONLY, NO_TELEMETRY, RAY_LOCAL_ONLY

LOOPBACK = "127.0.0.1"


def raylet_ip(index: int) -> str:
    """The address of the `index`th raylet: one loopback address per "machine" (127.0.0.2 on),
    as Ray's nodes each have their own. Never 127.0.0.1: Ray replaces that with the machine's
    network address, which it would then announce and connect to."""
    return f"127.0.0.{2 + index}"


@dataclass(frozen=True)
class Raylet:
    """One raylet: its name (also its custom resource, one unit of it), CPUs and object store;
    `env`: variables of its machine alone, over the cluster's (its own cache directory, say, as
    a machine of its own has)."""

    name: str
    num_cpus: int = 1
    object_store_bytes: int = 80 * 1024 * 1024
    env: dict[str, str] = field(default_factory=dict)


def free_port() -> int:
    """A TCP port free on loopback now (the OS's choice)."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def cluster_environment(token: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the raylets' processes: no telemetry, no library's own HTTP off
    loopback, the cluster's own token (Ray's token authentication, never the user's
    ~/.ray/auth_token), none of the caller's Ray variables (RAY_ADDRESS, the local-only switch
    of runtime.environment, which refuses a second raylet); `extra` on top (Ray's
    `RAY_<setting>` variables, say)."""
    dropped = {"RAY_ADDRESS", *RAY_LOCAL_ONLY, "RAY_AUTH_TOKEN_PATH"}
    env = {key: value for key, value in os.environ.items() if key not in dropped}
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})
    env.update(NO_TELEMETRY)
    env.update(LOOPBACK_ONLY)
    env.update({name.lower(): value for name, value in LOOPBACK_ONLY.items()})
    env.update(extra or {})
    return env


class RayletExited(RuntimeError):
    """`ray start` ended before its raylet was up."""


class LocalCluster:
    """`raylets[0]` is the head. `start()` returns once every raylet has joined."""

    def __init__(
        self, root: Path, raylets: list[Raylet], env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        self.raylets = raylets
        self.env = cluster_environment(secrets.token_hex(32), env)
        self.port = free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        # Ray's sockets live under its temp dir, and a socket's path has at most 107 bytes:
        # a short directory of its own, whatever `root` is.
        self.ray_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))

    @property
    def address(self) -> str:
        """What RAY_ADDRESS names to join it."""
        return f"{raylet_ip(0)}:{self.port}"

    def client_environment(self) -> dict[str, str]:
        """The environment of a process that joins the cluster (`crawlflow crawl`, say)."""
        return {**self.env, "RAY_ADDRESS": self.address}

    def _argv(self, index: int, raylet: Raylet) -> list[str]:
        ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
        ports = {
            "--node-manager-port": free_port(),
            "--object-manager-port": free_port(),
            "--dashboard-agent-listen-port": free_port(),
            "--dashboard-agent-grpc-port": free_port(),
            "--runtime-env-agent-port": free_port(),
            "--metrics-export-port": free_port(),
        }
        argv = [
            ray,
            "start",
            "--block",
            "--disable-usage-stats",
            f"--node-ip-address={raylet_ip(index)}",
            f"--num-cpus={raylet.num_cpus}",
            "--num-gpus=0",
            f"--object-store-memory={raylet.object_store_bytes}",
            f"--resources={json.dumps({raylet.name: 1})}",
            *[f"{flag}={port}" for flag, port in ports.items()],
        ]
        if index == 0:
            argv += [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--dashboard-port={free_port()}",
                f"--temp-dir={self.ray_dir}",
            ]
        else:
            argv.append(f"--address={self.address}")
        return argv

    def start(self, timeout_s: float = 90.0, attempts: int = 3) -> None:
        """Each raylet is started up to `attempts` times: `ray start` gives up when its raylet
        has not registered within 30 s, which a heavily loaded machine can take."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            for index, raylet in enumerate(self.raylets):
                for attempt in range(1, attempts + 1):
                    try:
                        self._start_raylet(index, raylet, timeout_s)
                        break
                    except RayletExited:
                        self.lose(raylet.name)
                        if attempt == attempts:
                            raise
            deadline = time.monotonic() + timeout_s
            while len(self.alive_nodes()) < len(self.raylets):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(self.raylets)} raylets not up in {timeout_s:.0f} s")
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise

    def alive_nodes(self) -> list[dict[str, object]]:
        """The raylets the cluster's GCS counts alive: each with its Ray node id and resources,
        asked from a separate process (this one may have a Ray of its own)."""
        query = (
            "import json, ray;"
            f"ray.init(address={self.address!r}, log_to_driver=False);"
            "print(json.dumps([{'node_id': n['NodeID'], 'resources': n['Resources']}"
            " for n in ray.nodes() if n['Alive']]))"
        )
        done = subprocess.run(
            [sys.executable, "-c", query], env=self.env, capture_output=True, timeout=60
        )
        if done.returncode != 0:
            return []
        nodes: list[dict[str, object]] = json.loads(done.stdout.decode().splitlines()[-1])
        return nodes

    def _start_raylet(self, index: int, raylet: Raylet, timeout_s: float) -> None:
        log = (self.root / f"{raylet.name}.log").open("ab")
        self.processes[raylet.name] = subprocess.Popen(
            self._argv(index, raylet),
            env={**self.env, **raylet.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: see `lose`
        )
        self._wait_until_started(raylet.name, timeout_s)

    def _wait_until_started(self, name: str, timeout_s: float) -> None:
        """Until `ray start` says its processes are up (it then blocks, watching them)."""
        log, process = self.root / f"{name}.log", self.processes[name]
        deadline = time.monotonic() + timeout_s
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if process.poll() is not None:
                raise RayletExited(f"raylet {name} exited: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"raylet {name} not up in {timeout_s:.0f} s")
            time.sleep(0.2)

    def lose(self, name: str) -> None:
        """The machine of raylet `name` goes down: its raylet and every process it started
        (its workers: the actors on it) are killed at once, with no chance to say goodbye."""
        process = self.processes[name]
        # The group outlives its leader when `ray start` ended first.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        """Every raylet lost at once: nothing of a throwaway cluster needs a clean stop (`ray
        start --block` would drain for up to 30 s on SIGTERM)."""
        for name in self.processes:
            self.lose(name)
        shutil.rmtree(self.ray_dir, ignore_errors=True)
