"""Fault injection into the storage layer: at every call that changes the disk (creating,
writing, syncing, renaming or removing a file; encoding a Parquet batch), a failed write
(ENOSPC after a short write, EIO), a disk that stays full, a kill, or a power cut; after it,
what a crawl does next (carry on, or resume and take over), then the invariants of the commit
protocol (storage/writer.py): every URL has exactly one committed `fetches` row and is fetched
again only if a kill lost its row, every row finds its page, its links and its WARC record,
and warcio and fastwarc read every WARC file to its end.

The points are not listed by hand: `Disk` counts the calls a clean run makes under the crawl
directory, and each test fails every one of them in turn, so a write path added later is
covered without a change here. A power cut keeps what was synced and loses the rest: the data
of every file not synced since it was written (it becomes empty, as ext4 leaves a file renamed
before its data reached the disk), and, in the `power-lost` variant, every entry made or
removed in a directory not synced since (created files, renames, removals), newest first.
"""

from __future__ import annotations

import errno
import gzip
import itertools
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fastwarc.warc import ArchiveIterator as FastArchiveIterator
from warcio.archiveiterator import ArchiveIterator

from crawler.cluster.recovery import OutputRecovery
from crawler.scheduling.server import ServerState
from storage.checkpoint import Checkpoint, load_checkpoint
from storage.compaction import JOURNAL, compact
from storage.durable import is_whole_parquet
from storage.manifest import Manifest, read_manifest, write_manifest
from storage.schema import COMMITTED_DATASETS, DATASETS
from storage.warc import WARC_DIR, Exchange, WarcBatchWriter, read_record
from storage.writer import (
    FLUSH_ATTEMPTS,
    CommitGroupWriter,
    OutputFailed,
    ParquetDatasetWriter,
    discard_uncommitted,
)

# ---- the disk ---------------------------------------------------------------------------------


class Kill(BaseException):
    """The process dies at this call: no handler of the storage layer catches it."""


# What hits the chosen call. An error the code sees (ENOSPC where a file is created or written,
# after a short write; EIO at a sync, rename or removal), after which the node carries on
# (`error`), dies at once (`die`), or finds every later call failing too (`full`, a disk that
# stays full). Or the end of the process (`killed`), seen three ways: as it was left (`kill`);
# after a power cut, which also loses the data not synced (`power-kept`), and the directory
# entries not synced (`power-lost`).
KINDS = ["error", "die", "full", "killed"]
DYING = {"die", "full", "killed"}


@dataclass
class Fault:
    kind: str
    at: int = 0  # the counted call it hits, from 1
    call: str = ""  # or the first call so described (`Disk.calls`)

    def error(self, operation: str) -> BaseException:
        if self.kind == "killed":
            return Kill()
        code = errno.ENOSPC if operation in ("create", "write") else errno.EIO
        return OSError(code, os.strerror(code))


STASHED = itertools.count()  # names of the copies that undo removals, unique in a test run


def real(path: str | os.PathLike[str]) -> str:
    """`path` with its directory resolved (the file itself may not exist yet)."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


class Disk:
    """The calls that change files under `root`, counted; `fault` fails one (`full`: every one
    from it on); what a power cut would lose, kept track of (syncs are simulated: this is the
    disk). The writes into one file count as one call: failing its first write or its last
    leaves the same thing, a temporary file the protocol never publishes."""

    def __init__(self, root: Path, stash: Path) -> None:
        self.root = real(root)
        self.stash = stash
        self.calls: list[str] = []
        self.fault: Fault | None = None
        self.fired = False
        self._real = {name: getattr(os, name) for name in ("open", "write", "replace", "unlink")}
        self._real_write_table = pq.write_table
        self._written: set[int] = set()  # descriptors whose first write was counted
        self._dirty: set[int] = set()  # inodes written and not synced since
        # Entries made in a directory since it was last synced, oldest first:
        # (directory, what, path, what undoing it needs).
        self._unsynced: list[tuple[str, str, str, tuple[str, ...]]] = []

    @contextmanager
    def attached(self, monkeypatch: pytest.MonkeyPatch, fault: Fault | None) -> Iterator[None]:
        self.fault, self.fired = fault, False
        with monkeypatch.context() as patch:
            patch.setattr(os, "open", self._open)
            patch.setattr(os, "write", self._write)
            patch.setattr(os, "fsync", self._fsync)
            patch.setattr(os, "replace", self._replace)
            patch.setattr(os, "unlink", self._unlink)
            patch.setattr(pq, "write_table", self._write_table)
            yield

    def _inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + os.sep)

    def _point(self, operation: str, path: str) -> BaseException | None:
        """Count a call; the error it fails with, if the fault is here."""
        self.calls.append(f"{operation} {os.path.relpath(path, self.root)}")
        fault = self.fault
        if fault is None:
            return None
        if fault.call and self.calls[-1] == fault.call and not self.fired:
            fault.at = len(self.calls)
        if len(self.calls) == fault.at or (fault.kind == "full" and 0 < fault.at < len(self.calls)):
            self.fired = True
            return fault.error(operation)
        return None

    def _open(self, path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        where = real(path)
        creates = bool(flags & os.O_CREAT) and self._inside(where)
        if creates and (error := self._point("create", where)):
            raise error
        fd = self._real["open"](path, flags, mode, **kwargs)
        self._written.discard(fd)
        if creates:
            self._unsynced.append((os.path.dirname(where), "create", where, ()))
        return fd

    def _write(self, fd: int, data: Any) -> int:
        where = os.readlink(f"/proc/self/fd/{fd}")
        if not self._inside(where):
            return self._real["write"](fd, data)
        self._dirty.add(os.fstat(fd).st_ino)
        if fd not in self._written:
            self._written.add(fd)
            if error := self._point("write", where):
                if not (isinstance(error, OSError) and error.errno == errno.EIO):
                    self._real["write"](fd, memoryview(data)[: len(data) // 2])
                raise error
        return self._real["write"](fd, data)

    def _fsync(self, fd: int) -> None:
        where = os.readlink(f"/proc/self/fd/{fd}")
        if not self._inside(where):
            return  # nothing to keep outside the crawl directory
        if error := self._point("sync", where):
            raise error
        if os.path.isdir(where):
            self._unsynced = [entry for entry in self._unsynced if entry[0] != where]
        else:
            self._dirty.discard(os.fstat(fd).st_ino)

    def _replace(self, source: Any, destination: Any) -> None:
        where = real(destination)
        if not self._inside(where):
            return self._real["replace"](source, destination)
        if error := self._point("rename", where):
            raise error
        replaced = self._stash_copy(where)
        self._real["replace"](source, destination)
        self._unsynced.append((os.path.dirname(where), "rename", where, (real(source), replaced)))

    def _unlink(self, path: Any, *args: Any, **kwargs: Any) -> None:
        where = real(path)
        if not self._inside(where) or not os.path.lexists(where):  # nothing to change
            return self._real["unlink"](path, *args, **kwargs)
        if error := self._point("remove", where):
            raise error
        copy = self._stash_copy(where)
        self._real["unlink"](path, *args, **kwargs)
        self._unsynced.append((os.path.dirname(where), "remove", where, (copy,)))

    def _write_table(self, *args: Any, **kwargs: Any) -> None:
        if error := self._point("encode", self.root):
            raise error
        self._real_write_table(*args, **kwargs)

    def _stash_copy(self, path: str) -> str:
        """A hard link to the file at `path`, if any: what undoing its removal brings back."""
        if not os.path.exists(path):
            return ""
        copy = str(self.stash / f"stashed-{next(STASHED)}")
        os.link(path, copy)
        return copy

    def power_cut(self, copy: Path, entries_lost: bool) -> None:
        """Lose, in `copy` (of the root as the process left it), what was not synced."""

        def there(path: str) -> str:
            return os.path.join(copy, os.path.relpath(path, self.root))

        if entries_lost:
            for _, what, path, undo in reversed(self._unsynced):
                path = there(path)
                if what == "create" and os.path.exists(path):
                    os.unlink(path)
                elif what == "remove" and undo[0] and not os.path.exists(path):
                    os.link(undo[0], path)
                elif what == "rename":
                    source, replaced = undo
                    if os.path.exists(path):
                        os.rename(path, there(source))
                    if replaced:
                        os.link(replaced, path)
        for directory, _, files in os.walk(self.root):
            for name in files:
                path = os.path.join(directory, name)
                if os.stat(path).st_ino in self._dirty and os.path.exists(there(path)):
                    os.truncate(there(path), 0)


@contextmanager
def passive_disk(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A disk that fails nothing (and spends no time on real syncs)."""
    with Disk(root, root.parent).attached(monkeypatch, None):
        yield


def files_of(directory: Path) -> dict[str, int]:
    """Each file's size, by path: what a power cut changes (it empties files, and undoes
    creations, renames and removals)."""
    return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*")}


def every_point(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prepare: Callable[[Path], None],
    act: Callable[[Path, Disk], None],
    kind: str,
) -> Iterator[tuple[str, Path, list[str]]]:
    """For each call that `act` makes under a directory `prepare` set up: a fresh copy of that
    directory with the fault of `kind` hit at that call (for `killed`: three, as the process
    left it and after either power cut), what happened where, and the calls done before."""
    # Each state in a directory of its own, named as the crawl (compaction names its WARC files
    # after the crawl directory): the calls of every state name the same files.
    template = tmp_path / "template" / CRAWL_ID
    template.mkdir(parents=True)
    prepare(template)
    clean = tmp_path / "clean" / CRAWL_ID
    shutil.copytree(template, clean)
    counter = Disk(clean, tmp_path)
    with counter.attached(monkeypatch, None):
        act(clean, counter)
    assert counter.calls, "the scenario changed nothing on the disk"
    # A process can also be killed, or the power cut, once the scenario is over.
    calls = [*counter.calls, "the end"] if kind == "killed" else counter.calls
    for at, call in enumerate(calls, start=1):
        crawl_dir = tmp_path / f"{kind}-{at}" / CRAWL_ID
        shutil.copytree(template, crawl_dir)
        stash = tmp_path / f"{kind}-{at}.stash"
        stash.mkdir()
        disk = Disk(crawl_dir, stash)
        with disk.attached(monkeypatch, Fault(kind, at)), suppress(Kill):
            act(crawl_dir, disk)
        assert disk.fired == (at <= len(counter.calls))
        assert disk.calls[: at - 1] == counter.calls[: at - 1]
        states = {kind: crawl_dir}
        if kind == "killed":
            states = {"kill": crawl_dir}
            seen = [files_of(crawl_dir)]
            for cut in ("power-kept", "power-lost"):
                copy = shutil.copytree(crawl_dir, tmp_path / f"{cut}-{at}" / CRAWL_ID)
                disk.power_cut(copy, entries_lost=cut == "power-lost")
                if files_of(copy) in seen:  # the cut lost nothing more: a state seen already
                    shutil.rmtree(copy)
                    continue
                seen.append(files_of(copy))
                states[cut] = copy
        for name, state in states.items():
            yield f"{name} at call {at}: {call}", state, disk.calls[: at - 1]
            shutil.rmtree(state)
        shutil.rmtree(stash)


# ---- a crawl of a small web, as a node records it ----------------------------------------------

CRAWL_ID = "c"
HOST = "a.test"
SEED = f"http://{HOST}/"
NODE = "node-0"
NOW = datetime(2025, 1, 1, tzinfo=UTC)
BATCH_ROWS = 3


@dataclass(frozen=True)
class Page:
    status: int | None  # None: no answer, so no WARC record
    links: tuple[str, ...] = ()


# The seed links to two pages, each linking back; one of them to a 404 and to a URL that never
# answers. Two batches: one due while recording, the last one flushed at the end.
WEB = {
    SEED: Page(200, (f"{SEED}a", f"{SEED}b")),
    f"{SEED}a": Page(200, (f"{SEED}c", f"{SEED}d", SEED)),
    f"{SEED}b": Page(200, (SEED, f"{SEED}a")),
    f"{SEED}c": Page(404),
    f"{SEED}d": Page(None),
}


def body(url: str) -> bytes:
    return f"<html><title>{url}</title>{' '.join(WEB[url].links)}</html>".encode()


def rows_of(url: str, new_links: list[str]) -> dict[str, list[dict[str, Any]]]:
    status = WEB[url].status
    fetch = {
        "crawl_id": CRAWL_ID,
        "url": url,
        "url_host_name": HOST,
        "url_path": url.removeprefix(f"http://{HOST}"),
        "fetch_time": NOW,
        "fetch_status": status,
        "error": None if status else "gave_up: connection_error: refused",
        "node_id": NODE,
        "depth": 0,
        "attempt": 1,
    }
    page = {"crawl_id": "c", "url": url, "node_id": NODE, "content": body(url).decode()}
    return {
        "discovered": [{"crawl_id": "c", "url": u, "depth": 1, "node_id": NODE} for u in new_links],
        "pages": [page] if status == 200 else [],
        # An [extract] field of each page: the fourth dataset of a batch.
        "extracts": [{"crawl_id": "c", "url": url, "field": "title", "value": url}]
        if status == 200
        else [],
        "fetches": [fetch],
    }


def exchange_of(url: str) -> Exchange | None:
    status = WEB[url].status
    if status is None:
        return None
    return Exchange(url, NOW, status, {"User-Agent": "t"}, {"Content-Type": "text/html"}, body(url))


def new_writer(crawl_dir: Path) -> CommitGroupWriter:
    return CommitGroupWriter(
        {name: (crawl_dir / name, DATASETS[name]) for name in COMMITTED_DATASETS},
        prefix=NODE,
        batch_rows=BATCH_ROWS,
        interval_s=3600,
        archive=WarcBatchWriter(crawl_dir),
    )


@dataclass
class Run:
    """What one run of a node did."""

    checkpoint: Checkpoint  # what it resumed from
    fetched: Counter[str]
    finished: bool  # it committed everything


def crawl(crawl_dir: Path, disk: Disk | None = None, stop_on_error: bool = False) -> Run:
    """What a node does: resume from the checkpoint, fetch the frontier, record each fetch,
    flush at the end (again if the disk refused). It dies when the output refuses rows or its
    last flush fails; `stop_on_error`: right after the first failed call."""
    checkpoint = load_checkpoint(crawl_dir, [SEED])
    run = Run(checkpoint, Counter(), finished=False)
    frontier = sorted(checkpoint.pending) if not checkpoint.empty else [SEED]
    seen = set(frontier) | checkpoint.done
    try:
        writer = new_writer(crawl_dir)
    except OSError:  # it could not make its directories durable: the node does not start
        return run
    while frontier:
        url = frontier.pop(0)
        run.fetched[url] += 1
        new = [link for link in WEB[url].links if link not in seen]
        seen.update(new)
        frontier.extend(new)
        try:
            writer.record(rows_of(url, new), exchange_of(url))
        except OutputFailed:
            return run
        if stop_on_error and disk is not None and disk.fired:
            return run
    for _ in range(FLUSH_ATTEMPTS):
        try:
            writer.flush()
        except OSError:
            if stop_on_error:
                return run
            continue
        run.finished = True
        return run
    return run


# ---- the invariants ----------------------------------------------------------------------------


def rows_in(directory: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(directory.glob("*.parquet")):
        rows.extend(pq.read_table(path).to_pylist())
    return rows


Output = dict[str, list[dict[str, Any]]]


def read_output(crawl_dir: Path) -> Output:
    return {name: rows_in(crawl_dir / name) for name in (*COMMITTED_DATASETS, "metrics")}


def contents(output: Output) -> dict[str, list[tuple]]:
    return {
        name: sorted((tuple(sorted(row.items())) for row in rows), key=repr)
        for name, rows in output.items()
    }


def assert_committed_only(crawl_dir: Path, output: Output) -> None:
    """No temporary file, no batch without its `fetches` file or not whole, no WARC file no
    row points into."""
    assert not [str(p) for p in crawl_dir.rglob("*.tmp")]
    assert sorted(p.name for p in (crawl_dir / WARC_DIR).iterdir()) == sorted(
        p.name for p in (crawl_dir / WARC_DIR).glob("*.warc.gz")
    )
    commit = crawl_dir / "fetches"
    for name in COMMITTED_DATASETS:
        for path in (crawl_dir / name).glob("*.parquet"):
            assert (commit / path.name).exists(), f"{name}/{path.name} was never committed"
            assert is_whole_parquet(path), f"{name}/{path.name}"
    assert_warc_files_pointed_into(crawl_dir, output)


def assert_warc_files_pointed_into(crawl_dir: Path, output: Output) -> None:
    """The WARC files (temporary ones aside) are those committed rows point into."""
    pointed = {row["warc_filename"] for row in output["fetches"] if row["warc_filename"]}
    files = (crawl_dir / WARC_DIR).glob("*.warc.gz")
    assert {f"{WARC_DIR}/{p.name}" for p in files} == pointed


def assert_complete(crawl_dir: Path, output: Output, links: bool = True) -> None:
    """The crawl of WEB, committed: every URL once, with its page, its links (unless a
    committed batch was lost, with links found nowhere else), its record."""
    assert Counter(row["url"] for row in output["fetches"]) == Counter(list(WEB)), "lost/doubled"
    assert Counter(row["url"] for row in output["pages"]) == Counter(
        url for url, page in WEB.items() if page.status == 200
    )
    assert all(row["content"] == body(row["url"]).decode() for row in output["pages"])
    linked = {link for page in WEB.values() for link in page.links} - {SEED}
    if links:
        assert Counter(row["url"] for row in output["discovered"]) == Counter(linked)
    answers: Counter[str] = Counter()
    for row in output["fetches"]:
        url, filename = row["url"], row["warc_filename"]
        if WEB[url].status is None:
            assert filename is None
            continue
        offset, length = row["warc_record_offset"], row["warc_record_length"]
        record = read_record(crawl_dir / filename, offset, length)
        assert f"WARC-Target-URI: {url}\r\n".encode() in record
        assert f"WARC-Record-ID: {row['warc_record_id']}\r\n".encode() in record
        assert record.endswith(body(url) + b"\r\n\r\n")  # the answer, whole
        answers[filename] += 1
    for filename, count in answers.items():
        assert warc_records(crawl_dir / filename) == 1 + 2 * count  # warcinfo, request+answer


def assert_sound(crawl_dir: Path, links: bool = True) -> Output:
    """Only committed batches, and the whole crawl of WEB in them."""
    output = read_output(crawl_dir)
    assert_committed_only(crawl_dir, output)
    assert_complete(crawl_dir, output, links)
    return output


def warc_records(path: Path) -> int:
    """How many records warcio and fastwarc (checking digests) read in `path`: they must agree,
    and read to its end."""
    with open(path, "rb") as file:
        by_warcio = sum(1 for _ in ArchiveIterator(file))
        assert file.read() == b""
    by_fastwarc = sum(1 for _ in FastArchiveIterator(str(path), verify_digests=True))
    assert by_warcio == by_fastwarc, path
    gzip.decompress(path.read_bytes())  # gzip members to the end: no half one
    return by_warcio


def takeover(crawl_dir: Path, copy: Path) -> ServerState:
    """What a takeover of the dead node reads (on a copy: it discards files too)."""
    shutil.copytree(crawl_dir, copy)
    try:
        (state,) = OutputRecovery(copy, [SEED])(NODE, [HOST]).states
    finally:
        shutil.rmtree(copy)
    return state


def assert_takeover_agrees(state: ServerState, checkpoint: Checkpoint) -> None:
    """A takeover reads what a resume reads: the URLs done, and those still to fetch."""
    assert state.seen == checkpoint.done
    pending = set(checkpoint.pending) if not checkpoint.empty else {SEED}
    assert {url for url, _ in state.inbox} == pending


# ---- a node's batches --------------------------------------------------------------------------


def synced_commits(crawl_dir: Path, done_calls: list[str]) -> set[str]:
    """The URLs of the batches whose `fetches` file was renamed into place and its directory
    synced in `done_calls`: what no power cut may take back."""
    renamed: list[str] = []
    durable: set[str] = set()
    for call in done_calls:
        if call.startswith("rename fetches/"):
            renamed.append(call.removeprefix("rename "))
        elif call == "sync fetches":
            for name in renamed:
                durable.update(row["url"] for row in pq.read_table(crawl_dir / name).to_pylist())
            renamed = []
    return durable


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_at_any_call_of_a_crawl_loses_and_doubles_nothing(tmp_path, monkeypatch, kind):
    runs: list[Run] = []

    def act(crawl_dir: Path, disk: Disk) -> None:
        runs.append(crawl(crawl_dir, disk, stop_on_error=kind == "die"))

    durable: set[str] = set()  # the URLs of batches whose commit was synced before the kill
    points = every_point(tmp_path, monkeypatch, lambda _: None, act, kind)
    for where, crawl_dir, done_calls in points:
        if kind in DYING or where.endswith(": sync ."):  # or the node did not start
            # The node died. A takeover reads what a resume reads (checked where the process
            # left things; after a power cut, a takeover is a resume); the resumed crawl
            # fetches again only what was not committed, and after a power cut, never what
            # a synced commit holds.
            taken_over = None
            if where.startswith("kill "):
                durable = synced_commits(crawl_dir, done_calls)
                taken_over = takeover(crawl_dir, tmp_path / "takeover")
            with passive_disk(crawl_dir, monkeypatch):
                resumed = crawl(crawl_dir)
            if taken_over is not None:
                assert_takeover_agrees(taken_over, resumed.checkpoint)
            assert resumed.finished, where
            assert not set(resumed.fetched) & resumed.checkpoint.done, where
            if where.startswith("power"):
                assert durable <= resumed.checkpoint.done, where
            if where.endswith("the end"):  # flushed, then killed or cut off: all kept
                assert not resumed.fetched, where
        else:
            # The error passed and the node carried on: every URL once, nothing left over.
            assert runs[-1].finished and set(runs[-1].fetched.values()) == {1}, where
        assert_sound(crawl_dir)


# ---- compaction and the manifest ---------------------------------------------------------------


def finished_crawl(crawl_dir: Path) -> None:
    """What a finished crawl leaves: its committed batches, and metrics files."""
    assert crawl(crawl_dir).finished
    metrics = ParquetDatasetWriter(crawl_dir / "metrics", DATASETS["metrics"], NODE, 1, 3600)
    for value in range(2):
        metrics.write({"crawl_id": "c", "node_id": NODE, "metric": "pages", "value": value})


# What a compaction changes in a `fetches` row: where its WARC record is. The record it points
# to stays the same one (its warc_record_id, which `assert_complete` finds there, and digest).
WARC_POINTER = ("warc_filename", "warc_record_offset", "warc_record_length")


def comparable(output: Output) -> dict[str, list[tuple]]:
    """`contents` less the WARC pointers."""
    return contents(
        {
            name: [{k: v for k, v in row.items() if k not in WARC_POINTER} for row in rows]
            for name, rows in output.items()
        }
    )


def payload_digests(crawl_dir: Path, output: Output) -> dict[str, bytes]:
    """The payload digest of the record each `fetches` row points to, by its WARC-Record-ID."""
    digests = {}
    for row in output["fetches"]:
        if row["warc_filename"]:
            record = read_record(
                crawl_dir / row["warc_filename"],
                row["warc_record_offset"],
                row["warc_record_length"],
            )
            found = re.search(rb"\r\nWARC-Payload-Digest: ([^\r]+)\r\n", record)
            assert found is not None
            digests[row["warc_record_id"]] = found[1]
    return digests


@pytest.mark.parametrize("kind", ["error", "killed"])
def test_a_fault_at_any_call_of_a_compaction_loses_and_doubles_nothing(tmp_path, monkeypatch, kind):
    """After an error the command fails and is run again; after a kill or a power cut too.
    Either way the crawl resumes (nothing left to fetch) and compacts again. Wherever the
    compaction stopped, every row finds its WARC record (in a batch WARC file or a merged one),
    and every WARC file reads to its end."""
    # The WARC files rolled at each batch: two merged files, so the journal swaps several
    # (merging batches into one file makes no other call: a file's writes count as one).
    warc_file_bytes, warc_files = 1, 2
    template: dict[str, Any] = {}

    def prepare(crawl_dir: Path) -> None:
        with passive_disk(crawl_dir, monkeypatch):
            finished_crawl(crawl_dir)
        output = read_output(crawl_dir)
        template["contents"] = comparable(output)
        template["digests"] = payload_digests(crawl_dir, output)
        template["done"] = load_checkpoint(crawl_dir, []).done

    def act(crawl_dir: Path, disk: Disk) -> None:
        with suppress(OSError):
            compact(crawl_dir, warc_file_bytes)

    for where, crawl_dir, _ in every_point(tmp_path, monkeypatch, prepare, act, kind):
        with passive_disk(crawl_dir, monkeypatch):
            if not where.startswith("power"):
                # The resume reads the crawl as it was, whatever step the compaction reached.
                # (After a power cut, the check is left to the compaction: it does first what
                # a resume does, finish or drop the compaction journalled, then the commit
                # rule.)
                checkpoint = load_checkpoint(crawl_dir, [])
                assert checkpoint.done == template["done"] and not checkpoint.pending, where
                output = read_output(crawl_dir)
                assert comparable(output) == template["contents"], where
                assert payload_digests(crawl_dir, output) == template["digests"], where
                assert_warc_files_pointed_into(crawl_dir, output)
                assert_complete(crawl_dir, output)
            compact(crawl_dir, warc_file_bytes)
        output = assert_sound(crawl_dir)
        assert comparable(output) == template["contents"], where
        assert payload_digests(crawl_dir, output) == template["digests"], where
        for name in (*COMMITTED_DATASETS, "metrics"):
            assert [p.name for p in (crawl_dir / name).iterdir()] == ["compacted-000001.parquet"]
        assert sorted(p.name for p in (crawl_dir / WARC_DIR).iterdir()) == [
            f"{CRAWL_ID}-{NODE}-{n:05d}.warc.gz" for n in range(1, warc_files + 1)
        ], where
        assert not (crawl_dir / JOURNAL).exists()


def interrupted_crawl(crawl_dir: Path) -> None:
    """What a resume finds of a crawl killed mid-batch, run on a disk that damaged a file: a
    committed batch with a short `pages` file, a batch with no `fetches` file, temporaries."""
    finished_crawl(crawl_dir)
    pages = crawl_dir / "pages" / f"{NODE}-000001.parquet"
    pages.write_bytes(pages.read_bytes()[:100])
    for name in ("warc/node-0-000003.warc.gz", "pages/node-0-000003.parquet"):
        shutil.copy(crawl_dir / name.replace("3", "2"), crawl_dir / name)
    (crawl_dir / "fetches" / f"{NODE}-000004.parquet.tmp").write_bytes(b"PAR1")


@pytest.mark.parametrize("kind", ["error", "killed"])
def test_a_fault_at_any_call_of_a_resume_leaves_a_resumable_crawl(tmp_path, monkeypatch, kind):
    def prepare(crawl_dir: Path) -> None:
        with passive_disk(crawl_dir, monkeypatch):
            interrupted_crawl(crawl_dir)

    def act(crawl_dir: Path, disk: Disk) -> None:
        with suppress(OSError):
            load_checkpoint(crawl_dir, [SEED])

    for where, crawl_dir, _ in every_point(tmp_path, monkeypatch, prepare, act, kind):
        with passive_disk(crawl_dir, monkeypatch):
            assert crawl(crawl_dir).finished, where  # the resume, run again
        assert_sound(crawl_dir, links=False)  # the damaged batch's links are lost with it


OLD = Manifest(CRAWL_ID, "2025-01-01T00:00:00+00:00", "a.test", None)
NEW = Manifest(CRAWL_ID, "2025-01-02T00:00:00+00:00", "a.test", "b")


@pytest.mark.parametrize("kind", ["error", "killed"])
@pytest.mark.parametrize("earlier", [None, OLD], ids=["new", "rewritten"])
def test_a_fault_at_any_call_of_the_manifest_leaves_one_whole(tmp_path, monkeypatch, kind, earlier):
    def prepare(crawl_dir: Path) -> None:
        if earlier is not None:
            write_manifest(crawl_dir, earlier)

    def act(crawl_dir: Path, disk: Disk) -> None:
        with suppress(OSError):
            write_manifest(crawl_dir, NEW)

    # Every state's directory is named as the crawl, as a manifest requires.
    for where, crawl_dir, _ in every_point(tmp_path, monkeypatch, prepare, act, kind):
        assert read_manifest(crawl_dir) in (earlier, NEW), where
        if where.endswith("the end"):  # written, then killed or cut off: it stays
            assert read_manifest(crawl_dir) == NEW, where
        write_manifest(crawl_dir, NEW)  # the run started again
        assert read_manifest(crawl_dir) == NEW
        assert [p.name for p in crawl_dir.iterdir()] == ["crawl.json"], where


# ---- the reported cases, one by one ------------------------------------------------------------


def record_all(writer: CommitGroupWriter, urls: list[str]) -> None:
    for url in urls:
        writer.record(rows_of(url, []), exchange_of(url))


def test_a_failed_fetches_write_never_reuses_its_batch_number(tmp_path, monkeypatch):
    """The reported loss: the next flush renamed a new WARC file over the committed one and
    rewrote that batch's pages, then committed rows whose records were gone."""
    disk = Disk(tmp_path, tmp_path)
    fault = Fault("error", call="rename fetches/node-0-000002.parquet")
    with disk.attached(monkeypatch, fault):
        writer = new_writer(tmp_path)
        record_all(writer, [SEED])
        writer.flush()
        record_all(writer, [f"{SEED}a"])
        with pytest.raises(OSError):
            writer.flush()
        record_all(writer, [f"{SEED}b"])
        writer.flush()
    assert disk.fired
    names = sorted(p.name for p in (tmp_path / "fetches").iterdir())
    assert names == ["node-0-000001.parquet", "node-0-000003.parquet"]
    assert sorted(p.name for p in (tmp_path / WARC_DIR).iterdir()) == [
        "node-0-000001.warc.gz",
        "node-0-000003.warc.gz",
    ]
    assert [row["url"] for row in rows_in(tmp_path / "fetches")] == [SEED, f"{SEED}a", f"{SEED}b"]
    assert_committed_only(tmp_path, read_output(tmp_path))
    for row in rows_in(tmp_path / "fetches"):
        record = read_record(
            tmp_path / row["warc_filename"], row["warc_record_offset"], row["warc_record_length"]
        )
        assert f"WARC-Target-URI: {row['url']}\r\n".encode() in record


@pytest.mark.parametrize(
    "call",
    [
        "write warc/node-0-000001.warc.gz.tmp",
        "sync warc/node-0-000001.warc.gz.tmp",
        "rename warc/node-0-000001.warc.gz",
        "sync warc",
    ],
)
def test_a_failed_warc_write_or_rename_leaves_the_writer_working(tmp_path, monkeypatch, call):
    """It answered "write to closed file" to every later record, or left half a gzip member
    that stopped warcio."""
    disk = Disk(tmp_path, tmp_path)
    with disk.attached(monkeypatch, Fault("error", call=call)):
        writer = new_writer(tmp_path)
        record_all(writer, [SEED, f"{SEED}a"])
        with pytest.raises(OSError):
            writer.flush()
        record_all(writer, [f"{SEED}b", f"{SEED}c", f"{SEED}d"])
        writer.flush()
    assert disk.fired
    assert_committed_only(tmp_path, read_output(tmp_path))
    rows = rows_in(tmp_path / "fetches")
    assert sorted(row["url"] for row in rows) == sorted(WEB)
    for path in (tmp_path / WARC_DIR).iterdir():
        assert warc_records(path) == 1 + 2 * 4


def test_the_output_refuses_rows_once_its_flushes_keep_failing(tmp_path, monkeypatch):
    disk = Disk(tmp_path, tmp_path)
    with disk.attached(monkeypatch, Fault("full", call="create warc/node-0-000001.warc.gz.tmp")):
        writer = new_writer(tmp_path)
        urls = iter(sorted(WEB) * 3)
        with pytest.raises(OutputFailed):
            while True:
                record_all(writer, [next(urls)])
        buffered = writer.buffered("fetches")
        with pytest.raises(OutputFailed):
            record_all(writer, [SEED])
        assert writer.buffered("fetches") == buffered  # refused whole
        with pytest.raises(OSError):
            writer.flush()
    writer.flush()  # the disk has room again: every row taken is committed, once
    assert [row["url"] for row in rows_in(tmp_path / "fetches")] == [r["url"] for r in buffered]
    assert len(buffered) == FLUSH_ATTEMPTS * BATCH_ROWS  # a batch's worth per try
    assert_committed_only(tmp_path, read_output(tmp_path))


@pytest.mark.parametrize("dataset", ["discovered", "pages", "fetches", "metrics"])
@pytest.mark.parametrize("damage", ["empty", "short"])
def test_an_empty_or_short_batch_file_is_garbage_to_resume_compaction_and_takeover(
    tmp_path, dataset, damage
):
    """What a power cut leaves of a file written and renamed without a sync: resume raised."""
    crawl_dir = tmp_path / "c"
    finished_crawl(crawl_dir)
    damaged = crawl_dir / dataset / f"{NODE}-000001.parquet"
    data = damaged.read_bytes()
    damaged.write_bytes(b"" if damage == "empty" else data[: len(data) // 2])

    takeover(crawl_dir, tmp_path / "takeover")
    checkpoint = load_checkpoint(crawl_dir, [SEED])
    if dataset != "metrics":  # the whole batch is gone: its URLs are fetched again
        assert not [n for n in COMMITTED_DATASETS if (crawl_dir / n / damaged.name).exists()]
        assert SEED in checkpoint.pending
    assert crawl(crawl_dir).finished
    compact(crawl_dir)
    # A lost batch's links are found again only on pages not fetched since.
    assert_sound(crawl_dir, links=dataset == "metrics")


def test_a_warc_file_that_committed_rows_point_into_is_kept_whatever_its_name(tmp_path):
    finished_crawl(tmp_path)
    first = tmp_path / "fetches" / f"{NODE}-000001.parquet"
    # The batch's rows, committed under another number (as a writer might carry them over).
    first.rename(first.with_name(f"{NODE}-000009.parquet"))
    removed = discard_uncommitted(tmp_path)
    assert {p.name for p in removed} == {f"{NODE}-000001.parquet"}
    assert (tmp_path / WARC_DIR / f"{NODE}-000001.warc.gz").exists()
    assert_committed_only(tmp_path, read_output(tmp_path))


# ---- a node crawling a web on a failing disk -----------------------------------------------


@pytest.fixture(scope="module")
def small_web():
    from websim import WebSim, WebSpec

    spec = WebSpec(hosts=3, pages=60, seed=3, rate_limit_rps=None, latency_ms=(0.5, 1.0))
    with WebSim(spec) as sim:
        yield sim


def node_crawl(sim: Any, out: Path) -> Path:
    from crawler.config import CrawlConfig
    from runtime.backends import crawl_in_process
    from runtime.fleet import single_node

    config = CrawlConfig(
        scheduling={"max_connections": 3},
        output={"write_batch_rows": 15},
        rate_control={"mode": "fixed", "fixed": {"delay_s": 0.0}},
    )
    crawl_in_process(single_node("c1", str(out), config, sim.servers), [sim.hub_url])
    return out / "c1"


@pytest.mark.integration
@pytest.mark.parametrize(
    "call",
    [
        "rename fetches/node-0-000002.parquet",
        "write warc/node-0-000003.warc.gz.tmp",
        "sync pages",
        "sync fetches",  # after the first commit's rename
    ],
)
def test_a_node_whose_disk_fails_once_records_every_url_once(
    small_web, tmp_path, monkeypatch, call
):
    """The Recorder and the fetch loop on top of the writer: a failed write costs no row and
    doubles none; the node goes on and commits everything."""
    clean = node_crawl(small_web, tmp_path / "clean")
    disk = Disk(tmp_path / "faulty" / "c1", tmp_path)
    with disk.attached(monkeypatch, Fault("error", call=call)):
        crawl_dir = node_crawl(small_web, tmp_path / "faulty")
    assert disk.fired
    output = read_output(crawl_dir)
    expected = read_output(clean)
    tries = Counter((row["url"], row["attempt"]) for row in output["fetches"])
    assert set(tries.values()) == {1}, "a row recorded twice"
    assert {url for url, _ in tries} == {row["url"] for row in expected["fetches"]}
    assert Counter(row["url"] for row in output["pages"]) == Counter(
        row["url"] for row in expected["pages"]
    )
    assert_committed_only(crawl_dir, output)
    for row in output["fetches"]:
        if row["warc_filename"]:
            record = read_record(
                crawl_dir / row["warc_filename"],
                row["warc_record_offset"],
                row["warc_record_length"],
            )
            assert f"WARC-Target-URI: {row['url']}\r\n".encode() in record
    for path in (crawl_dir / WARC_DIR).iterdir():
        warc_records(path)
