"""Collect step: merge the finished crawl's batch files, one file per dataset, and its WARC
files into files of `[output] warc_file_bytes`."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from storage.compaction import compact


@task(name="collect", cache_policy=NO_CACHE)
def collect_output(out_dir: str, crawl_id: str, warc_file_bytes: int) -> None:
    result = compact(Path(out_dir) / crawl_id, warc_file_bytes)
    get_run_logger().info(
        "merged %d batch files into %d, %d WARC files into %d",
        result.files_before,
        result.files_after,
        result.warc_files_before,
        result.warc_files_after,
    )
