"""Output in object storage: `--out s3://bucket/prefix`, `gs://...`, or any filesystem pyarrow.fs
(or, failing that, fsspec) opens.

An object store has no rename, no directory and no fsync, but it has what the commit protocol
of `storage.writer` needs: an object is written whole or not at all (a PUT, or a multipart
upload completed at `close`), and a listing sees every object written before it (S3 has been
strongly consistent since 2020; GCS always was). So the bucket holds the same tree a local
crawl directory holds, and the same commit rule decides what counts (docs/storage.md):

- Every process that writes works on a local copy of the crawl directory, its staging
  directory (`local_root`: `[output] staging_dir`, by default under `$XDG_CACHE_HOME`), with
  the local protocol unchanged: files written whole, synced, renamed, the `fetches` file last.
- A node publishes each batch once it is committed locally, one object per file in the same
  order: the WARC file, `discovered`, `pages`, `extracts`, then `fetches`, the commit point
  (`BatchPublisher`). An upload that fails leaves the batch uncommitted in the bucket (its
  `fetches` object is not there) and is tried again with the next batch; a kill leaves it
  uncommitted for good, and the resume fetches its URLs again.
- A node numbers its batches past every number the bucket already holds for it, so an object
  name is never written twice: what a reader or a resume downloaded under a name is what the
  bucket holds under it.
- A resume (`restore`) waits until the bucket's crawl is quiet, makes the staging directory
  exactly the bucket's crawl, applies the commit rule to it, and deletes from the bucket what
  the rule discarded.
- The end of the crawl (`publish_crawl`) compacts locally, then replaces the batch objects by
  the compacted ones under a journal object, `publish.json`, naming what it adds and what it
  removes, written before the first upload: while every added object is not there the added
  ones are garbage, once they all are the removed ones are. Readers apply that rule to the
  listing, so they never see a row twice; the next resume or publish finishes the journal.
- Readers (`crawlflow sql`, `report`, `views`, `warc-get`, the recrawl's history, the plan's
  demand estimate) read a local mirror of the committed Parquet files (`readable`): each file
  is downloaded once (names are never reused), WARC records are read from the bucket by range.

Credentials and the endpoint come from where the filesystem's own client looks (for S3 the
`AWS_*` environment variables, `AWS_ENDPOINT_URL` and `AWS_PROFILE` included, the shared
config files, the instance role); an `--out` that carries credentials is refused, so they
never reach a command line, a flow parameter or a log.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from storage.compaction import finish_compaction
from storage.files import wait_for_quiet
from storage.lease import LEASE, LeaseFence
from storage.lock import LOCK
from storage.manifest import MANIFEST
from storage.schema import COMMITTED_DATASETS
from storage.warc import (
    SUFFIX,
    WARC_DIR,
    RecordNotFound,
    check_place,
    decompress_record,
    newest_record,
)
from storage.writer import discard_uncommitted

JOURNAL = "publish.json"
# Downloads in progress: never a name the local protocol globs for (`*.tmp`, `*.parquet`).
_PART = ".part"
_CHUNK = 8 << 20
# Local files that are no output: the lock, and what a write in progress leaves.
_LOCAL_ONLY = (LOCK,)


class BucketError(OSError):
    """The object-storage output cannot be used; the message says why, in one line."""


def is_remote(location: str | Path) -> bool:
    """Whether `location` names object storage (a URI with a scheme other than file://)."""
    text = str(location)
    return "://" in text and not text.startswith("file://")


def cache_home() -> Path:
    """crawlflow's per-user cache: staging directories and read mirrors of buckets."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "crawlflow"


def _slug(uri: str) -> str:
    return quote(uri.rstrip("/"), safe="")


def _local_path(location: str | Path) -> Path:
    text = str(location)
    return Path(urlsplit(text).path) if text.startswith("file://") else Path(text)


def local_root(location: str, staging_dir: str = "") -> Path:
    """Where a crawl of the output root `location` is written on this machine: the root itself
    on a local disk; for object storage, its staging directory (under `staging_dir`, default
    the user's cache)."""
    if not is_remote(location):
        return _local_path(location)
    base = Path(staging_dir) if staging_dir else cache_home() / "staging"
    return base / _slug(location)


@dataclass(frozen=True)
class Entry:
    size: int
    mtime: float  # seconds since the epoch; 0 when the store does not say


class Bucket:
    """An output root in object storage: objects named by their path below the root."""

    def __init__(self, uri: str) -> None:
        self.uri = uri if uri.endswith("://") else uri.rstrip("/")
        parts = urlsplit(self.uri)
        if "@" in parts.netloc:
            raise BucketError(
                f"--out {parts.scheme}://...@{parts.netloc.rsplit('@', 1)[1]}{parts.path}: "
                "credentials are not taken from --out; set them as the filesystem's client "
                "expects (AWS_* environment variables or a profile for S3)"
            )
        try:
            self.fs, self.root = pafs.FileSystem.from_uri(self.uri)
        except (pa.ArrowException, ValueError) as exc:
            self.fs, self.root = _fsspec_filesystem(self.uri, exc)
        self.root = self.root.rstrip("/")
        if not self.root:
            raise BucketError(f"--out {self.uri}: names no bucket")

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def child(self, name: str) -> Bucket:
        return Bucket(f"{self.uri}/{name}")

    def listing(self, under: str = "") -> dict[str, Entry]:
        """Every object below `under`, by its path relative to the root, but crawls' leases
        (storage/lease.py: no output, and renewed while a crawl runs)."""
        selector = pafs.FileSelector(self.path(under), recursive=True, allow_not_found=True)
        found = {}
        for info in self.fs.get_file_info(selector):
            if info.type != pafs.FileType.File or info.base_name == LEASE:
                continue
            relative = info.path[len(self.root) + 1 :]
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            found[relative] = Entry(info.size or 0, mtime)
        return found

    def upload(self, local: Path, relative: str) -> None:
        """`local` as one object: it is there whole once this returns, or not at all."""
        with local.open("rb") as source, self._output(relative) as sink:
            while chunk := source.read(_CHUNK):
                sink.write(chunk)

    def put(self, relative: str, data: bytes) -> None:
        with self._output(relative) as sink:
            sink.write(data)

    def _output(self, relative: str) -> pa.NativeFile:
        # Bytes as they are: pyarrow would otherwise gzip a `.warc.gz` again on the way out (and
        # gunzip it on the way in), leaving objects no other reader can use.
        path = self.path(relative)
        try:
            return self.fs.open_output_stream(path, compression=None)
        except FileNotFoundError:
            # A filesystem with directories (file://, HDFS): object stores have none.
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            return self.fs.open_output_stream(path, compression=None)

    def get(self, relative: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(self.path(relative), compression=None) as source:
                return bytes(source.read())
        except FileNotFoundError:
            return None

    def read_range(self, relative: str, offset: int, length: int) -> bytes:
        with self.fs.open_input_file(self.path(relative)) as source:
            source.seek(offset)
            return bytes(source.read(length))

    def download(self, relative: str, local: Path, entry: Entry) -> None:
        """The object as the file `local`, written under a temporary name and renamed; its
        time is the object's, so that a quiet bucket makes a quiet directory."""
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f"{local.name}.{secrets.token_hex(4)}{_PART}")
        try:
            with (
                self.fs.open_input_stream(self.path(relative), compression=None) as source,
                partial.open("wb") as f,
            ):
                while chunk := source.read(_CHUNK):
                    f.write(chunk)
            if entry.mtime:
                os.utime(partial, (entry.mtime, entry.mtime))
            os.replace(partial, local)
        finally:
            partial.unlink(missing_ok=True)

    def delete(self, relatives: Iterable[str]) -> None:
        for relative in relatives:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(self.path(relative))

    def check_writable(self) -> None:
        """A probe object written and deleted: BucketError saying why if that fails (no such
        bucket, no credentials, no endpoint), before anything starts."""
        probe = f".crawlflow-probe-{secrets.token_hex(6)}"
        try:
            self.put(probe, b"")
            self.delete([probe])
        except (OSError, pa.ArrowException) as exc:
            reason = " ".join(str(exc).split())
            raise BucketError(f"--out {self.uri}: cannot write there ({reason[:300]})") from None


def _fsspec_filesystem(uri: str, arrow_error: Exception) -> tuple[pafs.FileSystem, str]:
    """What fsspec opens, for schemes pyarrow.fs does not know (and fsspec does: it would take
    an unknown one for a local path)."""
    scheme = urlsplit(uri).scheme
    try:
        from fsspec.core import url_to_fs  # type: ignore[import-untyped]
        from fsspec.registry import known_implementations  # type: ignore[import-untyped]

        if scheme not in known_implementations or scheme in ("file", "local"):
            raise ValueError(f"no filesystem is known for {scheme}://")
        filesystem, path = url_to_fs(uri)
    except Exception as exc:  # whatever the implementation's import or constructor raises
        raise BucketError(f"--out {uri}: no filesystem opens it ({arrow_error}; {exc})") from None
    # The stubs take FSSpecHandler for abstract; it is pyarrow's own complete handler.
    return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem)), str(path)  # type: ignore[abstract]


# ---- the commit rule on a listing ---------------------------------------------------------------


def _journal_dead(bucket: Bucket, crawl: str, listing: dict[str, Entry]) -> set[str]:
    """The objects of `crawl` (a path below the root, "" for the root itself) a publish
    journal makes garbage: the added ones until all are there, then the removed ones."""
    key = f"{crawl}/{JOURNAL}" if crawl else JOURNAL
    if key not in listing:
        return set()
    data = bucket.get(key)
    try:
        journal = json.loads(data or b"")
        adds, removes = list(journal["adds"]), list(journal["removes"])
    except (ValueError, KeyError, TypeError):
        return {key}  # written whole or not at all, so never decided: nothing it names is dead
    prefix = f"{crawl}/" if crawl else ""
    dead = [
        prefix + name for name in (removes if all(prefix + a in listing for a in adds) else adds)
    ]
    return {*dead, key}


def committed_view(bucket: Bucket, listing: dict[str, Entry]) -> dict[str, Entry]:
    """What a reader may take of `listing`: no journal-dead object, no file of a batch whose
    `fetches` object is not there, no download or write in progress, no lock, no journal."""
    dead: set[str] = set()
    for key in listing:
        if key == JOURNAL or key.endswith(f"/{JOURNAL}"):
            dead |= _journal_dead(bucket, key[: -len(JOURNAL)].rstrip("/"), listing)
    live = {k: e for k, e in listing.items() if k not in dead}
    kept = {}
    for key, entry in live.items():
        parent, _, name = key.rpartition("/")
        if name == LOCK or name.endswith((".tmp", _PART)) or name.startswith(".crawlflow-probe"):
            continue
        crawl, _, dataset = parent.rpartition("/")
        if dataset in COMMITTED_DATASETS and name.endswith(".parquet"):
            commit = f"{crawl}/{COMMITTED_DATASETS[-1]}/{name}" if crawl else f"fetches/{name}"
            if commit not in live:
                continue
        kept[key] = entry
    return kept


# ---- readers -------------------------------------------------------------------------------------


def readable(location: str | Path, required: bool = False) -> Path:
    """A local directory holding what a reader of `location` (an output root or a crawl
    directory) may read: `location` itself on a local disk; for object storage a mirror of
    its committed files, WARC files left out (`remote_record` reads them by range).
    `required`: BucketError when the bucket holds no crawl output there."""
    if not is_remote(location):
        return _local_path(location)
    uri = str(location).rstrip("/")
    parent, _, name = uri.rpartition("/")
    local = mirror(Bucket(uri), cache_home() / "read" / _slug(parent) / name)
    if required and not any(local.glob(f"**/{COMMITTED_DATASETS[-1]}/*.parquet")):
        raise BucketError(f"no crawl output (fetches Parquet) under {uri}")
    return local


def mirror(bucket: Bucket, directory: Path) -> Path:
    """`directory` made to hold the committed files of `bucket` but its WARC files, each
    downloaded once (a name is never written twice), and nothing else."""
    try:
        listing = bucket.listing()
    except OSError as exc:
        reason = " ".join(str(exc).split())[:300]
        raise BucketError(f"{bucket.uri}: cannot list it ({reason})") from None
    committed = committed_view(bucket, listing)
    warc = {key for key in committed if f"/{WARC_DIR}/" in f"/{key}"}
    wanted = {key: entry for key, entry in committed.items() if key not in warc}
    directory.mkdir(parents=True, exist_ok=True)
    with _flocked(directory.parent / f".{directory.name}.lock"):
        _mirror(bucket, wanted, warc, directory)
    return directory


def _mirror(bucket: Bucket, wanted: dict[str, Entry], keep: set[str], directory: Path) -> None:
    """Make `directory` hold the objects of `wanted`, and no file that is not in `keep` (a
    WARC file fetched for a record stays while the bucket has it)."""
    for key, entry in wanted.items():
        local = directory / key
        if not local.is_file() or local.stat().st_size != entry.size:
            bucket.download(key, local, entry)
    for path in _files(directory):
        key = path.relative_to(directory).as_posix()
        if key not in wanted and key not in keep:
            path.unlink(missing_ok=True)


def remote_record(con: Any, location: str, mirror: Path, url: str) -> bytes:
    """The newest WARC record of `url`, found through the `fetches` view `con` has over the
    mirror of the output `location` (a root or a crawl directory), read from the bucket by
    range."""
    crawl_id, filename, offset, length = newest_record(con, location, url)
    # The row names a file of its own crawl's warc/ directory, never an object elsewhere.
    folder, _, name = filename.partition("/")
    if folder != WARC_DIR or "/" in name or name.startswith(".") or not name.endswith(SUFFIX):
        raise RecordNotFound(f"the WARC file {filename!r} of crawl {crawl_id} is not its own")
    check_place(url, filename, offset, length)
    in_crawl = (mirror / MANIFEST).exists() or (mirror / COMMITTED_DATASETS[-1]).is_dir()
    key = filename if in_crawl else f"{crawl_id}/{filename}"
    where = f"{location.rstrip('/')}/{key}:{offset} (+{length})"
    try:
        member = Bucket(location).read_range(key, offset, length)
    except (OSError, pa.ArrowException) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise RecordNotFound(f"the WARC record at {where} cannot be read: {reason}") from None
    return decompress_record(member, length, where)


# ---- writers -------------------------------------------------------------------------------------


def _files(directory: Path) -> Iterator[Path]:
    return (p for p in directory.rglob("*") if p.is_file())


def _local_files(crawl_dir: Path) -> dict[str, Path]:
    return {
        path.relative_to(crawl_dir).as_posix(): path
        for path in _files(crawl_dir)
        if path.name not in _LOCAL_ONLY and not path.name.endswith((".tmp", _PART))
    }


def wait_until_quiet(bucket: Bucket, crawl_id: str, quiet_s: float, timeout_s: float) -> bool:
    """Wait until no object of the crawl has changed for `quiet_s` seconds (the nodes of a
    killed run may still publish a batch); False if it still changed after `timeout_s`."""
    return wait_for_quiet(
        lambda: max(
            (e.mtime for k, e in bucket.listing(crawl_id).items() if not k.endswith(MANIFEST)),
            default=0.0,
        ),
        quiet_s,
        timeout_s,
    )


def finish_journal(bucket: Bucket, crawl_id: str) -> None:
    """Complete (or roll back) a publish a killed run left half done."""
    listing = bucket.listing(crawl_id)
    dead = _journal_dead(bucket, crawl_id, listing)
    journal = f"{crawl_id}/{JOURNAL}"
    bucket.delete(sorted(dead - {journal}))
    bucket.delete([journal] if journal in dead else [])


def restore(bucket: Bucket, crawl_id: str, crawl_dir: Path) -> None:
    """Make the staging directory `crawl_dir` the crawl as the bucket holds it, by the commit
    rule, and delete from the bucket what that rule discards: what a resume reads its
    checkpoint from. The caller holds the crawl's lock and has waited for quiet."""
    finish_journal(bucket, crawl_id)
    listing = {
        key.split("/", 1)[1]: entry for key, entry in bucket.listing(crawl_id).items() if "/" in key
    }
    crawl_dir.mkdir(parents=True, exist_ok=True)
    local = _local_files(crawl_dir)
    for relative, path in local.items():
        if relative not in listing and relative != MANIFEST:
            path.unlink()
    for relative, entry in listing.items():
        path = crawl_dir / relative
        if relative not in local or path.stat().st_size != entry.size:
            bucket.download(f"{crawl_id}/{relative}", path, entry)
    finish_compaction(crawl_dir)
    discard_uncommitted(crawl_dir)
    kept = _local_files(crawl_dir)
    bucket.delete(f"{crawl_id}/{r}" for r in sorted(listing) if r not in kept)


def gather(bucket: Bucket, crawl_id: str, crawl_dir: Path) -> None:
    """Download the crawl's committed objects the staging directory lacks (batches nodes on
    other machines published), adding only: nodes of this machine may be writing there."""
    listing = bucket.listing(crawl_id)
    local = _local_files(crawl_dir)
    for key, entry in committed_view(bucket, listing).items():
        relative = key.split("/", 1)[1] if "/" in key else key
        if relative not in local:
            bucket.download(key, crawl_dir / relative, entry)


def _publish_order(relative: str) -> tuple[int, str]:
    """WARC files first, then the datasets without the commit rule, then the committed
    datasets in their order (`fetches`, the commit, last), then the rest (manifest, report)."""
    top = relative.split("/", 1)[0]
    if top == WARC_DIR:
        return (0, relative)
    if top in COMMITTED_DATASETS:
        return (2 + COMMITTED_DATASETS.index(top), relative)
    if "/" in relative:
        return (1, relative)
    return (9, relative)


def publish_crawl(
    bucket: Bucket, crawl_id: str, crawl_dir: Path, fence: Callable[[], None] = lambda: None
) -> None:
    """Make the bucket's crawl what the staging directory holds (compacted, at the end of a
    crawl): the journal first when objects go, the new objects in commit order, then the
    replaced ones deleted, then the journal. `fence` raises if this run may no longer write
    the crawl (its lease was lost): called first, and before the commit (`fetches`) objects
    and the deletes."""
    fence()
    finish_journal(bucket, crawl_id)
    local = _local_files(crawl_dir)
    remote = {
        key.split("/", 1)[1]: entry for key, entry in bucket.listing(crawl_id).items() if "/" in key
    }
    adds = sorted(
        (r for r, p in local.items() if r not in remote or remote[r].size != p.stat().st_size),
        key=_publish_order,
    )
    removes = sorted(r for r in remote if r not in local)
    journal = f"{crawl_id}/{JOURNAL}"
    if removes:
        bucket.put(journal, json.dumps({"adds": adds, "removes": removes}).encode())
    fenced = False
    for relative in adds:
        if not fenced and relative.startswith(f"{COMMITTED_DATASETS[-1]}/"):
            fence()
            fenced = True
        bucket.upload(local[relative], f"{crawl_id}/{relative}")
    if removes:
        fence()
        bucket.delete(f"{crawl_id}/{r}" for r in removes)
        bucket.delete([journal])


def drop_staged(crawl_dir: Path) -> None:
    """Remove a published crawl's staging copy, but its lock (the run holds it)."""
    for child in crawl_dir.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        elif child.name != LOCK:
            child.unlink(missing_ok=True)


def publish_file(bucket: Bucket, crawl_id: str, crawl_dir: Path, relative: str) -> None:
    """One file of the staging directory as its object (the manifest, when a crawl starts)."""
    bucket.upload(crawl_dir / relative, f"{crawl_id}/{relative}")


class BatchPublisher:
    """A node's side of the protocol: each committed batch's files uploaded in commit order;
    what fails is tried again, first, with the next batch. Shared by a node's writers.
    `fence`: the run's lease, checked before each commit (`fetches`) object goes up."""

    def __init__(self, bucket: Bucket, crawl_dir: Path, fence: LeaseFence | None = None) -> None:
        self.bucket = bucket
        self.crawl_dir = crawl_dir
        self.fence = fence
        self._pending: list[Path] = []
        self._lock = threading.Lock()

    def last_sequence(self, directories: list[Path], prefix: str) -> int:
        """The highest batch number the bucket holds for `prefix` in these directories."""
        taken = [0]
        for directory in directories:
            relative = directory.relative_to(self.crawl_dir.parent).as_posix()
            for key in self.bucket.listing(relative):
                name = key.rsplit("/", 1)[-1]
                if name.startswith(f"{prefix}-"):
                    number = name[len(prefix) + 1 :].split(".", 1)[0]
                    if number.isdigit():
                        taken.append(int(number))
        return max(taken)

    def publish(self, files: list[Path]) -> None:
        """Upload `files` (a committed batch's, the commit file last) after whatever an earlier
        call could not; raises what the store said, the rest kept for the next call."""
        with self._lock:
            self._pending.extend(files)
            while self._pending:
                path = self._pending[0]
                relative = path.relative_to(self.crawl_dir.parent).as_posix()
                if path.exists():  # else compacted or discarded since: nothing to publish
                    if self.fence is not None and path.parent.name == COMMITTED_DATASETS[-1]:
                        self.fence.check()
                    self.bucket.upload(path, relative)
                self._pending.pop(0)


def node_publisher(
    location: str, crawl_dir: Path, lease_token: str | None = None
) -> BatchPublisher | None:
    """The publisher of a node writing to `location`; None for a local disk. `lease_token`:
    the token of its run's lease in the bucket (storage/lease.py), None if there is none."""
    if not is_remote(location):
        return None
    fence = None if lease_token is None else LeaseFence(location, crawl_dir.name, lease_token)
    return BatchPublisher(Bucket(location), crawl_dir, fence)


@contextlib.contextmanager
def _flocked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_bucket(location: str, since: str | None) -> None:
    """What can be checked of an object storage `--out` before anything starts: that it opens,
    that a crawl can write there, and that the earlier crawl `since` names is there."""
    bucket = Bucket(location)
    bucket.check_writable()
    if since is not None and not any(
        key.startswith(f"{since}/{COMMITTED_DATASETS[-1]}/")
        for key in committed_view(bucket, bucket.listing(since))
    ):
        raise BucketError(f"--since {since}: no crawl output in {bucket.uri}/{since}")
