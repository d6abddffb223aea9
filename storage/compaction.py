"""Compaction: a finished crawl's batch files merged into one file per dataset.

Nodes write a file per batch (`storage.writer`), so a long crawl leaves thousands of small
files, and every query opens them all. Once a crawl is over, each dataset's files are merged
into one `compacted-<n>.parquet` (zstd, row groups of about `ROW_GROUP_BYTES`).

Crash safety, with the commit rule of `storage.writer` in mind (a batch of `discovered` and
`pages` counts only once the `fetches` file of its name exists): half-written batches are
removed by that rule first, as a resumed crawl would. Every merged file is then written whole
under a temporary name and synced to the disk, and a journal naming the merged file and the
files it replaces is written atomically. That is the decision: from then on the compaction is
finished by whoever finds the journal (`finish_compaction`, which the next compaction and
every resume call first): rename the merged files into place, `fetches` last, delete the
replaced files, delete the journal. A crash before the journal leaves only temporary files,
which resume deletes, and the batch files untouched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

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
    *partial, commit = (crawl_dir / name for name in COMMITTED_DATASETS)
    # The commit rule first: a half-written batch (a node that died while closing) merged with
    # committed ones would count as committed.
    discard_uncommitted(partial, commit)
    directories = [crawl_dir / name for name in _ORDER if (crawl_dir / name).is_dir()]
    # Temporary files nothing will finish: merged files of a compaction that never wrote its
    # journal, and a batch a killed node was writing in a dataset without the commit rule
    # (metrics: seen left over from a crawl killed mid-write and resumed).
    for directory in directories:
        for stale in directory.glob("*.tmp"):
            stale.unlink()
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
    journal = {"target": target, "replaces": {n: [f.name for f in fs] for n, fs in merged.items()}}
    temporary = crawl_dir / f"{JOURNAL}.tmp"
    temporary.write_text(json.dumps(journal))
    _sync(temporary)
    os.replace(temporary, crawl_dir / JOURNAL)
    _sync(crawl_dir)
    finish_compaction(crawl_dir)
    after = sum(1 if name in merged else len(files) for name, files in inputs.items())
    return Compaction(before, after)


def finish_compaction(crawl_dir: Path) -> None:
    """Complete a compaction whose journal was written (a no-op without one)."""
    path = crawl_dir / JOURNAL
    if not path.exists():
        return
    journal = json.loads(path.read_text())
    target = journal["target"]
    replaces: dict[str, list[str]] = journal["replaces"]
    if not all(
        (crawl_dir / name / f"{target}.tmp").exists() or (crawl_dir / name / target).exists()
        for name in replaces
    ):
        # A merged file did not reach the disk (the synced writes make this the storage's
        # fault): keep the batch files, drop the compaction.
        for name in replaces:
            (crawl_dir / name / f"{target}.tmp").unlink(missing_ok=True)
        path.unlink()
        return
    for name in _ORDER:
        replaced = replaces.get(name)
        if replaced is None:
            continue
        directory = crawl_dir / name
        merged = directory / f"{target}.tmp"
        if merged.exists():  # else a crash came after this rename
            os.replace(merged, directory / target)
            _sync(directory)
        for file_name in replaced:
            (directory / file_name).unlink(missing_ok=True)
    path.unlink()


def _merge(files: list[Path], schema: pa.Schema, destination: Path) -> None:
    """Stream `files` into one Parquet file, in row groups of about ROW_GROUP_BYTES."""
    pending: list[pa.RecordBatch] = []
    size = 0
    with pq.ParquetWriter(destination, schema, compression="zstd") as writer:
        for file in files:
            for batch in pq.ParquetFile(file).iter_batches():
                pending.append(batch)
                size += batch.nbytes
                if size >= ROW_GROUP_BYTES:
                    writer.write_table(pa.Table.from_batches(pending).cast(schema))
                    pending, size = [], 0
        if pending:
            writer.write_table(pa.Table.from_batches(pending).cast(schema))
    _sync(destination)


def _sync(path: Path) -> None:
    """Flush a file, or a directory's entries, to the disk: the journal must never name a
    merged file that a power loss could take back."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
