"""Collect step: merge the finished crawl's batch files, one file per dataset."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from storage.compaction import compact


@task(name="collect", cache_policy=NO_CACHE)
def collect_output(out_dir: str, crawl_id: str) -> None:
    result = compact(Path(out_dir) / crawl_id)
    get_run_logger().info("merged %d batch files into %d", result.files_before, result.files_after)
