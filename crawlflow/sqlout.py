"""The result of `crawlflow sql`, streamed in batches: never held whole in memory.

`table` is for reading: each batch of rows as a table when its columns fit the terminal, else
one record per block, column per line (wide results such as `SELECT * FROM fetches`), long
values cut. `csv`, `json` (JSON Lines) and `parquet` give every value whole.
"""

from __future__ import annotations

import csv
import datetime
import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import duckdb

FORMATS = ("table", "csv", "json", "parquet")
BATCH_ROWS = 1000
# What a table cell shows of a long value (content, text): the other formats give it whole.
CELL_CHARS = 200
# Narrower than this per column, a table is no longer readable: records are printed instead.
MIN_COLUMN_WIDTH = 12


def write_result(
    con: duckdb.DuckDBPyConnection, query: str, output_format: str, output: Path | None
) -> int:
    """Run `query` and stream its result to `output` (stdout if None); returns the row count.
    Raises duckdb.Error for a query DuckDB refuses."""
    if output_format == "parquet":
        assert output is not None
        return _parquet(con, query, output)
    cursor = con.execute(query)
    columns = [d[0] for d in cursor.description] if cursor.description else []
    if not columns:
        return 0
    with _opened(output) as stream:
        if output_format == "csv":
            return _csv(cursor, columns, stream)
        if output_format == "json":
            return _json(cursor, columns, stream)
        return _table(cursor, columns, stream, output is None)


@contextmanager
def _opened(output: Path | None) -> Iterator[IO[str]]:
    if output is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    with open(output, "w", encoding="utf-8", newline="") as stream:
        yield stream


def _batches(cursor: duckdb.DuckDBPyConnection) -> Iterator[list[tuple[Any, ...]]]:
    while rows := cursor.fetchmany(BATCH_ROWS):
        yield rows


def _csv(cursor: duckdb.DuckDBPyConnection, columns: list[str], stream: IO[str]) -> int:
    writer = csv.writer(stream)
    writer.writerow(columns)
    count = 0
    for rows in _batches(cursor):
        writer.writerows([["" if v is None else _plain(v) for v in row] for row in rows])
        count += len(rows)
    return count


def _json(cursor: duckdb.DuckDBPyConnection, columns: list[str], stream: IO[str]) -> int:
    count = 0
    for rows in _batches(cursor):
        for row in rows:
            record = dict(zip(columns, row, strict=True))
            stream.write(json.dumps(record, default=_json_value, ensure_ascii=False) + "\n")
        count += len(rows)
    return count


def _parquet(con: duckdb.DuckDBPyConnection, query: str, output: Path) -> int:
    import pyarrow.parquet as pq

    relation: duckdb.DuckDBPyRelation | None = con.sql(query)  # None: no result (DDL)
    if relation is None:
        return 0
    reader = relation.to_arrow_reader(BATCH_ROWS * 100)
    count = 0
    with pq.ParquetWriter(output, reader.schema, compression="zstd") as writer:
        for batch in reader:
            writer.write_batch(batch)
            count += batch.num_rows
    return count


def _table(
    cursor: duckdb.DuckDBPyConnection, columns: list[str], stream: IO[str], terminal: bool
) -> int:
    from rich.console import Console
    from rich.table import Table

    width = shutil.get_terminal_size((120, 40)).columns if terminal else 200
    console = Console(file=stream, width=width, soft_wrap=False, highlight=False)
    records = len(columns) * MIN_COLUMN_WIDTH > width
    count = 0
    for rows in _batches(cursor):
        if records:
            label = max(len(column) for column in columns)
            for offset, row in enumerate(rows, start=count + 1):
                stream.write(f"-[ row {offset} ]" + "-" * max(0, min(width, 60) - 12) + "\n")
                for column, value in zip(columns, row, strict=True):
                    stream.write(f"{column.ljust(label)} | {_cell(value)}\n")
        else:
            table = Table()
            for name in columns:
                table.add_column(name, overflow="fold")
            for row in rows:
                table.add_row(*(_cell(value) for value in row))
            console.print(table)
        count += len(rows)
    return count


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    text = " ".join(_plain(value).split())
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict):
        return json.dumps(value, default=_json_value, ensure_ascii=False)
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
