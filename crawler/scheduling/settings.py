"""The `[scheduling]` settings: the scheduling policy and its connection parameters (a
section of the settings tree, `crawler.config`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from crawler.scheduling.policies import (
    DEFAULT_ESTIMATE_WEIGHT,
    DEFAULT_KEEPALIVE_SPEEDUP,
    POLICIES,
    Policy,
)
from crawler.section import Section


class SchedulingSettings(Section):
    """`[scheduling]`: which server a node connects to next and how long it keeps the
    connection (docs/scheduling.md; crawler/scheduling/policies.py and frontier.py)."""

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
    max_queued_per_server: int = Field(
        100_000,
        ge=1,
        description="URLs queued for one server (new and retries); a URL found past it is not "
        "queued but gets a `discovered` row and a `skipped: queue_full` row, and a resumed "
        "crawl fetches it (docs/scheduling.md#bounds)",
    )
    max_queued_per_node: int = Field(
        1_000_000,
        ge=1,
        description="URLs queued on one node, all its servers together (about 0.6 KB each with "
        "their seen set and page-quality graph); past it, as past max_queued_per_server",
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
