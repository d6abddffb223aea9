"""What a request's result says to a rate controller: served, refused, or failed."""

from __future__ import annotations

from enum import Enum

from crawler.fetching.politeness import BAN_STATUSES


class ResponseKind(Enum):
    PAGE = "page"  # any HTTP answer that is not a ban: the host served us
    BAN = "ban"  # 429/503: "too fast", the loss signal
    ERROR = "error"  # other 5xx or no answer


def classify(status: int | None) -> ResponseKind:
    if status is None:
        return ResponseKind.ERROR
    if status in BAN_STATUSES:
        return ResponseKind.BAN
    if status >= 500:
        return ResponseKind.ERROR
    return ResponseKind.PAGE
