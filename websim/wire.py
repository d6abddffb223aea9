"""Network latency on the wire: websim's hosts behind a delay line, all on loopback addresses.

websim puts a host's latency into the server's own timer, where a client cannot tell it from
the server's work. Real network latency is also in the TCP handshake, which the server's
kernel answers whatever the server's load: that is how a crawler can tell the part of a
response time that queues from the part that does not. `Wire` gives websim real network
latency on one machine, as netem would (not available here):

- two private network namespaces, the crawler's and the web's, each with its own loopback,
  so traffic never leaves the machine and uses 127.0.0.0/8 addresses only;
- a TUN device in each, and a relay process that copies every packet from one to the other
  after half the round trip of the host it comes from or goes to (its median latency);
- in the crawler's namespace, while a web is served (`serving`), its addresses are routed to
  the TUN device (127.0.0.1 stays local: Ray and Prefect run there); the crawler's side of
  the wire is `CRAWLER_ADDRESS`, which the web's namespace routes back the same way.

The calling thread joins the crawler's namespace (`Wire.__enter__`, left at `__exit__`) and
`serving` starts a websim inside the web's, so every process it starts in between (Ray,
Prefect's API, websim) lives in one of the two. Outside `serving`, the crawler's namespace is
a plain loopback where other websims run as usual. The web is served with
`WebSpec.latency_on_wire`, so that its server leaves out what the wire adds. Needs root
(network namespaces and /dev/net/tun); `unavailable()` says why not when it cannot run.
Linux only.

    python -m websim.wire CRAWLER_FD WEB_FD   # the relay, started by Wire
"""

from __future__ import annotations

import ctypes
import fcntl
import heapq
import itertools
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from websim.sim import WebSim

CRAWLER_ADDRESS = "127.255.0.1"
_CLONE_NEWNET = 0x40000000
_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
_MTU = 65000  # large frames: fewer packets for the relay to copy
_NETNS_DIR = Path("/run/netns")


def unavailable() -> str | None:
    """Why a `Wire` cannot be set up here, or None when it can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    if shutil.which("ip") is None:
        return "no `ip` command (Debian's iproute2)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _setns(namespace: str | Path) -> None:
    """Move the calling thread (and the processes it starts from now on) into `namespace`, a
    name of `ip netns` or a namespace's path."""
    fd = os.open(_NETNS_DIR / namespace, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {namespace}")
    finally:
        os.close(fd)


def _remove_orphans() -> None:
    """Delete the namespaces of wires whose process is gone (killed before its __exit__)."""
    if not _NETNS_DIR.is_dir():
        return
    for path in _NETNS_DIR.iterdir():
        found = re.fullmatch(r"cf(\d+)[cw]", path.name)
        if found and not Path(f"/proc/{found[1]}").exists():
            subprocess.run(["ip", "netns", "del", path.name], check=False, capture_output=True)


def _tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TUN | _IFF_NO_PI))
    return fd


class Wire:
    """A delay line between the crawler's namespace and the web's (see the module notes).
    `delays_s`: round trip per host address of the web."""

    def __init__(self) -> None:
        tag = f"cf{os.getpid()}"
        self.crawler_ns, self.web_ns = f"{tag}c", f"{tag}w"
        self._devices = (f"{tag}c", f"{tag}w")
        self._relay: subprocess.Popen[str] | None = None
        self._home: int | None = None  # the calling thread's namespace before

    def __enter__(self) -> Wire:
        reason = unavailable()
        if reason is not None:
            raise RuntimeError(f"no wire: {reason}")
        _remove_orphans()
        _ip("netns", "add", self.crawler_ns)
        _ip("netns", "add", self.web_ns)
        fds = [_tun(device) for device in self._devices]
        try:
            crawler_dev, web_dev = self._devices
            self._configure(self.crawler_ns, crawler_dev, CRAWLER_ADDRESS)
            self._configure(self.web_ns, web_dev, None)
            self._route("add", self.web_ns, web_dev, [CRAWLER_ADDRESS])
            self._relay = subprocess.Popen(
                [sys.executable, "-m", "websim.wire", *map(str, fds)],
                pass_fds=fds,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        finally:
            for fd in fds:  # the relay holds them now (or nothing does, on failure)
                os.close(fd)
        # Held open, so that __exit__ can come back to it even once nothing else is in it.
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        _setns(self.crawler_ns)
        return self

    @staticmethod
    def _configure(ns: str, device: str, address: str | None) -> None:
        """`device` into `ns` and up, with `address` if any; 127.0.0.0/8 may cross it."""
        _ip("link", "set", device, "netns", ns)
        for name in ("all", device):
            _ip("netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.conf.{name}.route_localnet=1")
        _ip("-n", ns, "link", "set", "lo", "up")
        if address is not None:
            _ip("-n", ns, "addr", "add", f"{address}/32", "dev", device)
        _ip("-n", ns, "link", "set", device, "mtu", str(_MTU), "up")

    @staticmethod
    def _route(verb: str, ns: str, device: str, addresses: list[str]) -> None:
        """Routes to `addresses` through `device`, in the local table: more specific than
        loopback's 127.0.0.0/8 there, they win."""
        for address in addresses:
            _ip("-n", ns, "route", verb, f"{address}/32", "dev", device, "table", "local")

    def _set_delays(self, delays_s: dict[str, float]) -> None:
        """The round trip per host address from now on; returns once the relay applies it."""
        relay = self._relay
        assert relay is not None and relay.stdin is not None and relay.stdout is not None
        relay.stdin.write(json.dumps(delays_s) + "\n")
        relay.stdin.flush()
        if relay.stdout.readline().strip() != "ok":
            raise RuntimeError(f"the wire's relay stopped (exit code {relay.poll()})")

    @contextmanager
    def serving(self, sim: WebSim) -> Iterator[WebSim]:
        """`sim` started in the web's namespace, its hosts reached through the wire with their
        median latency as the round trip, for the block. Its spec must have
        `latency_on_wire`, or its server would add the latency a second time."""
        if not sim.spec.latency_on_wire:
            raise ValueError("a web on the wire needs WebSpec.latency_on_wire")
        hosts = sim.web.hosts
        self._set_delays({host.address: host.latency_ms_median / 1000 for host in hosts})
        _setns(self.web_ns)
        try:
            sim.start()
        finally:
            _setns(self.crawler_ns)
        addresses = [host.address for host in hosts]
        try:
            self._route("add", self.crawler_ns, self._devices[0], addresses)
            yield sim
        finally:
            self._route("del", self.crawler_ns, self._devices[0], addresses)
            sim.stop()

    def __exit__(self, *exc: object) -> None:
        if self._home is not None:
            _setns(f"/proc/self/fd/{self._home}")
            os.close(self._home)
            self._home = None
        if self._relay is not None:
            self._relay.kill()
            self._relay.wait()
        for ns in (self.crawler_ns, self.web_ns):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def relay(crawler_fd: int, web_fd: int) -> None:
    """Copy packets between the two TUN devices, each after half its host's round trip. The
    round trips come on stdin, a JSON object per line ({address: seconds}), each answered
    "ok" once applied; the relay exits when stdin closes (its parent is gone)."""
    one_way: dict[bytes, float] = {}
    due: list[tuple[float, int, int, bytes]] = []
    order = itertools.count()  # ties in time keep the order packets came in
    ready = threading.Condition()

    def read(source: int, target: int, host_at: slice) -> None:
        while True:
            packet = os.read(source, _MTU + 100)
            delay = one_way.get(packet[host_at], 0.0)  # IPv4 header: source 12-16, dest 16-20
            with ready:
                heapq.heappush(due, (time.monotonic() + delay, next(order), target, packet))
                ready.notify()

    def take_delays() -> None:
        nonlocal one_way
        for line in sys.stdin:
            delays = json.loads(line)
            one_way = {socket.inet_aton(address): rtt / 2 for address, rtt in delays.items()}
            print("ok", flush=True)
        os._exit(0)

    threading.Thread(target=take_delays, daemon=True).start()
    threading.Thread(target=read, args=(crawler_fd, web_fd, slice(16, 20)), daemon=True).start()
    threading.Thread(target=read, args=(web_fd, crawler_fd, slice(12, 16)), daemon=True).start()
    while True:
        with ready:
            while not due or due[0][0] > time.monotonic():
                ready.wait(None if not due else due[0][0] - time.monotonic())
            _, _, target, packet = heapq.heappop(due)
        os.write(target, packet)


if __name__ == "__main__":
    relay(int(sys.argv[1]), int(sys.argv[2]))
