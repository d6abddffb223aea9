"""Buffered, crash-safe Parquet writers.

Rows are buffered and written as whole files: a file is written under a temporary name and
renamed into place, so a reader (or a resumed crawl) never sees a half-written file, whatever
moment the process dies at.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


class ParquetDatasetWriter:
    """Appends rows to `directory` as numbered `<prefix>-<n>.parquet` files (zstd)."""

    def __init__(
        self,
        directory: Path,
        schema: pa.Schema,
        prefix: str,
        batch_rows: int,
        interval_s: float,
    ) -> None:
        self.directory = directory
        self.schema = schema
        self.prefix = prefix
        self.batch_rows = batch_rows
        self.interval_s = interval_s
        self.rows_written = 0
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        directory.mkdir(parents=True, exist_ok=True)
        self._sequence = self._next_free_sequence()

    def _next_free_sequence(self) -> int:
        # A resumed node continues numbering after the files its predecessor left.
        taken = [
            int(p.stem.rsplit("-", 1)[1])
            for p in self.directory.glob(f"{self.prefix}-*.parquet")
            if p.stem.rsplit("-", 1)[1].isdigit()
        ]
        return max(taken, default=0) + 1

    def write(self, row: dict[str, Any]) -> None:
        with self._lock:
            self._rows.append(row)
            due = (
                len(self._rows) >= self.batch_rows
                or time.monotonic() - self._last_flush >= self.interval_s
            )
            if due:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        if not self._rows:
            return
        table = pa.Table.from_pylist(self._rows, schema=self.schema)
        final = self.directory / f"{self.prefix}-{self._sequence:06d}.parquet"
        temporary = final.with_suffix(".parquet.tmp")
        pq.write_table(table, temporary, compression="zstd")
        os.replace(temporary, final)
        self._sequence += 1
        self.rows_written += len(self._rows)
        self._rows = []
