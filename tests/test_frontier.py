"""The two-level frontier with simulated time: eligibility, ranking, connections, bookkeeping."""

from __future__ import annotations

import heapq
import random

import pytest

from crawler.scheduling.frontier import Frontier
from crawler.scheduling.server import ServerState
from crawler.scheduling.settings import SchedulingSettings
from crawler.scheduling.urlqueue import FairUrls, QualityUrls, UrlTask


class Clock:
    """A rate controller stand-in: the server may be contacted from `at` on."""

    def __init__(self, at: float = 0.0) -> None:
        self.at = at

    def earliest_next(self) -> float:
        return self.at


def frontier_with(policy: str, hosts: list[str], rpc: int = 50) -> Frontier:
    frontier = Frontier(SchedulingSettings(policy=policy, requests_per_connection=rpc))
    for host in hosts:
        frontier.add_server(ServerState(host, Clock()))
    return frontier


def push(frontier: Frontier, host: str, count: int, quality: float = 0.0) -> None:
    for _ in range(count):
        n = frontier.queued()
        frontier.push(host, UrlTask(f"http://{host}/{n}", 0, quality=quality), "http")


def measured(frontier: Frontier, host: str, response_time: float, rpc: int = 100) -> None:
    stats = frontier.servers[host].stats
    stats.connection_time, stats.response_time = 0.0, response_time
    stats.requests_per_connection = rpc


def test_breadth_first_takes_turns_and_keeps_urls_in_order():
    frontier = frontier_with("bfs", ["a", "b", "c"])
    for host in ("b", "a", "c"):
        push(frontier, host, 2)
    order = []
    for _ in range(3):
        server = frontier.acquire(0.0)
        order.append(server.host)
        first = server.next_task(0.0, True)
        assert first.url.endswith(("/0", "/2", "/4"))  # its first URL first
        frontier.release(server)
    assert order == ["b", "a", "c"]
    assert frontier.acquire(0.0).host == "b"  # back of the line after its turn


def test_one_connection_per_server_and_a_global_slot_count_is_the_callers():
    frontier = frontier_with("bfs", ["a", "b"])
    push(frontier, "a", 3)
    push(frontier, "b", 3)
    first, second = frontier.acquire(0.0), frontier.acquire(0.0)
    assert {first.host, second.host} == {"a", "b"}
    assert frontier.acquire(0.0) is None  # both busy, though both have URLs
    push(frontier, "a", 5)  # a busy server is not offered again
    assert frontier.acquire(0.0) is None
    frontier.release(first)
    assert frontier.acquire(0.0) is first


def test_politeness_wins_over_ranking():
    frontier = frontier_with("performance", ["fast", "slow"])
    measured(frontier, "fast", 0.001)
    measured(frontier, "slow", 1.0)
    push(frontier, "fast", 10)
    push(frontier, "slow", 10)
    frontier.servers["fast"].controller.at = 5.0  # its rate controller says wait
    assert frontier.acquire(1.0).host == "slow"
    assert frontier.next_ready_time() == 5.0
    assert frontier.acquire(4.9) is None
    assert frontier.acquire(5.0).host == "fast"


def test_a_pause_set_after_ranking_still_holds():
    frontier = frontier_with("bfs", ["a", "b"])
    push(frontier, "a", 1)
    push(frontier, "b", 1)
    frontier.acquire(0.0)  # promotes both to the ranked heap, takes a
    frontier.servers["b"].paused_until = 3.0
    assert frontier.acquire(1.0) is None
    assert frontier.next_ready_time() == 3.0


def test_a_server_with_only_a_future_retry_waits_for_it_until_new_urls_come():
    frontier = frontier_with("bfs", ["a"])
    push(frontier, "a", 1)
    server = frontier.acquire(0.0)
    task = server.next_task(0.0, True)
    server.retry_later(UrlTask(task.url, 0, attempt=2), 10.0)
    frontier.release(server)
    assert frontier.next_ready_time() == 10.0
    assert frontier.acquire(1.0) is None
    push(frontier, "a", 1)  # a new URL may go before the retry is due
    assert frontier.next_ready_time() == 0.0
    server = frontier.acquire(1.0)
    assert server.next_task(1.0, True).attempt == 1
    assert server.next_task(1.0, True) is None  # the retry is still not due


def test_performance_first_ranks_by_pages_per_second_of_connection():
    frontier = frontier_with("performance", ["slow", "fast", "tiny"])
    measured(frontier, "slow", 0.5)
    measured(frontier, "fast", 0.01)
    measured(frontier, "tiny", 0.005, rpc=1)  # 1 request per connection, no keep-alive gain
    frontier.servers["tiny"].stats.connection_time = 0.05
    push(frontier, "slow", 100)
    push(frontier, "fast", 100)
    push(frontier, "tiny", 100)
    order = [frontier.acquire(0.0).host for _ in range(3)]
    assert order == ["fast", "tiny", "slow"]  # 120/s, 1/0.105 = 9.5/s, 2.4/s


def test_batch_is_p_min_of_allowance_and_queue():
    frontier = frontier_with("performance", ["a", "b"], rpc=50)
    push(frontier, "a", 7)
    push(frontier, "b", 80)
    batches = {}
    for _ in range(2):
        server = frontier.acquire(0.0)
        batches[server.host] = server.batch
    assert batches == {"a": 7, "b": 50}


def test_quality_first_ranks_servers_by_their_best_url_and_urls_by_quality():
    frontier = frontier_with("quality", ["a", "b"])
    push(frontier, "a", 3, quality=1.0)
    push(frontier, "b", 1, quality=2.0)
    push(frontier, "a", 1, quality=5.0)
    server = frontier.acquire(0.0)
    assert server.host == "a"
    assert [server.next_task(0.0, True).quality for _ in range(4)] == [5.0, 1.0, 1.0, 1.0]
    assert frontier.acquire(0.0).host == "b"


def test_crawl_capability_ranks_by_quality_of_the_next_p_urls_per_second():
    frontier = frontier_with("capability", ["gem", "bulk", "slowbulk"])
    measured(frontier, "gem", 0.01, rpc=1)  # one URL per connection: 10 / 0.01 s
    measured(frontier, "bulk", 0.01)  # 100 URLs: 100 * 2 / (100 * 0.01 / 1.2) s
    measured(frontier, "slowbulk", 0.1)
    for host in frontier.servers:
        frontier.release(frontier.servers[host])  # take the measured allowance into the head
    push(frontier, "gem", 1, quality=10.0)
    push(frontier, "gem", 50, quality=0.001)
    push(frontier, "bulk", 150, quality=2.0)
    push(frontier, "slowbulk", 150, quality=2.0)
    assert frontier.servers["bulk"].top_quality_sum() == pytest.approx(200.0)
    order = [frontier.acquire(0.0).host for _ in range(3)]
    assert order == ["gem", "bulk", "slowbulk"]  # 1000/s, 240/s, 24/s


def test_ranking_follows_urls_queued_while_idle():
    frontier = frontier_with("capability", ["a", "b"])
    push(frontier, "a", 1, quality=1.0)
    push(frontier, "b", 1, quality=2.0)
    assert frontier.next_ready_time() == 0.0
    frontier.acquire(-1.0)  # nothing eligible yet: no change
    push(frontier, "a", 1, quality=5.0)
    assert frontier.acquire(0.0).host == "a"


def test_no_preemption_a_better_server_waits_for_a_free_slot():
    frontier = frontier_with("quality", ["a", "b"])
    push(frontier, "a", 5, quality=1.0)
    a = frontier.acquire(0.0)
    push(frontier, "b", 1, quality=9.0)
    assert a.busy  # a keeps its connection
    assert a.next_task(0.0, True).quality == 1.0
    assert frontier.acquire(0.0).host == "b"


def test_queued_counts_every_way_a_url_moves():
    frontier = frontier_with("capability", ["a", "b"])
    push(frontier, "a", 4, quality=1.0)
    push(frontier, "b", 2, quality=1.0)
    frontier.push_retry("b", UrlTask("http://b/r", 0, attempt=2), "http")
    assert frontier.queued() == 7
    server = frontier.acquire(0.0)
    task = server.next_task(0.0, True)
    assert frontier.queued() == 6
    server.put_back(task)
    assert frontier.queued() == 7
    task = server.next_task(0.0, True)
    server.retry_later(UrlTask(task.url, 0, attempt=2), 1.0)
    assert frontier.queued() == 7
    drained = server.drain()
    frontier.release(server)
    assert frontier.queued() == 7 - len(drained)
    assert frontier.queued() == sum(s.pending() for s in frontier.servers.values())


def test_stale_heap_entries_are_bounded():
    frontier = frontier_with("capability", [f"h{i}" for i in range(10)])
    rng = random.Random(3)
    for _ in range(5000):
        push(frontier, f"h{rng.randrange(10)}", 1, quality=rng.random())
        frontier.acquire(-1.0)  # promotes nothing: everything waits until time 0
    frontier.acquire(0.0)
    for _ in range(5000):
        push(frontier, f"h{rng.randrange(10)}", 1, quality=rng.random() * 10)
    assert len(frontier._ready) <= 2 * 10 + 64
    assert len(frontier._waiting) <= 2 * 10 + 64


def test_quality_queue_matches_a_sorted_reference():
    rng = random.Random(11)
    for head_size in (1, 3, 50):
        queue = QualityUrls(head_size)
        reference: list[tuple[float, int]] = []  # (-quality, order)
        order = 0
        for step in range(3000):
            action = rng.random()
            if action < 0.55 or not reference:
                order += 1
                quality = rng.choice([rng.random(), 1.0, 0.5])
                queue.push(UrlTask(f"u{order}", 0, quality=quality))
                heapq.heappush(reference, (-quality, order))
            elif action < 0.95:
                task = queue.pop()
                expected = heapq.heappop(reference)
                assert task.url == f"u{expected[1]}"
            else:
                head_size = rng.choice([1, 2, 7, 50])
                queue.set_head_size(head_size)
            top = heapq.nsmallest(head_size, reference)
            assert len(queue) == len(reference)
            assert queue.top_quality_sum() == pytest.approx(-sum(e[0] for e in top), abs=1e-9)
            if step % 500 == 0 and reference:
                assert queue.best_quality() == -reference[0][0]
        assert sorted(t.url for t in queue.drain()) == sorted(f"u{o}" for _, o in reference)


def test_put_back_comes_first_among_equals():
    queue = QualityUrls(2)
    for i in range(3):
        queue.push(UrlTask(f"u{i}", 0, quality=1.0))
    first = queue.pop()
    queue.push_front(first)
    assert [queue.pop().url for _ in range(3)] == ["u0", "u1", "u2"]


def simulate(policy: str, seconds: float, connections: int = 4) -> tuple[int, float]:
    """Discrete-event crawl of 12 servers (response times 5 ms to 1 s, a high-quality URL
    last in line on every third one); returns (pages, quality) fetched within `seconds`."""
    frontier = Frontier(SchedulingSettings(policy=policy, requests_per_connection=5))
    rng = random.Random(5)
    times = {}
    for i in range(12):
        host = f"s{i}"
        frontier.add_server(ServerState(host, Clock()))
        times[host] = 0.005 * (200 ** (i / 11))
        qualities = [rng.random() * 0.1 for _ in range(40)] + [10.0 * (i % 3 == 0)]
        for j, q in enumerate(qualities):
            frontier.push(host, UrlTask(f"http://{host}/{j}", 0, quality=q), "http")
    now, pages, quality = 0.0, 0, 0.0
    open_until: list[tuple[float, str]] = []
    while now < seconds:
        while len(open_until) < connections and (server := frontier.acquire(now)):
            end = now
            for _ in range(server.batch):
                task = server.next_task(now, True)
                end += times[server.host]
                server.stats.on_response(200, times[server.host], {"connection": "keep-alive"})
                if end <= seconds:
                    pages += 1
                    quality += task.quality
            heapq.heappush(open_until, (end, server.host))
        if not open_until:
            break
        now, host = heapq.heappop(open_until)
        frontier.release(frontier.servers[host])
    return pages, quality


def test_simulated_crawl_shows_the_policies_apart():
    results = {p: simulate(p, 2.0) for p in ("bfs", "performance", "quality", "capability")}
    assert results["performance"][0] > 1.3 * results["bfs"][0]
    assert results["capability"][1] > max(results[p][1] for p in ("bfs", "performance"))
    assert results["quality"][1] > results["bfs"][1]


@pytest.mark.parametrize("policy", ["bfs", "performance", "quality", "capability"])
def test_no_url_family_starves_the_others_under_any_policy(policy):
    """A trap's 1,000 URLs, of better quality and queued first, do not hold back the pages
    the front page links to: families take turns, each in the policy's own order."""
    frontier = Frontier(SchedulingSettings(policy=policy, requests_per_connection=50))
    frontier.add_server(ServerState("a", Clock()))
    for day in range(1000):
        frontier.push("a", UrlTask(f"http://a/events?d={day}", 1, quality=1.0), "http")
    for page in ("about", "team", "blog/", "docs/guide/"):
        frontier.push("a", UrlTask(f"http://a/{page}", 1, quality=0.001), "http")
    server = frontier.acquire(0.0)
    first = [server.next_task(0.0, new_allowed=True).url for _ in range(10)]
    # Four families ("/events?", "/", "/blog/", "/docs/guide/"): a round takes one URL each.
    assert {"http://a/about", "http://a/blog/", "http://a/docs/guide/"} <= set(first[:4])
    assert "http://a/team" in first[:6]
    assert first[6:] == [f"http://a/events?d={day}" for day in range(2, 6)]  # best first


def test_the_fair_queue_ranks_its_server_by_what_it_gives_next():
    queue = FairUrls(quality_ordered=True, head_size=3)
    for url, quality in (("http://a/x/1", 0.9), ("http://a/x/2", 0.8), ("http://a/y", 0.1)):
        queue.push(UrlTask(url, 0, quality=quality))
    # The next three: x's best, then y (its family's turn), then x's second.
    assert queue.top_quality_sum() == pytest.approx(0.9 + 0.1 + 0.8)
    assert queue.best_quality() == 0.9
    assert [queue.pop().url for _ in range(3)] == ["http://a/x/1", "http://a/y", "http://a/x/2"]
    assert len(queue) == 0 and queue.top_quality_sum() == 0.0


def test_urgent_urls_go_before_the_round():
    """A recrawl's URLs that its sitemaps say changed come first, whatever their family."""
    queue = FairUrls(quality_ordered=True, head_size=2)
    queue.push(UrlTask("http://a/x/1", 0, quality=0.5))
    queue.push(UrlTask("http://a/y/1", 0, quality=1.2, urgent=True))
    queue.push(UrlTask("http://a/y/2", 0, quality=1.4, urgent=True))
    assert queue.best_quality() == 1.4
    assert queue.top_quality_sum() == pytest.approx(1.4 + 1.2)
    assert [queue.pop().url for _ in range(3)] == ["http://a/y/2", "http://a/y/1", "http://a/x/1"]


@pytest.mark.parametrize("policy", ["bfs", "performance", "quality", "capability"])
def test_a_generator_of_fresh_directories_is_one_family_under_any_policy(policy):
    """URLs reached through descending pages (a new directory per URL, so a new `url_family`
    each) take one turn of the round between them: a chain of ordinary pages beside 1,000 of
    them, of better quality and queued first, still gets every other turn."""
    frontier = Frontier(SchedulingSettings(policy=policy, requests_per_connection=50))
    frontier.add_server(ServerState("a", Clock()))
    for n in range(1000):
        trap_url = f"http://a/explore/w{chr(97 + n % 26)}{n // 26:x}/deeper/"
        frontier.push("a", UrlTask(trap_url, 1, quality=1.0, descent=1 + n % 5), "http")
    frontier.push("a", UrlTask("http://a/guide/part-a.html", 1, quality=0.001), "http")
    server = frontier.acquire(0.0)
    first = [server.next_task(0.0, new_allowed=True).url for _ in range(2)]
    assert "http://a/guide/part-a.html" in first
