"""Object storage output (storage/bucket.py): the commit rule and the publish journal on an
object store's listing, and whole crawls against an S3 API on loopback (moto's server): the
same crawl to local disk and to the bucket gives the same rows and the same report; a crawl
killed with SIGKILL resumes from the bucket with every page once; a recrawl finds the earlier
crawl there; `crawlflow sql`, `report` and `warc-get` read it."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from killing import kill_once_committed

from storage.bucket import (
    JOURNAL,
    BatchPublisher,
    Bucket,
    BucketError,
    committed_view,
    finish_journal,
    mirror,
    publish_crawl,
    readable,
    restore,
)

CRAWLFLOW = str(Path(sys.executable).with_name("crawlflow"))


def parquet(path: Path, urls: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"url": urls}), path)


def batch(crawl_dir: Path, name: str, urls: list[str], *, commit: bool = True) -> None:
    """A node's batch: `discovered` and `pages`, and its `fetches` file when it committed."""
    for dataset in ("discovered", "pages") + (("fetches",) if commit else ()):
        parquet(crawl_dir / dataset / f"{name}.parquet", urls)


@pytest.fixture
def store(tmp_path: Path) -> Bucket:
    """A bucket on the local filesystem (pyarrow's file:// filesystem): the same listing,
    upload and delete calls as S3's, without a server."""
    (tmp_path / "bucket").mkdir()
    return Bucket(f"file://{tmp_path / 'bucket'}")


def test_a_reader_takes_committed_batches_only(store: Bucket, tmp_path: Path) -> None:
    staging = tmp_path / "staging" / "c1"
    batch(staging, "node-0-000001", ["http://a/1"])
    batch(staging, "node-0-000002", ["http://a/2"], commit=False)  # killed before its commit
    (staging / "crawl.lock").write_text("")
    for path in staging.rglob("*.parquet"):
        store.upload(path, f"c1/{path.relative_to(staging).as_posix()}")
    store.put("c1/fetches/node-0-000003.parquet.tmp", b"")
    view = committed_view(store, store.listing())
    assert sorted(view) == [
        f"c1/{dataset}/node-0-000001.parquet" for dataset in ("discovered", "fetches", "pages")
    ]


def test_an_interrupted_publish_is_never_read_twice_and_is_finished_by_the_next(
    store: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    staging = tmp_path / "staging" / "c1"
    batch(staging, "node-0-000001", ["http://a/1"])
    batch(staging, "node-1-000001", ["http://b/1"])
    publish_crawl(store, "c1", staging)
    # The compaction's result: one file per dataset replaces the batches.
    for dataset in ("discovered", "pages", "fetches"):
        for path in (staging / dataset).iterdir():
            path.unlink()
    batch(staging, "compacted-000001", ["http://a/1", "http://b/1"])
    uploaded: list[str] = []
    real_upload = Bucket.upload

    def fail_at_the_commit(self: Bucket, local: Path, relative: str) -> None:
        if relative.startswith("c1/fetches/"):
            raise OSError("connection reset")
        uploaded.append(relative)
        real_upload(self, local, relative)

    monkeypatch.setattr(Bucket, "upload", fail_at_the_commit)
    with pytest.raises(OSError):
        publish_crawl(store, "c1", staging)
    monkeypatch.setattr(Bucket, "upload", real_upload)
    assert uploaded == [
        "c1/discovered/compacted-000001.parquet",
        "c1/pages/compacted-000001.parquet",
    ]
    journal = json.loads(store.get(f"c1/{JOURNAL}") or b"")
    assert "fetches/compacted-000001.parquet" in journal["adds"]
    # Every batch object is still there beside the compacted ones: a reader takes the batches.
    local = mirror(store.child("c1"), tmp_path / "mirror" / "c1")
    assert sorted(p.name for p in (local / "pages").iterdir()) == [
        "node-0-000001.parquet",
        "node-1-000001.parquet",
    ]
    publish_crawl(store, "c1", staging)  # rolls the journal back, then publishes again
    assert sorted(store.listing("c1")) == [
        f"c1/{dataset}/compacted-000001.parquet" for dataset in ("discovered", "fetches", "pages")
    ]
    local = mirror(store.child("c1"), tmp_path / "mirror" / "c1")
    assert [p.name for p in (local / "pages").iterdir()] == ["compacted-000001.parquet"]


def test_a_journal_whose_objects_all_arrived_removes_the_replaced_ones(store: Bucket) -> None:
    for name in ("pages/n-000001.parquet", "fetches/n-000001.parquet"):
        store.put(f"c1/{name}", b"old")
    for name in ("pages/compacted-000001.parquet", "fetches/compacted-000001.parquet"):
        store.put(f"c1/{name}", b"new")
    adds = ["pages/compacted-000001.parquet", "fetches/compacted-000001.parquet"]
    removes = ["pages/n-000001.parquet", "fetches/n-000001.parquet"]
    store.put(f"c1/{JOURNAL}", json.dumps({"adds": adds, "removes": removes}).encode())
    assert sorted(committed_view(store, store.listing())) == sorted(f"c1/{a}" for a in adds)
    finish_journal(store, "c1")
    assert sorted(store.listing()) == sorted(f"c1/{a}" for a in adds)


def test_a_resume_restores_the_bucket_and_drops_what_never_committed(
    store: Bucket, tmp_path: Path
) -> None:
    node_dir = tmp_path / "node-machine" / "c1"
    batch(node_dir, "node-0-000001", ["http://a/1"])
    batch(node_dir, "node-0-000002", ["http://a/2"], commit=False)
    for path in sorted(node_dir.rglob("*.parquet")):
        store.upload(path, f"c1/{path.relative_to(node_dir).as_posix()}")
    staging = tmp_path / "driver" / "c1"
    batch(staging, "node-0-000009", ["http://a/9"])  # committed here, never published
    restore(store, "c1", staging)
    local = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*.parquet"))
    assert local == [f"{d}/node-0-000001.parquet" for d in ("discovered", "fetches", "pages")]
    assert sorted(store.listing()) == [f"c1/{name}" for name in local]


def test_a_node_numbers_its_batches_past_what_the_bucket_holds_and_retries_in_order(
    store: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage.writer import CommitGroupWriter

    store.put("c1/fetches/node-0-000007.parquet", b"x")
    crawl_dir = tmp_path / "fresh-machine" / "c1"
    publisher = BatchPublisher(store, crawl_dir)
    schema = pa.schema([("url", pa.string())])
    writer = CommitGroupWriter(
        {name: (crawl_dir / name, schema) for name in ("discovered", "fetches")},
        prefix="node-0",
        batch_rows=1000,
        interval_s=3600,
        publisher=publisher,
    )
    real_upload = Bucket.upload
    monkeypatch.setattr(Bucket, "upload", lambda *_: (_ for _ in ()).throw(OSError("503")))
    writer.record({"discovered": [{"url": "u1"}], "fetches": [{"url": "u1"}]})
    with pytest.raises(OSError):  # committed locally; its publish failed and waits
        writer.flush()
    monkeypatch.setattr(Bucket, "upload", real_upload)
    writer.record({"discovered": [{"url": "u2"}], "fetches": [{"url": "u2"}]})
    writer.flush()
    assert sorted(store.listing()) == [
        "c1/discovered/node-0-000008.parquet",
        "c1/discovered/node-0-000009.parquet",
        "c1/fetches/node-0-000007.parquet",
        "c1/fetches/node-0-000008.parquet",
        "c1/fetches/node-0-000009.parquet",
    ]


def test_an_object_holds_the_bytes_of_its_file(store: Bucket, tmp_path: Path) -> None:
    # A WARC file is gzip members already: never compressed again on the way (pyarrow would
    # by its name), or no other reader could take a record by its offset.
    warc = tmp_path / "night-node-0-00001.warc.gz"
    warc.write_bytes(gzip.compress(b"WARC/1.1\r\n"))
    store.upload(warc, "c1/warc/night-node-0-00001.warc.gz")
    assert (
        tmp_path / "bucket/c1/warc/night-node-0-00001.warc.gz"
    ).read_bytes() == warc.read_bytes()
    assert store.read_range("c1/warc/night-node-0-00001.warc.gz", 0, 2) == b"\x1f\x8b"


@pytest.mark.parametrize("uri", ["nosuchscheme://bucket/night", "s3://", "s3:///night"])
def test_an_output_uri_no_filesystem_opens_is_refused(
    uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # fsspec would take an unknown scheme for a local path: not here
    with pytest.raises(BucketError, match="^--out "):
        Bucket(uri)
    assert not list(tmp_path.iterdir())


def test_credentials_in_the_output_uri_are_refused() -> None:
    with pytest.raises(BucketError) as error:
        Bucket("s3://AKIAEXAMPLE:very-secret@crawls/night")
    assert "very-secret" not in str(error.value) and "AKIAEXAMPLE" not in str(error.value)


# ---- against an S3 API on loopback ------------------------------------------------------------

# What differs between two crawls of the same web whatever their output: their times.
TIMING = {"started", "finished", "duration_s", "pages_per_s", "rtt_ms", "fetches_per_s"}


def figures(crawl_dir: Path) -> tuple[dict[str, int], dict[str, object], list[dict[str, object]]]:
    from storage.queries import crawl_summary, per_host
    from storage.views import connect

    con = connect(crawl_dir)
    counts = {
        view: con.execute(f"SELECT count(*) FROM {view}").fetchone()[0]  # type: ignore[index]
        for view in ("fetches", "pages", "discovered", "extracts")
    }
    summary = {k: v for k, v in crawl_summary(con).items() if k not in TIMING}
    hosts = [{k: v for k, v in row.items() if k not in TIMING} for row in per_host(con)]
    return counts, summary, hosts


def cli(argv: list[str]) -> str:
    """What `crawlflow ARGV` prints, run in this process (a command's own process would spend
    seconds importing what this one has)."""
    from crawlflow.cli import _run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _run(argv)
    assert code == 0, err.getvalue()
    return out.getvalue()


def report_lines(location: str) -> list[str]:
    """`crawlflow report`'s table, less the lines that hold a time or a path."""
    timed = ("duration", "per second", "rtt", "achieved rate", "output:", "top ", "host ")
    return [
        re.sub(r"\s+", " ", line)
        for line in cli(["report", location]).splitlines()
        if not any(word in line for word in timed) and "│" in line and "." not in line
    ]


@pytest.mark.integration
def test_the_same_crawl_to_disk_and_to_s3_gives_the_same_output_and_a_recrawl_reads_it(
    s3_server, ray_session, prefect_api, tmp_path
):
    from crawler.request import CrawlRequest
    from flows.crawl import crawl
    from websim import WebSim, WebSpec

    # No hidden rate limits: nothing in the crawl depends on timing.
    spec = WebSpec(hosts=2, pages=60, seed=5, rate_limit_rps=None, latency_ms=(1, 2))
    with WebSim(spec) as sim:

        def run(out_dir: str, crawl_id: str) -> dict:
            return crawl(
                CrawlRequest(
                    seeds=[sim.hub_url],
                    allow=sim.servers,
                    allow_private=True,
                    nodes=1,
                    out_dir=out_dir,
                    crawl_id=crawl_id,
                )
            )

        run(str(tmp_path / "out"), "night-1")
        summary = run("s3://crawls/same", "night-1")
        assert summary["out_dir"] == "s3://crawls/same/night-1"
        local, remote = tmp_path / "out" / "night-1", readable("s3://crawls/same/night-1")
        assert figures(remote) == figures(local)
        assert figures(local)[0]["pages"] > 40
        assert report_lines("s3://crawls/same/night-1") == report_lines(str(local))
        # The bucket holds the compacted crawl, nothing else of it.
        keys = sorted(Bucket("s3://crawls/same").listing("night-1"))
        assert [k for k in keys if "/fetches/" in k] == ["night-1/fetches/compacted-000001.parquet"]
        assert not [k for k in keys if k.endswith((".tmp", JOURNAL, ".lock"))]

        # The next night finds the first in the bucket and revisits its URLs with the
        # validators it read there: a page answers again (a `pages` row) or 304.
        second = run("s3://crawls/same", "night-2")
        manifest = json.loads(Bucket("s3://crawls/same").get("night-2/crawl.json") or b"")
        assert manifest["since"] == "night-1"
        assert second["urls_fetched"] == summary["urls_fetched"]
        assert second["not_modified"] > 0 and second["duplicate_pages"] == 0
        assert second["pages"] + second["not_modified"] >= summary["pages"]

    query = "SELECT crawl_id, count(*) FROM pages GROUP BY 1"
    sql = cli(["sql", "s3://crawls/same", query, "--format", "csv"])
    pages = figures(local)[0]["pages"]
    # Over the root, night 2's pages are those it stored and those a 304 confirmed: all.
    assert sorted(sql.split()[1:]) == [f"night-1,{pages}", f"night-2,{pages}"]
    # A record read from the bucket by its offset; the command writes bytes to stdout's buffer.
    record = subprocess.run(
        [CRAWLFLOW, "warc-get", "s3://crawls/same/night-1", sim.hub_url],
        capture_output=True,
        check=True,
    )
    assert f"WARC-Target-URI: {sim.hub_url}\r\n".encode() in record.stdout


def committed_fetches(bucket: Bucket, crawl_id: str) -> int:
    return sum(1 for key in bucket.listing(f"{crawl_id}/fetches") if key.endswith(".parquet"))


@pytest.mark.integration
def test_a_crawl_to_s3_killed_with_sigkill_resumes_from_the_bucket_with_every_page_once(
    s3_server, ray_session, prefect_api, tmp_path
):
    from prefect.settings import PREFECT_API_URL

    from crawler.request import CrawlRequest
    from flows.crawl import crawl
    from websim import WebSim, WebSpec
    from websim.coverage import coverage

    bucket = Bucket("s3://crawls/killed")
    config = tmp_path / "crawl.toml"
    config.write_text("[output]\nwrite_interval_s = 0.2\nwrite_batch_rows = 10\n")
    # Hidden limits of about 10 requests/s: the crawl lasts long enough to be killed.
    spec = WebSpec(hosts=3, pages=180, seed=11, rate_limit_rps=(8.0, 12.0), latency_ms=(1, 3))
    with WebSim(spec) as sim:
        command = [CRAWLFLOW, "crawl", sim.hub_url, "--allow-private", "--nodes", "2"]
        command += [arg for host in sim.servers for arg in ("--allow", host)]
        command += ["--out", "s3://crawls/killed", "--crawl-id", "k1", "--config", str(config)]
        env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
        kill_once_committed(command, env, lambda: committed_fetches(bucket, "k1"), 3)
        expected = sim.reachable_allowed_urls()
        before = coverage(readable("s3://crawls/killed/k1"), expected)
        assert 0 < before["fetched"] < before["expected"], "the kill must land mid-crawl"

        summary = crawl(
            CrawlRequest(
                seeds=[sim.hub_url],
                allow=sim.servers,
                allow_private=True,
                nodes=2,
                out_dir="s3://crawls/killed",
                crawl_id="k1",
            )
        )
    after = coverage(readable("s3://crawls/killed/k1"), expected)
    assert after["missing"] == [] and after["coverage"] == 1.0
    assert after["duplicates"] == 0 and summary["duplicate_pages"] == 0
    keys = sorted(bucket.listing("k1"))
    assert [k for k in keys if "/fetches/" in k] == ["k1/fetches/compacted-000001.parquet"]
    assert not [k for k in keys if k.endswith((".tmp", JOURNAL))]


@pytest.mark.integration
def test_a_bucket_that_cannot_be_written_is_one_line_before_anything_starts(s3_server, tmp_path):
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    started = time.monotonic()
    result = subprocess.run(
        [CRAWLFLOW, "crawl", "http://127.0.0.1:9/", "--allow-private"]
        + ["--out", "s3://no-such-bucket/night"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "crawlflow: error: --out s3://no-such-bucket/night: cannot write there ("
    ), result.stderr
    assert "testing" not in result.stderr  # the secret key the environment holds
    # Prefect never started: its server creates its database in PREFECT_HOME first thing.
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()
    print(f"refused in {time.monotonic() - started:.1f}s")


@pytest.mark.integration
def test_a_reader_of_a_prefix_without_crawls_is_told_so_in_one_line(s3_server):
    from crawlflow.cli import _run

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = _run(["sql", "s3://crawls/nothing-here", "SELECT 1"])
    assert code == 2
    assert err.getvalue() == (
        "crawlflow: error: no crawl output (fetches Parquet) under s3://crawls/nothing-here\n"
    )
