"""A node's side of the task exchange (crawler/cluster/exchange.py): its link to the shared state.

Double buffering (`[exchange] batch` > 1): worker threads only append the foreign URLs they
find (those the dedup cache does not know) to a buffer; the node's exchange thread sends a
batch whenever `[exchange] batch` are buffered, while the workers fill the next buffer, and the
rest rides the heartbeat. The heartbeat also carries the node's queue length and smoothed
throughput; its reply brings every URL waiting for the node's servers, and servers to adopt. So
a node makes one call per heartbeat plus one per batch of URLs it had not seen. With
`[exchange] batch` = 1 (unbatched, the design's baseline) every URL and every server is its own
remote call, made by the thread that has it: a worker sends each URL it found before it goes
on, and URLs for the node come one per call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from crawler.cluster.dedup import SeenCache
from crawler.cluster.exchange import MAX_PULLS_PER_BEAT, Beat, Reply
from crawler.cluster.settings import ExchangeSettings
from crawler.scheduling.server import Item, ServerState

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ExchangeHandle(Protocol):
    """The exchange as a node reaches it (in-process, or a Ray actor through an adapter)."""

    def heartbeat(self, beat: Beat) -> Reply: ...
    def push(self, urls: list[Item]) -> int: ...
    def pull(self, node_id: str, max_items: int) -> Reply: ...
    def offer(self, node_id: str, states: list[ServerState]) -> None: ...


class Levels(Protocol):
    """What a heartbeat reports of its node (crawler.node.NodeStatus has it)."""

    @property
    def queued(self) -> int: ...
    @property
    def urls_done(self) -> int: ...


class LinkedNode(Protocol):
    node_id: str

    def status(self) -> Levels: ...
    def add_urls(self, items: list[Item]) -> int: ...
    def adopt_hosts(self, states: list[ServerState]) -> None: ...
    def export_hosts(self, want_urls: int, max_urls: int) -> list[ServerState]: ...


class PeerLink:
    """A node's connection to the shared state: dedup cache, send buffers, heartbeats,
    balancing. Its counters are the node's distribution metrics."""

    def __init__(
        self, settings: ExchangeSettings, cache_size: int, exchange: ExchangeHandle
    ) -> None:
        """`settings`: the `[exchange]` section; `cache_size`: `[dedup] cache_size`, the LRU
        entries of the node's dedup cache (0: none)."""
        self.settings = settings
        self._exchange = exchange
        self._cache = SeenCache(cache_size)
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
        if self.settings.shared_state_delay_s:
            time.sleep(self.settings.shared_state_delay_s)
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
        new = self._remote(self._exchange.push, items)
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
        self._window.append((now, status.urls_done))
        (t0, done0), (t1, done1) = self._window[0], self._window[-1]
        self.throughput = (done1 - done0) / (t1 - t0) if t1 > t0 else 0.0
        batched = self.settings.batch > 1
        with self._lock:
            carry = self._take(self.settings.batch)
            forwarded, self._forwarded = self._forwarded, []
            # The reply too is in flight until it is applied (see `unsent`).
            self._in_flight += len(forwarded) + 1
            self.counters["heartbeats"] += 1
        # Until the window is full it measures the node's start, not its pace: a node started
        # a moment after the others, its servers still paced at the unknown servers' ceiling,
        # would read as slow and hand a server over, only for the others to end up with its
        # work. Unknown counts as an average node (see Exchange._fair_share).
        measured = len(self._window) == self._window.maxlen
        beat = Beat(
            node_id=node.node_id,
            queued=status.queued,
            throughput=self.throughput if measured else 0.0,
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
