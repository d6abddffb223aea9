"""What the parts of a node share, under one lock: its servers (the frontier), its page
budget, its counters, and the rules that decide which URLs it queues."""

from __future__ import annotations

import threading
import time

from crawler.cluster.status import Counters
from crawler.fetching.fetcher import ServerSession
from crawler.node.settings import NodeSettings
from crawler.ratecontrol import make_host_controller
from crawler.scheduling.frontier import Frontier
from crawler.scheduling.quality import make_quality_model
from crawler.scheduling.server import ServerState
from crawler.scheduling.urlqueue import UrlTask
from crawler.scope.limits import UrlLimits
from crawler.scope.traps import ParamStripper
from crawler.scope.urls import Scope

UNLIMITED = 1 << 62


class NodeCore:
    """Not a component of its own: the state the node's components (fetch loop, handover,
    discovery, metrics, control API) read and change, each under `lock`."""

    def __init__(self, settings: NodeSettings) -> None:
        self.node_id = settings.node_id
        self.crawl_id = settings.crawl_id
        self.config = config = settings.config
        self.scope = Scope(set(settings.scope_hosts))
        self.max_depth = config.limits.max_depth
        self.lock = threading.Condition()
        self.frontier = Frontier(config.scheduling)
        self.limits = UrlLimits(config.limits)
        self.strip_params = ParamStripper(config.limits.strip_params)
        self.revisits = settings.revisits
        self._quality = make_quality_model(config.scheduling.policy, config.scheduling.quality_file)
        self.sessions: dict[str, ServerSession] = {}  # this node's connection to each server
        self.budget = UNLIMITED if settings.page_budget is None else settings.page_budget
        self.active = 0  # connections open
        self.stopping = False
        self.failure: str | None = None  # the first bug that killed one of its threads
        self.touched: set[str] = set()  # servers that answered since the last metrics tick
        self.counters = Counters()

    @property
    def servers(self) -> dict[str, ServerState]:
        """The servers this node owns: only it may connect to them."""
        return self.frontier.servers

    def own(self, server: ServerState) -> None:
        """Take a server, new or arrived from another node. Under the lock."""
        if server.controller is None:  # new, or rebuilt from the output by crawler.cluster.recovery
            server.controller = make_host_controller(
                self.config.rate_control, self.config.retry, time.monotonic()
            )
        self.frontier.add_server(server)

    def score(self, url: str) -> float:
        """A URL's rank in the scheduler: its revisit priority in a recrawl, else its quality."""
        if self.revisits is not None:
            return self.revisits.priority(url)
        return self._quality.score(url)

    def observe_page(self, url: str, links: list[str]) -> None:
        """Every in-scope link of a page, seen or not: the graph page quality is computed on."""
        self._quality.observe_page(url, links)

    def queue(self, server: ServerState, task: UrlTask) -> None:
        """Queue a new URL of an owned server, seen from now on. Under the lock."""
        server.seen.add(task.url)
        self.frontier.push(server.host, task, scheme=task.url.split(":", 1)[0])

    def changed(self) -> None:
        """What the node holds changed: wake the workers, tell the coordinator. Under the lock."""
        self.counters.activity += 1
        self.lock.notify_all()
