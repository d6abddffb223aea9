"""The table of hostile scenarios: for each name, what it is about, what its root page links
to, its handler and the paths a robust crawler fetches from it."""

from __future__ import annotations

from dataclasses import dataclass

from websim.hostile import bodies, mixed, robots, traps
from websim.hostile.exchange import GOOD_PAGES, Handler


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    links: tuple[str, ...]  # what the root page links to besides the good pages
    handler: Handler
    good_pages: bool = True  # the root and /ok/* must be fetched
    also_expected: tuple[str, ...] = ()  # more paths that must be fetched

    @property
    def expected(self) -> tuple[str, ...]:
        return (("/", *GOOD_PAGES) if self.good_pages else ()) + self.also_expected


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "redirect_loop",
            "endless redirect chain and a 2-cycle",
            ("/loop/0", "/cycle/a"),
            traps.redirect_loop,
        ),
        Scenario(
            "redirect_offsite",
            "redirect to a server outside the host",
            ("/away",),
            traps.redirect_offsite,
        ),
        Scenario(
            "huge_body",
            "1 GB body, with and without Content-Length",
            ("/huge", "/huge-stream"),
            bodies.huge_body,
        ),
        Scenario(
            "gzip_bomb", "1 GB of zeros as about 1 MB of gzip", ("/bomb",), bodies.gzip_bomb_host
        ),
        Scenario(
            "drip",
            "body, or headers too, at one byte a second",
            ("/drip", "/drip-head"),
            bodies.drip,
        ),
        Scenario(
            "hang_after_headers", "headers, then silence", ("/hang",), bodies.hang_after_headers
        ),
        Scenario(
            "reset_mid_body", "TCP reset after 10 KB of 100 KB", ("/reset",), bodies.reset_mid_body
        ),
        Scenario(
            "content_type",
            "HTML without Content-Type, HTML labelled image/png",
            ("/no-type", "/wrong-type"),
            bodies.content_type,
            also_expected=("/no-type", "/via-no-type", "/wrong-type"),
        ),
        Scenario(
            "binary_html", "random binary labelled text/html", ("/binary",), bodies.binary_html
        ),
        Scenario(
            "bad_charset",
            "invalid UTF-8, unknown, non-text and wrong charsets",
            ("/invalid-utf8", "/unknown-charset", "/binary-codec-charset", "/wrong-charset"),
            bodies.bad_charset,
            also_expected=(
                "/invalid-utf8",
                "/via-invalid-utf8",
                "/unknown-charset",
                "/via-unknown-charset",
                "/binary-codec-charset",
                "/via-hex-charset",
                "/wrong-charset",
                "/via-wrong-charset",
            ),
        ),
        Scenario(
            "broken_html",
            "unclosed tags, junk, 100,000 nested divs, an unclosed title",
            ("/broken", "/broken-title"),
            bodies.broken_html,
            also_expected=(
                "/broken",
                "/via-broken",
                "/via-broken-2",
                "/via-broken-3",
                "/broken-title",
            ),
        ),
        Scenario(
            "link_trap",
            "endless calendar, session ids, self-nesting relative link",
            ("/cal/2024/1", "/session?sid=0123456789abcdef", "/deep/"),
            traps.link_trap,
            also_expected=("/cal/2024/1", "/session", "/deep/"),
        ),
        Scenario(
            "garbage_links",
            "malformed and overlong links and Locations",
            ("/garbage", "/bad-redirect", "/long-redirect"),
            traps.garbage_links,
            also_expected=("/garbage",),
        ),
        Scenario(
            "many_links",
            "one page with 100,000 links",
            ("/many",),
            traps.many_links,
            also_expected=("/many",),
        ),
        Scenario(
            "calendar_sid",
            "endless calendar of days, a fresh session id in every link",
            ("/events?d=0&sid=0123456789abcdef",),
            traps.calendar_sid,
            also_expected=("/events?d=0",),
        ),
        Scenario(
            "dead_links",
            "one page with 100,000 links that answer 404",
            ("/links",),
            traps.dead_links,
            also_expected=("/links",),
        ),
        Scenario(
            "deep_trap",
            "documentation site with an endless branching archive deep inside",
            ("/docs/",),
            traps.deep_trap,
            also_expected=traps.DOC_PAGES,
        ),
        Scenario(
            "hostile_site",
            "about 40 good pages among calendar, dead links, deep trap, loops, big bodies",
            (),
            traps.hostile_site,
            good_pages=False,
            also_expected=("/", *traps.SITE_PAGES, *traps.DOC_PAGES),
        ),
        Scenario("robots_500", "robots.txt answers 500", (), robots.robots_500, good_pages=False),
        Scenario(
            "robots_timeout",
            "robots.txt never answers, or stops after its headers",
            (),
            robots.robots_timeout,
            good_pages=False,
        ),
        Scenario("robots_garbage", "robots.txt is binary junk", (), robots.robots_garbage),
        Scenario(
            "retry_after_past",
            "503 once per URL, Retry-After a date in the past",
            (),
            robots.retry_after_past,
        ),
        Scenario(
            "retry_after_far",
            "503 once per URL, Retry-After a year away",
            (),
            robots.retry_after_far,
        ),
        Scenario(
            "slow_failures",
            "20 articles beside URLs that hang, drip, reset, 429 for a year, 503 always",
            (),
            mixed.slow_failures,
            good_pages=False,
            also_expected=("/", *mixed.ARTICLES),
        ),
        Scenario(
            "fresh_trap",
            "a chain of 30 pages beside paths that grow ever deeper with fresh words",
            (),
            mixed.fresh_trap,
            good_pages=False,
            also_expected=("/", *mixed.CHAIN),
        ),
        Scenario(
            "empty_body",
            "200 with an empty body, with and without a length",
            ("/empty", "/empty-close"),
            bodies.empty_body,
            also_expected=("/empty", "/empty-close"),
        ),
    )
}


def check_scenarios(names: tuple[str, ...]) -> None:
    """Raise ValueError unless `names` are distinct scenarios of SCENARIOS."""
    if set(names) - set(SCENARIOS) or len(set(names)) != len(names):
        raise ValueError(f"hostile must name distinct scenarios of {sorted(SCENARIOS)}")
