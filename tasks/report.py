"""Report step: summarize the crawl from its Parquet output, publish Prefect artifacts, and draw
the achieved rate per server over time beside the output (`host_rates.png`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.tasks import exponential_backoff

from storage.queries import crawl_summary, per_host
from storage.views import connect


@task(name="report", retries=2, retry_delay_seconds=exponential_backoff(backoff_factor=2))
def report_crawl(out_dir: str, crawl_id: str) -> dict[str, Any]:
    crawl_dir = Path(out_dir) / crawl_id
    con = connect(crawl_dir)
    summary = crawl_summary(con)
    hosts = per_host(con)
    lines = [f"# Crawl `{crawl_id}`", "", f"Output: `{crawl_dir.resolve()}`", ""]
    lines += ["| measure | value |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in summary.items()]
    create_markdown_artifact("\n".join(lines), key="crawl-summary", description="crawl summary")
    create_table_artifact(hosts, key="crawl-hosts", description="per-host results")
    from storage.plots import plot_host_rates  # matplotlib: imported during the crawl task

    plot = plot_host_rates(con, crawl_dir / "host_rates.png")
    return {"crawl_id": crawl_id, "out_dir": str(crawl_dir), **summary, "plot": str(plot)}
