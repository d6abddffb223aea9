"""`crawlflow sql` in every format, streamed, and `crawlflow views` for the DuckDB CLI; views
over output written before a column existed."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawlflow.cli import main
from storage.schema import FETCHES, PAGES
from storage.writer import ParquetDatasetWriter

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


@pytest.fixture
def crawl(tmp_path):
    crawl_dir = tmp_path / "night-1"
    writer = ParquetDatasetWriter(crawl_dir / "fetches", FETCHES, "node-0", 1000, 3600)
    for n in range(2500):  # more rows than one streamed batch
        writer.write(
            {
                "crawl_id": "night-1",
                "url": f"http://a.test:8080/{n}",
                "url_host_name": "a.test",
                "url_server": "a.test:8080",
                "fetch_time": NOW,
                "fetch_status": 200,
                "error": 'a, "quoted"\nvalue' if n == 0 else None,
            }
        )
    writer.flush()
    return crawl_dir


def test_csv_and_json_stream_every_row(crawl, capsys):
    query = "SELECT url, fetch_status, error, fetch_time FROM fetches ORDER BY url"
    code, out, err = run(["sql", str(crawl), query, "--format", "csv"], capsys)
    assert (code, err.strip()) == (0, "2500 rows")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["url", "fetch_status", "error", "fetch_time"]
    assert len(rows) == 2501 and rows[1][2] == 'a, "quoted"\nvalue'
    code, out, _ = run(["sql", str(crawl), query, "--format", "json"], capsys)
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 2500
    assert records[0]["fetch_time"].startswith("2026-01-01T00:00:00")
    assert records[1]["error"] is None


def test_parquet_needs_and_writes_an_output_file(crawl, tmp_path, capsys):
    query = "SELECT url, url_server FROM fetches"
    code, _, err = run(["sql", str(crawl), query, "--format", "parquet"], capsys)
    assert code == 2 and "needs --output" in err
    target = tmp_path / "result.parquet"
    code, _, _ = run(
        ["sql", str(crawl), query, "--format", "parquet", "--output", str(target)], capsys
    )
    assert code == 0 and pq.read_table(target).num_rows == 2500


def test_an_unknown_format_is_a_one_line_error(crawl, capsys):
    code, _, err = run(["sql", str(crawl), "SELECT 1", "--format", "xml"], capsys)
    assert code == 2 and err.startswith("crawlflow: error: --format xml")


def test_a_wide_table_is_printed_as_records(crawl, capsys):
    code, out, _ = run(["sql", str(crawl), "SELECT * FROM fetches LIMIT 2"], capsys)
    assert code == 0
    assert "-[ row 2 ]" in out and "url_surtkey" in out and "…" not in out.splitlines()[1][:20]
    assert "http://a.test:8080/" in out
    code, out, _ = run(["sql", str(crawl), "SELECT url, fetch_status FROM fetches LIMIT 1"], capsys)
    assert "http://a.test:8080/0" in out and "-[ row" not in out


def test_views_are_sql_the_duckdb_cli_runs(crawl, tmp_path, capsys):
    target = tmp_path / "out.csv"
    code, out, _ = run(["views", str(crawl)], capsys)
    assert code == 0
    con = duckdb.connect()
    for statement in out.strip().splitlines():
        con.execute(statement)
    assert con.execute("SELECT count(*) FROM fetches").fetchone() == (2500,)
    assert con.execute("SELECT count(*) FROM extracts").fetchone() == (0,)
    assert not target.exists()


def test_output_written_before_a_column_existed_reads_it_as_null(tmp_path, capsys):
    """A pages file of an older release: no url_server, text, ...; its url_host_name held
    host:port, which url_server shows."""
    old = pa.schema(
        [field for field in PAGES if field.name in ("crawl_id", "url", "url_host_name")]
    )
    (tmp_path / "c" / "pages").mkdir(parents=True)
    (tmp_path / "c" / "fetches").mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            [{"crawl_id": "c", "url": "http://a.test:81/", "url_host_name": "a.test:81"}],
            schema=old,
        ),
        tmp_path / "c" / "pages" / "old.parquet",
    )
    query = "SELECT url_server, text, text_simhash FROM pages"
    code, out, _ = run(["sql", str(tmp_path / "c"), query, "--format", "json"], capsys)
    assert code == 0
    assert json.loads(out) == {"url_server": "a.test:81", "text": None, "text_simhash": None}


def test_compaction_merges_files_written_before_a_column_existed(tmp_path):
    """A crawl resumed across an upgrade: its old batch files lack the new columns."""
    from storage.compaction import compact
    from storage.views import connect

    old = pa.schema(
        [field for field in FETCHES if field.name in ("crawl_id", "url", "url_host_name")]
    )
    (tmp_path / "fetches").mkdir()
    pq.write_table(
        pa.Table.from_pylist(
            [{"crawl_id": "c", "url": "http://a.test:81/", "url_host_name": "a.test:81"}],
            schema=old,
        ),
        tmp_path / "fetches" / "node-0-000001.parquet",
    )
    writer = ParquetDatasetWriter(tmp_path / "fetches", FETCHES, "node-0", 10, 3600)
    writer.write(
        {
            "crawl_id": "c",
            "url": "http://a.test:81/x",
            "url_host_name": "a.test",
            "url_server": "a.test:81",
        }
    )
    writer.flush()
    assert compact(tmp_path).files_after == 1
    rows = connect(tmp_path).execute("SELECT url_server, url_surtkey FROM fetches").fetchall()
    assert rows == [("a.test:81", None), ("a.test:81", None)]
