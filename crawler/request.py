"""What one crawl is asked to do: the `crawl` flow's single parameter.

Built once where a crawl is asked for (the `crawlflow crawl` command from its options and the
config file, a deployment from prefect.yaml, a test) and validated there; from then on the flow,
its tasks and the nodes read the same typed values, never a dict of them. Plain pydantic, so
that the Prefect UI renders it as a form and a deployment's parameters are checked the same way.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from crawler.config import ConfigError, CrawlConfig, one_line
from storage.manifest import check_crawl_id

# Fields of the request that moved into its settings (issue 28): name -> its place in `config`.
MOVED_TO_CONFIG = {"max_pages": "limits.max_pages", "max_depth": "limits.max_depth"}


class CrawlRequest(BaseModel):
    """One crawl: where it starts, what is in scope, where it writes, what it revisits, and
    its settings (the page, depth and time limits among them, in `config.limits`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Defaults by keyword (`default=`): type checkers without pydantic's plugin take a field
    # whose default is positional for a required one (the API's users, docs/python-api.md).
    seeds: list[str] = Field(
        default_factory=list, description="start URLs; with [scope] they say what is in scope"
    )
    seeds_file: str | None = Field(
        default=None,
        description="more start URLs: a text file (one a line, # comments), or a .csv or "
        ".parquet file with a url column; malformed lines are reported, not fatal",
    )
    allow: list[str] = Field(
        default_factory=list,
        description="more in scope: HOST, HOST:PORT, *.DOMAIN, or a URL prefix such as HOST/docs/",
    )
    allow_private: bool = Field(
        default=False, description="allow loopback/private/link-local targets"
    )
    nodes: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description="crawler nodes; None: as many as the allocation plan",
    )
    out_dir: str = Field(
        default="crawl-out",
        description="output root: a directory, or object storage (s3://BUCKET/PREFIX, gs://...); "
        "the crawl writes out_dir/crawl_id",
    )
    crawl_id: str | None = Field(
        default=None, description="None: a new crawl; an earlier crawl's id resumes it"
    )
    since: str | None = Field(
        default=None,
        description="the earlier crawl whose URLs are revisited; None: the newest earlier crawl "
        "of the same servers in out_dir",
    )
    incremental: bool = Field(
        default=True,
        description="revisit an earlier crawl's URLs; False: a full crawl from the seeds",
    )
    config: CrawlConfig = Field(default_factory=CrawlConfig, description="crawler settings")

    @field_validator("seeds")
    @classmethod
    def _no_credentials(cls, seeds: list[str]) -> list[str]:
        # The crawler never logs in; a password in a seed would only be stored with the flow
        # run's parameters (Prefect's database) and logs.
        for number, seed in enumerate(seeds, 1):
            if "@" in urlsplit(seed.strip()).netloc:
                raise ValueError(
                    f"seed {number} carries credentials (user:password@): remove them, the "
                    "crawler does not log in and would store them with the run"
                )
        return seeds

    @field_validator("crawl_id", "since")
    @classmethod
    def _valid_crawl_id(cls, value: str | None) -> str | None:
        return None if value is None else check_crawl_id(value)

    @model_validator(mode="before")
    @classmethod
    def _no_moved_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in MOVED_TO_CONFIG:
                if name in data:
                    raise ValueError(f"{name} moved to config.{MOVED_TO_CONFIG[name]}")
        return data

    @model_validator(mode="after")
    def _some_seed(self) -> CrawlRequest:
        if not self.seeds and self.seeds_file is None:
            raise ValueError("no seed URLs given: seeds or seeds_file")
        return self

    @model_validator(mode="after")
    def _since_needs_incremental(self) -> CrawlRequest:
        if self.since is not None and not self.incremental:
            raise ValueError("since names a crawl to revisit, but incremental is off (--full)")
        return self


def crawl_request(data: dict[str, Any]) -> CrawlRequest:
    """Validate a request; a bad value is a ConfigError naming it in one line."""
    try:
        return CrawlRequest.model_validate(data)
    except ValidationError as exc:
        if exc.errors()[0]["loc"][:1] == ("config",):
            problem = one_line(exc, CrawlRequest, within="config")
            raise ConfigError(f"invalid config: {problem}") from None
        raise ConfigError(f"invalid crawl request: {one_line(exc, CrawlRequest)}") from None
