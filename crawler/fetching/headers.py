"""Values a server sends, parsed defensively: one parser per kind of value.

A server may send anything: a `Last-Modified` in the year 99999999999, a `Retry-After` of a
billion years, a date with no zone. Each parser here turns such a value into "no usable
value" (None) or clamps it, and never raises, so that one server's header can never stop a
worker thread, nor be stored and break every later night that reads it back.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")  # delay-seconds (a fraction tolerated)


def parse_http_date(value: str | None) -> datetime | None:
    """An HTTP-date (RFC 9110: IMF-fixdate, and the obsolete RFC 850 and asctime forms) as an
    aware UTC datetime; None when absent or not a date a calendar holds."""
    if not value or len(value) > 64:
        return None
    try:
        when = parsedate_to_datetime(value)
        # Dates without a zone ("-0000", asctime) are GMT by RFC 9110.
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
        when.timestamp()  # a date at the edge of the calendar may still not convert
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return when


def parse_retry_after(value: str | None, now_wall: float, max_s: float) -> float | None:
    """Seconds to wait from a `Retry-After` value, or None when there is no usable value.

    Both RFC 9110 forms are accepted: delay-seconds ("120") and an HTTP-date. `now_wall` is the
    wall-clock time (`time.time()`), needed only for the date form. A date in the past means
    "retry now" (0). The result is clamped to `max_s` so a hostile or broken server cannot park
    a host for days.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if _SECONDS.fullmatch(text):
        return min(float(text), max_s)
    when = parse_http_date(text)
    if when is None:
        return None
    return min(max(0.0, when.timestamp() - now_wall), max_s)
