"""The node's pure parts, without a server: what a fetch comes to (crawler/node/outcome.py),
the rows it writes against their Parquet schemas, the error classes' stable strings, and a
server's state moving between nodes whole."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pyarrow.parquet as pq
import pytest

from crawler.config import CrawlConfig
from crawler.fetching.fetcher import FetchResult
from crawler.fetching.links import ParsedPage, parse_html
from crawler.node.core import NodeCore
from crawler.node.outcome import outcome_of
from crawler.node.recorder import RECORD_MAX_LINKS, Recorder
from crawler.node.settings import NodeSettings
from crawler.scheduling.urlqueue import UrlTask
from errors import DEADLINE, ErrorClass, FetchError, family_errors, is_retryable
from storage.outcomes import is_final
from storage.schema import DATASETS, ROW_TYPES
from storage.writer import OutputFailed

URL = "http://a.example/page"
HTML = {"content-type": "text/html; charset=utf-8"}


def result(status: int | None, error: FetchError | None = None, **headers: str) -> FetchResult:
    body = b'<html><title>T</title><a href="/next">n</a><a href="http://b.example/">b</a>'
    return FetchResult(URL, status=status, error=error, headers={**HTML, **headers}, body=body)


def test_a_page_gives_its_title_and_canonical_links_and_keeps_the_connection():
    outcome = outcome_of(result(200), attempt=1, retry_in=None, hops=0, max_redirects=10)
    assert outcome.error is None and outcome.failed is False and outcome.keep_connection
    assert outcome.page is not None and outcome.page.title == "T"
    assert outcome.page.links == ["http://a.example/next", "http://b.example/"]


def test_a_retry_ends_the_connection_and_is_no_failure_yet():
    timeout = FetchError(ErrorClass.READ_TIMEOUT, "slow")
    outcome = outcome_of(result(None, timeout), attempt=1, retry_in=2.5, hops=0, max_redirects=10)
    assert (outcome.retry_in, outcome.failed, outcome.keep_connection) == (2.5, None, False)
    assert outcome.error == timeout and outcome.page is None


@pytest.mark.parametrize(
    ("status", "error", "row_error"),
    [
        (503, None, "gave_up: 503 after 4 tries"),
        (
            None,
            FetchError(ErrorClass.CONNECT_TIMEOUT, "x"),
            "gave_up: connect_timeout: x after 4 tries",
        ),
    ],
)
def test_the_last_try_of_a_url_that_kept_failing_is_given_up(status, error, row_error):
    outcome = outcome_of(result(status, error), attempt=4, retry_in=None, hops=0, max_redirects=3)
    assert str(outcome.error) == row_error
    assert outcome.failed is True and outcome.retry_in is None and outcome.page is None
    assert is_final(status, str(outcome.error))


def test_dead_links_count_against_their_family_and_other_errors_do_not():
    assert outcome_of(result(404), 1, None, 0, 10).failed is True
    assert outcome_of(result(410), 1, None, 0, 10).failed is True
    assert outcome_of(result(403), 1, None, 0, 10).failed is False
    not_html = FetchError(ErrorClass.NOT_HTML, "binary")
    assert outcome_of(result(200, not_html), 1, None, 0, 10).failed is False


def test_a_redirect_is_followed_until_max_redirects_in_a_row():
    moved = result(301, location="/there")
    outcome = outcome_of(moved, attempt=1, retry_in=None, hops=2, max_redirects=3)
    assert outcome.follow == "/there" and outcome.error is None and outcome.page is None
    outcome = outcome_of(moved, attempt=1, retry_in=None, hops=3, max_redirects=3)
    assert outcome.follow is None
    assert str(outcome.error) == "too_many_redirects: 3 in a row, not to /there"
    assert outcome_of(result(302), 1, None, 0, 3).follow is None  # no Location


def test_a_connection_the_server_closes_is_not_kept():
    assert not outcome_of(result(200, connection="close"), 1, None, 0, 10).keep_connection


def test_error_strings_are_the_stable_output():
    assert str(DEADLINE) == "skipped: deadline"
    assert str(family_errors("/cal/*/")) == "skipped: pattern_errors: /cal/*/"
    assert str(FetchError(ErrorClass.ROBOTS_DISALLOWED)) == "robots_disallowed"
    assert str(FetchError(ErrorClass.HTTP_ERROR, "")) == "http_error: "
    assert ErrorClass.of("trap: 3 URLs like /x") is ErrorClass.TRAP
    assert ErrorClass.of("no_such_class: x") is None and ErrorClass.of(None) is None
    assert is_retryable(None, "read_timeout: x") and not is_retryable(None, "trap: x")
    assert not is_final(503, None) and is_final(503, "gave_up: 503 after 4 tries")


def test_each_row_type_has_exactly_its_datasets_columns():
    for name, row_type in ROW_TYPES.items():
        assert list(row_type.__annotations__) == DATASETS[name].names, name


def test_a_server_moves_between_nodes_whole(two_nodes):
    """Pickled as Ray would: its queue (with each URL's depth inside the server), seen set,
    redirect hops and limit counts arrive; the sender forgets it."""
    host = "127.0.0.1:9"  # loopback, nothing listens: the nodes are never started
    config = CrawlConfig()
    sender, receiver = two_nodes(config, host)
    sender.add_urls([(f"http://{host}/a", 0)])
    source = UrlTask(f"http://{host}/a", 0, host_depth=2)
    found = sender.discovery.discover([f"http://{host}/b"], source, 1, [], redirects=1)
    assert found == [(f"http://{host}/b", 1)]
    assert sender.core.limits.admit(sender.core.servers[host].limits, f"http://{host}/c") is None

    (state,) = sender.export_hosts(want_urls=10, max_urls=10)
    assert host not in sender.core.servers and sender.status().servers == 0
    receiver.adopt_hosts(pickle.loads(pickle.dumps([state])))

    server = receiver.core.servers[host]
    assert server.seen == {f"http://{host}/a", f"http://{host}/b"}
    assert server.redirects == {f"http://{host}/b": 1}
    assert server.limits.pages == 1
    assert receiver.core.limits.admit(server.limits, f"http://{host}/d") is None
    assert server.limits.pages == 2  # the counts that came along are the ones counted
    tasks = {task.url: task.host_depth for task in server.queue.drain()}
    assert tasks == {f"http://{host}/a": 0, f"http://{host}/b": 3}


# ---- the record workers: a page's rows off the fetch path (crawler/node/recorder.py) --------


def make_recorder(tmp_path, config: CrawlConfig) -> Recorder:
    settings = NodeSettings(
        node_id="n0",
        crawl_id="c",
        out_dir=str(tmp_path),
        config=config,
        hosts=[RECORDER_HOST],
        scope_hosts=[RECORDER_HOST],
        allow_private=True,
        page_budget=None,
        revisits=None,
    )
    return Recorder(NodeCore(settings), tmp_path / "c")


RECORDER_HOST = "127.0.0.1:9"  # no request is made: the answers are made up here


def answered_page(number: int) -> tuple[FetchResult, ParsedPage]:
    url = f"http://{RECORDER_HOST}/{number}"
    body = f"<html><title>page {number}</title><p>text of page {number}</p></html>".encode()
    headers = {"content-type": "text/html; charset=utf-8"}
    return FetchResult(url, 200, headers=headers, body=body), parse_html(body, url)


def test_pages_handed_to_the_record_workers_all_land_by_the_flush(tmp_path):
    recorder = make_recorder(tmp_path, CrawlConfig(output={"warc": False}))
    for number in range(40):
        result, page = answered_page(number)
        recorder.fetch_later(result, UrlTask(result.url, 0), None, page, [])
    recorder.flush()
    recorder.stop_workers()
    rows = pq.read_table(tmp_path / "c" / "pages").to_pylist()
    assert sorted(row["title"] for row in rows) == sorted(f"page {n}" for n in range(40))
    assert {row["text"] for row in rows} == {f"text of page {n}" for n in range(40)}


def test_an_output_failure_on_a_record_worker_stops_the_node_at_the_next_call(tmp_path):
    recorder = make_recorder(tmp_path, CrawlConfig(output={"warc": False}))

    def full_disk(*args, **kwargs):
        raise OutputFailed("no space left on device")

    recorder.output.record = full_disk
    result, page = answered_page(0)
    recorder.fetch_later(result, UrlTask(result.url, 0), None, page, [])
    with pytest.raises(OutputFailed):
        recorder.flush()
    with pytest.raises(OutputFailed):
        recorder.fetch_later(result, UrlTask(result.url, 0), None, page, [])
    recorder.stop_workers()


def test_a_page_of_many_links_is_recorded_on_the_fetch_path(tmp_path):
    # Its rows, one per link, are memory: handed over, they would wait beside the pages the
    # connections hold.
    recorder = make_recorder(tmp_path, CrawlConfig(output={"warc": False}))
    result, page = answered_page(0)
    links = [f"http://{RECORDER_HOST}/link/{n}" for n in range(RECORD_MAX_LINKS + 1)]
    discovered = [(link, 1) for link in links]
    recorder.fetch_later(
        result, UrlTask(result.url, 0), None, replace(page, links=links), discovered
    )
    assert [row["url"] for row in recorder.output.buffered("fetches")] == [result.url]
    recorder.flush()
    recorder.stop_workers()


def test_a_page_with_extract_fields_is_recorded_on_the_fetch_path(tmp_path):
    # Its fields read the parsed document, which must not wait on the workers' queue.
    config = CrawlConfig(output={"warc": False}, extract={"xpath": {"heading": "//title"}})
    recorder = make_recorder(tmp_path, config)
    result, page = answered_page(0)
    recorder.fetch_later(result, UrlTask(result.url, 0), None, page, [])
    assert [row["url"] for row in recorder.output.buffered("fetches")] == [result.url]
    recorder.flush()
    recorder.stop_workers()
    (row,) = pq.read_table(tmp_path / "c" / "extracts").to_pylist()
    assert row["value"] == "page 0"


def test_a_bug_on_a_record_worker_costs_that_url_recorded_as_such(tmp_path, monkeypatch):
    # As on the fetch path: the URL gets an internal_error row, and the node goes on.
    recorder = make_recorder(tmp_path, CrawlConfig(output={"warc": False}))

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(recorder, "_page_rows", broken)
    result, page = answered_page(0)
    recorder.fetch_later(result, UrlTask(result.url, 0), None, page, [])
    recorder.flush()
    recorder.stop_workers()
    (row,) = pq.read_table(tmp_path / "c" / "fetches").to_pylist()
    assert row["url"] == result.url
    assert row["error"] == "internal_error: RuntimeError: boom"
