from __future__ import annotations

from datetime import UTC, datetime

import pytest

from storage.schema import FETCHES, PAGES
from storage.views import OutputNotFound, connect
from storage.writer import ParquetDatasetWriter


def fetch_row(url: str, status: int | None = 200) -> dict:
    return {
        "crawl_id": "c1",
        "url": url,
        "url_host_name": "h",
        "fetch_time": datetime.now(UTC),
        "fetch_status": status,
        "error": None if status else "connection_error: refused",
        "node_id": "node-0",
        "depth": 0,
        "attempt": 1,
    }


def test_writer_batches_rows_into_whole_files_and_views_read_them(tmp_path):
    writer = ParquetDatasetWriter(tmp_path / "c1" / "fetches", FETCHES, "node-0", 3, 3600)
    for i in range(7):
        writer.write(fetch_row(f"http://h/{i}", None if i == 6 else 200))
    files = sorted((tmp_path / "c1" / "fetches").glob("*.parquet"))
    assert [f.name for f in files] == ["node-0-000001.parquet", "node-0-000002.parquet"]
    writer.flush()
    assert not list((tmp_path / "c1" / "fetches").glob("*.tmp"))
    con = connect(tmp_path / "c1")
    assert con.execute("SELECT count(*), count(fetch_status) FROM fetches").fetchall() == [(7, 6)]
    # The same data through the output root: views span every crawl.
    assert connect(tmp_path).execute("SELECT count(*) FROM fetches").fetchall() == [(7,)]
    # Pages were never written: the view exists, empty, with the documented columns.
    columns = [d[0] for d in con.execute("SELECT * FROM pages").description]
    assert columns == PAGES.names


def test_writer_continues_numbering_after_existing_files(tmp_path):
    first = ParquetDatasetWriter(tmp_path / "fetches", FETCHES, "node-0", 1, 3600)
    first.write(fetch_row("http://h/1"))
    second = ParquetDatasetWriter(tmp_path / "fetches", FETCHES, "node-0", 1, 3600)
    second.write(fetch_row("http://h/2"))
    names = sorted(p.name for p in (tmp_path / "fetches").glob("*.parquet"))
    assert names == ["node-0-000001.parquet", "node-0-000002.parquet"]


def test_connect_refuses_directory_without_output(tmp_path):
    with pytest.raises(OutputNotFound):
        connect(tmp_path)
    with pytest.raises(OutputNotFound):
        connect(tmp_path / "missing")
