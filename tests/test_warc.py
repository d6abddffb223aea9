"""WARC output: every file the node writes reads with warcio, every fetches row finds its
record by warc_filename/offset, and the files stay consistent through crashes and compaction."""

from __future__ import annotations

import io

import pytest
from fastwarc.warc import ArchiveIterator as FastArchiveIterator
from warc_checks import records_of_rows
from warcio.archiveiterator import ArchiveIterator

from crawler.config import CrawlConfig
from crawlflow.cli import main
from runtime.backends import crawl_in_process
from runtime.fleet import single_node
from storage.compaction import compact
from storage.views import connect
from storage.warc import WARC_DIR, plan_warc_files
from storage.writer import discard_uncommitted
from websim import WebSim, WebSpec

pytestmark = pytest.mark.integration  # websim


@pytest.fixture(scope="module")
def crawled(tmp_path_factory):
    """A small web crawled by one node with small batches (several WARC files)."""
    out = tmp_path_factory.mktemp("warc")
    spec = WebSpec(hosts=3, pages=60, seed=3, rate_limit_rps=None, latency_ms=(0.5, 1.0))
    with WebSim(spec) as sim:
        hosts = sim.servers
        config = CrawlConfig(
            scheduling={"max_connections": 3},
            output={"write_batch_rows": 15},
            rate_control={"mode": "fixed", "fixed": {"delay_s": 0.0}},
        )
        crawl_in_process(single_node("c1", str(out), config, hosts), [sim.hub_url])
        yield out / "c1", sim


def records_of(path):
    with open(path, "rb") as file:
        return [
            (r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.content_stream().read())
            for r in ArchiveIterator(file)
        ]


def rows_find_their_records(crawl_dir) -> int:
    """Asserts that every fetches row with a WARC location finds its record there; returns how
    many rows have one."""
    return len(records_of_rows(crawl_dir))


def read_by_both(path) -> int:
    """warcio and fastwarc (checking digests) read `path` to its end; how many records."""
    with open(path, "rb") as file:
        by_warcio = sum(1 for _ in ArchiveIterator(file))
    by_fastwarc = sum(1 for _ in FastArchiveIterator(str(path), verify_digests=True))
    assert by_warcio == by_fastwarc > 0
    return by_warcio


def test_warcio_reads_every_file_and_every_row_finds_its_record(crawled):
    crawl_dir, _ = crawled
    files = sorted((crawl_dir / WARC_DIR).glob("*"))
    assert len(files) > 1 and all(f.name.endswith(".warc.gz") for f in files)
    answered = 0
    for path in files:
        kinds = [kind for kind, _, _ in records_of(path)]
        assert kinds[0] == "warcinfo"
        assert kinds.count("request") == kinds.count("response") > 0
        answered += kinds.count("response")
    rows = (
        connect(crawl_dir)
        .execute(
            "SELECT url, fetch_status, content_digest, warc_filename, warc_record_offset, "
            "warc_record_length, content_length FROM fetches"
        )
        .fetchall()
    )
    with_answer = [row for row in rows if row[1] is not None]
    assert answered == len(with_answer) and len(with_answer) > 50
    for url, status, digest, filename, offset, length, size in with_answer:
        with open(crawl_dir / filename, "rb") as file:
            file.seek(offset)
            member = file.read(length)
        record = next(iter(ArchiveIterator(io.BytesIO(member))))
        assert record.rec_type == "response"
        assert record.rec_headers.get_header("WARC-Target-URI") == url
        assert record.rec_headers.get_header("WARC-Payload-Digest") == f"sha1:{digest}"
        assert record.http_headers.get_statuscode() == str(status)
        assert len(record.content_stream().read()) == size
    # Rows without an HTTP answer (robots-disallowed URLs) have no record.
    assert all(row[3] is None for row in rows if row[1] is None)


def test_warc_get_prints_a_pages_record(crawled, capsysbinary):
    crawl_dir, sim = crawled
    url = sim.host_urls[0]
    with pytest.raises(SystemExit) as exit_info:
        main(["warc-get", str(crawl_dir.parent), url])
    assert exit_info.value.code == 0
    printed = capsysbinary.readouterr().out
    assert printed.startswith(b"WARC/1.1\r\n")
    assert f"WARC-Target-URI: {url}".encode() in printed
    assert b"HTTP/1.1 200 OK" in printed and b"</html>" in printed
    with pytest.raises(SystemExit) as exit_info:
        main(["warc-get", str(crawl_dir), url + "nowhere"])
    assert exit_info.value.code == 2
    assert b"no WARC record" in capsysbinary.readouterr().err


def test_uncommitted_warc_files_go_and_compaction_merges_the_rest(crawled, tmp_path):
    import shutil

    crawl_dir = tmp_path / "c1"
    shutil.copytree(crawled[0], crawl_dir)
    warc = crawl_dir / WARC_DIR
    # A crash: one batch's WARC written but not its fetches file; another still temporary.
    last = sorted((crawl_dir / "fetches").glob("*.parquet"))[-1]
    last.unlink()
    (warc / "node-0-000099.warc.gz.tmp").write_bytes(b"half")
    removed = discard_uncommitted(crawl_dir)
    assert warc / (last.stem + ".warc.gz") in removed
    assert not (warc / "node-0-000099.warc.gz.tmp").exists()
    batches = sorted(warc.iterdir())
    records = records_of_rows(crawl_dir)
    read = sum(read_by_both(path) for path in batches)
    result = compact(crawl_dir)
    assert [p.name for p in (crawl_dir / "fetches").glob("*.parquet")] == [
        "compacted-000001.parquet"
    ]
    assert (result.warc_files_before, result.warc_files_after) == (len(batches), 1)
    # One file named by crawl and node, holding every record (one warcinfo for all) ...
    assert [p.name for p in warc.iterdir()] == ["c1-node-0-00001.warc.gz"]
    assert read_by_both(warc / "c1-node-0-00001.warc.gz") == read - len(batches) + 1
    # ... and every row points at the same record as before, at its new place.
    assert records_of_rows(crawl_dir) == records
    # A resume after compaction keeps the WARC file the compacted rows point into.
    discard_uncommitted(crawl_dir)
    assert [p.name for p in warc.iterdir()] == ["c1-node-0-00001.warc.gz"]


def test_compaction_rolls_warc_files_at_the_size_set(crawled, tmp_path):
    import shutil

    crawl_dir = tmp_path / "c1"
    shutil.copytree(crawled[0], crawl_dir)
    warc = crawl_dir / WARC_DIR
    sizes = [path.stat().st_size for path in sorted(warc.iterdir())]
    records = records_of_rows(crawl_dir)
    limit = 2 * max(sizes)  # two batches or more to a file, a few files
    # The batch files each merged file takes, as planned (by the batch files' sizes).
    planned = [
        [path.stat().st_size for path in paths]
        for _, paths in sorted(plan_warc_files(warc, "c1", limit).items())
    ]
    compact(crawl_dir, warc_file_bytes=limit)
    merged = sorted(warc.iterdir())
    assert len(merged) > 1
    assert [p.name for p in merged] == [
        f"c1-node-0-{n:05d}.warc.gz" for n in range(1, len(merged) + 1)
    ]
    assert len(planned) == len(merged)
    # Rolled only when the next batch would not fit; each file at most the limit (it holds
    # its batches' records less their own warcinfo records, and one warcinfo of its own).
    for group, following in zip(planned, planned[1:], strict=False):
        assert sum(group) <= limit < sum(group) + following[0]
    assert all(path.stat().st_size <= limit for path in merged)
    assert all(read_by_both(path) for path in merged)
    assert records_of_rows(crawl_dir) == records


def test_a_run_after_compaction_numbers_its_warc_files_after_the_kept_ones(crawled, tmp_path):
    import shutil

    crawl_dir = tmp_path / "c1"
    shutil.copytree(crawled[0], crawl_dir)
    compact(crawl_dir)  # the batches, WARC files included, merged
    kept = {p.name: p.read_bytes() for p in (crawl_dir / WARC_DIR).iterdir()}
    assert list(kept) == ["c1-node-0-00001.warc.gz"]
    sim = crawled[1]
    hosts = sim.servers
    config = CrawlConfig(
        scheduling={"max_connections": 3},
        output={"write_batch_rows": 15},
        rate_control={"mode": "fixed", "fixed": {"delay_s": 0}},
    )
    crawl_in_process(single_node("c1", str(tmp_path), config, hosts), [sim.hub_url])
    rows = rows_find_their_records(crawl_dir)
    assert rows > 0
    compact(crawl_dir)  # the new run's batches go into a second file
    names = sorted(p.name for p in (crawl_dir / WARC_DIR).iterdir())
    assert names == ["c1-node-0-00001.warc.gz", "c1-node-0-00002.warc.gz"]
    for name, data in kept.items():  # not one WARC file of the first run overwritten
        assert (crawl_dir / WARC_DIR / name).read_bytes() == data
    assert rows_find_their_records(crawl_dir) == rows > len(kept)
    assert all(read_by_both(crawl_dir / WARC_DIR / name) for name in names)


def test_warc_get_on_a_damaged_warc_file_is_a_one_line_error(crawled, tmp_path, capsysbinary):
    import shutil

    crawl_dir = tmp_path / "c1"
    shutil.copytree(crawled[0], crawl_dir)
    for damage in (b"", b"not gzip at all" * 100_000):  # truncated, then overwritten
        for path in (crawl_dir / WARC_DIR).iterdir():
            path.write_bytes(damage)
        with pytest.raises(SystemExit) as exit_info:
            main(["warc-get", str(crawl_dir), crawled[1].host_urls[0]])
        assert exit_info.value.code == 2
        err = capsysbinary.readouterr().err.decode()
        assert err.startswith("crawlflow: error: the WARC record at ") and err.count("\n") == 1
