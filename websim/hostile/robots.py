"""Scenarios that fail a crawler's politeness: a robots.txt that errs, hangs or is junk, and
503 answers whose Retry-After is a date in the past or a year away."""

from __future__ import annotations

import random
from collections.abc import Callable
from email.utils import formatdate

from websim.hostile.exchange import Exchange, Handler

_YEAR_S = 365 * 24 * 3600


async def robots_500(ex: Exchange) -> bool | None:
    if ex.request.path == "/robots.txt":
        return await ex.send(500, b"oops\n", "text/plain")
    return None


async def robots_timeout(ex: Exchange) -> bool | None:
    if ex.request.path == "/robots.txt":
        # Every other time the headers come first: a robots.txt cut off is no robots.txt.
        if ex.state.hits["/robots.txt"] % 2:
            return await ex.hang()
        return await ex.hang(
            ex.head(200, [("Content-Type", "text/plain"), ("Content-Length", "500")])
        )
    return None


async def robots_garbage(ex: Exchange) -> bool | None:
    if ex.request.path == "/robots.txt":
        body = b"\x00\xff\xfe<html>User-agent: *\x00Disallow /ok\n" + random.Random(3).randbytes(
            2000
        )
        return await ex.send(200, body, "text/plain")
    return None


def _retry_after(value: Callable[[], str]) -> Handler:
    async def handler(ex: Exchange) -> bool | None:
        if ex.request.path == "/robots.txt" or ex.state.hits[ex.request.target] > 1:
            return None
        # The first request of each URL is turned away.
        return await ex.send(503, b"busy\n", "text/plain", (("Retry-After", value()),))

    return handler


retry_after_past = _retry_after(lambda: formatdate(946684800, usegmt=True))
retry_after_far = _retry_after(lambda: str(_YEAR_S))
