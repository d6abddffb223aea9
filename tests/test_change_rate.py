"""The change-rate estimator (Cho and Garcia-Molina) and the revisit order built on it."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from crawler.scheduling.recrawl import (
    NEW_URL_PRIORITY,
    Observation,
    Visits,
    change_rate,
    dated_evidence,
    dated_rate,
    dates_trusted,
    plan_revisits,
    start_urls,
)
from websim import WebSpec
from websim.changes import GOOD, LASTMOD_FROZEN, NIGHT_ZERO, ChangeModel
from websim.changes import http_date as web_date
from websim.graph import build_web

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = 86_400.0


def observe(rate: float, visits: int, every: int, rng: random.Random) -> tuple[int, int]:
    """(intervals, intervals that saw a change) of a Poisson page visited every `every` nights."""
    changed = sum(rng.random() > math.exp(-rate * every) for _ in range(visits - 1))
    return visits - 1, changed


@pytest.mark.parametrize("rate", [0.05, 0.3, 1.0, 2.0])
def test_estimator_recovers_the_rate_where_the_naive_share_does_not(rate):
    rng = random.Random(14)
    intervals, changed = observe(rate, 2000, 1, rng)
    estimate = change_rate(intervals, changed, intervals)
    assert estimate == pytest.approx(rate, rel=0.12)
    if rate >= 1.0:  # the share of visits that saw a change saturates below 1 per night
        assert changed / intervals < 0.9 * rate


def test_unequal_intervals_count_in_nights():
    rng = random.Random(3)
    intervals, changed = observe(0.2, 1500, 3, rng)
    assert change_rate(intervals, changed, 3 * intervals) == pytest.approx(0.2, rel=0.15)


def test_no_change_seen_gives_zero_and_every_change_a_finite_rate():
    assert change_rate(10, 0, 10) == 0.0
    assert 2.5 < change_rate(10, 10, 10) < 4.0
    assert change_rate(0, 0, 0) == 0.0


def history(**pages: tuple[list[str | None], int]) -> dict[str, Visits]:
    """Per URL: its digests at crawls 0..n-1 (None: not visited), and its depth."""
    out = {}
    for name, (digests, depth) in pages.items():
        visits = Visits(depth, T0)
        for index, digest in enumerate(digests):
            if digest is not None:
                visits.visit(index, digest, T0)
        out[f"http://a.test/{name}"] = visits
    return out


def test_revisit_order_puts_the_likely_changed_first():
    pages = history(
        hot=(["a", "b", "c", "d"], 2),
        cold=(["a", "a", "a", "a"], 0),
        stale=(["a", "a", None, None], 1),  # unchanged when seen, but not seen for 2 nights
        never=([None, None, None, None], 3),
    )
    revisits = plan_revisits(pages, crawls=4, since="c3")
    priority = {url.rsplit("/", 1)[1]: revisits.priority(url) for url in pages}
    assert priority["never"] == NEW_URL_PRIORITY
    assert priority["hot"] > priority["stale"] > priority["cold"] > 0.0
    assert revisits.priority("http://a.test/unknown") == NEW_URL_PRIORITY
    # Breadth-first order for the FIFO policies: by depth.
    assert [url.rsplit("/", 1)[1] for url in revisits.order] == ["cold", "stale", "hot", "never"]


def test_a_budget_seeds_the_likeliest_changes_or_the_first_breadth_first():
    pages = history(
        hot=(["a", "b", "c", "d"], 2),
        cold=(["a", "a", "a", "a"], 0),
        warm=(["a", "a", "b", "b"], 1),
    )
    revisits = plan_revisits(pages, crawls=4, since="c3")
    seeds = ["http://a.test/"]
    names = lambda urls: [url.rsplit("/", 1)[1] for url in urls]  # noqa: E731
    assert names(start_urls(seeds, revisits)) == ["", "cold", "warm", "hot"]
    assert names(start_urls(seeds, revisits, 2, "capability")) == ["", "hot", "warm"]
    assert names(start_urls(seeds, revisits, 2, "bfs")) == ["", "cold", "warm"]
    assert start_urls(seeds, None, 2) == seeds


def test_conditional_headers_send_back_the_validators():
    pages = history(p=(["a"], 0))
    visits = pages["http://a.test/p"]
    visits.etag, visits.last_modified = '"p-1"', "Thu, 01 Jan 2026 00:00:00 GMT"
    revisits = plan_revisits(pages, crawls=1, since="c0")
    assert revisits.conditional_headers("http://a.test/p") == {
        "If-None-Match": '"p-1"',
        "If-Modified-Since": "Thu, 01 Jan 2026 00:00:00 GMT",
    }
    assert revisits.conditional_headers("http://a.test/new") == {}


def http_date(moment: datetime) -> str:
    return format_datetime(moment, usegmt=True)


def night_2_priorities(host: str, ages: dict[str, timedelta | None], stamp=None) -> dict:
    """Priorities for crawl 1 of pages fetched once at crawl 0 whose Last-Modified was `ages`
    before the fetch (`stamp(name)` overrides the date)."""
    pages = {}
    for name, age in ages.items():
        visits = Visits(0, T0)
        fetched = T0 + timedelta(minutes=len(pages))
        modified = stamp(name, fetched) if stamp else (None if age is None else fetched - age)
        visits.visit(0, name, fetched, None if modified is None else http_date(modified))
        pages[f"http://{host}/{name}"] = visits
    return pages


def test_a_recent_last_modified_ranks_a_page_above_older_ones_on_night_2():
    ages = {"hour": timedelta(hours=1), "days": timedelta(days=2), "month": timedelta(days=30)}
    pages = night_2_priorities("a.test", {**ages, "year": timedelta(days=400)})
    revisits = plan_revisits(pages, crawls=1, since="c0")
    priority = {url.rsplit("/", 1)[1]: revisits.priority(url) for url in pages}
    assert priority["hour"] > priority["days"] > priority["month"] > priority["year"] > 0.0
    assert priority["hour"] > 0.5 > 0.02 > priority["year"]


@pytest.mark.parametrize(
    "stamp",
    [
        lambda name, fetched: T0 - timedelta(days=90),  # a Last-Modified that never changes
        lambda name, fetched: fetched,  # "now" on every answer
        lambda name, fetched: fetched + timedelta(days=3),  # a clock ahead
        lambda name, fetched: None,  # no Last-Modified at all
    ],
    ids=["frozen", "now", "ahead", "none"],
)
def test_a_server_with_wrong_or_missing_dates_is_ranked_without_them(stamp):
    names = {f"p{i}": None for i in range(4)}
    good = night_2_priorities(
        "good.test", {"fresh": timedelta(hours=2), "old": timedelta(days=200)}
    )
    pages = {**night_2_priorities("bad.test", names, stamp), **good}
    revisits = plan_revisits(pages, crawls=1, since="c0")
    bad = {revisits.priority(url) for url in pages if "bad.test" in url}
    # No date ranks these pages: one priority for all, that of the deployment's dated pages
    # on average (the chance of a change in one night), between its freshest and oldest.
    assert len(bad) == 1
    fresh, old = (revisits.priority(f"http://good.test/{n}") for n in ("fresh", "old"))
    assert fresh > bad.pop() > old


def test_a_server_whose_changes_keep_their_date_is_not_trusted():
    pages = {}
    for i in range(4):
        visits = Visits(0, T0)
        visits.visit(0, "a", T0, http_date(T0 - timedelta(days=i + 1)))
        digest = "b" if i < 3 else "a"  # three pages changed, their dates did not
        visits.visit(1, digest, T0 + timedelta(days=1), http_date(T0 - timedelta(days=i + 1)))
        pages[f"http://a.test/p{i}"] = visits
    revisits = plan_revisits(pages, crawls=2, since="c1")
    # By visit counts: the changed pages first, whatever their dates say.
    priority = [revisits.priority(f"http://a.test/p{i}") for i in range(4)]
    assert priority[0] == priority[1] == priority[2] > priority[3]


def test_one_unchanged_page_keeps_its_date_and_its_trust():
    lone = [Observation(0, 10 * DAY, DAY, False), Observation(1, 11 * DAY, DAY, False)]
    assert dates_trusted([lone])
    other = [Observation(0, 10 * DAY, DAY, False)]
    assert not dates_trusted([lone, other])  # two pages, one date: it never changes


def test_the_dated_estimator_recovers_known_rates():
    rng = random.Random(14)
    for rate in (0.05, 0.3, 1.0, 3.0):
        # A Poisson page visited every night for 4,000 nights; each visit reads its last change.
        observations, clock = [], {}
        last_change, upcoming = -rng.expovariate(rate) * DAY, rng.expovariate(rate) * DAY
        for night in range(4000):
            now = clock[night] = night * DAY
            changed = False
            while upcoming <= now:
                last_change, upcoming = upcoming, upcoming + rng.expovariate(rate) * DAY
                changed = night > 0
            observations.append(Observation(night, now, last_change, changed))
        changes, quiet = dated_evidence(observations, clock)
        assert dated_rate(0.1, changes, quiet) == pytest.approx(rate, rel=0.12)


def test_websims_dates_rank_night_2_toward_the_pages_that_change():
    """Night 1's dates alone put about half of night 2's changes into the first 30% of URLs
    (a blind 30% would hold 30%)."""
    # bench/recrawl's web, with 9 of its 30 servers without validators or with wrong ones
    spec = WebSpec(hosts=30, pages=6_000, seed=14, validator_fault_share=0.45)
    model = ChangeModel(build_web(spec))
    fetched = datetime(2026, 6, 1, tzinfo=UTC)  # any time after websim's night 0
    history = {}
    for page in range(6_000):
        kind = model.validators[int(model.web.host_of[page])]
        date = {GOOD: web_date(model.last_change(page)), LASTMOD_FROZEN: web_date(NIGHT_ZERO)}
        visits = Visits(0, T0)
        visits.visit(0, "v0", fetched, date.get(kind))
        history[f"http://h{model.web.host_of[page]}.test/{page}"] = visits
    revisits = plan_revisits(history, crawls=1, since="c0")
    changed = {int(url.rsplit("/", 1)[1]) for url in history} & set(model.advance().tolist())
    first = sorted(history, key=lambda url: -revisits.priority(url))[:1_800]
    caught = sum(int(url.rsplit("/", 1)[1]) in changed for url in first)
    assert caught > 0.45 * len(changed)
    frozen = {
        revisits.priority(url)
        for url in history
        if model.validators[int(url.split("/")[2][1:].split(".")[0])] == LASTMOD_FROZEN
    }
    assert len(frozen) == 1
