"""Server-sent values parsed defensively: whatever a server sends, the parsers return a usable
value or None, and never raise (tests/test_politeness.py has the ordinary cases)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from crawler.fetching.headers import parse_http_date, parse_retry_after
from crawler.scheduling.recrawl import Visits, plan_revisits

NOW_WALL = 1_700_000_000.0
MAX_S = 120.0

WEEKDAYS = st.sampled_from(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "Xyz", ""])
MONTHS = st.sampled_from(["Jan", "Feb", "Jun", "Dec", "Foo", ""])
ZONES = st.sampled_from(["GMT", "UTC", "-0000", "+2359", "-9999", "PST", "", "Z"])
# Dates of the IMF-fixdate shape with any numbers in them: huge years, day 0, hour 99.
HOSTILE_DATES = st.builds(
    "{}, {:02d} {} {} {:02d}:{:02d}:{:02d} {}".format,
    WEEKDAYS,
    st.integers(-5, 10**6),
    MONTHS,
    st.integers(-(10**20), 10**20),
    st.integers(-1, 10**3),
    st.integers(-1, 99),
    st.integers(-1, 99),
    ZONES,
)
ANY_VALUE = st.one_of(
    HOSTILE_DATES,
    st.text(max_size=80),
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
)


@given(ANY_VALUE)
def test_an_http_date_is_an_aware_datetime_or_none(value):
    when = parse_http_date(value)
    assert when is None or (when.tzinfo is not None and isinstance(when.timestamp(), float))


@given(ANY_VALUE)
def test_retry_after_is_a_delay_within_the_clamp_or_none(value):
    delay = parse_retry_after(value, NOW_WALL, MAX_S)
    assert delay is None or 0.0 <= delay <= MAX_S


def test_dates_no_calendar_holds_are_no_dates():
    assert parse_http_date("Sun, 06 Nov 99999999999 08:49:37 GMT") is None
    assert parse_http_date("Sun, 06 Nov 10000 08:49:37 GMT") is None
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == datetime(
        1994, 11, 6, 8, 49, 37, tzinfo=UTC
    )
    # A Retry-After date past the calendar is no value; one far ahead is clamped.
    assert parse_retry_after("Sun, 06 Nov 99999999999 08:49:37 GMT", NOW_WALL, MAX_S) is None
    assert parse_retry_after("Sun, 06 Nov 9999 08:49:37 GMT", NOW_WALL, MAX_S) == MAX_S


@given(HOSTILE_DATES)
def test_a_stored_hostile_last_modified_never_breaks_the_next_night(value):
    """What one night stored is read back by the next: a visit with any Last-Modified."""
    visits = Visits(0, datetime(2026, 1, 1, tzinfo=UTC))
    visits.visit(0, "D", datetime(2026, 1, 1, tzinfo=UTC), value)
    visits.visit(1, "D", datetime(2026, 1, 2, tzinfo=UTC), value)
    revisits = plan_revisits({"http://h/": visits}, 2, "night-1")
    assert revisits.conditional_headers("http://h/")["If-Modified-Since"] == value
    revisits.changed_since("http://h/", datetime(2026, 1, 3, tzinfo=UTC))
