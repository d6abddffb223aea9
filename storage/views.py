"""DuckDB over the crawl output: views `fetches`, `pages` and `metrics`.

`DIR` may be one crawl's directory (`OUT/<crawl_id>`) or the output root holding many crawls;
over a root the views span every crawl, so nights can be compared by `crawl_id`.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from storage.schema import DATASETS


class OutputNotFound(FileNotFoundError):
    """The directory holds no crawl output."""


def _dataset_pattern(directory: Path, dataset: str) -> str | None:
    for pattern in (f"{dataset}/*.parquet", f"*/{dataset}/*.parquet"):
        if next(directory.glob(pattern), None) is not None:
            return str(directory / pattern)
    return None


def connect(directory: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per dataset."""
    directory = Path(directory)
    if not directory.is_dir():
        raise OutputNotFound(f"no such output directory: {directory}")
    con = duckdb.connect()
    found = False
    for name, schema in DATASETS.items():
        pattern = _dataset_pattern(directory, name)
        if pattern is not None:
            found = True
            con.execute(
                f"CREATE VIEW {name} AS "
                f"SELECT * FROM read_parquet('{pattern}', union_by_name = true)"
            )
        else:
            # An empty view with the documented columns, so queries still bind.
            con.register(f"_empty_{name}", pa.Table.from_pylist([], schema=schema))
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM _empty_{name}")
    if not found:
        raise OutputNotFound(f"no crawl output (fetches/pages Parquet) under {directory}")
    return con
