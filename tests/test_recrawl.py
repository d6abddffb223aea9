"""Incremental recrawl through the real flow: night 2 revisits night 1's URLs with conditional
GETs, records 304s (as WARC revisit records), catches exactly the pages that changed (also on
servers whose validators are missing or wrong), and `pages` answers per night."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawlflow.cli import main
from storage.manifest import read_manifest
from storage.views import connect
from websim import WebSim, WebSpec
from websim.changes import GOOD

pytestmark = pytest.mark.integration  # websim, Ray and Prefect


@pytest.fixture(scope="module")
def nights(ray_session, prefect_api, tmp_path_factory):
    from crawler.request import CrawlRequest
    from flows.crawl import crawl

    spec = WebSpec(
        hosts=8,
        pages=400,
        seed=21,
        rate_limit_rps=None,
        latency_ms=(0.5, 1.0),
        change_share=0.3,
        validator_fault_share=0.6,
    )
    out = tmp_path_factory.mktemp("nights")
    with WebSim(spec) as sim:
        kinds = set(sim.changes.validators)
        assert GOOD in kinds and len(kinds) >= 3, kinds
        args = {
            "seeds": [sim.hub_url],
            "allow": sim.servers,
            "allow_private": True,
            "nodes": 1,
            "out_dir": str(out),
        }
        crawl(CrawlRequest(**args, crawl_id="night-1"))
        changed = sim.advance_night() & sim.reachable_allowed_urls()
        summary = crawl(CrawlRequest(**args, crawl_id="night-2"))
        yield sim, out, changed, summary


def digests(con, crawl_id: str, status: str = "= 200") -> dict[str, str]:
    return dict(
        con.execute(
            "SELECT url, content_digest FROM fetches WHERE crawl_id = ? AND fetch_status "
            + status
            + " AND url NOT LIKE '%/robots.txt'",
            [crawl_id],
        ).fetchall()
    )


def test_night_two_revisits_everything_and_catches_exactly_the_changes(nights):
    sim, out, changed, summary = nights
    assert read_manifest(out / "night-2").since == "night-1"
    con = connect(out)
    first = digests(con, "night-1")
    second = {**digests(con, "night-2"), **digests(con, "night-2", "= 304")}
    assert len(first) > 300 and set(second) == set(first)
    caught = {url for url, digest in second.items() if digest != first[url]}
    assert len(changed) > 30
    assert caught == changed
    # 304s only from servers with working validators, and only for unchanged pages.
    not_modified = set(digests(con, "night-2", "= 304"))
    hosts = {
        f"{h.address}:{sim.port}": kind
        for h, kind in zip(sim.web.hosts, sim.changes.validators, strict=True)
    }
    assert not_modified and not (not_modified & changed)
    assert {hosts[url.split("/")[2]] for url in not_modified} == {GOOD}
    good_unchanged = {
        url for url in first if hosts[url.split("/")[2]] == GOOD and url not in changed
    }
    assert not_modified == good_unchanged - {sim.hub_url}
    assert summary["not_modified"] == len(not_modified)
    bytes_per_night = dict(
        con.execute(
            "SELECT crawl_id, sum(content_length) FROM fetches GROUP BY crawl_id"
        ).fetchall()
    )
    assert bytes_per_night["night-2"] < bytes_per_night["night-1"]


def test_pages_view_answers_per_night(nights):
    sim, out, changed, _ = nights
    night_2 = connect(out / "night-2")
    rows = night_2.execute("SELECT url, content_digest, content FROM pages").fetchall()
    html_night_1 = connect(out / "night-1").execute("SELECT url FROM pages").fetchall()
    assert {url for url, _, _ in rows} == {url for (url,) in html_night_1}
    assert len(rows) == len(html_night_1)
    # Each row is what the server serves tonight, whether downloaded or confirmed by a 304.
    import requests

    session = requests.Session()
    for url, _, content in rows[:: max(1, len(rows) // 40)]:
        assert session.get(url).text == content
    # Over the output root, night 1 still shows the old content of the changed pages.
    root = connect(out)
    for url in sorted(changed)[:5]:
        old, new = (
            root.execute(
                "SELECT content_digest FROM pages WHERE url = ? AND crawl_id = ?", [url, night]
            ).fetchall()
            for night in ("night-1", "night-2")
        )
        assert old and new and old != new


def test_a_304_is_archived_as_a_revisit_record(nights):
    _, out, _, _ = nights
    con = connect(out / "night-2")
    url, digest, filename, offset, length = con.execute(
        "SELECT url, content_digest, warc_filename, warc_record_offset, warc_record_length "
        "FROM fetches WHERE fetch_status = 304 LIMIT 1"
    ).fetchall()[0]
    with open(out / "night-2" / filename, "rb") as file:
        file.seek(offset)
        record = next(iter(ArchiveIterator(io.BytesIO(file.read(length)))))
    assert record.rec_type == "revisit"
    assert record.rec_headers.get_header("WARC-Profile").endswith("/server-not-modified")
    assert record.rec_headers.get_header("WARC-Payload-Digest") == f"sha1:{digest}"
    assert record.rec_headers.get_header("WARC-Target-URI") == url
    # The request record before it carried the validators.
    with open(out / "night-2" / filename, "rb") as file:
        requests_sent = [
            r.http_headers
            for r in ArchiveIterator(file)
            if r.rec_type == "request" and r.rec_headers.get_header("WARC-Target-URI") == url
        ]
    assert requests_sent[-1].get_header("If-None-Match")


def test_since_must_name_an_earlier_crawl(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "crawl",
                "http://127.0.0.1:9/",
                "--allow-private",
                "--out",
                str(tmp_path),
                "--since",
                "nope",
            ]
        )
    assert exit_info.value.code == 2
    assert "--since nope: no crawl output" in capsys.readouterr().err
    assert not Path(tmp_path / "nope").exists()
