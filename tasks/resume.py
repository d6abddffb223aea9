"""Checkpoint step: find out how far an earlier run of the same crawl id got."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from storage.bucket import Bucket, restore
from storage.bucket import wait_until_quiet as wait_until_bucket_quiet
from storage.checkpoint import Checkpoint, load_checkpoint, wait_until_quiet


@task(name="restore", cache_policy=NO_CACHE)
def restore_output(location: str, crawl_id: str, work_dir: str, quiet_s: float) -> None:
    """Object storage output: the staging directory `work_dir/crawl_id` made the crawl as the
    bucket `location` holds it (what the checkpoint reads), once the bucket's crawl is quiet
    (the nodes of a killed run may still publish a batch)."""
    bucket = Bucket(location)
    if not wait_until_bucket_quiet(bucket, crawl_id, quiet_s, timeout_s=10 * quiet_s):
        raise RuntimeError(
            f"{location}/{crawl_id} is still being written: is another run of crawl "
            f"{crawl_id} going on?"
        )
    restore(bucket, crawl_id, Path(work_dir) / crawl_id)


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
