"""WARC/1.1 output (warcio): one gzip member per record, one file per node batch.

Each fetch that got an HTTP answer is archived as a `request` record and either a `response`
record or, for a 304 Not Modified, a `revisit` record of the WARC 1.1 `server-not-modified`
profile. The `fetches` row of the fetch names the response (or revisit) record the way Common
Crawl's index does: `warc_filename` (relative to the crawl directory), `warc_record_offset`
and `warc_record_length` (bytes of the gzip member), so one ranged read finds it.

Crash safety follows the Parquet batches (`storage.writer`): the records of batch
`<node>-<n>` go to `warc/<node>-<n>.warc.gz.tmp`, which is renamed into place before the
batch's Parquet files are; the batch commits with its `fetches` file as before. So a committed
row's WARC file always exists, and a WARC file without its `fetches` file is a half-written
batch, which `discard_uncommitted_warc` removes. Compaction merges only the Parquet files and
leaves the WARC files as they are, so the offsets stay valid.

Bodies are archived as the crawler received them after undoing any Content-Encoding (gzip,
br): the record's HTTP headers drop `Content-Encoding` and `Transfer-Encoding` and give the
decoded `Content-Length`, so every record is readable on its own.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import pyarrow.parquet as pq
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

WARC_DIR = "warc"
SUFFIX = ".warc.gz"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
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


def warc_name(batch_file: str) -> str:
    """`node-0-000001.parquet` -> `node-0-000001.warc.gz`: a batch's WARC file."""
    return batch_file.removesuffix(".parquet") + SUFFIX


def _iso(date: datetime) -> str:
    return date.isoformat(timespec="microseconds").replace("+00:00", "Z")


class WarcBatchWriter:
    """Appends exchanges to the WARC file of the current batch; `commit` puts it in place."""

    def __init__(self, crawl_dir: Path) -> None:
        self.directory = crawl_dir / WARC_DIR
        self.directory.mkdir(parents=True, exist_ok=True)
        self._name: str | None = None
        self._file: IO[bytes] | None = None
        self._writer: WARCWriter | None = None

    def append(self, batch_file: str, exchange: Exchange) -> dict[str, Any]:
        """Write the exchange's records; returns the `fetches` columns that locate the response
        (or revisit) record."""
        name = warc_name(batch_file)
        if self._name != name:
            self._open(name)
        assert self._writer is not None and self._file is not None
        request = self._request_record(exchange)
        self._writer.write_record(request)
        offset = self._file.tell()
        self._writer.write_record(self._answer_record(exchange, request))
        return {
            "warc_filename": f"{WARC_DIR}/{name}",
            "warc_record_offset": offset,
            "warc_record_length": self._file.tell() - offset,
        }

    def commit(self, batch_file: str) -> None:
        """Rename the batch's WARC file into place (before its Parquet files are written)."""
        name = warc_name(batch_file)
        if self._name != name or self._file is None:
            return
        self._file.close()
        os.replace(self.directory / f"{name}.tmp", self.directory / name)
        self._name = self._file = self._writer = None

    def _open(self, name: str) -> None:
        if self._file is not None:  # a batch that had no rows to commit: never happens twice
            self._file.close()
        self._file = open(self.directory / f"{name}.tmp", "wb")  # noqa: SIM115 (kept open)
        self._writer = WARCWriter(self._file, gzip=True, warc_version="1.1")
        self._name = name
        info = self._writer.create_warcinfo_record(
            name, {"software": "crawlflow", "format": "WARC File Format 1.1"}
        )
        self._writer.write_record(info)

    def _request_record(self, exchange: Exchange) -> Any:
        parts = urlsplit(exchange.url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = [("Host", parts.netloc), *exchange.request_headers.items()]
        http = StatusAndHeaders(f"GET {target} HTTP/1.1", headers, is_http_request=True)
        assert self._writer is not None
        return self._writer.create_warc_record(
            exchange.url,
            "request",
            payload=io.BytesIO(b""),
            length=0,
            http_headers=http,
            warc_headers_dict={"WARC-Date": _iso(exchange.date)},
        )

    def _answer_record(self, exchange: Exchange, request: Any) -> Any:
        status = exchange.status
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        headers = [
            (name.title(), value)
            for name, value in exchange.response_headers.items()
            if name not in _WIRE_HEADERS
        ]
        body = b"" if status == 304 else exchange.body
        headers.append(("Content-Length", str(len(body))))
        http = StatusAndHeaders(f"{status} {reason}", headers, protocol="HTTP/1.1")
        warc_headers = {
            "WARC-Date": _iso(exchange.date),
            "WARC-Concurrent-To": request.rec_headers.get_header("WARC-Record-ID"),
        }
        if exchange.truncated:
            warc_headers["WARC-Truncated"] = exchange.truncated
        assert self._writer is not None
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
        return self._writer.create_warc_record(
            exchange.url,
            record_type,
            payload=io.BytesIO(body),
            length=len(body),
            http_headers=http,
            warc_headers_dict=warc_headers,
        )


def discard_uncommitted_warc(crawl_dir: Path, prefix: str = "") -> list[Path]:
    """Delete WARC files of batches that never committed: temporary files, and files whose
    `fetches` batch file is missing unless a compacted `fetches` file refers to them (a
    compaction merged their batch). `prefix`: only one node's files (a takeover)."""
    directory = crawl_dir / WARC_DIR
    if not directory.is_dir():
        return []
    removed = []
    for temporary in directory.glob(f"{prefix}*{SUFFIX}.tmp"):
        temporary.unlink()
        removed.append(temporary)
    fetches = crawl_dir / "fetches"
    referenced: set[str] | None = None
    for path in directory.glob(f"{prefix}*{SUFFIX}"):
        if (fetches / (path.name.removesuffix(SUFFIX) + ".parquet")).exists():
            continue
        if referenced is None:
            referenced = _referenced_by_compacted(fetches)
        if f"{WARC_DIR}/{path.name}" not in referenced:
            path.unlink()
            removed.append(path)
    return removed


def _referenced_by_compacted(fetches: Path) -> set[str]:
    names: set[str] = set()
    for path in fetches.glob("compacted-*.parquet"):
        if "warc_filename" in pq.read_schema(path).names:
            column = pq.read_table(path, columns=["warc_filename"]).column(0)
            names.update(name for name in column.unique().to_pylist() if name)
    return names


class RecordNotFound(LookupError):
    """No WARC record of that URL in the crawl output."""


def locate_record(con: Any, directory: Path, url: str) -> tuple[Path, int, int]:
    """The WARC file, offset and length of the newest record of `url` in the `fetches` view of
    `con` (over `directory`, a crawl directory or the output root)."""
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
    path = directory / filename
    if not path.exists():  # the output root: files are under their crawl's directory
        path = directory / crawl_id / filename
    if not path.exists():
        raise RecordNotFound(f"the WARC file {filename} of crawl {crawl_id} is missing")
    return path, offset, length


def read_record(path: Path, offset: int, length: int) -> bytes:
    """One record, uncompressed: WARC headers, HTTP headers and payload as stored. Raises
    RecordNotFound when the file cannot give it (damaged, truncated, or not where it was)."""
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            member = file.read(length)
        if len(member) < length:
            raise EOFError("the file ends before the record does")
        return gzip.decompress(member)
    except (OSError, EOFError, zlib.error) as exc:
        raise RecordNotFound(
            f"the WARC record at {path}:{offset} (+{length}) cannot be read: {exc}"
        ) from None
