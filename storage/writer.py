"""Buffered, crash-safe Parquet writers.

Rows are buffered and written as whole files: each file is written under a temporary name and
renamed into place, so a reader (or a resumed crawl) never sees a half-written file, whatever
moment the process dies at.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from storage.warc import Exchange, WarcBatchWriter, discard_uncommitted_warc

FileName = str
Row = Mapping[str, Any]  # column name -> value


def write_atomically(table: pa.Table, final: Path) -> None:
    temporary = final.with_suffix(".parquet.tmp")
    pq.write_table(table, temporary, compression="zstd")
    os.replace(temporary, final)


def batch_file_name(prefix: str, sequence: int) -> FileName:
    return f"{prefix}-{sequence:06d}.parquet"


def next_free_sequence(directories: list[Path], prefix: str) -> int:
    """The batch number after the last one a predecessor with this prefix left, in any of
    `directories`: Parquet batches and WARC files alike. A compaction removes the batches'
    Parquet files but never their WARC files, whose records committed rows point into, so a
    resumed crawl must not number a batch as one of those."""
    taken = []
    for directory in directories:
        for path in directory.glob(f"{prefix}-*"):
            number = path.name[len(prefix) + 1 :].split(".", 1)[0]
            if number.isdigit():
                taken.append(int(number))
    return max(taken, default=0) + 1


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
        self._group = CommitGroupWriter(
            {directory.name: (directory, schema)}, prefix, batch_rows, interval_s
        )
        self._name = directory.name

    @property
    def rows_written(self) -> int:
        return self._group.rows_written

    def write(self, row: Row) -> None:
        self._group.record({self._name: [row]})

    def flush(self) -> None:
        self._group.flush()


class CommitGroupWriter:
    """Several datasets written in step: one batch number for all, files renamed into place in
    the given order, so the LAST dataset's file commits the batch.

    A crash between renames leaves earlier datasets' files of a batch without the last one;
    `discard_uncommitted` removes them before a resumed crawl reads its checkpoint. Rows that
    belong together (a fetch, its page, the links found on it) are given in one `record` call
    and so always land in the same batch.
    """

    def __init__(
        self,
        datasets: dict[str, tuple[Path, pa.Schema]],
        prefix: str,
        batch_rows: int,
        interval_s: float,
        archive: WarcBatchWriter | None = None,
    ) -> None:
        """`archive`: WARC output; a batch's WARC file is renamed into place before its
        Parquet files (storage/warc.py)."""
        self.datasets = datasets
        self.archive = archive
        self.prefix = prefix
        self.batch_rows = batch_rows
        self.interval_s = interval_s
        self.rows_written = 0
        self._rows: dict[str, list[Row]] = {name: [] for name in datasets}
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        for directory, _ in datasets.values():
            directory.mkdir(parents=True, exist_ok=True)
        directories = [d for d, _ in datasets.values()]
        if archive is not None:
            directories.append(archive.directory)
        self._sequence = next_free_sequence(directories, prefix)

    def record(self, rows: Mapping[str, Sequence[Row]], exchange: Exchange | None = None) -> None:
        """`exchange`: archived to WARC in this batch; the last `fetches` row given is written
        with the record's location."""
        with self._lock:
            if exchange is not None and self.archive is not None:
                batch = batch_file_name(self.prefix, self._sequence)
                *earlier, last = rows["fetches"]
                located = {**last, **self.archive.append(batch, exchange)}
                rows = {**rows, "fetches": [*earlier, located]}
            for name, dataset_rows in rows.items():
                self._rows[name].extend(dataset_rows)
            due = (
                max(len(buffered) for buffered in self._rows.values()) >= self.batch_rows
                or time.monotonic() - self._last_flush >= self.interval_s
            )
            if due:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def buffered(self, dataset: str) -> list[Row]:
        """The rows of `dataset` recorded but not written yet."""
        with self._lock:
            return list(self._rows[dataset])

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        if not any(self._rows.values()):
            return
        name = batch_file_name(self.prefix, self._sequence)
        if self.archive is not None:
            self.archive.commit(name)
        for dataset, (directory, schema) in self.datasets.items():
            rows = self._rows[dataset]
            if rows:
                write_atomically(pa.Table.from_pylist(rows, schema=schema), directory / name)
                self.rows_written += len(rows)
                self._rows[dataset] = []
        self._sequence += 1


def discard_uncommitted(datasets: list[Path], commit_dataset: Path) -> list[Path]:
    """Delete temporary files, and batch files whose commit file (same name in
    `commit_dataset`) was never written: the crash hit that batch half-way; and the WARC
    files of such batches."""
    removed = []
    for directory in [*datasets, commit_dataset]:
        for temporary in directory.glob("*.tmp"):
            temporary.unlink()
            removed.append(temporary)
    for directory in datasets:
        for path in directory.glob("*.parquet"):
            if not (commit_dataset / path.name).exists():
                path.unlink()
                removed.append(path)
    return removed + discard_uncommitted_warc(commit_dataset.parent)
