"""Crawl directories with hostile names, walked through every reader of the output.

A name with a quote must not break out of SQL, and one with glob characters (`[1]`, `*`, `?`)
must not read a sibling crawl's rows: each reader sees exactly its own crawl.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from crawler.cluster.recovery import OutputRecovery
from crawler.config import one_line
from crawler.request import CrawlRequest
from crawler.scheduling.recrawl import read_history
from storage.checkpoint import load_checkpoint
from storage.manifest import Manifest, read_manifest, write_manifest
from storage.queries import previous_crawl_profile
from storage.schema import DISCOVERED, FETCHES, PAGES
from storage.views import connect
from storage.writer import ParquetDatasetWriter

# Each hostile name beside a sibling its glob characters would match.
HOSTILE = [
    ("night[1]", "night1"),
    ("a*b", "axb"),
    ("q?", "qx"),
    ("it's", "its"),
    ("x'); COPY (SELECT 1) TO 'pwned.csv' --", "x"),
    ('say "hi"', "say hi"),
    ("{a,b}", "a"),
    ("back\\slash", "backslash"),
]


def write_crawl(out: Path, name: str, host: str) -> None:
    """One crawl of one URL of `host`, as the nodes write it: fetched, discovered, stored."""
    crawl = out / name
    now = datetime.now(UTC)
    url = f"http://{host}/"
    rows = {
        "fetches": (
            FETCHES,
            {
                "crawl_id": name,
                "url": url,
                "url_host_name": host,
                "url_path": "/",
                "fetch_time": now,
                "fetch_status": 200,
                "node_id": "node-0",
                "depth": 0,
                "attempt": 1,
                "content_length": 10,
                "content_digest": "D",
            },
        ),
        "pages": (
            PAGES,
            {
                "crawl_id": name,
                "url": url,
                "url_host_name": host,
                "fetch_time": now,
                "content_digest": "D",
                "content_length": 10,
                "depth": 0,
                "node_id": "node-0",
            },
        ),
        "discovered": (
            DISCOVERED,
            {"crawl_id": name, "url": url + "next", "depth": 1, "node_id": "node-0"},
        ),
    }
    for dataset, (schema, row) in rows.items():
        writer = ParquetDatasetWriter(crawl / dataset, schema, "node-0", 1, 3600)
        writer.write(row)
        writer.flush()


@pytest.mark.parametrize(("name", "sibling"), HOSTILE)
def test_every_reader_reads_only_its_own_crawl(tmp_path, name, sibling):
    write_crawl(tmp_path, name, "own.example")
    write_crawl(tmp_path, sibling, "other.example")
    crawl = tmp_path / name

    hosts = connect(crawl).execute("SELECT DISTINCT url_host_name FROM fetches").fetchall()
    assert hosts == [("own.example",)]
    assert connect(crawl).execute("SELECT count(*) FROM pages").fetchall() == [(1,)]

    checkpoint = load_checkpoint(crawl, ["http://own.example/"])
    assert checkpoint.done == {"http://own.example/"}
    assert set(checkpoint.pending) == {"http://own.example/next"}

    write_manifest(crawl, Manifest(name, "2026-01-01T00:00:00", "d", None))
    history = read_history(tmp_path, [read_manifest(crawl)])
    assert set(history) == {"http://own.example/next"}

    recovered = OutputRecovery(crawl, [])("node-0", ["own.example", "other.example"])
    assert recovered.budget_spent == 1
    assert "http://own.example/next" in str(recovered)
    assert "http://other.example" not in str(recovered)

    profile = previous_crawl_profile(tmp_path, sibling)
    assert profile is not None and set(profile[0]) == {"own.example"}

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, sibling])


@pytest.mark.parametrize(
    "crawl_id", ["../x", ".hidden", "a/b", "it's", "", "x" * 101, "night[1]", "a b"]
)
def test_a_crawl_id_that_is_not_a_plain_name_is_refused(crawl_id):
    with pytest.raises(ValidationError, match="is not a crawl id"):
        CrawlRequest(seeds=["http://example.org/"], crawl_id=crawl_id)
    with pytest.raises(ValidationError, match="is not a crawl id"):
        CrawlRequest(seeds=["http://example.org/"], since=crawl_id)


def test_a_manifest_naming_another_directory_is_not_read(tmp_path):
    write_manifest(tmp_path / "night-2", Manifest("../../etc", "2026-01-01", "d", None))
    assert read_manifest(tmp_path / "night-2") is None


def test_a_seed_with_credentials_is_refused_without_echoing_them():
    with pytest.raises(ValidationError) as refused:
        CrawlRequest(seeds=["http://example.org/", "http://bob:s3cret@example.org/"])
    message = one_line(refused.value, CrawlRequest)  # what the command prints
    assert "seed 2 carries credentials" in message and "s3cret" not in message
