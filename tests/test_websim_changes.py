"""websim between nights: seeded change processes, validators (good, missing, wrong), 304s
and sitemaps, served over loopback."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import requests

from websim import WebSim, WebSpec
from websim.changes import (
    CREATED_WITHIN_NIGHTS,
    ETAG_CHURN,
    GOOD,
    LASTMOD_FROZEN,
    NIGHT_S,
    NIGHT_ZERO,
    NONE,
    ChangeModel,
    http_date,
)
from websim.graph import build_web


def test_a_tenth_of_the_pages_changes_per_night_with_skewed_rates():
    model = ChangeModel(build_web(WebSpec(hosts=50, pages=20_000, seed=7)))
    shares = [len(model.advance()) / 20_000 for _ in range(5)]
    assert all(0.08 < share < 0.12 for share in shares)
    # Skewed: the fastest tenth of the pages holds over four times its share of the change rate.
    rates = np.sort(model.rates)[::-1]
    assert rates[:2000].sum() > 0.4 * rates.sum()
    # Same seed, same nights.
    again = ChangeModel(build_web(WebSpec(hosts=50, pages=20_000, seed=7)))
    assert [len(again.advance()) for _ in range(5)] == [round(s * 20_000) for s in shares]


def test_last_change_before_night_0_comes_from_each_pages_own_process():
    model = ChangeModel(build_web(WebSpec(hosts=30, pages=6_000, seed=14)))
    nights_ago = (NIGHT_ZERO - model.changed_at) / NIGHT_S
    assert (nights_ago >= 0).all() and (nights_ago <= CREATED_WITHIN_NIGHTS).all()
    assert len(np.unique(model.changed_at)) > 5_900  # a date per page, not one for all
    # Exp(rate) ago: the fastest tenth of the pages changed far more recently than the slowest.
    order = np.argsort(model.rates)
    assert np.median(nights_ago[order[-600:]]) < 2.0 < 100.0 < np.median(nights_ago[order[:600]])
    # Seeded: the same dates in another process; a change during night n is dated in it.
    again = ChangeModel(build_web(WebSpec(hosts=30, pages=6_000, seed=14)))
    assert (again.changed_at == model.changed_at).all()
    changed = model.advance()
    night_1 = (model.changed_at[changed] - NIGHT_ZERO) / NIGHT_S
    assert ((night_1 >= 0) & (night_1 <= 1)).all() and len(np.unique(night_1)) > 100


@pytest.fixture(scope="module")
def web():
    spec = WebSpec(
        hosts=40,
        pages=800,
        seed=11,
        rate_limit_rps=None,
        latency_ms=(0.0, 0.0),
        validator_fault_share=0.45,
        sitemap_share=1.0,
        robots_share=0.5,
        change_share=0.5,
    )
    with WebSim(spec) as sim:
        yield sim


def pages_of(sim: WebSim, kind: str) -> list[int]:
    kinds = sim.changes.validators
    allowed = sim.web.allowed
    return [p for p in range(sim.web.n_pages) if kinds[sim.web.host_of[p]] == kind and allowed[p]]


@pytest.mark.integration
def test_validators_and_304s_follow_each_servers_kind(web):
    session = requests.Session()
    good = pages_of(web, GOOD)
    url = web.url_of(good[1])
    first = session.get(url)
    etag, modified = first.headers["ETag"], first.headers["Last-Modified"]
    assert modified == http_date(web.changes.last_change(good[1]))
    assert session.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert session.get(url, headers={"If-Modified-Since": modified}).status_code == 304
    # Nights pass until that page changes: then the same validators get the new page.
    changed: set[str] = set()
    while url not in changed:
        changed |= web.advance_night()
    fresh = session.get(url, headers={"If-None-Match": etag})
    assert fresh.status_code == 200 and fresh.headers["ETag"] != etag
    assert b"Revision" in fresh.content and fresh.content != first.content
    assert session.get(url, headers={"If-Modified-Since": modified}).status_code == 200
    # No validators; an ETag new on every answer; a Last-Modified that never moves: never 304.
    plain = session.get(web.url_of(pages_of(web, NONE)[0]))
    assert "ETag" not in plain.headers and "Last-Modified" not in plain.headers
    churn_url = web.url_of(pages_of(web, ETAG_CHURN)[0])
    tag = session.get(churn_url).headers["ETag"]
    again = session.get(churn_url, headers={"If-None-Match": tag})
    assert again.status_code == 200 and again.headers["ETag"] != tag
    frozen = pages_of(web, LASTMOD_FROZEN)
    stamp = session.get(web.url_of(frozen[0])).headers["Last-Modified"]
    for page in frozen[:5]:
        answer = session.get(web.url_of(page), headers={"If-Modified-Since": stamp})
        assert answer.status_code == 200 and answer.headers["Last-Modified"] == stamp


@pytest.mark.integration
def test_sitemaps_from_robots_and_the_well_known_path(web):
    session = requests.Session()
    with_robots = [
        i
        for i, h in enumerate(web.web.hosts)
        if h.robots_disallow is not None and web.changes.sitemap[i]
    ][0]
    origin = web.host_urls[with_robots].rstrip("/")
    robots = session.get(origin + "/robots.txt").text
    assert f"Sitemap: {origin}/sitemap_index.xml" in robots
    index = session.get(origin + "/sitemap_index.xml").text
    assert f"<loc>{origin}/sitemap-1.xml.gz</loc>" in index
    urlset = gzip.decompress(session.get(origin + "/sitemap-1.xml.gz").content).decode()
    assert urlset.count("<lastmod>") == urlset.count("<loc>") > 0
    without = [
        i
        for i, h in enumerate(web.web.hosts)
        if h.robots_disallow is None and web.changes.sitemap[i]
    ][0]
    plain = session.get(web.host_urls[without] + "sitemap.xml")
    assert plain.status_code == 200 and "<urlset" in plain.text
    assert session.get(web.host_urls[without] + "sitemap_index.xml").status_code == 404
