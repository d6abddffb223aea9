"""The whole path with real parts: websim on loopback, the Prefect flow, Ray nodes, Parquet,
DuckDB, checked against the simulator's ground truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.schema import FETCHES, PAGES
from storage.views import connect
from websim import WebSim, WebSpec
from websim.coverage import coverage

pytestmark = pytest.mark.integration  # websim, Ray and Prefect


@pytest.fixture(scope="module")
def small_web():
    # Fast hosts without hidden rate limits: this test is about completeness, not politeness.
    spec = WebSpec(
        hosts=5, pages=500, seed=7, rate_limit_rps=None, latency_ms=(1.0, 3.0), robots_share=0.6
    )
    with WebSim(spec) as sim:
        yield sim


@pytest.fixture(scope="module")
def crawl_result(small_web, ray_session, prefect_api, tmp_path_factory):
    from crawler.request import CrawlRequest
    from flows.crawl import crawl

    out = tmp_path_factory.mktemp("out")
    summary = crawl(
        CrawlRequest(
            seeds=[small_web.hub_url],
            allow=small_web.servers,
            allow_private=True,
            nodes=2,
            out_dir=str(out),
            crawl_id="e2e",
        )
    )
    return summary, Path(out) / "e2e"


def test_every_reachable_allowed_page_fetched_exactly_once(small_web, crawl_result):
    _, crawl_dir = crawl_result
    expected = small_web.reachable_allowed_urls()
    assert len(expected) > 300
    result = coverage(crawl_dir, expected)
    assert result["missing"] == []
    assert result["coverage"] == 1.0
    assert result["duplicates"] == 0
    con = connect(crawl_dir)
    fetched = {
        u
        for (u,) in con.execute(
            "SELECT url FROM fetches WHERE fetch_status = 200 AND url NOT LIKE '%/robots.txt'"
        ).fetchall()
    }
    assert fetched == expected


def test_no_disallowed_url_requested_and_none_twice(small_web, crawl_result):
    log = small_web.request_log()
    requested = [f"http://{entry['host']}{entry['path']}" for entry in log]
    disallowed = small_web.disallowed_urls()
    assert disallowed, "the test web should have robots.txt rules"
    assert not disallowed & set(requested)
    assert len(requested) == len(set(requested))


def test_output_reads_back_in_duckdb_with_documented_columns(crawl_result):
    summary, crawl_dir = crawl_result
    con = connect(crawl_dir)
    fetch_columns = [d[0] for d in con.execute("SELECT * FROM fetches LIMIT 0").description]
    assert fetch_columns == FETCHES.names
    page_columns = [d[0] for d in con.execute("SELECT * FROM pages LIMIT 0").description]
    assert page_columns == PAGES.names
    assert summary["pages"] == con.execute("SELECT count(*) FROM pages").fetchall()[0][0]
    assert summary["duplicate_pages"] == 0
    (bad_digests,) = con.execute(
        "SELECT count(*) FROM fetches WHERE fetch_status = 200 AND length(content_digest) <> 32"
    ).fetchall()[0]
    assert bad_digests == 0
    (denied,) = con.execute(
        "SELECT count(*) FROM fetches WHERE error = 'robots_disallowed' AND fetch_status IS NULL"
    ).fetchall()[0]
    assert denied > 0
    # A handshake per connection the crawl opened, none on the requests that reused one.
    connected, answered = con.execute(
        "SELECT count(connect_ms), count(rtt_ms) FROM fetches WHERE fetch_status IS NOT NULL"
    ).fetchall()[0]
    assert 0 < connected < answered
    # The flow's collect step merged each dataset's batch files into one.
    for dataset in ("discovered", "pages", "fetches", "metrics"):
        assert [p.name for p in (crawl_dir / dataset).iterdir()] == ["compacted-000001.parquet"]
