"""DuckDB over the crawl output: views `fetches`, `pages` and `metrics`.

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


def _create_view(con: duckdb.DuckDBPyConnection, view: str, files: list[str], what: str) -> None:
    """A view over Parquet `files`; OutputUnreadable, naming the file, if one cannot be read."""
    try:
        con.read_parquet(files, union_by_name=True).create_view(view)
    except duckdb.Error as exc:
        raise OutputUnreadable(f"cannot read {what}: {str(exc).splitlines()[0]}") from None


def connect(directory: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per dataset."""
    directory = Path(directory)
    if not directory.is_dir():
        raise OutputNotFound(f"no such output directory: {directory}")
    con = duckdb.connect()
    found = False
    for name, schema in DATASETS.items():
        view = "_pages_stored" if name == "pages" else name
        files = _dataset_files(directory, name)
        if files:
            found = True
            _create_view(con, view, files, f"{name} under {directory}")
        else:
            # An empty view with the documented columns, so queries still bind.
            con.register(f"_empty_{name}", pa.Table.from_pylist([], schema=schema))
            con.execute(f"CREATE VIEW {view} AS SELECT * FROM _empty_{name}")
    if not found:
        raise OutputNotFound(f"no crawl output (fetches/pages Parquet) under {directory}")
    _create_pages_view(con, directory)
    return con


def _create_pages_view(con: duckdb.DuckDBPyConnection, directory: Path) -> None:
    """`pages`: the stored pages, plus the earlier page each 304 confirms."""
    archive = "_pages_stored"
    manifest = read_manifest(directory)
    if manifest is not None and manifest.since is not None:
        earlier = parquet_files(directory.parent, "*/pages/*.parquet")
        if earlier:
            archive = "_pages_archive"
            _create_view(con, archive, earlier, f"the pages of the crawls beside {directory}")
    columns = ", ".join(PAGES.names)
    taken_from_fetch = {"crawl_id", "url", "url_host_name", "fetch_time", "depth", "node_id"}
    carried = ", ".join(
        f"f.{name}" if name in taken_from_fetch else f"p.{name}" for name in PAGES.names
    )
    con.execute(
        f"CREATE VIEW pages AS SELECT {columns} FROM _pages_stored "
        f"UNION ALL SELECT {carried} FROM fetches f JOIN {archive} p "
        "ON p.url = f.url AND p.content_digest = f.content_digest "
        "WHERE f.fetch_status = 304 AND f.error IS NULL "
        "QUALIFY row_number() OVER (PARTITION BY f.crawl_id, f.url, f.fetch_time "
        "ORDER BY p.fetch_time DESC) = 1"
    )
