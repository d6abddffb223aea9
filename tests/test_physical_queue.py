"""websim's physical queue hosts (websim/physical.py): the discrete-event simulation that gives
the benchmark its ground truth, and the worker slots in the served web, where requests really
wait."""

from __future__ import annotations

import math
import socket
import threading

import pytest

from websim import PhysicalQueue, WebSim, WebSpec
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
