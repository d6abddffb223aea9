"""Report step: summarize the crawl from its Parquet output (with its seeds, what was refused
and why, and the `[alerts]` verdict), publish Prefect artifacts, and draw the achieved rate per
server over time beside the output (`host_rates.png`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from crawler.alerts import AlertSettings, crossed
from crawler.scope.seeds import CrawlScope
from storage.health import crawl_health, scope_refusals, urls_per_error_class
from storage.queries import crawl_summary, per_host
from storage.views import connect


def seed_figures(scope: CrawlScope) -> dict[str, Any]:
    """What the summary says of the seeds: how many, and the lines set aside."""
    return {
        "seeds": len(scope.seeds),
        "seeds_duplicates": scope.duplicates,
        "seeds_malformed": len(scope.rejected),
        "seeds_malformed_examples": [
            f"line {seed.line}: {seed.reason}" for seed in scope.rejected[:3]
        ],
    }


@task(
    name="report",
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    cache_policy=NO_CACHE,
)
def report_crawl(
    out_dir: str,
    crawl_id: str,
    seeds: dict[str, Any] | None = None,
    alerts: AlertSettings | None = None,
    published_to: str | None = None,
) -> dict[str, Any]:
    """The summary; `seeds`: `seed_figures` of the crawl's scope; `alerts`: the thresholds
    whose crossing the summary's `alerts` lists (none: the defaults); `published_to`: the
    output root in object storage `out_dir` (a staging directory) is published to."""
    crawl_dir = Path(out_dir) / crawl_id
    shown = f"{published_to}/{crawl_id}" if published_to else str(crawl_dir.resolve())
    con = connect(crawl_dir)
    summary = crawl_summary(con)
    health = crawl_health(con)
    refused = {**scope_refusals(con), **urls_per_error_class(con)}
    raised = crossed(alerts or AlertSettings(), {**summary, **health})
    hosts = per_host(con)
    lines = [f"# Crawl `{crawl_id}`", "", f"Output: `{shown}`", ""]
    lines += [f"**Failed:** {alert}" for alert in raised] + ([""] if raised else [])
    lines += ["| measure | value |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in {**summary, **(seeds or {})}.items()]
    lines += [f"| refused or failed: {reason} | {count} |" for reason, count in refused.items()]
    create_markdown_artifact("\n".join(lines), key="crawl-summary", description="crawl summary")
    create_table_artifact(hosts, key="crawl-hosts", description="per-host results")
    from storage.plots import plot_host_rates  # matplotlib: imported during the crawl task

    plot = plot_host_rates(con, crawl_dir / "host_rates.png")
    return {
        "crawl_id": crawl_id,
        "out_dir": shown if published_to else str(crawl_dir),
        **summary,
        **(seeds or {}),
        **health,
        "refused": refused,
        "alerts": raised,
        "plot": f"{shown}/{plot.name}" if published_to else str(plot),
    }
