"""The shared task exchange (water level, inboxes, the shared queue of servers) and a node's
link to it (dedup cache, batching, remote-call accounting), in-process."""

from __future__ import annotations

import time
from typing import Any

import pytest

from crawler.cluster.exchange import Beat, Exchange, ExchangeWithFilter
from crawler.cluster.peerlink import PeerLink
from crawler.cluster.settings import DedupSettings, ExchangeSettings
from crawler.node import NodeStatus
from crawler.scheduling.server import ServerState
from crawler.scheduling.urlqueue import UrlTask


def beat(node_id: str, queued: int, throughput: float = 10.0, urls=(), batch=100, deliver=None):
    return Beat(node_id, queued, throughput, list(urls), batch, deliver)


def url(host: str, n: int) -> tuple[str, int]:
    return (f"http://{host}/p{n}", 1)


def server_with(host: str, urls: int) -> ServerState:
    """A server on its way between nodes, with `urls` queued."""
    state = ServerState(host)
    for n in range(urls):
        state.queue.push(UrlTask(f"http://{host}/p{n}", 1))
    return state


def test_a_node_above_its_share_is_told_to_offer_and_one_below_takes_servers():
    exchange = Exchange({"h1": "n0", "h2": "n0", "h3": "n1"})
    exchange.heartbeat(beat("n1", queued=0))
    reply = exchange.heartbeat(beat("n0", queued=1000))
    assert reply.offer_urls == 500  # equal throughput: the fair share is half
    state = server_with("h2", 300)
    exchange.offer("n0", [state])
    assert exchange.owner["h2"] is None
    reply = exchange.heartbeat(beat("n1", queued=0))
    assert [s.host for s in reply.hosts] == ["h2"]
    assert exchange.owner["h2"] == "n1"
    assert exchange.snapshot().pool_hosts == 0


def test_no_balancing_until_every_node_has_said_how_much_it_holds():
    # At the start n1 has not beaten yet: its 600 URLs are not the exchange's to see, and
    # reading its level as empty would move one of n0's servers to it (and back, a beat later).
    exchange = Exchange({"h1": "n0", "h2": "n0", "h3": "n1", "h4": "n1"})
    assert exchange.heartbeat(beat("n0", queued=1200)).offer_urls == 0
    assert exchange.heartbeat(beat("n1", queued=1200)).offer_urls == 0
    assert exchange.heartbeat(beat("n0", queued=2400)).offer_urls == 600


def test_fair_share_follows_throughput():
    exchange = Exchange({"h1": "n0", "h2": "n1"})
    exchange.heartbeat(beat("n1", queued=0, throughput=30.0))
    # n0 holds 400 of 400 URLs but does a quarter of the work: its share is 100.
    assert exchange.heartbeat(beat("n0", queued=400, throughput=10.0)).offer_urls == 300


def test_no_offer_within_the_tolerance_and_none_when_balancing_is_off():
    exchange = Exchange({"h1": "n0", "h2": "n1"}, settings=ExchangeSettings(balance_tolerance=0.25))
    exchange.heartbeat(beat("n1", queued=90))
    assert exchange.heartbeat(beat("n0", queued=110)).offer_urls == 0
    off = Exchange({"h1": "n0", "h2": "n1"}, settings=ExchangeSettings(balance=False))
    off.heartbeat(beat("n1", queued=0))
    assert off.heartbeat(beat("n0", queued=1000)).offer_urls == 0


def test_urls_reach_the_owner_with_its_heartbeat_or_one_per_call_unbatched():
    exchange = Exchange({"h1": "n0", "h2": "n1"})
    exchange.heartbeat(beat("n0", queued=0, urls=[url("h2", i) for i in range(3)]))
    reply = exchange.heartbeat(beat("n1", queued=0, deliver=1))
    assert reply.urls == [url("h2", 0)] and reply.more
    assert exchange.pull("n1", 5).urls == [url("h2", 1), url("h2", 2)]
    exchange.push([url("h2", 3)])
    assert exchange.heartbeat(beat("n1", queued=0)).urls == [url("h2", 3)]


def test_a_dead_nodes_servers_collect_urls_until_they_are_taken_over():
    exchange = Exchange({"h1": "n0", "h2": "n1"})
    assert exchange.orphan("n1") == ["h2"]
    exchange.push([url("h2", 1)])
    assert exchange.heartbeat(beat("n0", queued=0)).urls == []  # nobody owns h2 yet
    assert exchange.snapshot().inbox_urls == 1
    exchange.put_hosts([server_with("h2", 1)])
    reply = exchange.heartbeat(beat("n0", queued=0))
    assert [(s.host, s.inbox) for s in reply.hosts] == [("h2", [url("h2", 1)])]
    assert exchange.owner["h2"] == "n0"
    assert "n1" not in exchange.snapshot().nodes


def test_a_node_may_only_offer_servers_it_owns():
    exchange = Exchange({"h1": "n0", "h2": "n1"})
    with pytest.raises(ValueError, match="does not own"):
        exchange.offer("n0", [ServerState("h2")])


def test_urls_of_a_server_nobody_was_given_wait_in_the_shared_queue():
    exchange = Exchange({"h1": "n0"})
    exchange.push([url("h9", 1)])
    reply = exchange.heartbeat(beat("n0", queued=0))
    assert [(s.host, s.inbox) for s in reply.hosts] == [("h9", [url("h9", 1)])]


class FakeNode:
    """Just what the link calls on a node."""

    node_id = "n0"

    def __init__(self) -> None:
        self.received: list[tuple[str, int]] = []

    def status(self) -> NodeStatus:
        return NodeStatus("n0", 0, 0, 0, 0, 0, None, 0, 0, 0, 0, link={})

    def add_urls(self, items: list[tuple[str, int]]) -> int:
        self.received += items
        return len(items)

    def adopt_hosts(self, states: list[ServerState]) -> None:
        pass

    def export_hosts(self, want_urls: int, max_urls: int) -> list[ServerState]:
        return []


def new_link(
    cache_size: int = DedupSettings().cache_size, **settings: Any
) -> tuple[PeerLink, Exchange, FakeNode]:
    """A link not started yet, to node n0, through an exchange holding its filter (the flow's
    with one shard)."""
    exchange = ExchangeWithFilter({"h1": "n0", "h2": "n1"}, 10_000, 1e-6)
    return PeerLink(ExchangeSettings(**settings), cache_size, exchange), exchange, FakeNode()


def make_link(**settings: Any) -> tuple[PeerLink, Exchange, FakeNode]:
    link, exchange, node = new_link(**settings)
    link.start(node)
    return link, exchange, node


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def wait_for_the_first_heartbeat(link: PeerLink) -> None:
    """Until the link's first heartbeat is over: its reply applied, its calls counted."""
    wait_until(lambda: link.counters["heartbeats"] == 1 and link.unsent() == 0)


def test_throughput_is_reported_unknown_until_the_window_is_full() -> None:
    # The first beats measure a node's start (a moment after the others', its servers at the
    # unknown servers' ceiling), not its pace: sent as unknown, an average node's.
    link, exchange, node = new_link(heartbeat_s=0.02, throughput_window=3)
    sent: list[float] = []
    heartbeat = exchange.heartbeat

    def recording(b: Beat) -> Any:
        sent.append(b.throughput)
        return heartbeat(b)

    exchange.heartbeat = recording  # type: ignore[method-assign]
    done = iter(range(0, 10_000, 5))
    node.status = lambda: NodeStatus(  # type: ignore[method-assign]
        "n0", 0, 0, 0, 0, 0, None, 0, 0, next(done), 0, link={}
    )
    link.start(node)
    try:
        wait_until(lambda: len(sent) >= 4)
    finally:
        link.stop()
    assert sent[:2] == [0.0, 0.0]
    assert all(throughput > 0 for throughput in sent[2:])


def test_unbatched_every_url_is_its_own_remote_call_made_by_the_caller():
    link, exchange, _ = make_link(batch=1, cache_size=0, heartbeat_s=60)
    try:
        wait_for_the_first_heartbeat(link)
        calls = link.counters["remote_calls"]
        link.send([url("h2", 1), url("h2", 2), url("h2", 1)])
        assert link.counters["remote_calls"] - calls == 3
        # The exchange checked each with the filter: the repeated URL was not new.
        assert exchange.snapshot().inbox_urls == 2
        assert link.counters["urls_new"] == 2
        assert link.unsent() == 0
    finally:
        link.stop()


def test_batched_urls_are_checked_per_batch_and_ride_the_heartbeat():
    link, exchange, node = new_link(batch=100, cache_size=0, heartbeat_s=0.05)
    # Buffered before the exchange thread starts: the first heartbeat cannot carry part of a
    # batch still being added.
    link.send([url("h2", i) for i in range(250)])
    link.start(node)
    try:
        wait_until(lambda: exchange.snapshot().inbox_urls == 250 and link.unsent() == 0)
    finally:
        link.stop()  # no heartbeat between the counters read below
    # Two full batches of their own, the rest with a heartbeat.
    assert (link.counters["batches"], link.counters["batch_urls"]) == (3, 250)
    assert link.counters["remote_calls"] == 2 + link.counters["heartbeats"]


def test_the_dedup_cache_answers_repeats_without_a_remote_call_and_delay_is_counted():
    link, exchange, node = make_link(
        batch=1, cache_size=100, heartbeat_s=60, shared_state_delay_s=0.01
    )
    try:
        wait_for_the_first_heartbeat(link)
        assert link.admit("http://h2/p1")
        link.send([url("h2", 1)])
        assert not link.admit("http://h2/p1")  # known: no remote call, not sent again
        assert link.counters["remote_calls"] == 2  # a heartbeat, the URL
        assert link.counters["remote_wait_s"] >= 0.02
    finally:
        link.stop()
    assert link.stats()["cache_hits"] == 1


def test_forwarded_urls_are_not_dropped_by_the_filter_that_saw_them():
    link, exchange, _ = make_link(batch=100, heartbeat_s=0.05)
    try:
        assert exchange.push([url("h2", 1)]) == 1
        assert exchange.heartbeat(beat("n1", queued=0)).urls == [url("h2", 1)]
        # n1 gave h2 away meanwhile: the URL comes back through n0's heartbeat.
        link.forward([url("h2", 1)])
        wait_until(lambda: exchange.snapshot().inbox_urls == 1)
    finally:
        link.stop()
