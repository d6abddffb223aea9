"""The `[limits]` settings: what a crawl fetches at most, how deep, and when it stops (a section
of the settings tree, `crawler.config`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from crawler.scope.traps import DEFAULT_STRIP_PARAMS
from crawler.scope.urls import MAX_URL_LENGTH
from crawler.section import Section


class LimitSettings(Section):
    """`[limits]`: what a crawl fetches at most (in all, per server, against hostile servers
    and link traps: crawler/scope/limits.py, crawler/scope/traps.py), how deep it follows links,
    and when it stops (the deadline)."""

    max_pages: int | None = Field(
        None,
        ge=1,
        description="URLs fetched (first tries) in the whole crawl before it stops; None: no "
        "limit (--max-pages)",
    )
    max_depth: int | None = Field(
        None, ge=0, description="links followed from a seed; None: no limit (--max-depth)"
    )
    deadline_s: float = Field(
        3600.0,
        gt=0,
        description="the deadline: the crawl stops this many seconds after its start; what is "
        "left is recorded for a resumed run (--deadline)",
    )
    max_url_length: int = Field(
        MAX_URL_LENGTH, ge=16, le=MAX_URL_LENGTH, description="longer URLs are not fetched"
    )
    max_pages_per_host: int = Field(100_000, ge=1, description="URLs fetched per server")
    strip_params: list[str] = Field(
        default_factory=lambda: list(DEFAULT_STRIP_PARAMS),
        description="query/path parameters removed from every discovered URL (session ids, "
        "tracking); name* is a prefix",
    )
    trap_max_urls_per_pattern: int = Field(
        100,
        ge=1,
        description="URLs fetched per server and path pattern (digits masked), plus one per "
        "page of the pattern with new content",
    )
    trap_max_descending_urls: int = Field(
        100,
        ge=1,
        description="URLs fetched per server and top directory that were reached through two or "
        "more pages in a row whose new links lead mostly deeper under them (a generator of fresh "
        "paths)",
    )
    trap_max_segment_repeats: int = Field(
        3, ge=1, description="times one path segment may occur in a URL's path"
    )
    max_depth_per_host: int = Field(
        30, ge=0, description="links followed inside one server from where the crawl entered it"
    )
    max_links_per_page: int = Field(
        10_000,
        ge=1,
        description="links followed from one page, the first ones in document order; the "
        "others are dropped (the `pages` row's outlink_count still counts them all)",
    )
    family_error_budget: int = Field(
        20,
        ge=1,
        description="404/410/failed fetches in a row in one URL family of a server before its "
        "other URLs are skipped",
    )

    @field_validator("strip_params")
    @classmethod
    def _valid_strip_params(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name.rstrip("*"):
                raise ValueError(f"{name!r} names no parameter (a prefix needs letters before *)")
        return value
