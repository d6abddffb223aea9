"""DuckDB over the crawl output: views `fetches`, `pages`, `metrics`, `discovered`,
`allocation` and `extracts`, each with every documented column (a column newer than a file
reads as NULL in its rows). `view_statements` gives them as SQL text, for the DuckDB CLI or a
notebook (`crawlflow views DIR`).

`DIR` may be one crawl's directory (`OUT/<crawl_id>`) or the output root holding many crawls;
over a root the views span every crawl, so nights can be compared by `crawl_id`.

`pages` answers "what did each URL look like in crawl N" for incremental crawls too: a 304 in
crawl N stores no page, so the view adds, for each 304 row of `fetches`, the stored page of
the same URL and content digest (from an earlier night), under crawl N's id and fetch time.
Over one crawl directory whose `crawl.json` names an earlier crawl, the sibling crawls' pages
are read for that.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from storage.files import parquet_files
from storage.manifest import read_manifest
from storage.schema import DATASETS, PAGES


class OutputNotFound(FileNotFoundError):
    """The directory holds no crawl output."""


class OutputUnreadable(ValueError):
    """A file of the crawl output cannot be read (truncated, not Parquet); the message names
    it."""


def _dataset_files(directory: Path, dataset: str) -> list[str]:
    """One crawl's files of `dataset`, or else those of every crawl under an output root."""
    return parquet_files(directory, f"{dataset}/*.parquet") or parquet_files(
        directory, f"*/{dataset}/*.parquet"
    )


def _read(files: list[str]) -> str:
    """SQL reading Parquet `files` (DuckDB arguments, `storage.files.literal`): named one by
    one, since DuckDB's globs cannot match every directory name (a backslash)."""
    return f"read_parquet([{', '.join(_string(file) for file in files)}], union_by_name = true)"


def _string(text: str) -> str:
    """`text` as an SQL string literal (a quote in a path is just a character of it)."""
    return "'" + text.replace("'", "''") + "'"


def _name(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _duckdb_types(con: duckdb.DuckDBPyConnection, schema: pa.Schema) -> dict[str, str]:
    """DuckDB's name of each column type of `schema`."""
    con.register("_types", pa.Table.from_pylist([], schema=schema))
    types = {name: kind for name, kind, *_ in con.execute("DESCRIBE _types").fetchall()}
    con.unregister("_types")
    return types


def _select_list(con: duckdb.DuckDBPyConnection, present: list[str], schema: pa.Schema) -> str:
    """Every documented column of `schema`, whatever the files hold: one a file written before
    it existed lacks reads as NULL; `url_server` of such a file is its `url_host_name`, which
    held host:port until issue 31. Columns the files have beyond the schema follow."""
    types = _duckdb_types(con, schema)
    columns = []
    for name in schema.names:
        if name == "url_server" and "url_host_name" in present:
            expression = (
                "coalesce(url_server, url_host_name)" if name in present else "url_host_name"
            )
        elif name in present:
            expression = _name(name)
        else:
            expression = f"CAST(NULL AS {types[name]})"
        columns.append(f"{expression} AS {_name(name)}")
    columns += [_name(name) for name in present if name not in schema.names]
    return ", ".join(columns)


def view_statements(directory: str | Path) -> list[str]:
    """The CREATE VIEW statements of the views over `directory`, as SQL text for DuckDB (the
    CLI, a notebook): one view per dataset, and `pages` with the pages 304s confirm. Raises
    OutputNotFound when there is no output, OutputUnreadable when a file cannot be read."""
    directory = Path(directory)
    if not directory.is_dir():
        raise OutputNotFound(f"no such output directory: {directory}")
    con = duckdb.connect()
    statements: list[str] = []
    found = False
    for name, schema in DATASETS.items():
        view = "_pages_stored" if name == "pages" else name
        files = _dataset_files(directory, name)
        if not files:
            # An empty view with the documented columns, so queries still bind.
            source, present = "(SELECT 1) WHERE false", []
        else:
            found = True
            source = _read(files)
            present = _columns(con, source, f"{name} under {directory}")
        statements.append(
            f"CREATE OR REPLACE VIEW {view} AS SELECT {_select_list(con, present, schema)} "
            f"FROM {source};"
        )
    if not found:
        raise OutputNotFound(f"no crawl output (fetches/pages Parquet) under {directory}")
    statements += _pages_statements(con, directory)
    return statements


def _columns(con: duckdb.DuckDBPyConnection, source: str, what: str) -> list[str]:
    """The columns of `source`; OutputUnreadable, naming the file, if one cannot be read."""
    try:
        return [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()]
    except duckdb.Error as exc:
        raise OutputUnreadable(f"cannot read {what}: {str(exc).splitlines()[0]}") from None


def connect(directory: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per dataset."""
    con = duckdb.connect()
    for statement in view_statements(directory):
        con.execute(statement)
    return con


def _pages_statements(con: duckdb.DuckDBPyConnection, directory: Path) -> list[str]:
    """`pages`: the stored pages, plus the earlier page each 304 confirms."""
    statements = []
    archive = "_pages_stored"
    manifest = read_manifest(directory)
    if manifest is not None and manifest.since is not None:
        earlier = parquet_files(directory.parent, "*/pages/*.parquet")
        if earlier:
            archive = "_pages_archive"
            source = _read(earlier)
            present = _columns(con, source, f"the pages of the crawls beside {directory}")
            statements.append(
                f"CREATE OR REPLACE VIEW {archive} AS SELECT "
                f"{_select_list(con, present, PAGES)} FROM {source};"
            )
    columns = ", ".join(PAGES.names)
    taken_from_fetch = {
        "crawl_id",
        "url",
        "url_host_name",
        "url_server",
        "fetch_time",
        "depth",
        "node_id",
    }
    carried = ", ".join(
        f"f.{name}" if name in taken_from_fetch else f"p.{name}" for name in PAGES.names
    )
    statements.append(
        f"CREATE OR REPLACE VIEW pages AS SELECT {columns} FROM _pages_stored "
        f"UNION ALL SELECT {carried} FROM fetches f JOIN {archive} p "
        "ON p.url = f.url AND p.content_digest = f.content_digest "
        "WHERE f.fetch_status = 304 AND f.error IS NULL "
        "QUALIFY row_number() OVER (PARTITION BY f.crawl_id, f.url, f.fetch_time "
        "ORDER BY p.fetch_time DESC) = 1;"
    )
    return statements
