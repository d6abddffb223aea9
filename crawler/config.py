"""Crawler settings: everything a user may tune, with safe defaults, as one tree of sections.

Each component is built from its own section only (the fetcher from `fetch`, the URL limits
from `limits`, the rate controllers from `rate_control` and `retry`, ...); the node hands each
part its section. Loaded from a TOML or JSON file (`--config FILE`, one table per section) as
part of the crawl request (crawler/request.py). Every section is a `crawler.section.Section`:
unknown keys, wrong types and bad values are errors, so a typo never silently falls back to a
default: an unknown key is reported with the closest known one, and a key of an older layout
with its new place.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from crawler.alerts import AlertSettings
from crawler.cluster.settings import DedupSettings, ExchangeSettings
from crawler.content.settings import ContentSettings, ExtractSettings
from crawler.fetching.politeness import RetrySettings
from crawler.fetching.settings import FetchSettings
from crawler.ratecontrol import LAW_SETTINGS, RateControlSettings
from crawler.scheduling.settings import SchedulingSettings
from crawler.scope.rules import ScopeSettings
from crawler.scope.settings import LimitSettings
from crawler.section import Section
from storage.warc import WARC_FILE_BYTES


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message is one line."""


class OutputSettings(Section):
    """`[output]`: the Parquet and WARC files the nodes write (storage/), and resuming from
    them."""

    warc: bool = Field(
        True, description="archive every HTTP exchange to WARC/1.1 files beside the Parquet"
    )
    warc_file_bytes: int = Field(
        WARC_FILE_BYTES,
        ge=1,
        description="size the WARC files are merged to when the crawl ends (one file per batch "
        "until then), as Common Crawl's are about 1 GB",
    )
    write_batch_rows: int = Field(2000, ge=1, description="rows buffered per Parquet file")
    write_interval_s: float = Field(5.0, gt=0, description="longest time rows stay buffered")
    metrics_interval_s: float = Field(
        1.0, gt=0, description="control window of the metrics traces, seconds"
    )
    resume_quiet_s: float = Field(
        5.0, ge=0, description="a resumed crawl waits until its directory is this long unchanged"
    )
    staging_dir: str = Field(
        "",
        description="with --out in object storage (s3://, gs://...): the local directory each "
        "machine writes batches in before it publishes them; empty: "
        "$XDG_CACHE_HOME/crawlflow/staging (~/.cache/crawlflow/staging)",
    )
    lease_expiry_s: float = Field(
        60.0,
        gt=0,
        description="with --out s3://: a run of the crawl on another machine takes the "
        "running one's lease in the bucket over once it has not been renewed for this long "
        "(it is renewed every third of it); a run killed on this machine is taken over at once",
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
        0, ge=0, description="nodes added while the crawl is projected past [limits] deadline_s"
    )
    surcharge_check_s: float = Field(10.0, gt=0, description="interval of that projection")


class CrawlConfig(Section):
    """Every setting, one table (section) per component; each component takes its own."""

    fetch: FetchSettings = Field(
        default_factory=FetchSettings, description="how one HTTP request is made and cut off"
    )
    scope: ScopeSettings = Field(
        default_factory=ScopeSettings, description="which links the crawl follows"
    )
    limits: LimitSettings = Field(
        default_factory=LimitSettings,
        description="what the crawl fetches at most, how deep, and when it stops",
    )
    scheduling: SchedulingSettings = Field(
        default_factory=SchedulingSettings, description="which server and URL come next"
    )
    rate_control: RateControlSettings = Field(
        default_factory=RateControlSettings, description="the rate controller of each server"
    )
    retry: RetrySettings = Field(
        default_factory=RetrySettings, description="retries of a URL and pauses of a server"
    )
    exchange: ExchangeSettings = Field(
        default_factory=ExchangeSettings, description="how nodes hand URLs and servers over"
    )
    dedup: DedupSettings = Field(
        default_factory=DedupSettings, description="the crawl-wide set of URLs seen"
    )
    output: OutputSettings = Field(
        default_factory=OutputSettings, description="the Parquet and WARC files written"
    )
    plan: PlanSettings = Field(
        default_factory=PlanSettings, description="what the allocation plan assumes"
    )
    content: ContentSettings = Field(
        default_factory=ContentSettings,
        description="main text, language and robots directives of pages",
    )
    extract: ExtractSettings = Field(
        default_factory=ExtractSettings, description="fields of your own, per page"
    )
    alerts: AlertSettings = Field(
        default_factory=AlertSettings, description="when a finished crawl counts as failed"
    )

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
                    raise ValueError(moved_message(table, key))
        return data


# Keys that moved when the settings became a tree of sections (issue 18) or were split and
# renamed (issue 28): (the table a file held it in, None for the top level of the flat layout;
# its name there) -> (its section, its name there). A file that still uses one gets an error
# naming its new place.
_RENAMED = {
    "exchange_batch": ("exchange", "batch"),
    "dedup_cache_size": ("dedup", "cache_size"),
    "dedup_expected_urls": ("dedup", "expected_urls"),
    "dedup_fp_rate": ("dedup", "fp_rate"),
    "dedup_shards": ("dedup", "shards"),
    "time_budget_s": ("limits", "deadline_s"),
}
# The laws' keys at the top of [rate_control] before each law had its sub-table; those not
# listed kept their names there.
_RATE_CONTROL_RENAMED = {
    "pid_reference_ppm": ("pid", "reference_ppm"),
    "fixed_delay_s": ("fixed", "delay_s"),
    "rtt_increase": ("rtt", "increase"),
    "rtt_decrease": ("rtt", "decrease"),
    "rtt_initial_cap": ("rtt", "initial_cap"),
    "rtt_min_cap": ("rtt", "min_cap"),
    "rtt_max_cap": ("rtt", "max_cap"),
}
# The tables whose keys stood at the top level of the flat layout.
_FLAT_TABLES: list[tuple[str, type[Section]]] = [
    ("fetch", FetchSettings),
    ("limits", LimitSettings),
    ("scheduling", SchedulingSettings),
    ("exchange", ExchangeSettings),
    ("output", OutputSettings),
    ("plan", PlanSettings),
]
MOVED_KEYS: dict[tuple[str | None, str], tuple[str, str]] = {
    **{
        (None, name): (section, name)
        for section, model in _FLAT_TABLES
        for name in model.model_fields
        if (section, name) not in _RENAMED.values()
    },
    **{(None, old): new for old, new in _RENAMED.items()},
    ("limits", "time_budget_s"): ("limits", "deadline_s"),
    # The retry budget and host pauses were rate-control keys before [retry] was a section.
    **{("rate_control", name): ("retry", name) for name in RetrySettings.model_fields},
    **{
        ("rate_control", name): (f"rate_control.{law}", name)
        for law, model in LAW_SETTINGS.items()
        for name in model.model_fields
        if (law, name) not in _RATE_CONTROL_RENAMED.values()
    },
    **{
        ("rate_control", old): (f"rate_control.{law}", name)
        for old, (law, name) in _RATE_CONTROL_RENAMED.items()
    },
}


def moved_message(table: str | None, key: str) -> str:
    """Where key `key` of table `table` (None: the top level) of an older layout is now."""
    section, name = MOVED_KEYS[table, key]
    where = key if table is None else f"{table}.{key}"
    if section == table:
        return f"{where} is now {section}.{name}"
    return f"{where} moved to [{section}]" + (f" as {name}" if name != key else "")


def _keys_at(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The keys of the table at `path` below `model`; none if the path leads out of the
    models (into a list, say)."""
    for part in path:
        field = model.model_fields.get(str(part))
        table = None if field is None else field.annotation
        if not (isinstance(table, type) and issubclass(table, BaseModel)):
            return []
        model = table
    return list(model.model_fields)


def one_line(error: ValidationError, model: type[BaseModel], within: str | None = None) -> str:
    """The first problem of a validation of `model` as `where: what`; `where` is relative to
    the field `within` when the problem is inside it, and left out for the model as a whole
    or when the message names its place itself. An unknown key comes with the closest key of
    its table, if one is close: `unknown key fetch.user_agnet (did you mean user_agent?)`."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    inside = within is not None and loc[:1] == [within]
    where = ".".join(loc[1:] if inside else loc)
    if first["type"] == "extra_forbidden":
        close = difflib.get_close_matches(loc[-1], _keys_at(model, first["loc"][:-1]), n=1)
        return f"unknown key {where}" + (f" (did you mean {close[0]}?)" if close else "")
    message = first["msg"].removeprefix("Value error, ").removeprefix(f"{where}: ")
    if not where or message.startswith(f"{where}."):
        return message
    return f"{where}: {message}"


def config_from_dict(data: dict[str, Any]) -> CrawlConfig:
    try:
        return CrawlConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid config: {one_line(exc, CrawlConfig)}") from None


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The settings of a TOML (`.toml`) or JSON file, as written (validated with the request
    they become part of)."""
    path = Path(path)
    kind = "JSON" if path.suffix == ".json" else "TOML"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not {kind} (not UTF-8 text)") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid {kind}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} is nested too deeply to be settings") from None
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
