"""WARC/1.1 output (warcio): one gzip member per record, one file per node batch.

Each fetch that got an HTTP answer is archived as a `request` record and either a `response`
record or, for a 304 Not Modified, a `revisit` record of the WARC 1.1 `server-not-modified`
profile. The `fetches` row of the fetch names the response (or revisit) record the way Common
Crawl's index does: `warc_filename` (relative to the crawl directory), `warc_record_offset`
and `warc_record_length` (bytes of the gzip member), so one ranged read finds it.

Crash safety follows the Parquet batches (`storage.writer`): an exchange's records are built
in memory when it is recorded, and the WARC file of batch `<node>-<n>`,
`warc/<node>-<n>.warc.gz`, is written whole from them when the batch commits (temporary
name, synced, renamed into place before the batch's Parquet files); a file on the disk is
never appended to. So every WARC file under its final name reads to its end, a committed
row's file always exists, and a WARC file no committed row points into is a batch that
failed or died before its commit, which `discard_uncommitted_warc` removes.

Files like Common Crawl's: once the crawl is over, compaction (`storage.compaction`) merges
each node's batch files, in batch order, into files of about `[output] warc_file_bytes`
(default 1 GB) named `<crawl_id>-<node>-<n>.warc.gz`, unique across crawls and nodes
(`merge_warc_files`): each a new warcinfo record, then the batches' records byte for byte
(gzip members are copied, never recompressed), so a record keeps its WARC-Record-ID and
digest, and the merged `fetches` rows get the new file name and offset.

Bodies are archived as the crawler received them after undoing any Content-Encoding (gzip,
br): the record's HTTP headers give the decoded `Content-Length`, so every record is readable
on its own, and keep what the server sent for the wire as Common Crawl does, renamed
`X-Crawler-Content-Encoding`, `X-Crawler-Transfer-Encoding` and `X-Crawler-Content-Length`.
Each answer record carries `WARC-IP-Address` (the server's address) and its `WARC-Record-ID`,
which the `fetches` row repeats in `warc_record_id`.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.parquet as pq
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter
from zlib_ng import zlib_ng

from storage.durable import SyncedFile, is_whole_parquet

WARC_DIR = "warc"
# The most a record's gzip member is read and decompressed to by `warc-get`: far above what the
# fetch limits let a body be (`[fetch] max_decoded_bytes` accepts any size, so a generous
# bound), far below what would hurt.
MAX_RECORD_BYTES = 1 << 30
SUFFIX = ".warc.gz"
# The size compaction rolls the merged WARC files at, as Common Crawl's are about 1 GB.
WARC_FILE_BYTES = 1_000_000_000
# How much of a file a merge copies at a time.
COPY_BYTES = 1 << 20
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
# Each record's member is deflated by zlib-ng (standard gzip, read by any zlib) at level 5: on a
# page of real documentation HTML (70 KB) 0.64 ms against zlib's 1.51 ms at its default level 6,
# for members 1.6% larger (warcio's own writer uses zlib at 9: 1.95 ms, 0.7% smaller than
# zlib's 6; bench/results/cpu_per_page/NOTES.md).
GZIP_LEVEL = 5
# Headers that describe the bytes on the wire, not the decoded body the record holds.
_WIRE_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


@dataclass
class Exchange:
    """One HTTP request and its answer, as the node saw them."""

    url: str
    date: datetime
    status: int
    request_headers: dict[str, str]
    response_headers: dict[str, str]
    body: bytes
    truncated: str | None = None  # WARC-Truncated reason: "length", "time", "unspecified"
    # For a 304: the date and payload digest of the earlier capture it stands for.
    refers_to_date: datetime | None = None
    refers_to_digest: str | None = None
    ip_address: str | None = None  # the server's address (WARC-IP-Address)


def warc_name(batch_file: str) -> str:
    """`node-0-000001.parquet` -> `node-0-000001.warc.gz`: a batch's WARC file."""
    return batch_file.removesuffix(".parquet") + SUFFIX


def _iso(date: datetime) -> str:
    return date.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class ArchivedExchange:
    """An exchange's WARC records, built in memory: gzip members ready to be written."""

    records: bytes  # the request record, then the answer record
    answer_at: int  # where in `records` the answer (response or revisit) record starts
    record_id: str  # the answer record's WARC-Record-ID


class WarcBatchWriter:
    """Builds the WARC records of exchanges (`archive`), and a batch's WARC file from them
    (`contents`): the file is written whole at the batch's commit, never appended to."""

    def __init__(self, crawl_dir: Path) -> None:
        self.directory = crawl_dir / WARC_DIR
        self.directory.mkdir(parents=True, exist_ok=True)

    def archive(self, exchange: Exchange) -> ArchivedExchange:
        """The exchange's request and answer records, each its own gzip member."""
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=False, warc_version="1.1")
        request = self._request_record(writer, exchange)
        writer.write_record(request)
        records = _gzip_member(buffer.getvalue())
        answer_at = len(records)
        buffer.seek(0)
        buffer.truncate()
        answer = self._answer_record(writer, exchange, request)
        writer.write_record(answer)
        record_id = answer.rec_headers.get_header("WARC-Record-ID")
        return ArchivedExchange(records + _gzip_member(buffer.getvalue()), answer_at, record_id)

    def path(self, batch_file: str) -> Path:
        """Where the WARC file of batch `batch_file` goes."""
        return self.directory / warc_name(batch_file)

    def contents(
        self, batch_file: str, exchanges: list[ArchivedExchange]
    ) -> tuple[list[bytes], list[dict[str, Any]]]:
        """The WARC file of batch `batch_file` holding `exchanges` (a warcinfo record, then
        theirs, in order), and the `fetches` columns that locate each answer record in it."""
        name = warc_name(batch_file)
        chunks = [warcinfo_record(name)]
        offset = len(chunks[0])
        locations = []
        for exchange in exchanges:
            chunks.append(exchange.records)
            locations.append(
                {
                    "warc_filename": f"{WARC_DIR}/{name}",
                    "warc_record_offset": offset + exchange.answer_at,
                    "warc_record_length": len(exchange.records) - exchange.answer_at,
                    "warc_record_id": exchange.record_id,
                }
            )
            offset += len(exchange.records)
        return chunks, locations

    @staticmethod
    def _request_record(writer: WARCWriter, exchange: Exchange) -> Any:
        parts = urlsplit(exchange.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = [("Host", parts.netloc), *exchange.request_headers.items()]
        http = StatusAndHeaders(f"GET {target} HTTP/1.1", headers, is_http_request=True)
        return writer.create_warc_record(
            exchange.url,
            "request",
            payload=io.BytesIO(b""),
            length=0,
            http_headers=http,
            warc_headers_dict={"WARC-Date": _iso(exchange.date)},
        )

    @staticmethod
    def _answer_record(writer: WARCWriter, exchange: Exchange, request: Any) -> Any:
        status = exchange.status
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        headers = [
            (f"X-Crawler-{name.title()}" if name in _WIRE_HEADERS else name.title(), value)
            for name, value in exchange.response_headers.items()
        ]
        body = b"" if status == 304 else exchange.body
        headers.append(("Content-Length", str(len(body))))
        http = StatusAndHeaders(f"{status} {reason}", headers, protocol="HTTP/1.1")
        warc_headers = {
            "WARC-Date": _iso(exchange.date),
            "WARC-Concurrent-To": request.rec_headers.get_header("WARC-Record-ID"),
        }
        if exchange.ip_address:
            warc_headers["WARC-IP-Address"] = exchange.ip_address
        if exchange.truncated:
            warc_headers["WARC-Truncated"] = exchange.truncated
        if status == 304:
            warc_headers["WARC-Profile"] = NOT_MODIFIED_PROFILE
            warc_headers["WARC-Refers-To-Target-URI"] = exchange.url
            if exchange.refers_to_date is not None:
                warc_headers["WARC-Refers-To-Date"] = _iso(exchange.refers_to_date)
            if exchange.refers_to_digest:
                warc_headers["WARC-Payload-Digest"] = f"sha1:{exchange.refers_to_digest}"
            record_type = "revisit"
        else:
            record_type = "response"
        return writer.create_warc_record(
            exchange.url,
            record_type,
            payload=io.BytesIO(body),
            length=len(body),
            http_headers=http,
            warc_headers_dict=warc_headers,
        )


def _gzip_member(record: bytes) -> bytes:
    """One record as one gzip member (what warcio writes with gzip=True, at GZIP_LEVEL)."""
    return zlib_ng.compress(record, GZIP_LEVEL, wbits=31)


def warcinfo_record(file_name: str) -> bytes:
    """The warcinfo record that opens the WARC file `file_name`, as one gzip member."""
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=True, warc_version="1.1")
    info = {"software": "crawlflow", "format": "WARC File Format 1.1"}
    writer.write_record(writer.create_warcinfo_record(file_name, info))
    return buffer.getvalue()


# A batch's file (`storage.writer` numbers batches with 6 digits) and a merged one.
_BATCH_FILE = re.compile(r"(?P<node>.+)-\d{6}" + re.escape(SUFFIX))


def _merged_file(crawl_id: str) -> re.Pattern[str]:
    return re.compile(re.escape(crawl_id) + r"-(?P<node>.+)-(?P<n>\d{5,})" + re.escape(SUFFIX))


def merged_warc_name(crawl_id: str, node: str, number: int) -> str:
    return f"{crawl_id}-{node}-{number:05d}{SUFFIX}"


def plan_warc_files(directory: Path, crawl_id: str, file_bytes: int) -> dict[str, list[Path]]:
    """The merged files to make of the batch files in `directory` (a crawl's `warc/`), each
    with the batch files it holds: per node, in batch order, a new file once the next batch
    would take it past `file_bytes` (a batch larger than that is a file of its own). Numbered
    after the node's merged files already there (a crawl resumed after its compaction)."""
    merged = _merged_file(crawl_id)
    batches: dict[str, list[Path]] = {}
    numbers: dict[str, int] = {}
    for path in sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []:
        if match := merged.fullmatch(path.name):
            node = match["node"]
            numbers[node] = max(numbers.get(node, 0), int(match["n"]))
        elif match := _BATCH_FILE.fullmatch(path.name):
            batches.setdefault(match["node"], []).append(path)
    plan: dict[str, list[Path]] = {}
    for node, paths in batches.items():
        number, size = numbers.get(node, 0), 0
        for path in paths:  # sorted by name: by batch number
            path_bytes = path.stat().st_size
            if number == numbers.get(node, 0) or size + path_bytes > file_bytes:
                number, size = number + 1, 0
            plan.setdefault(merged_warc_name(crawl_id, node, number), []).append(path)
            size += path_bytes
    return plan


def merge_warc_files(
    batch_files: list[Path], destination: Path, name: str
) -> dict[str, tuple[str, int]]:
    """Write `batch_files` as one WARC file `destination` (synced), named `name`: a warcinfo
    record, then each file's records without its own warcinfo record, byte for byte. Returns,
    for each batch file as `fetches.warc_filename` names it, the merged file's name and what
    to add to an offset into it."""
    moved: dict[str, tuple[str, int]] = {}
    with SyncedFile(destination) as sink:
        sink.write(warcinfo_record(name))
        for path in batch_files:
            with open(path, "rb") as source:
                skipped = _warcinfo_length(source)
                source.seek(skipped)
                moved[f"{WARC_DIR}/{path.name}"] = (f"{WARC_DIR}/{name}", sink.tell() - skipped)
                for chunk in iter(lambda: source.read(COPY_BYTES), b""):
                    sink.write(chunk)
    return moved


def _warcinfo_length(file: io.BufferedReader) -> int:
    """The length of the gzip member the file opens with if it is a warcinfo record (a batch
    file's always is: a few hundred bytes, read whole with the first chunk), else 0."""
    decompressor = zlib.decompressobj(wbits=31)
    chunk = file.read(1 << 16)
    try:
        head = decompressor.decompress(chunk)
    except zlib.error:
        return 0
    if not decompressor.eof or b"\r\nWARC-Type: warcinfo\r\n" not in head:
        return 0
    return len(chunk) - len(decompressor.unused_data)


def relocated(
    names: Iterable[str | None], offsets: Iterable[int | None], moved: dict[str, tuple[str, int]]
) -> tuple[list[str | None], list[int | None]]:
    """`fetches.warc_filename` and `warc_record_offset` values, pointing into the merged files
    where `moved` (of `merge_warc_files`) says their batch files went."""
    new_names: list[str | None] = []
    new_offsets: list[int | None] = []
    for name, offset in zip(names, offsets, strict=True):
        if name in moved and offset is not None:
            name, shift = moved[name]
            offset += shift
        new_names.append(name)
        new_offsets.append(offset)
    return new_names, new_offsets


def discard_uncommitted_warc(crawl_dir: Path, prefix: str = "") -> list[Path]:
    """Delete the WARC files no committed `fetches` row points into: temporary files, and the
    files of batches that never committed. Runs after the commit rule of the Parquet files
    (`storage.writer.discard_uncommitted`), so every `fetches` file left is committed.
    `prefix`: only one node's files (a takeover)."""
    directory = crawl_dir / WARC_DIR
    if not directory.is_dir():
        return []
    removed = []
    for temporary in directory.glob(f"{prefix}*{SUFFIX}.tmp"):
        temporary.unlink()
        removed.append(temporary)
    fetches = crawl_dir / "fetches"
    # A batch's rows point into the WARC file of its own name: only a file without that
    # partner (a batch that failed or died before its commit, or one compaction merged) needs
    # the rows read.
    unpartnered = [
        path
        for path in sorted(directory.glob(f"{prefix}*{SUFFIX}"))
        if not (fetches / (path.name.removesuffix(SUFFIX) + ".parquet")).exists()
    ]
    if unpartnered:
        referenced = _referenced_warc_files(fetches)
        for path in unpartnered:
            if f"{WARC_DIR}/{path.name}" not in referenced:
                path.unlink()
                removed.append(path)
    return removed


def _referenced_warc_files(fetches: Path) -> set[str]:
    """The WARC files the rows of the (whole) `fetches` files point into."""
    names: set[str] = set()
    for path in sorted(fetches.glob("*.parquet")):
        if not is_whole_parquet(path) or "warc_filename" not in pq.read_schema(path).names:
            continue
        column = pq.read_table(path, columns=["warc_filename"]).column(0)
        names.update(name for name in column.unique().to_pylist() if name)
    return names


class RecordNotFound(LookupError):
    """No WARC record of that URL in the crawl output."""


def newest_record(con: Any, directory: str | Path, url: str) -> tuple[str, str, int, int]:
    """The crawl id, WARC file name (`warc/<name>`), offset and length of the newest record of
    `url` in the `fetches` view of `con` (over `directory`, as the user named it)."""
    import duckdb

    try:
        rows = con.execute(
            "SELECT crawl_id, warc_filename, warc_record_offset, warc_record_length FROM fetches "
            "WHERE url = ? AND warc_filename IS NOT NULL ORDER BY fetch_time DESC LIMIT 1",
            [url],
        ).fetchall()
    except duckdb.BinderException:  # output written before WARC support: no such columns
        rows = []
    if not rows:
        raise RecordNotFound(f"no WARC record of {url} under {directory}")
    crawl_id, filename, offset, length = rows[0]
    return str(crawl_id), str(filename), offset, length


def check_place(url: str, filename: str, offset: int, length: int) -> None:
    if offset < 0 or not 0 < length <= MAX_RECORD_BYTES:
        raise RecordNotFound(f"the WARC record of {url} has no valid place in {filename}")


def locate_record(con: Any, directory: Path, url: str) -> tuple[Path, int, int]:
    """The WARC file, offset and length of the newest record of `url` in the `fetches` view of
    `con` (over `directory`, a crawl directory or the output root)."""
    crawl_id, filename, offset, length = newest_record(con, directory, url)
    # The row names a file of its own crawl's warc/ directory, never one elsewhere (a row is
    # data, and an output directory may come from anywhere).
    crawl_dir = directory if (directory / filename).exists() else directory / str(crawl_id)
    path = (crawl_dir / filename).resolve()
    if path.parent != (crawl_dir / WARC_DIR).resolve() or not path.name.endswith(SUFFIX):
        raise RecordNotFound(f"the WARC file {filename!r} of crawl {crawl_id} is not its own")
    if not path.is_file():
        raise RecordNotFound(f"the WARC file {filename} of crawl {crawl_id} is missing")
    check_place(url, filename, offset, length)
    return path, offset, length


def read_record(path: Path, offset: int, length: int) -> bytes:
    """One record, uncompressed: WARC headers, HTTP headers and payload as stored. Raises
    RecordNotFound when the file cannot give it (damaged, truncated, or not where it was)."""
    where = f"{path}:{offset} (+{length})"
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            member = file.read(length)
    except OSError as exc:
        raise RecordNotFound(f"the WARC record at {where} cannot be read: {exc}") from None
    return decompress_record(member, length, where)


def decompress_record(member: bytes, length: int, where: str) -> bytes:
    """A record's gzip member, read as `length` bytes at `where` (for the error), uncompressed."""
    try:
        if len(member) < length:
            raise EOFError("the file ends before the record does")
        # One gzip member, decompressed up to a bound: a record never holds more than a body
        # the fetch limits allow, and a member that says otherwise is no record of ours.
        decompressor = zlib.decompressobj(wbits=31)
        record = decompressor.decompress(member, MAX_RECORD_BYTES)
        if decompressor.unconsumed_tail:
            raise EOFError(f"the record decompresses to more than {MAX_RECORD_BYTES} bytes")
        return record
    except (EOFError, zlib.error) as exc:
        raise RecordNotFound(f"the WARC record at {where} cannot be read: {exc}") from None
