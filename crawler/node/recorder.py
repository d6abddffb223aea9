"""The node's output: typed rows (storage/schema.py) for every attempt, written in committed
batches (storage/writer.py), with the WARC record of each answer when asked."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

from resiliparse.parse.encoding import detect_mime

from crawler.content.ccindex import url_columns
from crawler.content.extract import Extractor, Page
from crawler.content.text import MainText, main_text
from crawler.fetching.fetcher import FetchResult
from crawler.fetching.links import ParsedPage
from crawler.node.archive import exchange_of, truncation
from crawler.node.core import NodeCore
from crawler.scheduling.recrawl import KnownUrl
from crawler.scheduling.server import Item
from crawler.scheduling.urlqueue import UrlTask
from errors import FetchError, internal_error
from storage.schema import (
    COMMITTED_DATASETS,
    DATASETS,
    DiscoveredRow,
    ExtractRow,
    FetchRow,
    PageRow,
)
from storage.warc import WarcBatchWriter
from storage.writer import CommitGroupWriter, OutputFailed, Publisher

logger = logging.getLogger(__name__)

# Pages whose rows are made off the fetch path at once (see `Recorder.fetch_later`), and how
# many may be handed over in all, those being recorded included: each holds its body and its
# links beside the pages the connections hold, so they are few (a page that finds them all
# taken is recorded on the fetch path, as before; docs/scheduling.md#bounds).
RECORD_WORKERS = 2
RECORD_WAITING = 4
# A page with more links than this is recorded on the fetch path: its rows (one per link) are
# memory more than CPU, and handed over they would wait beside the pages the connections hold.
RECORD_MAX_LINKS = 1000


class Recorder:
    """Counts what it writes in the node's `fetches` counter."""

    def __init__(self, core: NodeCore, crawl_dir: Path, publisher: Publisher | None = None) -> None:
        """`publisher`: where committed batches go besides `crawl_dir` (object storage)."""
        self._core = core
        self.node_id = node_id = core.node_id
        self.crawl_id = core.crawl_id
        self._revisits = core.revisits
        config = core.config
        self._warc = config.output.warc
        self._content = config.content
        extractor = Extractor(config.extract)
        self._extractor = extractor if extractor.active else None
        # Fetches last: a batch counts once its fetches file exists (see CommitGroupWriter).
        self.output = CommitGroupWriter(
            {name: (crawl_dir / name, DATASETS[name]) for name in COMMITTED_DATASETS},
            prefix=node_id,
            batch_rows=config.output.write_batch_rows,
            interval_s=config.output.write_interval_s,
            archive=WarcBatchWriter(crawl_dir) if config.output.warc else None,
            publisher=publisher,
        )
        self._workers = ThreadPoolExecutor(RECORD_WORKERS, thread_name_prefix=f"{node_id}-record")
        self._slots = threading.BoundedSemaphore(RECORD_WAITING)
        # Pages handed over and not recorded yet, by their number in the order handed over.
        self._numbers = itertools.count()
        self._pending: set[int] = set()
        self._idle = threading.Condition()
        self._failure: OutputFailed | None = None

    def fetch_later(
        self,
        result: FetchResult,
        task: UrlTask,
        error: FetchError | None,
        page: ParsedPage | None,
        discovered: list[Item] | None,
    ) -> None:
        """`fetch`, on a worker of its own: a page's rows (its main text, its WARC record)
        cost milliseconds of CPU, which on the fetch path would delay the server's next request
        by as much (a fast server back to back at 30 pages/s instead of 40). The rows carry the
        time of this call. A full queue records the page here. `flush` waits for the pages
        handed over before it; an output failure on a worker is raised by the next call, and a
        bug that one page sets off there gives its URL an internal_error row, as on the fetch
        path. A page with [extract] fields is recorded here: its parsed document (lxml, about
        40 times the page's size), which they read, must not wait beside those the connections
        hold; so is a page of more than RECORD_MAX_LINKS links."""
        if self._failure is not None:
            raise self._failure
        fetch_time = datetime.now(UTC)
        inline = page is not None and (
            self._extractor is not None or len(page.links) > RECORD_MAX_LINKS
        )
        if inline or not self._slots.acquire(blocking=False):
            self.fetch(result, task, error, page, discovered, fetch_time)
            return
        if page is not None:
            page = replace(page, root=None)  # only [extract] reads the document
        with self._idle:
            number = next(self._numbers)
            self._pending.add(number)
        record = partial(self.fetch, result, task, error, page, discovered, fetch_time)
        self._workers.submit(self._record, record, task, number)

    def _record(self, record: Callable[[], None], task: UrlTask, number: int) -> None:
        try:
            record()
        except OutputFailed as exc:
            self._failure = exc
        except Exception as exc:
            # As on the fetch path (crawler/node/fetchloop.py): a bug that one page sets off
            # costs that URL, recorded as such, not the node.
            logger.exception("recording %s failed", task.url)
            try:
                self.unfetched([task], internal_error(exc))
            except OutputFailed as failed:
                self._failure = failed
        finally:
            self._slots.release()
            with self._idle:
                self._pending.discard(number)
                self._idle.notify_all()

    def wait_pending(self) -> None:
        """Until every page handed to `fetch_later` so far has its rows (committed or
        buffered); pages handed over meanwhile are not waited for, so a busy node's flush
        ends."""
        with self._idle:
            last = next(self._numbers) - 1  # a number skipped: none is handed over with it
            self._idle.wait_for(lambda: min(self._pending, default=last + 1) > last)

    def stop_workers(self) -> None:
        """Once the node's fetching has stopped: every page handed over recorded, no worker
        left."""
        self._workers.shutdown(wait=True)

    def fetch(
        self,
        result: FetchResult,
        task: UrlTask,
        error: FetchError | None,
        page: ParsedPage | None = None,
        discovered: list[Item] | None = None,
        fetch_time: datetime | None = None,
    ) -> None:
        """Write one attempt's rows (`fetch_time`: when it was fetched, by default now); a
        fetch, its page and the links found on it always land in the same batch, so a crash
        never keeps a page while losing its links. A 304 stands for the earlier capture: its
        row carries that capture's digest, and the validators it confirmed unless it sent new
        ones."""
        fetch_time = fetch_time or datetime.now(UTC)
        earlier = self._revisits.known(result.url) if self._revisits else None
        if not result.not_modified:
            earlier = None
        fetch_row = self._fetch_row(result, task, fetch_time, error, earlier)
        page_rows: list[PageRow] = []
        extract_rows: list[ExtractRow] = []
        if page is not None:
            # A page is a 200: its fetch row's digest is its body's (hashed once).
            digest = fetch_row["content_digest"]
            page_row, extract_rows = self._page_rows(result, task, fetch_time, page, digest)
            page_rows.append(page_row)
            fetch_row["content_charset"] = page_row["content_charset"]
            fetch_row["content_languages"] = page_row["content_languages"]
        discovered_rows: list[DiscoveredRow] = [
            {"crawl_id": self.crawl_id, "url": url, "depth": depth, "node_id": self.node_id}
            for url, depth in discovered or []
        ]
        self.output.record(
            {
                "discovered": discovered_rows,
                "pages": page_rows,
                "extracts": extract_rows,
                "fetches": [fetch_row],
            },
            exchange_of(result, fetch_time, earlier) if self._warc else None,
        )
        self._core.count_fetch_rows(1)

    def _page_rows(
        self,
        result: FetchResult,
        task: UrlTask,
        fetch_time: datetime,
        page: ParsedPage,
        digest: str | None,
    ) -> tuple[PageRow, list[ExtractRow]]:
        """The pages row of an HTML page, and its [extract] fields. A page that says noindex
        keeps its row and head facts but not its content, text or fields, when [content]
        honours it."""
        decoded = result.decoded
        head = page.head
        hidden = "noindex" in page.robots and self._content.honour_noindex
        text: MainText | None = None
        if self._content.main_text and not hidden:
            text = main_text(decoded.text)
        url = url_columns(result.url)
        row: PageRow = {
            "crawl_id": self.crawl_id,
            "url": result.url,
            "url_host_name": url["url_host_name"],
            "fetch_time": fetch_time,
            "content_digest": digest,
            "content_length": len(result.body),
            "title": page.title,
            "outlink_count": len(page.links),
            "depth": task.depth,
            "node_id": self.node_id,
            "content": None if hidden else decoded.text,
            "url_server": url["url_server"],
            "content_charset": decoded.charset,
            "content_languages": None if text is None else text.languages,
            "text": None if text is None else text.text,
            "text_simhash": None if text is None else text.simhash,
            "canonical": head.canonical,
            "meta_description": head.meta_description,
            "meta_robots": head.meta_robots,
            "x_robots_tag": result.headers.get("x-robots-tag"),
            "noindex": "noindex" in page.robots,
            "nofollow": "nofollow" in page.robots,
            "hreflang": [{"lang": lang, "url": link} for lang, link in head.hreflang],
            "meta_refresh": head.meta_refresh,
        }
        if self._extractor is None or hidden:
            return row, []
        status = result.status if result.status is not None else 0
        fields = self._extractor.fields(
            Page(result.url, status, result.headers, decoded.text, page.root)
        )
        extracts: list[ExtractRow] = [
            {
                "crawl_id": self.crawl_id,
                "url": result.url,
                "fetch_time": fetch_time,
                "node_id": self.node_id,
                "field": field.name,
                "value": field.value,
                "error": field.error,
            }
            for field in fields
        ]
        return row, extracts

    def unfetched(self, tasks: list[UrlTask], error: FetchError) -> None:
        """One fetches row per URL not fetched (refused, skipped, failed before a request),
        written as one batch."""
        now = datetime.now(UTC)
        rows = [self._fetch_row(FetchResult(task.url), task, now, error, None) for task in tasks]
        self.output.record({"fetches": rows})
        self._core.count_fetch_rows(len(rows))

    def _fetch_row(
        self,
        result: FetchResult,
        task: UrlTask,
        fetch_time: datetime,
        error: FetchError | None,
        earlier: KnownUrl | None,
    ) -> FetchRow:
        """The fetches row of one attempt; `earlier`: the capture a 304 stands for."""
        parts = urlsplit(result.url)
        answered = result.status is not None
        row: FetchRow = {
            "crawl_id": self.crawl_id,
            "url": result.url,
            "url_host_name": parts.netloc,
            "url_path": parts.path,
            "fetch_time": fetch_time,
            "fetch_status": result.status,
            "fetch_redirect": result.headers.get("location"),
            "error": None if error is None else str(error),
            "content_mime_type": result.mime_type,
            "content_charset": result.charset,
            "content_length": len(result.body) if answered else None,
            "content_digest": earlier.digest if earlier else result.digest,
            "rtt_ms": None if result.rtt_s is None else result.rtt_s * 1000.0,
            "connect_ms": None if result.handshake_s is None else result.handshake_s * 1000.0,
            "node_id": self.node_id,
            "depth": task.depth,
            "attempt": task.attempt,
            "etag": result.headers.get("etag") or (earlier.etag if earlier else None),
            "last_modified": result.headers.get("last-modified")
            or (earlier.last_modified if earlier else None),
            "url_server": parts.netloc,
            "url_surtkey": None,
            "url_host_registered_domain": None,
            "url_host_tld": None,
            "url_protocol": None,
            "url_port": None,
            "url_query": None,
            "content_mime_detected": detect_mime(result.body) if answered else None,
            "content_languages": None,
            "content_truncated": truncation(result),
        }
        row.update(url_columns(result.url))  # type: ignore[typeddict-item]
        return row

    def flush(self) -> None:
        self.wait_pending()
        if self._failure is not None:
            raise self._failure
        self.output.flush()

    def uncommitted_urls(self) -> list[str]:
        """The URLs of the fetches rows not committed yet (what a node's death loses)."""
        return [row["url"] for row in self.output.buffered("fetches")]
