"""Crawler settings: everything a user may tune, with safe defaults, as one tree of sections.

Each component is built from its own section only (the fetcher from `fetch`, the URL limits
from `limits`, the rate controllers from `rate_control` and `retry`, ...); the node hands each
part its section. Loaded from a TOML or JSON file (`--config FILE`, one table per section) as
part of the crawl request (crawler/request.py). Every section is a `crawler.section.Section`:
unknown keys, wrong types and bad values are errors, so a typo never silently falls back to a
default, and a key of the old flat layout names its table.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from crawler.politeness import RetrySettings
from crawler.ratecontrol import RateControlSettings
from crawler.scheduling import (
    DEFAULT_ESTIMATE_WEIGHT,
    DEFAULT_KEEPALIVE_SPEEDUP,
    POLICIES,
    Policy,
)
from crawler.section import Section
from crawler.traps import DEFAULT_STRIP_PARAMS
from crawler.urls import MAX_URL_LENGTH


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message is one line."""


class FetchSettings(Section):
    """`[fetch]`: how one HTTP request is made and cut off (crawler/fetcher.py), redirects and
    robots.txt (the node)."""

    user_agent: str = Field("crawlflow/0.1", description="User-Agent header and robots.txt agent")
    connect_timeout_s: float = Field(5.0, gt=0, description="per request")
    read_timeout_s: float = Field(15.0, gt=0, description="per read")
    fetch_timeout_s: float = Field(
        60.0, gt=0, description="wall-clock limit on one fetch: connect, headers and body"
    )
    max_body_bytes: int = Field(10_000_000, ge=1024, description="bodies past this are cut off")
    max_decoded_bytes: int = Field(
        10_000_000, ge=1024, description="bodies past this once gzip/deflate/br is undone"
    )
    max_redirects: int = Field(10, ge=0, description="redirect hops followed from one URL")
    robots_retry_s: float = Field(
        30.0, gt=0, description="wait before re-asking for a robots.txt that failed (5xx, network)"
    )
    # Off by default: a sitemap is extra requests on every server (a /sitemap.xml probe where
    # robots.txt names none), and they count as URLs admitted when a crawl resumes.
    sitemaps: bool = Field(
        False,
        description="read each server's sitemaps (robots.txt Sitemap:, /sitemap.xml), fetched "
        "over its connection at its pace",
    )


class LimitSettings(Section):
    """`[limits]`: what a crawl fetches at most, against hostile servers and link traps
    (crawler/limits.py, crawler/traps.py), and when it stops (the deadline)."""

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
    trap_max_segment_repeats: int = Field(
        3, ge=1, description="times one path segment may occur in a URL's path"
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
    time_budget_s: float = Field(
        3600.0,
        gt=0,
        description="the deadline: the crawl stops this many seconds after its start; what is "
        "left is recorded for a resumed run (--deadline)",
    )

    @field_validator("strip_params")
    @classmethod
    def _valid_strip_params(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name.rstrip("*"):
                raise ValueError(f"{name!r} names no parameter (a prefix needs letters before *)")
        return value


class SchedulingSettings(Section):
    """`[scheduling]`: which server a node connects to next and how long it keeps the
    connection (SPEC section 3; crawler/scheduling.py, crawler/frontier.py)."""

    policy: Policy = Field("capability", description=f"scheduling policy: {', '.join(POLICIES)}")
    quality_file: str | None = Field(
        None, description="page quality per URL (.parquet or .csv: url, quality); else PageRank"
    )
    max_connections: int = Field(64, ge=1, le=4096, description="open connections per node")
    requests_per_connection: int = Field(
        50, ge=1, description="URLs fetched over one keep-alive connection to a new server"
    )
    keepalive_speedup: float = Field(
        DEFAULT_KEEPALIVE_SPEEDUP, gt=0, description="p in T = 2*ConnectionTime + P*ResponseTime/p"
    )
    estimate_weight: float = Field(
        DEFAULT_ESTIMATE_WEIGHT,
        ge=0,
        lt=1,
        description="w in est <- w*est + (1-w)*measured (connection stats)",
    )

    @field_validator("quality_file")
    @classmethod
    def _valid_quality_file(cls, value: str | None) -> str | None:
        if value is not None:
            if Path(value).suffix not in (".parquet", ".csv"):
                raise ValueError("must be a .parquet or .csv file")
            if not Path(value).is_file():
                raise ValueError(f"no such file: {value}")
        return value


class ExchangeSettings(Section):
    """`[exchange]`: how nodes share URLs and servers (SPEC section 4; crawler/exchange.py).
    Each optimization can be switched off for comparison."""

    batch: int = Field(
        200, ge=1, description="URLs (or servers' worth) per call to shared state; 1: unbatched"
    )
    heartbeat_s: float = Field(0.5, gt=0, description="node status and send-buffer interval")
    throughput_window: int = Field(8, ge=2, description="heartbeats in the throughput window")
    balance: bool = Field(True, description="move servers between nodes by the water level")
    balance_tolerance: float = Field(
        0.25, ge=0, description="a node hands servers on above (1 + this) x its fair share"
    )
    shared_state_delay_s: float = Field(
        0.0, ge=0, description="added to every call to shared state (benchmarks: a far store)"
    )


class DedupSettings(Section):
    """`[dedup]`: the URLs seen by any node (crawler/dedup.py): a shared Bloom filter with an
    LRU cache in front of it on each node."""

    cache_size: int = Field(
        100_000, ge=0, description="LRU entries in front of the shared Bloom filter; 0: none"
    )
    expected_urls: int | None = Field(
        None,
        ge=1,
        description="Bloom filter capacity; default servers x [plan] expected_pages_per_host",
    )
    fp_rate: float = Field(1e-6, gt=0, lt=1, description="Bloom filter false positives")
    shards: int = Field(1, ge=1, le=64, description="Bloom filter actors")


class OutputSettings(Section):
    """`[output]`: the Parquet and WARC files the nodes write (storage/), and resuming from
    them."""

    warc: bool = Field(
        True, description="archive every HTTP exchange to WARC/1.1 files beside the Parquet"
    )
    write_batch_rows: int = Field(2000, ge=1, description="rows buffered per Parquet file")
    write_interval_s: float = Field(5.0, gt=0, description="longest time rows stay buffered")
    metrics_interval_s: float = Field(
        1.0, gt=0, description="control window of the metrics traces, seconds"
    )
    resume_quiet_s: float = Field(
        5.0, ge=0, description="a resumed crawl waits until its directory is this long unchanged"
    )


class PlanSettings(Section):
    """`[plan]`: what the plan step assumes of servers it has no earlier crawl of
    (tasks/allocate.py), and the nodes it may add while the crawl runs behind its deadline."""

    expected_pages_per_host: int = Field(
        1000, ge=1, description="pages of a server with no earlier crawl"
    )
    expected_page_kb: float = Field(50.0, gt=0, description="average page size, kB")
    expected_pages_per_s_per_host: float = Field(10.0, gt=0, description="politeness rate")
    surcharge_max_nodes: int = Field(
        0, ge=0, description="nodes added while the crawl is projected past time_budget_s"
    )
    surcharge_check_s: float = Field(10.0, gt=0, description="interval of that projection")


class CrawlConfig(Section):
    """Every setting, one table (section) per component; each component takes its own."""

    fetch: FetchSettings = Field(default_factory=FetchSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    scheduling: SchedulingSettings = Field(default_factory=SchedulingSettings)
    rate_control: RateControlSettings = Field(
        default_factory=RateControlSettings, description="the rate controller of each server"
    )
    retry: RetrySettings = Field(
        default_factory=RetrySettings, description="retries of a URL and pauses of a server"
    )
    exchange: ExchangeSettings = Field(default_factory=ExchangeSettings)
    dedup: DedupSettings = Field(default_factory=DedupSettings)
    output: OutputSettings = Field(default_factory=OutputSettings)
    plan: PlanSettings = Field(default_factory=PlanSettings)

    @model_validator(mode="before")
    @classmethod
    def _no_moved_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            held = [(None, key) for key in data] + [
                (table, key)
                for table, value in data.items()
                if isinstance(value, dict)
                for key in value
            ]
            for table, key in held:
                if (table, key) in MOVED_KEYS:
                    section, name = MOVED_KEYS[table, key]
                    where = key if table is None else f"{table}.{key}"
                    raise ValueError(
                        f"{where} moved to [{section}]" + (f" as {name}" if name != key else "")
                    )
        return data


# Keys that moved when the settings became a tree of sections (issue 18): (the table a file held
# it in, None for the top level of the flat layout; its name there) -> (its section, its name
# there). A file that still uses one gets an error naming its new place.
_RENAMED = {
    "exchange_batch": ("exchange", "batch"),
    "dedup_cache_size": ("dedup", "cache_size"),
    "dedup_expected_urls": ("dedup", "expected_urls"),
    "dedup_fp_rate": ("dedup", "fp_rate"),
    "dedup_shards": ("dedup", "shards"),
}
MOVED_KEYS: dict[tuple[str | None, str], tuple[str, str]] = {
    **{
        (None, name): (section, name)
        for section, model in [
            ("fetch", FetchSettings),
            ("limits", LimitSettings),
            ("scheduling", SchedulingSettings),
            ("exchange", ExchangeSettings),
            ("output", OutputSettings),
            ("plan", PlanSettings),
        ]
        for name in model.model_fields
        if (section, name) not in _RENAMED.values()
    },
    **{(None, old): new for old, new in _RENAMED.items()},
    # The retry budget and host pauses were rate-control keys before [retry] was a section.
    **{("rate_control", name): ("retry", name) for name in RetrySettings.model_fields},
}


def one_line(error: ValidationError, within: str | None = None) -> str:
    """The first problem of a validation error as `where: what`; `where` is relative to the
    field `within` when the problem is inside it, and left out for the model as a whole."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    if within is not None and loc[:1] == [within]:
        loc = loc[1:]
    where = ".".join(loc)
    message = first["msg"].removeprefix("Value error, ").removeprefix(f"{where}: ")
    return f"{where}: {message}" if where else message


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
