"""Checkpoint step: find out how far an earlier run of the same crawl id got."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from storage.checkpoint import Checkpoint, load_checkpoint, wait_until_quiet


@task(name="checkpoint", cache_policy=NO_CACHE)
def read_checkpoint(
    out_dir: str,
    crawl_id: str,
    seeds: list[str],
    quiet_s: float,
    depths: dict[str, int] | None = None,
) -> Checkpoint:
    crawl_dir = Path(out_dir) / crawl_id
    if crawl_dir.is_dir() and not wait_until_quiet(crawl_dir, quiet_s, timeout_s=10 * quiet_s):
        raise RuntimeError(
            f"{crawl_dir} is still being written: is another run of crawl {crawl_id} going on?"
        )
    checkpoint = load_checkpoint(crawl_dir, seeds, depths)
    if not checkpoint.empty:
        get_run_logger().info(
            "resuming crawl %s: %d URLs done, %d to fetch",
            crawl_id,
            len(checkpoint.done),
            len(checkpoint.pending),
        )
    return checkpoint
