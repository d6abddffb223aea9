"""Collect step: merge the finished crawl's batch files, one file per dataset, and its WARC
files into files of `[output] warc_file_bytes`."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from storage.bucket import Bucket, drop_staged, gather, publish_crawl, publish_file
from storage.compaction import compact
from storage.lease import LeaseFence
from storage.manifest import MANIFEST


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


@task(name="gather", cache_policy=NO_CACHE)
def gather_output(location: str, crawl_id: str, work_dir: str) -> None:
    """Object storage output: the batches nodes of other machines published, into this
    machine's staging directory, before it is compacted there."""
    gather(Bucket(location), crawl_id, Path(work_dir) / crawl_id)


@task(name="publish", cache_policy=NO_CACHE)
def publish_output(
    location: str, crawl_id: str, work_dir: str, lease_token: str | None = None
) -> None:
    """Object storage output: the compacted crawl of the staging directory replaces its batch
    objects in the bucket (storage/bucket.py: under a journal, nothing read twice), if the
    run's lease (`lease_token`, storage/lease.py) is still its own."""
    staged = Path(work_dir) / crawl_id
    fence = LeaseFence(location, crawl_id, lease_token).check if lease_token else lambda: None
    publish_crawl(Bucket(location), crawl_id, staged, fence)
    # Published: the staging copy goes (a resume restores from the bucket); the lock stays
    # with the run that holds it.
    drop_staged(staged)
    get_run_logger().info("published crawl %s to %s/%s", crawl_id, location, crawl_id)


@task(name="publish-manifest", cache_policy=NO_CACHE)
def publish_manifest(location: str, crawl_id: str, history_dir: str) -> None:
    """Object storage output: the crawl's manifest (`crawl.json`, which the recrawl step read
    or wrote in the local mirror `history_dir`) in the bucket, before any batch."""
    bucket = Bucket(location)
    if f"{crawl_id}/{MANIFEST}" not in bucket.listing(crawl_id):
        publish_file(bucket, crawl_id, Path(history_dir) / crawl_id, MANIFEST)
