"""A crawl killed with SIGKILL mid-way resumes with the same crawl id: nothing lost, nothing
fetched twice, every file readable."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
from fastwarc.warc import ArchiveIterator as FastArchiveIterator
from killing import kill_once_committed
from warcio.archiveiterator import ArchiveIterator

from storage.checkpoint import _changed_at, wait_until_quiet
from storage.manifest import MANIFEST
from storage.views import connect
from storage.warc import read_record
from websim import WebSim, WebSpec
from websim.coverage import coverage
from websim.sim import requested_again

pytestmark = pytest.mark.integration  # websim, Ray, Prefect and the CLI

BATCH_ROWS = 10  # small batches: the last, uncommitted one bounds what is asked again


@pytest.fixture(scope="module")
def slow_web():
    # Hidden limits of about 10 requests/s make the crawl last long enough to be killed.
    spec = WebSpec(hosts=4, pages=400, seed=11, rate_limit_rps=(8.0, 12.0), latency_ms=(1, 3))
    with WebSim(spec) as sim:
        yield sim


def committed_fetch_files(crawl_dir: Path) -> int:
    return len(list((crawl_dir / "fetches").glob("*.parquet")))


def test_killed_crawl_resumes_without_loss_or_duplicates(
    slow_web, ray_session, prefect_api, tmp_path
):
    from prefect.settings import PREFECT_API_URL

    from crawler.request import CrawlRequest
    from flows.crawl import crawl

    allow = slow_web.servers
    config = tmp_path / "crawl.toml"
    config.write_text(f"[output]\nwrite_interval_s = 0.2\nwrite_batch_rows = {BATCH_ROWS}\n")
    slow_web.request_log(clear=True)
    crawl_dir = tmp_path / "out" / "resumable"
    command = [sys.executable, "-m", "crawlflow", "crawl", slow_web.hub_url, "--allow-private"]
    command += [arg for host in allow for arg in ("--allow", host)]
    command += ["--out", str(tmp_path / "out"), "--crawl-id", "resumable", "--config", str(config)]
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    kill_once_committed(command, env, lambda: committed_fetch_files(crawl_dir), 5)

    expected = slow_web.reachable_allowed_urls()
    before = coverage(crawl_dir, expected)
    first_run_nodes = {p.name.rsplit("-", 1)[0] for p in (crawl_dir / "fetches").glob("*.parquet")}
    assert 0 < before["fetched"] < before["expected"], "the kill must land mid-crawl"

    summary = crawl(
        CrawlRequest(
            seeds=[slow_web.hub_url],
            allow=allow,
            allow_private=True,
            nodes=2,
            out_dir=str(tmp_path / "out"),
            crawl_id="resumable",
        )
    )

    after = coverage(crawl_dir, expected)
    # Asked again at the server: at most each killed node's last batch (fewer than BATCH_ROWS
    # rows are ever buffered) and its requests in flight (one per server).
    again = requested_again(slow_web.request_log())
    print(f"re-requested after the kill: {len(again)} ({len(first_run_nodes)} nodes killed)")
    assert len(again) <= len(first_run_nodes) * (BATCH_ROWS + len(slow_web.servers))
    assert after["missing"] == [] and after["coverage"] == 1.0
    assert after["duplicates"] == 0
    assert summary["duplicate_pages"] == 0
    con = connect(crawl_dir)
    page_urls = {url for (url,) in con.execute("SELECT url FROM pages").fetchall()}
    html_expected = {
        url
        for (url,) in con.execute(
            "SELECT url FROM fetches WHERE fetch_status = 200 AND content_mime_type = 'text/html'"
        ).fetchall()
    }
    assert page_urls == html_expected
    assert not list(crawl_dir.rglob("*.tmp"))
    # Both runs' batch files, merged by the resumed run's collect step.
    assert [p.name for p in (crawl_dir / "fetches").iterdir()] == ["compacted-000001.parquet"]
    # Their WARC files too, into files named by crawl and node, which warcio and fastwarc read;
    # every row finds its own record there.
    warc_files = sorted((crawl_dir / "warc").iterdir())
    assert warc_files
    for path in warc_files:
        assert re.fullmatch(r"resumable-node-\d+-\d{5}\.warc\.gz", path.name), path.name
        with open(path, "rb") as file:
            by_warcio = sum(1 for _ in ArchiveIterator(file))
        assert by_warcio == sum(1 for _ in FastArchiveIterator(str(path), verify_digests=True))
    pointers = con.execute(
        "SELECT url, warc_filename, warc_record_offset, warc_record_length, warc_record_id "
        "FROM fetches WHERE warc_filename IS NOT NULL"
    ).fetchall()
    assert pointers
    for url, filename, offset, length, record_id in pointers:
        record = read_record(crawl_dir / filename, offset, length)
        assert f"WARC-Target-URI: {url}\r\n".encode() in record
        assert f"WARC-Record-ID: {record_id}\r\n".encode() in record


def test_a_new_crawl_does_not_wait_for_its_own_manifest(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text("{}")
    started = time.monotonic()
    assert wait_until_quiet(tmp_path, quiet_s=30.0, timeout_s=60.0)
    assert time.monotonic() - started < 5.0  # waiting for quiet would take 30 s

    (tmp_path / "fetches").mkdir()
    (tmp_path / "fetches" / "node-0-1.parquet").write_bytes(b"")
    assert not wait_until_quiet(tmp_path, quiet_s=30.0, timeout_s=1.0)  # a node just wrote


def test_a_file_renamed_since_it_was_listed_counts_as_a_change_just_now(tmp_path: Path) -> None:
    # A node commits a batch by renaming its .tmp file: listed, then gone before its stat.
    before = time.time()
    assert _changed_at(tmp_path / "fetches" / "node-0-000001.parquet.tmp") >= before
