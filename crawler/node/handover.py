"""Server ownership between nodes: handing servers over (whole, crawler/scheduling/server.py) and
taking them over, without ever having two connections to one server open."""

from __future__ import annotations

import time
from collections.abc import Callable

from crawler.node.core import NodeCore
from crawler.scheduling.server import ServerState
from crawler.scheduling.urlqueue import UrlTask

# A server taken over is not handed on again for this many heartbeats (no ping-pong).
HOST_COOLDOWN_BEATS = 8


class Handover:
    def __init__(self, core: NodeCore, heartbeat_s: float, on_adopt: Callable[[], None]) -> None:
        """`on_adopt`: called under the lock once servers arrived (the node adds workers)."""
        self._core = core
        self._cooldown_s = HOST_COOLDOWN_BEATS * heartbeat_s
        self._on_adopt = on_adopt
        self._adopted: dict[str, float] = {}  # server -> when it was taken over
        self.leaving: set[str] = set()  # servers to hand over once their connection closes
        self.departed: list[ServerState] = []  # servers handed over, for the link to send

    def export_hosts(self, want_urls: int, max_urls: int) -> list[ServerState]:
        """Give up servers from the tail of the line (those served last) holding about
        `want_urls` queued URLs, and at most `max_urls` unless one server alone has more: one
        with no open connection at once, one with a connection once that closes (it closes
        after its current request), returned by a later call (the link calls every
        heartbeat). None with more queued than `want_urls` qualifies (moving it would not even
        out the load), nor one adopted within the cooldown (no ping-pong)."""
        core = self._core
        now = time.monotonic()
        cooldown = self._cooldown_s
        with core.lock:
            states, self.departed = self.departed, []
            if want_urls <= 0 or core.stopping:
                return states
            candidates = [
                server
                for host, server in core.servers.items()
                if host not in self.leaving
                and 0 < server.pending() <= want_urls
                and now - self._adopted.get(host, -cooldown) >= cooldown
            ]
            chosen: list[ServerState] = []
            urls = 0
            for server in sorted(candidates, key=lambda s: s.turn, reverse=True):
                if chosen and (urls + server.pending() > max_urls or urls >= want_urls):
                    break
                chosen.append(server)
                urls += server.pending()
            self.leaving.update(server.host for server in chosen if server.busy)
            idle = [server for server in chosen if not server.busy]
            core.disown(idle, now)
            return states + idle

    def connection_closed(self, server: ServerState) -> None:
        """A worker let go of the server; one on its way out can go now. Under the lock."""
        if server.host in self.leaving:
            self.leaving.discard(server.host)
            self._core.disown([server], time.monotonic())
            self.departed.append(server)

    def adopt_hosts(self, states: list[ServerState]) -> None:
        """Take over servers, whole: their queues, seen URLs, robots.txt rules, rate
        controllers and limit counts; and the URLs sent to them while they were between
        owners."""
        core = self._core
        now = time.monotonic()
        with core.lock:
            for server in states:
                server.arrive(now)
                core.own(server)
                self._adopted[server.host] = now
                inbox, server.inbox = server.inbox, []
                for url, depth in inbox:
                    if url not in server.seen:
                        task = UrlTask(url, depth, quality=core.score(url), host_depth=depth)
                        core.queue(server, task)
            self._on_adopt()
            core.changed()
