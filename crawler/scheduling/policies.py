"""Server-level scheduling (docs/scheduling.md): what one connection to a server is expected to
cost, and how the four policies rank servers.

Per server `s` and its `i`-th connection:

- `P(s,i) = min(RequestsPerConnection(s,i), TaskURLs(s,i))`: the requests the server allowed
  over one connection the last time we could tell (the configured `requests_per_connection`
  for a new server), and the URLs queued for it;
- `T(s,i) = 2*ConnectionTime(s,i) + P(s,i)*ResponseTime(s,i)/p`, with `p` the keep-alive
  speed-up (applied only to servers that allow more than one request per connection: a server
  that closes after every request gains nothing from keep-alive);
- `ConnectionTime` and `ResponseTime` are smoothed: `est <- w*est + (1 - w)*measured`; the first
  measurement sets the estimate (as TCP's SRTT), so one sample is not dragged from a made-up
  start value.

How the times are measured with `requests`, which hides the socket: the node keeps one
keep-alive session per server, so this module follows the connection from the response
headers. A request is on a fresh connection if it is the server's first, or if the previous
response said `Connection: close` or failed without an answer (urllib3 then drops the
connection). A response on a reused connection is a ResponseTime sample (request sent to
headers received). A response on a fresh connection also paid the TCP connect, so
`measured - ResponseTime` is a ConnectionTime sample. A server that closes after every request
never shows a reused connection: its ConnectionTime is taken to be the node-wide mean and the
rest of each fresh request's time is its ResponseTime. On loopback (websim) a connect costs
about 0.1 ms, so there ResponseTime dominates T.

RequestsPerConnection is learned from the server's own words: `Keep-Alive: max=N` on a response
means the connection allows the requests made so far plus N; `Connection: close` means it allowed
exactly the requests made on it. Without either the server allowed at least what was made.

Servers not measured yet use the node-wide means of the other servers' estimates, so a new
server competes as an average one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, Protocol, get_args

Policy = Literal["bfs", "performance", "quality", "capability"]
POLICIES: tuple[str, ...] = get_args(Policy)

# The defaults of [scheduling] keepalive_speedup and estimate_weight (crawler/config.py).
DEFAULT_KEEPALIVE_SPEEDUP = 1.2  # p in the documents
DEFAULT_ESTIMATE_WEIGHT = 0.8  # w in the documents
# Before any server of the node has been measured every server is equally unknown, so these
# only have to be positive; the first measurements replace them.
INITIAL_CONNECTION_TIME_S = 0.0
INITIAL_RESPONSE_TIME_S = 0.1
# T is a divisor; a server measured at 0 s still costs this much per connection.
MIN_CONNECTION_COST_S = 1e-6
_KEEP_ALIVE_MAX = re.compile(r"\bmax\s*=\s*(\d+)", re.IGNORECASE)


class _Mean:
    """Mean of the current per-server estimates (one value per server, replaced on update)."""

    def __init__(self, initial: float) -> None:
        self._initial = initial
        self._sum = 0.0
        self._count = 0

    def replace(self, old: float | None, new: float) -> None:
        if old is None:
            self._count += 1
            self._sum += new
        else:
            self._sum += new - old

    @property
    def value(self) -> float:
        return self._sum / self._count if self._count else self._initial


class StatsPrior:
    """Node-wide means of the servers' ConnectionTime and ResponseTime estimates."""

    def __init__(self) -> None:
        self.connection_time = _Mean(INITIAL_CONNECTION_TIME_S)
        self.response_time = _Mean(INITIAL_RESPONSE_TIME_S)


class ConnectionStats:
    """What the node has learned about connections to one server (see the module docstring)."""

    def __init__(
        self,
        prior: StatsPrior,
        requests_per_connection: int,
        keepalive_speedup: float = DEFAULT_KEEPALIVE_SPEEDUP,
        weight: float = DEFAULT_ESTIMATE_WEIGHT,
    ) -> None:
        self.prior = prior
        self.requests_per_connection = requests_per_connection
        self.keepalive_speedup = keepalive_speedup
        self.weight = weight
        self.connection_time: float | None = None
        self.response_time: float | None = None
        self.connections = 0  # i: connections (turns) opened to this server so far
        self._open = False  # whether the last response left the connection open
        self._requests_on_connection = 0
        self._reuse_samples = 0  # ResponseTime samples taken on reused connections

    def on_response(
        self, status: int | None, rtt_s: float | None, headers: Mapping[str, str]
    ) -> None:
        """One request's outcome (`status` None: no answer). The time of a 429 or 5xx answer
        is not a sample: refusals and errors say nothing about how fast pages are served."""
        if status is None or rtt_s is None:
            self._open = False
            self._requests_on_connection = 0
            return
        fresh = not self._open
        self._requests_on_connection += 1
        if status < 500 and status != 429:
            self._learn_times(max(0.0, rtt_s), fresh)
        allowed = self._requests_on_connection
        if "close" in headers.get("connection", "").lower():
            self.requests_per_connection = allowed
            self._open = False
            self._requests_on_connection = 0
            return
        self._open = True
        match = _KEEP_ALIVE_MAX.search(headers.get("keep-alive", ""))
        if match:
            self.requests_per_connection = allowed + int(match.group(1))
        else:
            self.requests_per_connection = max(self.requests_per_connection, allowed)

    def _learn_times(self, rtt_s: float, fresh: bool) -> None:
        if not fresh:
            self._set_response_time(rtt_s)
            self._reuse_samples += 1
        elif self._reuse_samples and self.response_time is not None:
            self._set_connection_time(max(0.0, rtt_s - self.response_time))
        else:
            connect = (
                self.connection_time
                if self.connection_time is not None
                else self.prior.connection_time.value
            )
            self._set_response_time(max(0.0, rtt_s - connect))

    def _smooth(self, estimate: float | None, measured: float) -> float:
        if estimate is None:
            return measured
        return self.weight * estimate + (1.0 - self.weight) * measured

    def _set_response_time(self, measured: float) -> None:
        new = self._smooth(self.response_time, measured)
        self.prior.response_time.replace(self.response_time, new)
        self.response_time = new

    def _set_connection_time(self, measured: float) -> None:
        new = self._smooth(self.connection_time, measured)
        self.prior.connection_time.replace(self.connection_time, new)
        self.connection_time = new

    def planned_requests(self, task_urls: int) -> int:
        """P(s,i) for a connection opened now with `task_urls` URLs queued."""
        return max(1, min(self.requests_per_connection, task_urls))

    def connection_cost(self, planned: int) -> float:
        """T(s,i): expected seconds of a connection that makes `planned` requests."""
        connect = self.connection_time
        if connect is None:
            connect = self.prior.connection_time.value
        response = self.response_time
        if response is None:
            response = self.prior.response_time.value
        speedup = self.keepalive_speedup if self.requests_per_connection > 1 else 1.0
        return max(MIN_CONNECTION_COST_S, 2.0 * connect + planned * response / speedup)


class RankedServer(Protocol):
    """What a policy needs to know about a server to rank it."""

    stats: ConnectionStats

    def pending(self) -> int: ...
    def best_quality(self) -> float: ...
    def top_quality_sum(self) -> float: ...


class ServerPolicy:
    """Server ranking of one policy: a higher score opens a connection sooner. Equal scores
    (always, for breadth-first) fall back to the order in which servers got in line."""

    name: str = "bfs"
    # Whether a server's URLs are fetched best quality first (else first in, first out).
    quality_ordered_urls = False

    def head_size(self, server: RankedServer) -> int:
        """How many of a server's best URLs the score needs summed (0: FIFO queue)."""
        return 0

    def score(self, server: RankedServer) -> float:
        return 0.0


class PerformanceFirst(ServerPolicy):
    name = "performance"

    def score(self, server: RankedServer) -> float:
        planned = server.stats.planned_requests(server.pending())
        return planned / server.stats.connection_cost(planned)


class QualityFirst(ServerPolicy):
    name = "quality"
    quality_ordered_urls = True

    def head_size(self, server: RankedServer) -> int:
        return 1

    def score(self, server: RankedServer) -> float:
        return server.best_quality()


class CrawlCapability(ServerPolicy):
    name = "capability"
    quality_ordered_urls = True

    def head_size(self, server: RankedServer) -> int:
        return server.stats.requests_per_connection

    def score(self, server: RankedServer) -> float:
        # The head holds the best min(RequestsPerConnection, queued) URLs: exactly the P(s,i)
        # URLs the next connection will fetch (due retries aside).
        planned = server.stats.planned_requests(server.pending())
        return server.top_quality_sum() / server.stats.connection_cost(planned)


# One class per policy; `Policy` is the only way a name gets here (the settings check it).
POLICY_CLASSES: dict[Policy, type[ServerPolicy]] = {
    "bfs": ServerPolicy,
    "performance": PerformanceFirst,
    "quality": QualityFirst,
    "capability": CrawlCapability,
}


def make_policy(name: Policy) -> ServerPolicy:
    return POLICY_CLASSES[name]()
