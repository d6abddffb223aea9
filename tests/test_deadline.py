"""The deadline: a crawl stops cleanly when its time is up, records what it left, and a run
with the same crawl id fetches exactly that (in-process node, real HTTP to websim)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from crawler.cluster.coordinator import Coordinator
from crawler.config import CrawlConfig
from crawler.scope.urls import canonical_url, host_key
from runtime.backends import start_fleet
from runtime.fleet import single_node
from storage.checkpoint import load_checkpoint
from storage.queries import crawl_summary
from storage.views import connect
from websim import WebSim, WebSpec
from websim.coverage import coverage

pytestmark = pytest.mark.integration  # a crawl against websim

# About 20 requests a second per server: the whole web takes seconds, the deadline less.
SLOW = CrawlConfig(
    output={"write_interval_s": 0.2},
    rate_control={"mode": "fixed", "fixed": {"delay_s": 0.05}},
)
DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def web():
    spec = WebSpec(hosts=3, pages=150, seed=4, rate_limit_rps=None, latency_ms=(1.0, 2.0))
    with WebSim(spec) as sim:
        yield sim


def run(web: WebSim, out_dir: str, deadline_s: float | None) -> Coordinator:
    """One run of crawl `c` over the web: a fresh crawl, or a resumed one if `c` has output."""
    seeds = [canonical_url(web.hub_url)]
    hosts = sorted({host_key(seeds[0]), *web.servers})
    fleet = start_fleet(single_node("c", out_dir, SLOW, hosts), "inprocess")
    coordinator = fleet.coordinator()
    checkpoint = load_checkpoint(node_dir(out_dir), seeds)
    if checkpoint.empty:
        coordinator.seed(seeds)
    else:
        coordinator.resume(checkpoint.pending, checkpoint.done, checkpoint.admitted)
    driver = threading.Thread(
        target=coordinator.run, kwargs={"poll_s": 0.02, "deadline_s": deadline_s}, daemon=True
    )
    driver.start()
    driver.join(60)
    fleet.stop()
    assert not driver.is_alive(), "the run did not end"
    return coordinator


def node_dir(out_dir: str) -> Path:
    return Path(out_dir) / "c"


def test_a_crawl_stopped_by_its_deadline_resumes_where_it_stopped(web, tmp_path):
    out = str(tmp_path)
    first = run(web, out, DEADLINE_S)
    left = first.left_at_deadline
    assert left and left > 0, "the deadline must land mid-crawl"
    con = connect(node_dir(out))
    rows = con.execute(
        "SELECT count(*), count(DISTINCT url) FROM fetches WHERE error = 'skipped: deadline'"
    ).fetchall()
    assert rows == [(left, left)]  # one row per URL left, none dropped
    assert crawl_summary(con)["left_at_deadline"] == left
    assert first.report()["left_at_deadline"] == left
    checkpoint = load_checkpoint(node_dir(out), [canonical_url(web.hub_url)])
    assert len(checkpoint.pending) >= left  # the deadline's URLs, plus any only discovered

    second = run(web, out, None)

    assert second.left_at_deadline is None
    after = coverage(node_dir(out), web.reachable_allowed_urls())
    assert after["coverage"] == 1.0 and after["duplicates"] == 0
    assert crawl_summary(connect(node_dir(out)))["left_at_deadline"] == 0
