"""Compaction: a finished crawl's batch files merged into one file per dataset, and its WARC
files into files of about `[output] warc_file_bytes`, like Common Crawl's.

Nodes write a file per batch (`storage.writer`), so a long crawl leaves thousands of small
files, and every query opens them all. Once a crawl is over, each dataset's files are merged
into one `compacted-<n>.parquet` (zstd, row groups of about `ROW_GROUP_BYTES`), and each
node's batch WARC files, in batch order, into `warc/<crawl_id>-<node>-<n>.warc.gz`
(`storage.warc.merge_warc_files`: the records copied byte for byte); the merged `fetches`
rows point into those at the records' new offsets.

Crash and failure safety, with the commit rule of `storage.writer` in mind (a batch counts
only once its `fetches` file exists and all its files are whole): half-written batches, and
empty or short files in any dataset, are removed by that rule first, as a resumed crawl
would. Every merged file (WARC ones included) is then written whole under a temporary name
and synced, its directory synced, and a journal naming the merged files and the files they
replace is written, synced and renamed into place, its directory synced. That is the
decision: before it, a failure or a crash leaves only temporary files (which the next
compaction or resume deletes) and the batch files untouched; from then on the compaction is
finished by whoever finds the journal (`finish_compaction`, which the next compaction and
every resume call first): rename the merged files into place, each directory synced, the
WARC files first (the rows that point into them must never be there without them) and
`fetches` last, then delete the replaced files, sync their directories, and only then delete
the journal, so that a power cut can never bring back a replaced file beside the merged one
without the journal that removes it. Every step of finishing may fail or be cut short and be
done again. Until it is done, every committed row points into a batch WARC file that is there;
after, into a merged one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import pyarrow as pa
import pyarrow.parquet as pq

from storage.durable import SyncedFile, is_whole_parquet, remove_quietly, sync, write_synced
from storage.schema import COMMITTED_DATASETS, DATASETS
from storage.warc import (
    WARC_DIR,
    WARC_FILE_BYTES,
    merge_warc_files,
    plan_warc_files,
    relocated,
)
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
    warc_files_before: int = 0  # the batch WARC files merged
    warc_files_after: int = 0  # the WARC files they became


def compact(crawl_dir: Path, warc_file_bytes: int = WARC_FILE_BYTES) -> Compaction:
    """Merge every dataset of a finished crawl that has more than one file, and its batch WARC
    files into files of about `warc_file_bytes`. The crawl's id is its directory's name."""
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
    warc = crawl_dir / WARC_DIR
    warc_plan = plan_warc_files(warc, crawl_dir.name, warc_file_bytes)
    if not merged and not warc_plan:
        return Compaction(before, before)
    if merged.keys() & set(COMMITTED_DATASETS) or warc_plan:
        # Batches commit by name across these datasets: they are merged together, or a
        # `discovered` file left behind would lose its `fetches` partner. And the `fetches`
        # rows are rewritten whenever the WARC files they point into are merged.
        merged.update({n: fs for n, fs in inputs.items() if n in COMMITTED_DATASETS and fs})
    target = batch_file_name(PREFIX, next_free_sequence(directories, PREFIX))
    moved: dict[str, tuple[str, int]] = {}  # batch WARC file -> merged file, offset shift
    temporary = crawl_dir / f"{JOURNAL}.tmp"
    written = [temporary]
    try:
        for name, batch_files in warc_plan.items():
            written.append(warc / f"{name}.tmp")
            moved.update(merge_warc_files(batch_files, written[-1], name))
        for name, files in merged.items():
            written.append(crawl_dir / name / f"{target}.tmp")
            relocations = moved if name == COMMITTED_DATASETS[-1] else {}
            _merge(files, DATASETS[name], written[-1], relocations)
        # The merged files' names, on the disk before a journal names them.
        for directory in [crawl_dir / name for name in merged] + ([warc] if warc_plan else []):
            sync(directory)
        journal = {
            "target": target,
            "replaces": {n: [f.name for f in fs] for n, fs in merged.items()},
            "warc": {name: [f.name for f in fs] for name, fs in warc_plan.items()},
        }
        write_synced(temporary, [json.dumps(journal).encode()])
    except Exception:
        # Undecided: the merged files are garbage. Removed now, not at the next run, so that
        # a disk the merge filled (it needs room for a copy of the WARC files) has it back.
        remove_quietly(written)
        raise
    os.replace(temporary, crawl_dir / JOURNAL)
    sync(crawl_dir)
    finish_compaction(crawl_dir)
    after = sum(1 if name in merged else len(files) for name, files in inputs.items())
    warc_before = sum(len(files) for files in warc_plan.values())
    return Compaction(before, after, warc_before, len(warc_plan))


def finish_compaction(crawl_dir: Path) -> None:
    """Complete a compaction whose journal was written (a no-op without one)."""
    path = crawl_dir / JOURNAL
    if not path.exists():
        return
    try:
        journal = json.loads(path.read_bytes())
        target: str = journal["target"]
        replaces: dict[str, list[str]] = journal["replaces"]
        # Merged WARC file -> the batch files it holds (none in a journal of an older version).
        warc_files: dict[str, list[str]] = journal.get("warc", {})
    except (ValueError, KeyError, TypeError, AttributeError):
        # The journal is synced before it is renamed into place, so an unreadable one was
        # damaged, not decided: keep the batch files; the merged ones are stale temporaries.
        path.unlink()
        return
    order = [name for name in _ORDER if name in replaces]
    # Every merged file, as (directory, name): the WARC files first, `fetches` last.
    warc = crawl_dir / WARC_DIR
    outputs = [(warc, name) for name in warc_files] + [(crawl_dir / n, target) for n in order]
    if not all(
        (directory / f"{name}.tmp").exists() or (directory / name).exists()
        for directory, name in outputs
    ):
        # A merged file did not reach the disk (the synced writes make this the storage's
        # fault): keep the batch files, drop the compaction. Nothing replaced was deleted yet
        # (that starts once every merged file is in place), so the merged files go, renamed
        # or not.
        for directory, name in outputs:
            (directory / f"{name}.tmp").unlink(missing_ok=True)
            (directory / name).unlink(missing_ok=True)
        for directory in dict.fromkeys(directory for directory, _ in outputs):
            sync(directory)
        path.unlink()
        sync(crawl_dir)
        return
    for directory, name in outputs:
        merged = directory / f"{name}.tmp"
        if merged.exists():  # else a crash came after this rename
            os.replace(merged, directory / name)
        sync(directory)  # before the next rename: `fetches`, the commit, comes last
    replaced = [(warc, name) for names in warc_files.values() for name in names]
    replaced += [(crawl_dir / n, name) for n in order for name in replaces[n]]
    for directory, name in replaced:
        (directory / name).unlink(missing_ok=True)
    for directory in dict.fromkeys(directory for directory, _ in replaced):
        sync(directory)
    path.unlink()
    sync(crawl_dir)


def _merge(
    files: list[Path],
    schema: pa.Schema,
    destination: Path,
    moved_warc: dict[str, tuple[str, int]],
) -> None:
    """Stream `files` into one Parquet file, in row groups of about ROW_GROUP_BYTES, synced;
    the WARC pointers of rows into the batch WARC files `moved_warc` names point into the
    merged ones."""
    pending: list[pa.RecordBatch] = []
    size = 0
    with (
        SyncedFile(destination) as sink,
        # A file-like sink (it has what ParquetWriter calls), not an IO subclass.
        pq.ParquetWriter(cast(IO[bytes], sink), schema, compression="zstd") as writer,
    ):
        for file in files:
            for batch in pq.ParquetFile(file).iter_batches():
                pending.append(_relocated(_conformed(batch, schema), moved_warc))
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


def _relocated(batch: pa.RecordBatch, moved_warc: dict[str, tuple[str, int]]) -> pa.RecordBatch:
    """`batch` (of `fetches`) with its WARC pointers into the merged WARC files."""
    if not moved_warc:
        return batch
    name_at = batch.schema.get_field_index("warc_filename")
    offset_at = batch.schema.get_field_index("warc_record_offset")
    names, offsets = relocated(
        batch.column(name_at).to_pylist(), batch.column(offset_at).to_pylist(), moved_warc
    )
    columns = list(batch.columns)
    columns[name_at] = pa.array(names, pa.string())
    columns[offset_at] = pa.array(offsets, pa.int64())
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)
