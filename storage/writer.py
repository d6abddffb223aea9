"""Buffered, crash-safe Parquet (and WARC) writers: the commit protocol.

A node's output is written in batches: one batch number `<node>-<n>` names a file in each of
`discovered`, `pages` and `fetches`, and the batch's WARC file `warc/<node>-<n>.warc.gz`.
The protocol holds under a kill, a power cut and a failed write (ENOSPC, EIO, a failed
rename or fsync) at any point:

1. A batch is committed when its `fetches` file exists and every Parquet file of the batch
   is whole (its footer reads). Resume, takeover and compaction first apply this rule
   (`discard_uncommitted`): every file of a batch that is not committed is deleted, the
   `fetches` file first, so that a crash while deleting never leaves a batch committed
   without its pages. An empty or short file (what a power cut leaves) is garbage, not an
   error.
2. A file under its final name is whole and durable: written under `<name>.tmp`, fsynced,
   renamed (`storage.durable`). Nothing on the disk is ever appended to or overwritten: a
   failed write can only leave a temporary file, never damage a committed one.
3. A batch's files are published in order: the WARC file, `discovered`, `pages`, then their
   directories are fsynced, then the `fetches` file is renamed into place (the commit) and
   its directory fsynced. So when a commit is visible, even after a power cut, the files it
   depends on are on the disk.
4. A batch number is tried once. The sequence advances before the first file of a flush is
   created; if any step before the commit fails, that attempt's files are removed as far as
   the disk lets us (what stays is garbage by rule 1), and ALL the batch's rows, with their
   WARC records, stay buffered and go out under the next number. So a failed flush never
   renames a file over a committed one, and the writer keeps no state a failure could leave
   broken (no file is held open between flushes). Once the commit rename is done, the rows
   are committed whatever fails next (the directory's sync): they are never written again.
5. Rows that belong together (a fetch, its page, the links found on it, its WARC records)
   are given in one `record` call and commit in one batch. WARC records are built in memory
   when recorded (at most WARC_BATCH_BYTES of them: then the batch is due) and the batch's
   WARC file is written whole at its commit, so a `fetches` row points only into the WARC
   file of its own batch, at offsets fixed when that file is written, and every WARC file
   reads to its end.
6. A WARC file is kept exactly when a committed `fetches` row points into it
   (`storage.warc.discard_uncommitted_warc`).
7. A failed flush inside `record` is logged and tried again once another batch's worth of
   rows is buffered (or `interval_s` later), the rows kept; after FLUSH_ATTEMPTS failures in
   a row `record` refuses rows (OutputFailed, nothing buffered), so a disk that takes nothing
   stops the node with about FLUSH_ATTEMPTS batches in memory, not its whole crawl. `flush`
   raises what the disk said. What a stopped node had not committed is fetched again by the
   resume or the takeover, as after a kill.

Compaction (`storage.compaction`) and the manifest (`storage.manifest`) follow rule 2, and
compaction decides with a synced journal; see there. The cost is at most 4 file and 4
directory fsyncs per batch, and a batch commits every `interval_s` or `batch_rows` rows,
never per record. tests/test_faults.py fails every call that changes the disk, in turn, and
checks these rules after each.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import pyarrow as pa
import pyarrow.parquet as pq

from storage.durable import is_whole_parquet, remove_quietly, sync, write_synced
from storage.schema import COMMITTED_DATASETS
from storage.warc import ArchivedExchange, Exchange, WarcBatchWriter, discard_uncommitted_warc

FileName = str
Row = Mapping[str, Any]  # column name -> value
# Failed flushes in a row after which `record` refuses rows.
FLUSH_ATTEMPTS = 3
# WARC records buffered (compressed) that make a batch due: bounds the memory of a node that
# fetches large bodies, whose records wait in memory for their batch's commit.
WARC_BATCH_BYTES = 64 << 20

logger = logging.getLogger(__name__)


class Publisher(Protocol):
    """Where committed batches go besides the local disk: object storage
    (`storage.bucket.BatchPublisher`)."""

    def last_sequence(self, directories: list[Path], prefix: str) -> int:
        """The highest batch number of `prefix` already published in these directories."""

    def publish(self, files: list[Path]) -> None:
        """Publish a committed batch's files, in commit order (the commit file last)."""


class OutputFailed(RuntimeError):
    """The output refuses rows: the last FLUSH_ATTEMPTS flushes failed."""


def publish(chunks: Iterable[bytes | memoryview], final: Path, written: list[Path]) -> None:
    """`chunks` as the file `final`: written under a temporary name, synced, renamed (the
    rename's durability is the caller's: sync the directory). `written` gets every path this
    creates, for the caller to remove if its batch fails."""
    temporary = final.with_name(final.name + ".tmp")
    written.append(temporary)
    write_synced(temporary, chunks)
    os.replace(temporary, final)
    written.append(final)


def parquet_bytes(rows: Sequence[Row], schema: pa.Schema) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    # Read as mappings (the rows are dicts, typed ones among them): no copy is needed.
    table = pa.Table.from_pylist(cast(list[dict[str, Any]], rows), schema=schema)
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def batch_file_name(prefix: str, sequence: int) -> FileName:
    return f"{prefix}-{sequence:06d}.parquet"


def next_free_sequence(directories: list[Path], prefix: str) -> int:
    """The batch number after the last one a predecessor with this prefix left, in any of
    `directories`: Parquet batches and WARC files alike, temporary ones included, so that no
    file a batch leaves is ever written over. (A compaction merges the batches' files,
    WARC files included, into files of other names; a run after it numbers from 1 again.)"""
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
        publisher: Publisher | None = None,
    ) -> None:
        self._group = CommitGroupWriter(
            {directory.name: (directory, schema)},
            prefix,
            batch_rows,
            interval_s,
            publisher=publisher,
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
    """Several datasets written in step under one batch number; the LAST dataset's file
    commits the batch (the protocol above). `archive`: WARC output, written with each batch."""

    def __init__(
        self,
        datasets: dict[str, tuple[Path, pa.Schema]],
        prefix: str,
        batch_rows: int,
        interval_s: float,
        archive: WarcBatchWriter | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        self.datasets = datasets
        self.publisher = publisher
        self.commit_dataset = list(datasets)[-1]
        self.archive = archive
        self.prefix = prefix
        self.batch_rows = batch_rows
        self.interval_s = interval_s
        self.rows_written = 0
        self._rows: dict[str, list[Row]] = {name: [] for name in datasets}
        # The WARC records of buffered exchanges, each with the commit row that points to it.
        self._archived: list[tuple[dict[str, Any], ArchivedExchange]] = []
        self._archived_bytes = 0
        self._failures = 0  # flushes failed in a row
        self._error = ""
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        directories = [d for d, _ in datasets.values()]
        if archive is not None:
            directories.append(archive.directory)
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
        # The directories' own entries: a synced file in a directory a power cut takes back
        # is lost all the same.
        for parent in dict.fromkeys(directory.parent for directory in directories):
            sync(parent)
        self._sequence = next_free_sequence(directories, prefix)
        if publisher is not None:
            # Past every number published too: a staging directory on another machine, or a
            # fresh one, must never write an object name twice.
            self._sequence = max(self._sequence, publisher.last_sequence(directories, prefix) + 1)

    def record(self, rows: Mapping[str, Sequence[Row]], exchange: Exchange | None = None) -> None:
        """Buffer rows that belong together (they commit in one batch), and commit the batch
        when it is due. `exchange`: archived to WARC with them; the last row given of the
        commit dataset gets the record's location.

        Returns once the rows are buffered: a failed commit keeps them for the next try (and
        is logged). Raises OutputFailed, buffering nothing, after FLUSH_ATTEMPTS failed
        flushes in a row."""
        archived = None
        if exchange is not None and self.archive is not None:
            archived = self.archive.archive(exchange)  # outside the lock: it compresses
        with self._lock:
            if self._failures >= FLUSH_ATTEMPTS:
                raise OutputFailed(
                    f"the output of {self.prefix} refuses rows: its last {self._failures} "
                    f"flushes failed, the last with {self._error}"
                )
            for name, dataset_rows in rows.items():
                self._rows[name].extend(dataset_rows)
            if archived is not None:
                # A copy: the commit row gets its WARC record's location at the commit.
                located = dict(rows[self.commit_dataset][-1])
                self._rows[self.commit_dataset][-1] = located
                self._archived.append((located, archived))
                self._archived_bytes += len(archived.records)
            if self._due():
                try:
                    self._flush_locked()
                except Exception:
                    logger.warning(
                        "%s: a batch failed to commit; its rows stay buffered (try %d of %d)",
                        self.prefix,
                        self._failures,
                        FLUSH_ATTEMPTS,
                        exc_info=True,
                    )

    def flush(self) -> None:
        """Commit every buffered row now, and publish every committed batch. Raises what the
        disk (or the object store) said if it cannot; the rows stay buffered (the batches
        queued for publishing) for the next try."""
        with self._lock:
            self._flush_locked()
            if self.publisher is not None:
                self.publisher.publish([])  # what earlier commits could not publish

    def buffered(self, dataset: str) -> list[Row]:
        """The rows of `dataset` recorded but not committed yet."""
        with self._lock:
            return list(self._rows[dataset])

    def _due(self) -> bool:
        """After each failed flush in a row, the next try waits for one more batch's worth."""
        if time.monotonic() - self._last_flush >= self.interval_s:
            return True
        batches = self._failures + 1
        return (
            max(len(buffered) for buffered in self._rows.values()) >= batches * self.batch_rows
            or self._archived_bytes >= batches * WARC_BATCH_BYTES
        )

    def _flush_locked(self) -> None:
        self._last_flush = time.monotonic()
        if not self._rows[self.commit_dataset]:
            return  # rows of the other datasets wait for a row that can commit them
        batch = batch_file_name(self.prefix, self._sequence)
        self._sequence += 1  # never tried again: files of it may be on the disk from now on
        try:
            self._commit(batch)
        except Exception as exc:
            self._failures += 1
            self._error = f"{type(exc).__name__}: {exc}"
            raise
        self._failures = 0

    def _commit(self, batch: FileName) -> None:
        written: list[Path] = []  # this attempt's files: removed if it fails
        synced: list[Path] = []  # directories to sync before the commit
        try:
            if self._archived:
                assert self.archive is not None
                chunks, locations = self.archive.contents(batch, [a for _, a in self._archived])
                for (row, _), location in zip(self._archived, locations, strict=True):
                    row.update(location)
                path = self.archive.path(batch)
                publish(chunks, path, written)
                synced.append(path.parent)
            for name, (directory, schema) in self.datasets.items():
                rows = self._rows[name]
                if rows and name != self.commit_dataset:
                    publish([memoryview(parquet_bytes(rows, schema))], directory / batch, written)
                    synced.append(directory)
            for directory in synced:
                sync(directory)
            directory, schema = self.datasets[self.commit_dataset]
            commit = parquet_bytes(self._rows[self.commit_dataset], schema)
            publish([memoryview(commit)], directory / batch, written)
        except Exception:
            remove_quietly(written)
            raise
        # Committed: whatever fails from here on, these rows must not be written again.
        published = [path for path in written if not path.name.endswith(".tmp")]
        self.rows_written += sum(len(rows) for rows in self._rows.values())
        self._rows = {name: [] for name in self.datasets}
        self._archived, self._archived_bytes = [], 0
        try:
            sync(directory)
        except OSError:
            # Not a failed flush: the batch is committed (a power cut now could take the
            # rename back, and resume would fetch the batch again, which loses nothing).
            logger.warning("%s: batch %s committed, its directory not synced", self.prefix, batch)
        if self.publisher is not None:
            try:
                self.publisher.publish(published)
            except Exception:
                # Committed here, not yet where it is published: tried again with the next
                # batch (and the crawl's end publishes the whole staging directory). A kill
                # before then leaves it uncommitted there, and the resume fetches it again.
                logger.warning(
                    "%s: batch %s committed, not yet published", self.prefix, batch, exc_info=True
                )


def discard_uncommitted(crawl_dir: Path, prefix: str = "") -> list[Path]:
    """Apply the commit rule to what a killed or failed run left in `crawl_dir`: delete
    temporary files and every file of a batch that is not committed (no `fetches` file, or a
    file of it that is not whole), then the WARC files no committed row points into.
    `prefix`: only the files of one node (a takeover: the other nodes are alive, and the
    files of the batches they are committing are not garbage)."""
    removed: list[Path] = []
    for name in COMMITTED_DATASETS:
        for temporary in sorted((crawl_dir / name).glob(f"{prefix}*.tmp")):
            temporary.unlink()
            removed.append(temporary)
    commit = crawl_dir / COMMITTED_DATASETS[-1]
    for paths, committed in _batches(crawl_dir, prefix):
        if committed:
            continue
        # The commit file first: a crash while deleting must leave the batch uncommitted,
        # never committed without its pages.
        for path in sorted(paths, key=lambda path: path.parent != commit):
            path.unlink()
            removed.append(path)
    return removed + discard_uncommitted_warc(crawl_dir, prefix)


def committed_batches(crawl_dir: Path) -> list[list[Path]]:
    """The Parquet files of each committed batch of `crawl_dir` (every node's), by the commit
    rule; what a reader may take as the crawl's output while nodes are still writing."""
    return [paths for paths, committed in _batches(crawl_dir, "") if committed]


def _batches(crawl_dir: Path, prefix: str) -> list[tuple[list[Path], bool]]:
    """Each batch's Parquet files, sorted by name, and whether it is committed: its `fetches`
    file exists and every file of it is whole."""
    commit = crawl_dir / COMMITTED_DATASETS[-1]
    batches: dict[str, list[Path]] = {}
    for name in COMMITTED_DATASETS:
        for path in (crawl_dir / name).glob(f"{prefix}*.parquet"):
            batches.setdefault(path.name, []).append(path)
    return [
        (paths, commit / name in paths and all(is_whole_parquet(path) for path in paths))
        for name, paths in sorted(batches.items())
    ]
