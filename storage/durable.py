"""Files written whole, synced to the disk, then published by a rename.

Every byte the storage layer writes goes through `SyncedFile` (`os.write`), and every file is
made durable (`os.fsync`) before the rename that gives it its final name: after a power cut a
file under its final name is whole, never the empty or short file that an unsynced write and
a synced rename leave behind. A rename is made durable by syncing its directory (`sync`);
whoever publishes several files syncs each directory before the rename that commits them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq


class SyncedFile:
    """A new file, written through `os.write`; closing it without an error syncs it first.

    A file-like sink (pyarrow's ParquetWriter writes to it). An error inside the `with` block
    closes the file unsynced and leaves it for the caller to remove."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._position = 0
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        while view:
            written = os.write(self._fd, view)  # short only when the disk is full: go on
            view = view[written:]
            self._position += written
        return len(data)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        """Nothing is buffered here; durability is `close`'s sync."""

    def close(self) -> None:
        """Sync, then close: the file is whole on the disk when this returns."""
        if self.closed:
            return
        try:
            os.fsync(self._fd)
        finally:
            self._abandon()

    def _abandon(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._fd)

    def __enter__(self) -> SyncedFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            self._abandon()


def write_synced(path: Path, chunks: Iterable[bytes | memoryview]) -> None:
    """A new file at `path` holding `chunks`, synced to the disk."""
    with SyncedFile(path) as file:
        for chunk in chunks:
            file.write(chunk)


def sync(path: Path) -> None:
    """Sync a file, or a directory's entries (the renames and removals made in it)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_quietly(paths: Iterable[Path]) -> None:
    """Remove what a failed write left, as far as the disk lets us: whatever stays is garbage
    the commit rule discards on the next resume or compaction."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def is_whole_parquet(path: Path) -> bool:
    """Whether `path` is a Parquet file whose footer reads: what a finished write leaves. A
    power cut after an unsynced write leaves an empty or short file; nothing this layer
    publishes is one, but a file copied, restored or damaged may be."""
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return False
    return True
