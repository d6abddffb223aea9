"""Crawler settings: everything a user may tune, with safe defaults.

Loaded from a TOML or JSON file (`--config FILE`); unknown keys and bad values are errors, so a
typo never silently falls back to a default.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crawler.politeness import RetrySettings
from crawler.ratecontrol import RateControlSettings
from crawler.scheduling import Policy
from crawler.traps import DEFAULT_STRIP_PARAMS
from crawler.urls import MAX_URL_LENGTH


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message is one line."""


class CrawlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user_agent: str = "crawlflow/0.1"
    max_connections: int = Field(64, ge=1, le=4096, description="open connections per node")
    requests_per_connection: int = Field(
        50, ge=1, description="URLs fetched over one keep-alive connection to a new server"
    )
    policy: Policy = Field(
        "capability", description="scheduling policy: bfs, performance, quality, capability"
    )
    quality_file: str | None = Field(
        None, description="page quality per URL (.parquet or .csv: url, quality); else PageRank"
    )
    keepalive_speedup: float = Field(
        1.2, gt=0, description="p in T = 2*ConnectionTime + P*ResponseTime/p"
    )
    estimate_weight: float = Field(
        0.8, ge=0, lt=1, description="w in est <- w*est + (1-w)*measured (connection stats)"
    )
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(15.0, gt=0)
    max_body_bytes: int = Field(10_000_000, ge=1024, description="bodies past this are cut off")
    # Limits against hostile servers and link traps (crawler/fetcher.py, crawler/limits.py).
    max_decoded_bytes: int = Field(
        10_000_000, ge=1024, description="bodies past this once gzip/deflate/br is undone"
    )
    fetch_timeout_s: float = Field(
        60.0, gt=0, description="wall-clock limit on one fetch: connect, headers and body"
    )
    max_redirects: int = Field(10, ge=0, description="redirect hops followed from one URL")
    max_url_length: int = Field(
        MAX_URL_LENGTH, ge=16, le=MAX_URL_LENGTH, description="longer URLs are not fetched"
    )
    max_pages_per_host: int = Field(100_000, ge=1, description="URLs fetched per server")
    strip_params: list[str] = Field(
        default_factory=lambda: list(DEFAULT_STRIP_PARAMS),
        description="query/path parameters removed from URLs (session ids, tracking); name* "
        "is a prefix",
    )
    trap_max_urls_per_pattern: int = Field(
        100,
        ge=1,
        description="URLs fetched per server and path pattern (digits masked), plus one per "
        "page of the pattern with new content",
    )
    max_depth_per_host: int = Field(
        30, ge=0, description="links followed inside one server from where the crawl entered it"
    )
    family_error_budget: int = Field(
        20,
        ge=1,
        description="404/410/failed fetches in a row in one URL family of a server before its "
        "other URLs are skipped",
    )
    trap_max_segment_repeats: int = Field(
        3, ge=1, description="times one path segment may occur in a URL's path"
    )
    robots_retry_s: float = Field(
        30.0, gt=0, description="wait before re-asking for a robots.txt that failed (5xx, network)"
    )
    metrics_interval_s: float = Field(
        1.0, gt=0, description="control window of the metrics traces, seconds"
    )
    warc: bool = Field(
        True, description="archive every HTTP exchange to WARC/1.1 files beside the Parquet"
    )
    # Off by default: a sitemap is extra requests on every server (a /sitemap.xml probe where
    # robots.txt names none), and they count as URLs admitted when a crawl resumes.
    sitemaps: bool = Field(
        False, description="read each server's sitemaps (robots.txt Sitemap:, /sitemap.xml)"
    )
    write_batch_rows: int = Field(2000, ge=1, description="rows buffered per Parquet file")
    write_interval_s: float = Field(5.0, gt=0, description="longest time rows stay buffered")
    # Distribution over nodes (SPEC §4; crawler/exchange.py, crawler/dedup.py). Each
    # optimization can be switched off for comparison.
    exchange_batch: int = Field(
        200, ge=1, description="URLs (or servers' worth) per call to shared state; 1: unbatched"
    )
    heartbeat_s: float = Field(0.5, gt=0, description="node status and send-buffer interval")
    throughput_window: int = Field(8, ge=2, description="heartbeats in the throughput window")
    balance: bool = Field(True, description="move servers between nodes by the water level")
    balance_tolerance: float = Field(
        0.25, ge=0, description="a node hands servers on above (1 + this) x its fair share"
    )
    dedup_cache_size: int = Field(
        100_000, ge=0, description="LRU entries in front of the shared Bloom filter; 0: none"
    )
    dedup_expected_urls: int | None = Field(
        None, ge=1, description="Bloom filter capacity; default servers x expected_pages_per_host"
    )
    dedup_fp_rate: float = Field(1e-6, gt=0, lt=1, description="Bloom filter false positives")
    dedup_shards: int = Field(1, ge=1, le=64, description="Bloom filter actors")
    shared_state_delay_s: float = Field(
        0.0, ge=0, description="added to every call to shared state (benchmarks: a far store)"
    )
    surcharge_max_nodes: int = Field(
        0, ge=0, description="nodes added while the crawl is projected past time_budget_s"
    )
    surcharge_check_s: float = Field(10.0, gt=0, description="interval of that projection")
    # What the plan step assumes of servers it has no earlier crawl of (see tasks/allocate.py).
    time_budget_s: float = Field(
        3600.0,
        gt=0,
        description="the deadline: the crawl stops this many seconds after its start, and "
        "what is left is recorded for a resumed run",
    )
    expected_pages_per_host: int = Field(1000, ge=1)
    expected_page_kb: float = Field(50.0, gt=0)
    expected_pages_per_s_per_host: float = Field(10.0, gt=0, description="politeness rate")
    resume_quiet_s: float = Field(
        5.0, ge=0, description="a resumed crawl waits until its directory is this long unchanged"
    )
    rate_control: RateControlSettings = Field(
        default_factory=RateControlSettings, description="the rate controller of each server"
    )
    retry: RetrySettings = Field(
        default_factory=RetrySettings, description="retries of a URL and pauses of a server"
    )

    @field_validator("strip_params")
    @classmethod
    def _valid_strip_params(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name.rstrip("*"):
                raise ValueError(f"{name!r} names no parameter (a prefix needs letters before *)")
        return value

    @field_validator("quality_file")
    @classmethod
    def _valid_quality_file(cls, value: str | None) -> str | None:
        if value is not None:
            if Path(value).suffix not in (".parquet", ".csv"):
                raise ValueError("must be a .parquet or .csv file")
            if not Path(value).is_file():
                raise ValueError(f"no such file: {value}")
        return value


def one_line(error: ValidationError, whole: str = "config") -> str:
    """The first problem of a validation error as `where: what` (`whole`: the model's own)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or whole
    message = first["msg"].removeprefix("Value error, ").removeprefix(f"{where}: ")
    return f"{where}: {message}"


def config_from_dict(data: dict[str, Any]) -> CrawlConfig:
    try:
        return CrawlConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid config: {one_line(exc)}") from None


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The settings of a TOML (`.toml`) or JSON file, as written (validated with the request
    they become part of)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ConfigError(f"config file {path} is not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table of settings")
    return data


def with_overrides(settings: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`settings` with `overrides` laid over them, table by table; None values are unset. A
    table the file holds as something else stays so, for validation to name it."""
    merged = dict(settings)
    for key, value in overrides.items():
        if isinstance(value, dict):
            table = merged.get(key, {})
            if isinstance(table, dict):
                merged[key] = with_overrides(table, value)
        elif value is not None:
            merged[key] = value
    return merged
