"""Compaction of a finished crawl's batch files (storage/compaction.py), crash included."""

from __future__ import annotations

import errno
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastwarc.warc import ArchiveIterator as FastArchiveIterator
from warc_checks import records_of_rows
from warcio.archiveiterator import ArchiveIterator

import storage.compaction as compaction
from storage.checkpoint import load_checkpoint
from storage.compaction import JOURNAL, compact
from storage.schema import COMMITTED_DATASETS, DATASETS
from storage.views import connect
from storage.warc import WARC_DIR, Exchange, WarcBatchWriter
from storage.writer import CommitGroupWriter, ParquetDatasetWriter

HOST = "a.test:80"
QUERIES = {
    "fetches": "SELECT url, attempt FROM fetches ORDER BY ALL",
    "pages": "SELECT url, content FROM pages ORDER BY ALL",
    "discovered": "SELECT url, depth FROM discovered ORDER BY ALL",
    "metrics": "SELECT metric, value FROM metrics ORDER BY ALL",
}


def crawl_output(crawl_dir: Path, batches: int = 4) -> None:
    """What two nodes leave: `batches` committed batches each, and metrics files."""
    for node in ("node-0", "node-1"):
        group = CommitGroupWriter(
            {name: (crawl_dir / name, DATASETS[name]) for name in COMMITTED_DATASETS},
            prefix=node,
            batch_rows=1_000,
            interval_s=3600,
        )
        metrics = ParquetDatasetWriter(crawl_dir / "metrics", DATASETS["metrics"], node, 1, 3600)
        for batch in range(batches):
            url = f"http://{HOST}/{node}/{batch}"
            group.record(
                {
                    "discovered": [{"crawl_id": "c", "url": url + "/next", "depth": 2}],
                    "pages": [{"crawl_id": "c", "url": url, "content": f"page {batch}"}],
                    "fetches": [{"crawl_id": "c", "url": url, "attempt": 1, "fetch_status": 200}],
                }
            )
            group.flush()
            metrics.write({"crawl_id": "c", "node_id": node, "metric": "pages", "value": batch})


def contents(crawl_dir: Path) -> dict[str, list[tuple]]:
    con = connect(crawl_dir)
    return {name: con.execute(query).fetchall() for name, query in QUERIES.items()}


def files(crawl_dir: Path) -> dict[str, list[str]]:
    return {name: sorted(p.name for p in (crawl_dir / name).iterdir()) for name in QUERIES}


def test_every_dataset_becomes_one_file_with_the_same_rows(tmp_path):
    crawl_output(tmp_path)
    before = contents(tmp_path)

    result = compact(tmp_path)

    assert (result.files_before, result.files_after) == (32, 4)
    assert all(names == ["compacted-000001.parquet"] for names in files(tmp_path).values())
    assert contents(tmp_path) == before
    checkpoint = load_checkpoint(tmp_path, [])
    assert len(checkpoint.done) == 8 and len(checkpoint.pending) == 8
    # A resumed crawl adds batch files; the next compaction merges them with the first.
    crawl_output(tmp_path, batches=1)
    assert compact(tmp_path).files_after == 4
    assert len(contents(tmp_path)["fetches"]) == 10


def test_a_crawl_with_one_batch_is_left_as_it_is(tmp_path):
    crawl_output(tmp_path, batches=1)
    for name in COMMITTED_DATASETS:  # node-1's batch never happened
        (tmp_path / name / "node-1-000001.parquet").unlink(missing_ok=True)  # extracts: none
    (tmp_path / "metrics" / "node-1-000001.parquet").unlink()
    before = files(tmp_path)
    assert compact(tmp_path).files_after == 4
    assert files(tmp_path) == before


def test_a_crash_before_the_journal_leaves_the_batches_and_no_merged_file(tmp_path, monkeypatch):
    crawl_output(tmp_path)
    before = contents(tmp_path)

    def crash(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(compaction.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        compact(tmp_path)
    monkeypatch.undo()

    assert not (tmp_path / JOURNAL).exists()
    load_checkpoint(tmp_path, [])  # what a resumed crawl does first
    assert contents(tmp_path) == before
    # The next compaction starts over: its leftovers go, nothing is counted twice.
    compact(tmp_path)
    assert all(names == ["compacted-000001.parquet"] for names in files(tmp_path).values())
    assert contents(tmp_path) == before


@pytest.mark.parametrize("renames_done", [0, 1, 3])
def test_a_crash_after_the_journal_is_finished_by_the_next_resume(
    tmp_path, monkeypatch, renames_done
):
    crawl_output(tmp_path)
    before = contents(tmp_path)
    real_replace = compaction.os.replace
    calls = []

    def crash_after_some(source, destination):
        # The first call writes the journal; merged files are renamed after it.
        if len(calls) == 1 + renames_done:
            raise KeyboardInterrupt
        calls.append(destination)
        real_replace(source, destination)

    monkeypatch.setattr(compaction.os, "replace", crash_after_some)
    with pytest.raises(KeyboardInterrupt):
        compact(tmp_path)
    monkeypatch.undo()
    assert (tmp_path / JOURNAL).exists()

    checkpoint = load_checkpoint(tmp_path, [])

    assert not (tmp_path / JOURNAL).exists()
    assert all(names == ["compacted-000001.parquet"] for names in files(tmp_path).values())
    assert contents(tmp_path) == before
    assert len(checkpoint.done) == 8 and len(checkpoint.pending) == 8


def test_a_metrics_batch_a_killed_node_was_writing_is_dropped(tmp_path):
    # Metrics have no commit rule, so nothing else removes the temporary file of a batch a
    # node was writing when it was killed (seen after a killed and resumed crawl).
    crawl_output(tmp_path)
    (tmp_path / "metrics" / "node-1-000005.parquet.tmp").write_bytes(b"PAR1 half")
    compact(tmp_path)
    assert files(tmp_path)["metrics"] == ["compacted-000001.parquet"]


def test_a_half_written_batch_is_dropped_not_merged(tmp_path):
    crawl_output(tmp_path)
    # node-1 died while closing: its last batch has its page but no fetches file.
    (tmp_path / "fetches" / "node-1-000004.parquet").unlink()
    compact(tmp_path)
    urls = {url for (url, _) in contents(tmp_path)["pages"]}
    assert f"http://{HOST}/node-1/3" not in urls and len(urls) == 7
    assert load_checkpoint(tmp_path, []).pending.keys() == {
        f"http://{HOST}/{node}/{batch}/next"
        for node in ("node-0", "node-1")
        for batch in range(4)
        if (node, batch) != ("node-1", 3)
    }


def test_a_journal_whose_merged_file_never_reached_the_disk_is_dropped(tmp_path, monkeypatch):
    crawl_output(tmp_path)
    before = contents(tmp_path)
    monkeypatch.setattr(compaction, "finish_compaction", lambda crawl_dir: None)
    compact(tmp_path)  # stops once the journal is written
    monkeypatch.undo()
    (tmp_path / "pages" / "compacted-000001.parquet.tmp").unlink()  # lost to a power cut

    load_checkpoint(tmp_path, [])

    assert not (tmp_path / JOURNAL).exists()
    assert not list(tmp_path.rglob("*.tmp"))
    assert contents(tmp_path) == before


# ---- WARC files ---------------------------------------------------------------------------------


def archived_output(crawl_dir: Path, batches: int = 3) -> None:
    """What two nodes leave with WARC on: `batches` committed batches each, a fetch apiece."""
    for node in ("node-0", "node-1"):
        group = CommitGroupWriter(
            {name: (crawl_dir / name, DATASETS[name]) for name in COMMITTED_DATASETS},
            prefix=node,
            batch_rows=1_000,
            interval_s=3600,
            archive=WarcBatchWriter(crawl_dir),
        )
        for batch in range(batches):
            url = f"http://{HOST}/{node}/{batch}"
            body = f"<p>page {batch} of {node}</p>".encode() * 40
            date = datetime(2025, 1, 1, tzinfo=UTC)
            group.record(
                {"fetches": [{"crawl_id": "c", "url": url, "fetch_status": 200, "attempt": 1}]},
                Exchange(url, date, 200, {}, {"Content-Type": "text/html"}, body),
            )
            group.flush()


def warc_files(crawl_dir: Path) -> dict[str, list[str]]:
    """Each WARC file's record types, as warcio reads them; fastwarc (checking digests) agrees."""
    types = {}
    for path in sorted((crawl_dir / WARC_DIR).iterdir()):
        with open(path, "rb") as file:
            types[path.name] = [record.rec_type for record in ArchiveIterator(file)]
        fast = FastArchiveIterator(str(path), verify_digests=True)
        assert sum(1 for _ in fast) == len(types[path.name])
    return types


def test_each_nodes_warc_files_become_one_named_by_crawl_and_node(tmp_path):
    crawl_dir = tmp_path / "night-1"
    archived_output(crawl_dir)
    records = records_of_rows(crawl_dir)
    assert len(records) == 6
    assert len(warc_files(crawl_dir)) == 6  # a file per batch while the crawl runs

    result = compact(crawl_dir)

    assert (result.warc_files_before, result.warc_files_after) == (6, 2)
    exchanges = ["request", "response"] * 3
    assert warc_files(crawl_dir) == {
        "night-1-node-0-00001.warc.gz": ["warcinfo", *exchanges],
        "night-1-node-1-00001.warc.gz": ["warcinfo", *exchanges],
    }
    assert records_of_rows(crawl_dir) == records  # the same records, at their new places
    # Another compaction finds nothing to merge, and keeps the files.
    assert compact(crawl_dir).warc_files_before == 0
    assert records_of_rows(crawl_dir) == records


def test_warc_files_roll_at_the_size_set(tmp_path):
    crawl_dir = tmp_path / "night-1"
    archived_output(crawl_dir)
    records = records_of_rows(crawl_dir)
    assert len(records) == 6
    # The batch files are about the same size: two fit, not three.
    largest = max(path.stat().st_size for path in (crawl_dir / WARC_DIR).iterdir())

    compact(crawl_dir, warc_file_bytes=2 * largest)

    exchange = ["request", "response"]
    assert warc_files(crawl_dir) == {
        f"night-1-{node}-{n:05d}.warc.gz": ["warcinfo", *exchange * (2 if n == 1 else 1)]
        for node in ("node-0", "node-1")
        for n in (1, 2)
    }
    assert records_of_rows(crawl_dir) == records
    # A resumed crawl's batches go into files numbered after these, the kept ones untouched.
    kept = {path: path.read_bytes() for path in (crawl_dir / WARC_DIR).iterdir()}
    archived_output(crawl_dir, batches=1)
    compact(crawl_dir)
    assert all(path.read_bytes() == data for path, data in kept.items())
    names = set(warc_files(crawl_dir)) - {path.name for path in kept}
    assert names == {"night-1-node-0-00003.warc.gz", "night-1-node-1-00003.warc.gz"}


def test_a_journal_whose_merged_warc_file_never_reached_the_disk_is_dropped(tmp_path, monkeypatch):
    crawl_dir = tmp_path / "night-1"
    archived_output(crawl_dir)
    records = records_of_rows(crawl_dir)
    assert len(records) == 6
    batches = warc_files(crawl_dir)
    monkeypatch.setattr(compaction, "finish_compaction", lambda crawl_dir: None)
    compact(crawl_dir)  # stops once the journal is written
    monkeypatch.undo()
    (crawl_dir / WARC_DIR / "night-1-node-1-00001.warc.gz.tmp").unlink()  # lost to a power cut

    load_checkpoint(crawl_dir, [])

    assert not (crawl_dir / JOURNAL).exists()
    assert not list(crawl_dir.rglob("*.tmp"))
    assert warc_files(crawl_dir) == batches
    assert records_of_rows(crawl_dir) == records


def test_a_merge_the_disk_cannot_hold_removes_its_copies(tmp_path, monkeypatch):
    crawl_dir = tmp_path / "night-1"
    archived_output(crawl_dir)
    batches = warc_files(crawl_dir)
    records = records_of_rows(crawl_dir)
    assert len(records) == 6
    real_write = os.write

    def full_for_merged_warc(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("-00002.warc.gz.tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_for_merged_warc)
    with pytest.raises(OSError):
        compact(crawl_dir, warc_file_bytes=1)  # a file per batch: the second fails
    monkeypatch.undo()

    assert not list(crawl_dir.rglob("*.tmp"))  # the first merged file's room given back
    assert warc_files(crawl_dir) == batches
    assert records_of_rows(crawl_dir) == records
