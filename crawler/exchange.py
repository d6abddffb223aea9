"""Peer-to-peer task exchange between crawler nodes (SPEC §4), double buffered.

Nodes are peers: each fetches the servers it owns and parses what it fetched; URLs it finds
for servers another node owns go, through the shared state, to that owner. The shared state is
the `Exchange` below, which holds the ownership map, an inbox of URLs per server, the shared
queue of servers between owners and every node's last heartbeat, and the Bloom filter shards
(`crawler.dedup`) behind it: URLs sent to the exchange are checked with the filter there, so a
batch of URLs costs a node one round trip (as a script on the store would), not two. The flow
puts each in a Ray actor; tests use them in-process.

The unit of work that moves between nodes is a whole server with its queue, never single URLs
of a server: politeness allows one connection per server, and only the owner opens it. A
server moves only while no connection to it is open (one with a connection leaves once its
current request is done), and it takes along what its next owner needs so that nothing is
lost or fetched twice and politeness holds: its queued URLs, the exact set of its URLs seen so
far, its robots.txt rules and its rate controller (what the server's limits taught it, and
when its next request is allowed), what it used of the page budget and trap limits of
crawler.limits, and the redirect hops of its queued redirect targets.

Double buffering (`exchange_batch` > 1): worker threads only append the foreign URLs they
find (those the dedup cache does not know) to a buffer; the node's exchange thread sends a
batch whenever `exchange_batch` are buffered, while the workers fill the next buffer, and the
rest rides the heartbeat. The heartbeat also carries the node's queue length and smoothed
throughput; its reply brings every URL waiting for the node's servers, and servers to adopt. So
a node makes one call per heartbeat plus one per batch of URLs it had not seen. With
`exchange_batch` = 1 (unbatched, the SPEC's baseline) every URL and every server is its own
remote call, made by the thread that has it: a worker sends each URL it found before it goes
on, and URLs for the node come one per call.

Load balancing is the water level of connected vessels: a node's fair share of the queued URLs
is proportional to its throughput; a node above its share by more than the tolerance hands
servers from the tail of its line (those it would serve last) to the shared queue as one
batch; a node below its share takes one batch from the shared queue. A node that joins starts
with no servers and so below its share; a node that dies has its servers put in the shared
queue by the coordinator (`crawler.recovery`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from crawler.config import CrawlConfig
from crawler.dedup import SeenCache, split_by_shard
from crawler.limits import ServerCounts
from crawler.urls import host_key

logger = logging.getLogger(__name__)

T = TypeVar("T")
Item = tuple[str, int]  # canonical URL, depth
# Inbox pulls the exchange thread makes in one heartbeat at most (the rest waits a beat).
MAX_PULLS_PER_BEAT = 50
# A surplus smaller than this is not worth moving servers (two remote calls and a pause).
MIN_SURPLUS_URLS = 10


@dataclass
class HostState:
    """A server on its way between nodes."""

    host: str
    scheme: str = "http"
    tasks: list[tuple[str, int, int, float]] = field(default_factory=list)  # url, depth, try, q
    seen: list[str] = field(default_factory=list)  # every URL of it known: done or queued
    robots: Any = None  # crawler.politeness.RobotsRules, None until fetched
    # Its rate controller, with what it learned of the server's limits. Its times are this
    # machine's monotonic clock: on a Ray cluster of several machines the next owner's first
    # request may come early or late by the clocks' difference (`wait_s` is still right).
    controller: Any = None
    robots_failures: int = 0
    refused: str | None = None
    wait_s: float = 0.0  # politeness: no request to it before this long after the handover
    inbox: list[Item] = field(default_factory=list)  # URLs sent to it while it was between owners
    limits: ServerCounts = field(default_factory=ServerCounts)  # what it used of crawler.limits
    redirects: dict[str, int] = field(default_factory=dict)  # queued URL -> redirects to it

    @property
    def urls(self) -> int:
        return len(self.tasks) + len(self.inbox)


@dataclass
class Beat:
    node_id: str
    queued: int
    throughput: float  # URLs done per second, over the node's moving window
    urls: list[Item]  # foreign URLs, for the filter and then their owners
    batch: int  # the most URLs' worth of servers the reply may carry (at least one server)
    deliver: int | None  # the most URLs for the node's servers it may carry; None: all
    # URLs already through the filter that came to the node after their server had left it.
    forwarded: list[Item] = field(default_factory=list)


@dataclass
class Reply:
    urls: list[Item]  # for servers the node owns
    hosts: list[HostState]  # servers the node takes from the shared queue
    offer_urls: int  # above its share: hand about this many URLs' worth of servers over
    more: bool  # the inbox holds more for this node than one reply carries
    new: int = 0  # how many of the URLs the heartbeat carried the filter had not seen


@dataclass
class _Level:
    queued: int = 0
    throughput: float = 0.0


class Exchange:
    """The shared task exchange. Not thread-safe: one Ray actor serializes its calls.

    `shards`: the Bloom filter, split by `crawler.dedup.shard_of`; none means every URL sent
    counts as new (the owners' exact sets still drop duplicates)."""

    def __init__(
        self,
        owner: dict[str, str],
        shards: Sequence[FilterHandle] = (),
        balance: bool = True,
        tolerance: float = 0.25,
    ):
        self.owner: dict[str, str | None] = dict(owner)  # server -> node; None: between nodes
        self.shards = list(shards)
        self.checked = 0  # URLs checked with the filter, and how many of them were new
        self.new = 0
        self.balance = balance
        self.tolerance = tolerance
        self.levels: dict[str, _Level] = {node: _Level() for node in set(owner.values())}
        self.inbox: dict[str, list[Item]] = {}  # server -> URLs waiting for its owner
        self.pool: dict[str, HostState] = {}  # the shared queue of servers, oldest first
        self.ops = 0  # changes to what is queued here, for the coordinator's end detection
        self.moved_hosts = 0
        self.gone: set[str] = set()  # nodes declared dead (a late heartbeat must not revive)

    # ---- calls from nodes ------------------------------------------------------------------

    def heartbeat(self, beat: Beat) -> Reply:
        """A node's level and its foreign URLs in; URLs for its servers out, servers to take
        when it is below its share, or how much to hand over when above."""
        new = self.push(beat.node_id, beat.urls)
        self._queue(beat.forwarded)
        if beat.node_id in self.gone:
            return Reply(urls=[], hosts=[], offer_urls=0, more=False, new=new)
        level = self.levels.setdefault(beat.node_id, _Level())  # a new node registers itself
        level.queued, level.throughput = beat.queued, beat.throughput
        urls, more = self._deliver(beat.node_id, beat.deliver)
        hosts: list[HostState] = []
        offer = 0
        if self.balance:
            share = self._fair_share(beat.node_id)
            mine = level.queued + len(urls) + self._inbox_of(beat.node_id)
            if self.pool and mine < share:
                hosts = self._take(beat.node_id, share - mine, beat.batch)
            elif not self.pool and mine - share > max(MIN_SURPLUS_URLS, self.tolerance * share):
                offer = int(mine - share)
        return Reply(urls=urls, hosts=hosts, offer_urls=offer, more=more, new=new)

    def push(self, node_id: str, urls: list[Item]) -> int:
        """Foreign URLs a node found: those the filter has not seen go to their owners'
        inboxes. Returns how many were new."""
        new = self._filter(urls)
        self._queue(new)
        return len(new)

    def pull(self, node_id: str, max_items: int) -> Reply:
        urls, more = self._deliver(node_id, max_items)
        return Reply(urls=urls, hosts=[], offer_urls=0, more=more)

    def offer(self, node_id: str, states: list[HostState]) -> None:
        for state in states:
            if self.owner.get(state.host) != node_id:
                raise ValueError(f"{node_id} offered {state.host}, which it does not own")
        self.put_hosts(states)

    # ---- calls from the coordinator --------------------------------------------------------

    def orphan(self, node_id: str) -> list[str]:
        """A node is gone: forget it, and return the servers it owned. They stay without an
        owner (their inbox keeps filling) until `put_hosts` brings them back."""
        self.levels.pop(node_id, None)
        self.gone.add(node_id)
        hosts = [host for host, owner in self.owner.items() if owner == node_id]
        for host in hosts:
            self.owner[host] = None
        self.ops += 1
        return hosts

    def put_hosts(self, states: list[HostState]) -> None:
        for state in states:
            self.owner[state.host] = None
            self.pool[state.host] = state
        self.ops += bool(states)

    def snapshot(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "inbox_urls": sum(len(items) for items in self.inbox.values()),
            "pool_hosts": len(self.pool),
            "pool_urls": sum(state.urls for state in self.pool.values()),
            "moved_hosts": self.moved_hosts,
            "urls_checked": self.checked,
            "urls_new": self.new,
            "nodes": {node: vars(level).copy() for node, level in self.levels.items()},
        }

    # ---- internals -------------------------------------------------------------------------

    def _filter(self, items: list[Item]) -> list[Item]:
        """The items whose URL the filter had not seen (it has them now): one call per shard."""
        if not self.shards or not items:
            return items
        answers = [False] * len(items)
        parts = split_by_shard([url for url, _ in items], len(self.shards))
        for shard, indexes in parts.items():
            part = self.shards[shard].check_and_add([items[i][0] for i in indexes])
            for index, new in zip(indexes, part, strict=True):
                answers[index] = new
        new_items = [item for item, new in zip(items, answers, strict=True) if new]
        self.checked += len(items)
        self.new += len(new_items)
        return new_items

    def _queue(self, items: list[Item]) -> None:
        for url, depth in items:
            host = host_key(url)
            if host not in self.owner:  # a server nobody was given: it starts in the pool
                self.owner[host] = None
                self.pool[host] = HostState(host)
            self.inbox.setdefault(host, []).append((url, depth))
        self.ops += bool(items)

    def _inbox_of(self, node_id: str) -> int:
        return sum(len(v) for host, v in self.inbox.items() if self.owner.get(host) == node_id)

    def _deliver(self, node_id: str, max_items: int | None) -> tuple[list[Item], bool]:
        """URLs waiting for the node's servers, at most `max_items`; and whether more wait."""
        urls: list[Item] = []
        more = False
        for host in [h for h in self.inbox if self.owner.get(h) == node_id]:
            room = len(self.inbox[host]) if max_items is None else max_items - len(urls)
            waiting = self.inbox[host]
            urls += waiting[:room]
            if len(waiting) > room:
                self.inbox[host] = waiting[room:]
                more = True
                break
            del self.inbox[host]
        self.ops += bool(urls)
        return urls, more

    def _fair_share(self, node_id: str) -> float:
        """Connected vessels: all queued URLs (nodes, inboxes, shared queue) spread over the
        nodes in proportion to their throughput. A node with no throughput measured yet (just
        joined) counts as an average one."""
        known = [lv.throughput for lv in self.levels.values() if lv.throughput > 0]
        default = sum(known) / len(known) if known else 1.0
        weights = {n: lv.throughput or default for n, lv in self.levels.items()}
        total = (
            sum(lv.queued for lv in self.levels.values())
            + sum(len(items) for items in self.inbox.values())
            + sum(state.urls for state in self.pool.values())
        )
        return total * weights[node_id] / sum(weights.values())

    def _take(self, node_id: str, want: float, max_items: int) -> list[HostState]:
        """Servers from the head of the shared queue, about `want` URLs and at most
        `max_items` (but always one server), with what their inbox collected meanwhile."""
        taken: list[HostState] = []
        urls = 0
        for host in list(self.pool):
            state = self.pool[host]
            state.inbox += self.inbox.pop(host, [])
            if taken and (urls + state.urls > max_items or urls >= want):
                break
            del self.pool[host]
            self.owner[host] = node_id
            taken.append(state)
            urls += state.urls
        self.moved_hosts += len(taken)
        self.ops += bool(taken)
        return taken


# ---- the node's side ------------------------------------------------------------------------


class ExchangeHandle(Protocol):
    """The exchange as a node reaches it (in-process, or a Ray actor through an adapter)."""

    def heartbeat(self, beat: Beat) -> Reply: ...
    def push(self, node_id: str, urls: list[Item]) -> int: ...
    def pull(self, node_id: str, max_items: int) -> Reply: ...
    def offer(self, node_id: str, states: list[HostState]) -> None: ...


class FilterHandle(Protocol):
    def check_and_add(self, urls: list[str]) -> list[bool]: ...


class LinkedNode(Protocol):
    node_id: str

    def status(self) -> dict[str, Any]: ...
    def add_urls(self, items: list[Item]) -> int: ...
    def adopt_hosts(self, states: list[HostState]) -> None: ...
    def export_hosts(self, want_urls: int, max_urls: int) -> list[HostState]: ...


@dataclass(frozen=True)
class LinkSettings:
    batch: int = 200  # items per remote call; 1 = unbatched, synchronous
    heartbeat_s: float = 0.5
    throughput_window: int = 8  # heartbeats in the throughput moving window
    cache_size: int = 100_000  # LRU entries of the dedup cache; 0 = no cache
    balance: bool = True
    delay_s: float = 0.0  # injected before every remote call (benchmarks: a distant store)


def link_settings(config: CrawlConfig) -> LinkSettings:
    return LinkSettings(
        batch=config.exchange_batch,
        heartbeat_s=config.heartbeat_s,
        throughput_window=config.throughput_window,
        cache_size=config.dedup_cache_size,
        balance=config.balance,
        delay_s=config.shared_state_delay_s,
    )


class PeerLink:
    """A node's connection to the shared state: dedup cache, send buffers, heartbeats,
    balancing. Its counters are the node's distribution metrics."""

    def __init__(self, settings: LinkSettings, exchange: ExchangeHandle) -> None:
        self.settings = settings
        self._exchange = exchange
        self._cache = SeenCache(settings.cache_size)
        self._node: LinkedNode | None = None
        self._lock = threading.Condition()
        self._buffer: list[Item] = []  # foreign URLs found, not yet sent
        self._forwarded: list[Item] = []  # URLs through the filter already, to send back
        self._in_flight = 0  # URLs taken from the buffers, and replies, not yet settled
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._window: deque[tuple[float, int]] = deque(maxlen=max(2, settings.throughput_window))
        self.throughput = 0.0
        self.counters = {
            "remote_calls": 0,
            "remote_wait_s": 0.0,
            "batches": 0,
            "batch_urls": 0,
            "urls_new": 0,
            "urls_received": 0,
            "hosts_offered": 0,
            "hosts_adopted": 0,
            "heartbeats": 0,
        }

    # ---- called by the node ----------------------------------------------------------------

    def start(self, node: LinkedNode) -> None:
        self._node = node
        self._thread = threading.Thread(
            target=self._run, name=f"{node.node_id}-exchange", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()

    def admit(self, url: str) -> bool:
        """Under the node's lock, for a foreign URL: False if the cache knows it was sent."""
        return self._cache.admit(url)

    def send(self, items: list[Item]) -> None:
        """Foreign URLs found by a worker, once their `discovered` rows are recorded."""
        if self.settings.batch == 1:
            for item in items:
                self._send_now(item)
            return
        with self._lock:
            self._buffer += items
            if len(self._buffer) >= self.settings.batch:
                self._lock.notify_all()

    def forward(self, items: list[Item]) -> None:
        """URLs that reached this node after their server had left it: back to the exchange,
        which knows the owner (with the next heartbeat)."""
        with self._lock:
            self._forwarded += items

    def unsent(self) -> int:
        """Work this node holds for others or has in transit (0 means none)."""
        with self._lock:
            return len(self._buffer) + len(self._forwarded) + self._in_flight

    def stats(self) -> dict[str, float]:
        with self._lock:
            buffered = len(self._buffer)
        return {
            **self.counters,
            "cache_hits": self._cache.hits,
            "cache_misses": self._cache.misses,
            "buffered_urls": buffered,
            "throughput": self.throughput,
            "cpu_s": time.process_time(),
        }

    def metric_values(self, pages: int) -> dict[str, float]:
        """The node's distribution metrics, for the `metrics` dataset (cumulative counts)."""
        stats = self.stats()
        lookups = stats["cache_hits"] + stats["cache_misses"]
        return {
            "remote_calls": stats["remote_calls"],
            "remote_calls_per_page": stats["remote_calls"] / max(1, pages),
            "mean_batch_urls": stats["batch_urls"] / max(1, stats["batches"]),
            "dedup_cache_hit_rate": stats["cache_hits"] / max(1, lookups),
            "exchange_buffered_urls": stats["buffered_urls"],
            "throughput_urls_per_s": stats["throughput"],
            "urls_sent": stats["urls_new"],
            "urls_received": stats["urls_received"],
            "hosts_offered": stats["hosts_offered"],
            "hosts_adopted": stats["hosts_adopted"],
        }

    # ---- remote calls ----------------------------------------------------------------------

    def _remote(self, fn: Callable[..., T], *args: Any) -> T:
        """Every call to shared state goes through here: counted, and delayed when asked."""
        started = time.monotonic()
        if self.settings.delay_s:
            time.sleep(self.settings.delay_s)
        result = fn(*args)
        with self._lock:
            self.counters["remote_calls"] += 1
            self.counters["remote_wait_s"] += time.monotonic() - started
        return result

    def _settle(self, count: int) -> None:
        with self._lock:
            self._in_flight -= count

    def _push(self, items: list[Item]) -> None:
        """One batch to the exchange (which checks it with the filter): one remote call."""
        new = self._remote(self._exchange.push, self._node_id, items)
        with self._lock:
            self.counters["batches"] += 1
            self.counters["batch_urls"] += len(items)
            self.counters["urls_new"] += new

    def _send_now(self, item: Item) -> None:
        """Unbatched: one URL, one call, in the calling worker's thread. If the shared state
        fails the call, the URL waits in the buffer for the exchange thread."""
        with self._lock:
            self._in_flight += 1
        try:
            self._push([item])
        except Exception:
            logger.exception("sending %s failed", item[0])
            with self._lock:
                self._buffer.append(item)
        finally:
            self._settle(1)

    @property
    def _node_id(self) -> str:
        assert self._node is not None, "the link is not started"
        return self._node.node_id

    # ---- the exchange thread ---------------------------------------------------------------

    def _run(self) -> None:
        next_beat = time.monotonic()
        while True:
            with self._lock:
                while (
                    not self._stopping
                    and len(self._buffer) < self.settings.batch
                    and time.monotonic() < next_beat
                ):
                    self._lock.wait(timeout=max(0.0, next_beat - time.monotonic()))
                if self._stopping:
                    return
                beat_due = time.monotonic() >= next_beat
            try:
                self._send_batches()
                if beat_due:
                    self._beat()
            except Exception:
                # A failed call loses nothing (the buffers are restored); try again next beat.
                logger.exception("exchange call failed")
            if beat_due:
                next_beat = time.monotonic() + self.settings.heartbeat_s

    def _take(self, count: int) -> list[Item]:
        """Up to `count` buffered URLs, counted in flight; the workers go on filling the
        buffer. Under the link lock."""
        items = self._buffer[:count]
        del self._buffer[: len(items)]
        self._in_flight += len(items)
        return items

    def _send_batches(self) -> None:
        """Every full batch buffered, one call each; on a failed call the batch goes back."""
        while True:
            with self._lock:
                if len(self._buffer) < self.settings.batch:
                    return
                batch = self._take(self.settings.batch)
            try:
                self._push(batch)
            except Exception:
                with self._lock:
                    self._buffer[:0] = batch
                raise
            finally:
                self._settle(len(batch))

    def _beat(self) -> None:
        """One heartbeat: the node's level out, with the URLs left in the buffer; URLs for its
        servers and servers to adopt back; then servers out, if it should hand some over."""
        node = self._node
        assert node is not None
        status = node.status()
        now = time.monotonic()
        self._window.append((now, status["urls_done"]))
        (t0, done0), (t1, done1) = self._window[0], self._window[-1]
        self.throughput = (done1 - done0) / (t1 - t0) if t1 > t0 else 0.0
        batched = self.settings.batch > 1
        with self._lock:
            carry = self._take(self.settings.batch)
            forwarded, self._forwarded = self._forwarded, []
            # The reply too is in flight until it is applied (see `unsent`).
            self._in_flight += len(forwarded) + 1
            self.counters["heartbeats"] += 1
        beat = Beat(
            node_id=node.node_id,
            queued=status["queued"],
            throughput=self.throughput,
            urls=carry,
            batch=self.settings.batch,
            deliver=None if batched else 1,
            forwarded=forwarded,
        )
        try:
            try:
                reply = self._remote(self._exchange.heartbeat, beat)
            except Exception:
                with self._lock:
                    self._buffer[:0] = carry
                    self._forwarded[:0] = forwarded
                raise
            finally:
                self._settle(len(carry) + len(forwarded))
            if carry:
                with self._lock:
                    self.counters["batches"] += 1
                    self.counters["batch_urls"] += len(carry)
                    self.counters["urls_new"] += reply.new
            self._apply(node, reply)
            surplus, pulls = reply.offer_urls, 0
            while reply.more and pulls < MAX_PULLS_PER_BEAT:
                reply = self._remote(self._exchange.pull, node.node_id, self.settings.batch)
                self._apply(node, reply)
                pulls += 1
            if self.settings.balance:
                self._offer(node, surplus)
        finally:
            self._settle(1)

    def _apply(self, node: LinkedNode, reply: Reply) -> None:
        if reply.urls:
            node.add_urls(reply.urls)
        if reply.hosts:
            node.adopt_hosts(reply.hosts)
        with self._lock:
            self.counters["urls_received"] += len(reply.urls)
            self.counters["hosts_adopted"] += len(reply.hosts)

    def _offer(self, node: LinkedNode, want_urls: int) -> None:
        """Hand surplus servers (and those the node let go since the last beat) to the shared
        queue: one batch, or one server per call when unbatched. A server taken from the node
        is in nobody's frontier until the exchange has it, so the call must not fail silently:
        on failure the node takes it back."""
        states = node.export_hosts(want_urls, self.settings.batch)
        groups = [states] if self.settings.batch > 1 else [[state] for state in states]
        for index, group in enumerate(groups):
            if not group:
                continue
            try:
                self._remote(self._exchange.offer, node.node_id, group)
            except Exception:
                node.adopt_hosts([s for g in groups[index:] for s in g])
                raise
            with self._lock:
                self.counters["hosts_offered"] += len(group)
