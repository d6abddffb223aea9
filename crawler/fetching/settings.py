"""The `[fetch]` settings: how one HTTP request is made and cut off, redirects and
robots.txt (a section of the settings tree, `crawler.config`)."""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from crawler.fetching.politeness import ROBOTS_MAX_RULES
from crawler.section import Section

MAX_SITEMAP_ENTRIES = 50_000  # per sitemap file: the sitemaps protocol's own limit
MAX_SITEMAP_ENTRIES_PER_SERVER = 50_000


class FetchSettings(Section):
    """`[fetch]`: how one HTTP request is made and cut off (crawler/fetching/fetcher.py), redirects
    and robots.txt (the node)."""

    user_agent: str = Field(
        "crawlflow/0.1",
        min_length=1,
        max_length=512,
        description="User-Agent header and robots.txt agent (printable ASCII)",
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="per request")
    read_timeout_s: float = Field(15.0, gt=0, description="per read")
    fetch_timeout_s: float = Field(
        60.0, gt=0, description="wall-clock limit on one fetch: connect, headers and body"
    )
    max_body_bytes: int = Field(10_000_000, ge=1024, description="bodies past this are cut off")
    max_decoded_bytes: int = Field(
        10_000_000, ge=1024, description="bodies past this once gzip/deflate is undone"
    )
    max_redirects: int = Field(10, ge=0, description="redirect hops followed from one URL")
    robots_retry_s: float = Field(
        30.0, gt=0, description="wait before re-asking for a robots.txt that failed (5xx, network)"
    )
    robots_max_rules: int = Field(
        ROBOTS_MAX_RULES,
        ge=1,
        description="Allow/Disallow rules of robots.txt kept per user agent, the first ones "
        "in the file; later ones are ignored as bytes past 500 KiB are (each URL checked costs "
        "one match per rule: about 0.4 ms at 1000)",
    )
    # Off by default: a sitemap is extra requests on every server (a /sitemap.xml probe where
    # robots.txt names none), and they count as URLs admitted when a crawl resumes.
    sitemaps: bool = Field(
        False,
        description="read each server's sitemaps (robots.txt Sitemap:, /sitemap.xml), fetched "
        "over its connection at its pace",
    )
    sitemap_max_entries: int = Field(
        MAX_SITEMAP_ENTRIES,
        ge=1,
        description="entries read from one sitemap file, the first ones (the sitemaps "
        "protocol's own limit; each costs about 1.6 KB while the server's sitemaps are read)",
    )
    sitemap_max_entries_per_server: int = Field(
        MAX_SITEMAP_ENTRIES_PER_SERVER,
        ge=1,
        description="entries read from one server's sitemaps together; no further sitemap "
        "file is fetched once they are reached",
    )

    resolve: dict[str, str] = Field(
        default_factory=dict,
        description="host name -> IP address to connect to instead of asking DNS, as curl's "
        "--resolve does; the address guard still checks the address (--allow-private)",
    )

    @field_validator("resolve")
    @classmethod
    def _names_and_addresses(cls, value: dict[str, str]) -> dict[str, str]:
        resolved: dict[str, str] = {}
        for name, address in value.items():
            host = name.strip().lower().rstrip(".")
            labels = host.split(".")
            if (
                not host
                or any(not label or len(label) > 63 for label in labels)
                or any(
                    not (char.isascii() and (char.isalnum() or char in "-_"))
                    for char in host.replace(".", "")
                )
            ):
                raise ValueError(f"{name[:100]!r} is not a host name (no port, no scheme)")
            try:
                resolved[host] = str(ipaddress.ip_address(address.strip()))
            except ValueError:
                raise ValueError(f"{name}: {address[:100]!r} is not an IP address") from None
        return resolved

    @field_validator("user_agent")
    @classmethod
    def _printable(cls, value: str) -> str:
        # A CR or LF would end the header early: every request would fail, or carry a header
        # the user never meant.
        if not value.isascii() or not value.isprintable():
            raise ValueError("must be printable ASCII (no line breaks or control characters)")
        return value
