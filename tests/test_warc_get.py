"""`warc-get` reads only its own crawl's WARC files, and a record only up to a bound: the row
that points to it is data, and an output directory may come from anywhere."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import pytest

import storage.warc
from storage.schema import FETCHES
from storage.views import connect
from storage.warc import WARC_DIR, RecordNotFound, locate_record, read_record
from storage.writer import ParquetDatasetWriter

URL = "http://127.0.0.1:9/"


def crawl_pointing_at(out: Path, filename: str, length: int = 10) -> Path:
    crawl = out / "night-1"
    writer = ParquetDatasetWriter(crawl / "fetches", FETCHES, "node-0", 1, 3600)
    row = {"crawl_id": "night-1", "url": URL, "url_host_name": "127.0.0.1:9",
           "fetch_time": datetime.now(UTC), "fetch_status": 200, "node_id": "node-0",
           "depth": 0, "attempt": 1, "warc_filename": filename, "warc_record_offset": 0,
           "warc_record_length": length}  # fmt: skip
    writer.write(row)
    writer.flush()
    return crawl


@pytest.mark.parametrize(
    "filename", ["../outside.warc.gz", "warc/../../outside.warc.gz", "/etc/passwd", "crawl.json"]
)
def test_a_row_pointing_outside_its_crawls_warc_directory_is_refused(tmp_path, filename):
    (tmp_path / "outside.warc.gz").write_bytes(gzip.compress(b"WARC/1.1\r\n"))
    crawl = crawl_pointing_at(tmp_path, filename)
    for directory in (crawl, tmp_path):  # a crawl directory, or the output root
        with pytest.raises(RecordNotFound, match="is not its own"):
            locate_record(connect(directory), directory, URL)


def test_a_record_that_decompresses_past_the_bound_is_refused(tmp_path, monkeypatch):
    crawl = crawl_pointing_at(tmp_path, f"{WARC_DIR}/node-0-000001.warc.gz")
    member = gzip.compress(bytes(1 << 20))  # a megabyte of zeros in about a kilobyte
    (crawl / WARC_DIR).mkdir()
    (crawl / WARC_DIR / "node-0-000001.warc.gz").write_bytes(member)
    monkeypatch.setattr(storage.warc, "MAX_RECORD_BYTES", 1 << 16)
    with pytest.raises(RecordNotFound, match="decompresses to more than"):
        read_record(crawl / WARC_DIR / "node-0-000001.warc.gz", 0, len(member))
    monkeypatch.setattr(storage.warc, "MAX_RECORD_BYTES", 1 << 21)
    assert read_record(crawl / WARC_DIR / "node-0-000001.warc.gz", 0, len(member)) == bytes(1 << 20)
