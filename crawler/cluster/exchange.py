"""Peer-to-peer task exchange between crawler nodes (docs/distributed.md): the shared state.

Nodes are peers: each fetches the servers it owns and parses what it fetched; URLs it finds
for servers another node owns go, through the shared state, to that owner. The shared state is
the `Exchange` below, which holds the ownership map, an inbox of URLs per server, the shared
queue of servers between owners and every node's last heartbeat, and the Bloom filter shards
(`crawler.cluster.dedup`) behind it: URLs sent to the exchange are checked with the filter there,
so a batch of URLs costs a node one round trip (as a script on the store would), not two. The flow
puts each in a Ray actor; tests use them in-process.

The unit of work that moves between nodes is a whole server
(`crawler.scheduling.server.ServerState`),
never single URLs of a server: politeness allows one connection per server, and only the owner
opens it. A server moves only while no connection to it is open (one with a connection leaves
once its current request is done). How a node reaches the exchange (batches, heartbeats) is
`crawler.cluster.peerlink`.

Load balancing is the water level of connected vessels: a node's fair share of the queued URLs
is proportional to its throughput; a node above its share by more than the tolerance hands
servers from the tail of its line (those it would serve last) to the shared queue as one
batch; a node below its share takes one batch from the shared queue. A node that joins starts
with no servers and so below its share; a node that dies has its servers put in the shared
queue by the coordinator (`crawler.cluster.recovery`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from crawler.cluster.dedup import BloomShard, split_by_shard
from crawler.cluster.settings import ExchangeSettings
from crawler.scheduling.server import Item, ServerState
from crawler.scope.urls import server_of

# Inbox pulls the exchange thread makes in one heartbeat at most (the rest waits a beat).
MAX_PULLS_PER_BEAT = 50
# A surplus smaller than this is not worth moving servers (two remote calls and a pause).
MIN_SURPLUS_URLS = 10


class FilterHandle(Protocol):
    def check_and_add(self, urls: list[str]) -> list[bool]: ...


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
    hosts: list[ServerState]  # servers the node takes from the shared queue
    offer_urls: int  # above its share: hand about this many URLs' worth of servers over
    more: bool  # the inbox holds more for this node than one reply carries
    new: int = 0  # how many of the URLs the heartbeat carried the filter had not seen


@dataclass
class _Level:
    queued: int = 0
    throughput: float = 0.0
    reported: bool = False  # a heartbeat came: `queued` is the node's, not a placeholder


@dataclass(frozen=True)
class ExchangeSnapshot:
    """What the exchange holds and has done, as the coordinator and the benchmarks read it."""

    ops: int  # calls served: a sign of activity while nodes look idle
    inbox_urls: int  # URLs waiting for their node
    pool_hosts: int  # servers handed in and not yet taken
    pool_urls: int  # their queued URLs
    moved_hosts: int
    urls_checked: int  # by the shared filter
    urls_new: int
    nodes: dict[str, dict[str, float]]  # node -> its water level (queued, throughput)


class Exchange:
    """The shared task exchange. Not thread-safe: one Ray actor serializes its calls.

    `shards`: the Bloom filter, split by `crawler.cluster.dedup.shard_of`; none means every URL sent
    counts as new (the owners' exact sets still drop duplicates)."""

    def __init__(
        self,
        owner: dict[str, str],
        shards: Sequence[FilterHandle] = (),
        settings: ExchangeSettings | None = None,
    ):
        """`settings`: the `[exchange]` section (its balancing); its defaults if None."""
        settings = settings or ExchangeSettings()
        self.owner: dict[str, str | None] = dict(owner)  # server -> node; None: between nodes
        self.shards = list(shards)
        self.checked = 0  # URLs checked with the filter, and how many of them were new
        self.new = 0
        self.balance = settings.balance
        self.tolerance = settings.balance_tolerance
        self.levels: dict[str, _Level] = {node: _Level() for node in set(owner.values())}
        self.inbox: dict[str, list[Item]] = {}  # server -> URLs waiting for its owner
        self.pool: dict[str, ServerState] = {}  # the shared queue of servers, oldest first
        self.ops = 0  # changes to what is queued here, for the coordinator's end detection
        self.moved_hosts = 0
        self.gone: set[str] = set()  # nodes declared dead (a late heartbeat must not revive)

    # ---- calls from nodes ------------------------------------------------------------------

    def heartbeat(self, beat: Beat) -> Reply:
        """A node's level and its foreign URLs in; URLs for its servers out, servers to take
        when it is below its share, or how much to hand over when above."""
        new = self.push(beat.urls)
        self._queue(beat.forwarded)
        if beat.node_id in self.gone:
            return Reply(urls=[], hosts=[], offer_urls=0, more=False, new=new)
        level = self.levels.setdefault(beat.node_id, _Level())  # a new node registers itself
        level.queued, level.throughput = beat.queued, beat.throughput
        level.reported = True
        urls, more = self._deliver(beat.node_id, beat.deliver)
        hosts: list[ServerState] = []
        offer = 0
        # Not before every node has said how much it holds: a node that has not beaten yet
        # counts as empty, and the first to beat would hand it a server (which comes back once
        # its queue shows, a second's pause for that server each way).
        if self.balance and all(lv.reported for lv in self.levels.values()):
            share = self._fair_share(beat.node_id)
            mine = level.queued + len(urls) + self._inbox_of(beat.node_id)
            if self.pool and mine < share:
                hosts = self._take(beat.node_id, share - mine, beat.batch)
            elif not self.pool and mine - share > max(MIN_SURPLUS_URLS, self.tolerance * share):
                offer = int(mine - share)
        return Reply(urls=urls, hosts=hosts, offer_urls=offer, more=more, new=new)

    def push(self, urls: list[Item]) -> int:
        """Foreign URLs a node found: those the filter has not seen go to their owners'
        inboxes. Returns how many were new."""
        new = self._filter(urls)
        self._queue(new)
        return len(new)

    def pull(self, node_id: str, max_items: int) -> Reply:
        urls, more = self._deliver(node_id, max_items)
        return Reply(urls=urls, hosts=[], offer_urls=0, more=more)

    def offer(self, node_id: str, states: list[ServerState]) -> None:
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

    def put_hosts(self, states: list[ServerState]) -> None:
        for state in states:
            self.owner[state.host] = None
            self.pool[state.host] = state
        self.ops += bool(states)

    def snapshot(self) -> ExchangeSnapshot:
        return ExchangeSnapshot(
            ops=self.ops,
            inbox_urls=sum(len(items) for items in self.inbox.values()),
            pool_hosts=len(self.pool),
            pool_urls=sum(state.urls for state in self.pool.values()),
            moved_hosts=self.moved_hosts,
            urls_checked=self.checked,
            urls_new=self.new,
            nodes={node: vars(level).copy() for node, level in self.levels.items()},
        )

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
            host = server_of(url)
            if host not in self.owner:  # a server nobody was given: it starts in the pool
                self.owner[host] = None
                self.pool[host] = ServerState(host)
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

    def _take(self, node_id: str, want: float, max_items: int) -> list[ServerState]:
        """Servers from the head of the shared queue, about `want` URLs and at most
        `max_items` (but always one server), with what their inbox collected meanwhile."""
        taken: list[ServerState] = []
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


class ExchangeWithFilter(Exchange):
    """The exchange holding the Bloom filter itself, when it is one shard (`[dedup] shards`, 1
    by default): the flow's exchange actor. A shard actor of its own costs a Ray worker
    process, started and then idling beside the crawl (1.5-1.8 CPU-s of a 20,000-page crawl),
    and a remote call on each side for every batch of URLs checked, to look up a few thousand
    URLs in microseconds each (bench/results/cpu_per_page/NOTES.md, 2026-11-28)."""

    def __init__(
        self,
        owner: dict[str, str],
        capacity: int,
        fp_rate: float,
        settings: ExchangeSettings | None = None,
    ) -> None:
        super().__init__(owner, shards=[BloomShard(capacity, fp_rate)], settings=settings)
