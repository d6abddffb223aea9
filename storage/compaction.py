"""Compaction: a finished crawl's batch files merged into one file per dataset.

Nodes write a file per batch (`storage.writer`), so a long crawl leaves thousands of small
files, and every query opens them all. Once a crawl is over, each dataset's files are merged
into one `compacted-<n>.parquet` (zstd, row groups of about `ROW_GROUP_BYTES`).

Crash and failure safety, with the commit rule of `storage.writer` in mind (a batch counts
only once its `fetches` file exists and all its files are whole): half-written batches, and
empty or short files in any dataset, are removed by that rule first, as a resumed crawl
would. Every merged file is then written whole under a temporary name and synced, its
directory synced, and a journal naming the merged file and the files it replaces is written,
synced and renamed into place, its directory synced. That is the decision: before it, a
failure or a crash leaves only temporary files (which the next compaction or resume deletes)
and the batch files untouched; from then on the compaction is finished by whoever finds the
journal (`finish_compaction`, which the next compaction and every resume call first): rename
the merged files into place, each directory synced, `fetches` last, then delete the replaced
files, sync their directories, and only then delete the journal, so that a power cut can
never bring back a replaced file beside the merged one without the journal that removes it.
Every step of finishing may fail or be cut short and be done again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import pyarrow as pa
import pyarrow.parquet as pq

from storage.durable import SyncedFile, is_whole_parquet, sync, write_synced
from storage.schema import COMMITTED_DATASETS, DATASETS
from storage.writer import batch_file_name, discard_uncommitted, next_free_sequence

JOURNAL = "compaction.json"
PREFIX = "compacted"
ROW_GROUP_BYTES = 64 << 20  # in memory, before compression: bounds the memory a merge takes
# The commit dataset goes last, as when the batches were written.
_ORDER = [name for name in DATASETS if name not in COMMITTED_DATASETS] + list(COMMITTED_DATASETS)


@dataclass
class Compaction:
    files_before: int
    files_after: int


def compact(crawl_dir: Path) -> Compaction:
    """Merge every dataset of a finished crawl that has more than one file."""
    finish_compaction(crawl_dir)
    # The commit rule first: a half-written batch (a node that died while closing) merged with
    # committed ones would count as committed.
    discard_uncommitted(crawl_dir)
    directories = [crawl_dir / name for name in _ORDER if (crawl_dir / name).is_dir()]
    (crawl_dir / f"{JOURNAL}.tmp").unlink(missing_ok=True)  # a journal never decided
    for directory in directories:
        # Temporary files nothing will finish: merged files of a compaction that never wrote
        # its journal, and a batch a killed node was writing in a dataset without the commit
        # rule (metrics: seen left over from a crawl killed mid-write and resumed).
        for stale in directory.glob("*.tmp"):
            stale.unlink()
        # And in those datasets, a file a power cut or damage left short holds nothing to keep.
        if directory.name not in COMMITTED_DATASETS:
            for path in directory.glob("*.parquet"):
                if not is_whole_parquet(path):
                    path.unlink()
    inputs = {d.name: sorted(d.glob("*.parquet")) for d in directories}
    merged = {name: files for name, files in inputs.items() if len(files) > 1}
    before = sum(len(files) for files in inputs.values())
    if not merged:
        return Compaction(before, before)
    if merged.keys() & set(COMMITTED_DATASETS):
        # Batches commit by name across these datasets: they are merged together, or a
        # `discovered` file left behind would lose its `fetches` partner.
        merged.update({n: fs for n, fs in inputs.items() if n in COMMITTED_DATASETS and fs})
    target = batch_file_name(PREFIX, next_free_sequence(directories, PREFIX))
    for name, files in merged.items():
        _merge(files, DATASETS[name], crawl_dir / name / f"{target}.tmp")
    for name in merged:  # the merged files' names, on the disk before a journal names them
        sync(crawl_dir / name)
    journal = {"target": target, "replaces": {n: [f.name for f in fs] for n, fs in merged.items()}}
    temporary = crawl_dir / f"{JOURNAL}.tmp"
    write_synced(temporary, [json.dumps(journal).encode()])
    os.replace(temporary, crawl_dir / JOURNAL)
    sync(crawl_dir)
    finish_compaction(crawl_dir)
    after = sum(1 if name in merged else len(files) for name, files in inputs.items())
    return Compaction(before, after)


def finish_compaction(crawl_dir: Path) -> None:
    """Complete a compaction whose journal was written (a no-op without one)."""
    path = crawl_dir / JOURNAL
    if not path.exists():
        return
    try:
        journal = json.loads(path.read_bytes())
        target: str = journal["target"]
        replaces: dict[str, list[str]] = journal["replaces"]
    except (ValueError, KeyError, TypeError):
        # The journal is synced before it is renamed into place, so an unreadable one was
        # damaged, not decided: keep the batch files; the merged ones are stale temporaries.
        path.unlink()
        return
    order = [name for name in _ORDER if name in replaces]
    if not all(
        (crawl_dir / name / f"{target}.tmp").exists() or (crawl_dir / name / target).exists()
        for name in order
    ):
        # A merged file did not reach the disk (the synced writes make this the storage's
        # fault): keep the batch files, drop the compaction. Nothing replaced was deleted yet
        # (that starts once every merged file is in place), so the merged files go, renamed
        # or not.
        for name in order:
            (crawl_dir / name / f"{target}.tmp").unlink(missing_ok=True)
            (crawl_dir / name / target).unlink(missing_ok=True)
            sync(crawl_dir / name)
        path.unlink()
        sync(crawl_dir)
        return
    for name in order:
        directory = crawl_dir / name
        merged = directory / f"{target}.tmp"
        if merged.exists():  # else a crash came after this rename
            os.replace(merged, directory / target)
        sync(directory)  # before the next rename: `fetches`, the commit, comes last
    for name in order:
        directory = crawl_dir / name
        for file_name in replaces[name]:
            (directory / file_name).unlink(missing_ok=True)
        sync(directory)
    path.unlink()
    sync(crawl_dir)


def _merge(files: list[Path], schema: pa.Schema, destination: Path) -> None:
    """Stream `files` into one Parquet file, in row groups of about ROW_GROUP_BYTES, synced."""
    pending: list[pa.RecordBatch] = []
    size = 0
    with (
        SyncedFile(destination) as sink,
        # A file-like sink (it has what ParquetWriter calls), not an IO subclass.
        pq.ParquetWriter(cast(IO[bytes], sink), schema, compression="zstd") as writer,
    ):
        for file in files:
            for batch in pq.ParquetFile(file).iter_batches():
                pending.append(_conformed(batch, schema))
                size += batch.nbytes
                if size >= ROW_GROUP_BYTES:
                    writer.write_table(pa.Table.from_batches(pending, schema=schema))
                    pending, size = [], 0
        if pending:
            writer.write_table(pa.Table.from_batches(pending, schema=schema))


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with the columns of `schema`: a file written before a column was added (a crawl
    resumed across an upgrade) gets it as nulls."""
    columns = [
        batch.column(field.name).cast(field.type)
        if field.name in batch.schema.names
        else pa.nulls(batch.num_rows, field.type)
        for field in schema
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
