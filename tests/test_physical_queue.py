"""websim's physical queue hosts (websim/physical.py): the discrete-event simulation that gives
the benchmark its ground truth, and the worker slots in the served web, where requests really
wait."""

from __future__ import annotations

import math
import socket
import threading

import pytest
from in_flight import most_at_once

from crawler.config import CrawlConfig
from runtime.backends import crawl_in_process
from runtime.fleet import single_node
from websim import PhysicalQueue, WebSim, WebSpec
from websim.coverage import coverage
from websim.physical import FifoQueue, best_polite_rate, paced_run, unloaded_median_s


def test_fifo_queue_makes_a_request_wait_only_for_busy_workers() -> None:
    # No background users: three requests at once on two workers, the third waits for the
    # first worker to free; one at a time, nobody ever waits.
    sim = FifoQueue(PhysicalQueue(workers=2, service_sigma=0.0), seed=1)
    first, second, third = sim.request(1.0), sim.request(1.0), sim.request(1.0)
    assert first == second == pytest.approx(0.020)
    assert third == pytest.approx(0.040)
    assert paced_run(PhysicalQueue(workers=1, service_sigma=0.0), math.inf).median_s == (
        pytest.approx(0.020)
    )


def test_unloaded_median_counts_the_background_users() -> None:
    # Alone, a request takes its service time (median 20 ms); behind 60% background load on
    # one worker it often waits, more than on eight workers at the same load.
    probes = 4000
    assert unloaded_median_s(PhysicalQueue(workers=1), probes=probes) == pytest.approx(
        0.020, rel=0.05
    )
    one = unloaded_median_s(PhysicalQueue(workers=1, background_load=0.6), probes=probes)
    eight = unloaded_median_s(PhysicalQueue(workers=8, background_load=0.6), probes=probes)
    assert one > 1.5 * eight > 1.5 * 0.020


def test_best_polite_rate_of_one_connection() -> None:
    # One request in flight never waits behind its own: alone on the server the best polite
    # rate is back to back. Behind others' load the crawler's requests wait more the faster
    # it goes, and its median at the best rate is within 1.5x the unloaded one.
    alone = best_polite_rate(PhysicalQueue(workers=1), requests=1000)
    assert alone.back_to_back
    assert alone.rate_rps == pytest.approx(1 / PhysicalQueue().mean_service_s, rel=0.1)
    busy = best_polite_rate(PhysicalQueue(workers=1, background_load=0.6), requests=1000)
    assert busy.median_s <= 1.5 * busy.unloaded_s
    assert busy.rate_rps < alone.rate_rps


def test_queue_hosts_are_checked() -> None:
    with pytest.raises(ValueError):
        PhysicalQueue(workers=0)
    with pytest.raises(ValueError):
        PhysicalQueue(background_load=1.0)
    with pytest.raises(ValueError):
        WebSpec(hosts=2, pages=10, queues=(PhysicalQueue(),))


def _get(url: str) -> None:
    host, port = url.split("//")[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        while sock.recv(65536):
            pass


@pytest.mark.integration
def test_served_requests_wait_for_a_worker() -> None:
    # One worker, 60 ms of service, no background users: three requests at once are served
    # one after the other, and the log says how long each waited.
    queue = PhysicalQueue(workers=1, service_ms=60.0, service_sigma=0.0)
    spec = WebSpec(hosts=1, pages=5, queues=(queue,), rate_limit_rps=None, latency_ms=(0, 0))
    with WebSim(spec) as sim:
        threads = [threading.Thread(target=_get, args=(sim.host_urls[0],)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        log = sim.queue_log()
    waits = sorted(entry["wait_s"] for entry in log)
    assert len(log) == 3
    assert [entry["path"] for entry in log] == ["/"] * 3
    assert waits[0] < 0.03
    assert 0.04 < waits[1] < waits[2] - 0.04
    assert all(entry["service_s"] >= 0.055 for entry in log)


@pytest.mark.integration
def test_a_server_with_workers_to_spare_gets_a_second_request_in_flight(tmp_path) -> None:
    # docs/rate-control.md, the in-flight test, in a real node with default settings: the
    # four-worker server serves two of the crawler's requests side by side and keeps its second
    # connection; on the one-worker server the second request waits behind the first, and it
    # goes back to one. Never more than two at once, and every page fetched exactly once.
    queues = (PhysicalQueue(workers=4, service_ms=10.0), PhysicalQueue(workers=1, service_ms=10.0))
    spec = WebSpec(
        hosts=2, pages=800, seed=3, queues=queues, rate_limit_rps=None, latency_ms=(0, 0)
    )
    with WebSim(spec) as sim:
        config = CrawlConfig(scheduling={"max_connections": 2})
        fleet = crawl_in_process(
            single_node("lanes", str(tmp_path), config, sim.servers), [sim.hub_url]
        )
        log = sim.queue_log()
        result = coverage(tmp_path / "lanes", sim.reachable_allowed_urls())
        hosts = [f"{profile.address}:{sim.port}" for profile in sim.web.hosts]
    assert result["coverage"] == 1.0 and result["duplicates"] == 0
    servers = fleet.nodes[0].node.core.frontier.servers
    many, one = (servers[host].controller for host in hosts)
    assert many is not None and many.in_flight_limit() == 2
    assert one is not None and one.in_flight_limit() == 1
    names = sorted({entry["host"] for entry in log})
    spans = [
        [(e["time"], e["time"] + e["wait_s"] + e["service_s"]) for e in log if e["host"] == name]
        for name in names
    ]
    assert [most_at_once(host_spans) for host_spans in spans] == [2, 2]
