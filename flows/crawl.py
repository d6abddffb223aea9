"""The `crawl` flow: plan, allocate, launch nodes, crawl, close, collect, report; then the
`[alerts]` verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, cast

from prefect import flow
from prefect.runtime import flow_run
from prefect.utilities.annotations import quote

from crawler.alerts import AlertsRaised
from crawler.request import CrawlRequest
from crawler.scheduling.recrawl import start_depths, start_urls
from runtime.fleet import FleetPlan
from storage.bucket import is_remote, local_root, readable
from storage.lease import crawl_lease
from storage.lock import crawl_lock
from storage.manifest import new_crawl_id
from tasks.allocate import allocate_nodes
from tasks.collect import collect_output, gather_output, publish_manifest, publish_output
from tasks.crawl import drive_crawl
from tasks.launch import close_nodes, launch_nodes, require_committed
from tasks.recrawl import plan_recrawl
from tasks.report import report_crawl, seed_figures
from tasks.resume import read_checkpoint, restore_output
from tasks.scope import scope_crawl, write_rejected_seeds

T = TypeVar("T")


def as_is(value: T) -> T:
    """`value` for a task parameter, not walked by Prefect: its `quote`, which the task gets
    unwrapped, typed as the value itself."""
    return cast(T, quote(value))


# The nightly deployment's flow (prefect.yaml): the same flow, retried when a run fails. A
# retried run keeps its crawl id (`default_crawl_id`), so it resumes: nothing fetched is
# fetched again.
NIGHTLY_RETRIES = 2
NIGHTLY_RETRY_DELAY_S = 600


def default_crawl_id() -> str:
    """`<UTC start>-<flow run id prefix>`: new for every run, but the same when Prefect retries
    a flow run (from the UI, say), so a retried run resumes its own crawl."""
    return new_crawl_id(flow_run.scheduled_start_time, suffix=str(flow_run.id)[:8])


@flow(name="crawl", log_prints=True)
def crawl(request: CrawlRequest) -> dict[str, Any]:
    """Crawl from `request.seeds` (and `request.seeds_file`) within the scope `[scope]` and
    `request.allow` give, writing Parquet to `out_dir/<crawl_id>/`. Run again with the same
    `crawl_id`, it resumes where the earlier run stopped. Incremental (the default): every URL
    of the earlier crawl `since` (default: the newest earlier crawl of the same servers in
    `out_dir`) is revisited with a conditional GET, most likely changed first;
    `incremental=False` crawls from the seeds alone. Returns the crawl summary; ends Failed
    (AlertsRaised, with the summary) once everything is written if the crawl crossed an
    `[alerts]` threshold."""
    crawl_id = request.crawl_id or default_crawl_id()
    out_dir, settings = request.out_dir, request.config
    max_pages = settings.limits.max_pages
    scope = scope_crawl(request)
    # Object storage output (storage/bucket.py): the crawl is written in this machine's
    # staging directory `work_dir` and published to the bucket `out_dir`; the earlier crawls
    # are read from a local mirror of the bucket, `history`.
    remote = is_remote(out_dir)
    work_dir = str(local_root(out_dir, settings.output.staging_dir))
    history = str(readable(out_dir)) if remote else out_dir
    # One run per crawl directory, from the manifest through compaction (storage/lock.py);
    # in S3, one across machines too (storage/lease.py).
    with (
        crawl_lock(Path(work_dir) / crawl_id),
        crawl_lease(out_dir, crawl_id, settings.output.lease_expiry_s) as lease,
    ):
        lease_token = None if lease is None else lease.token
        revisits = plan_recrawl(history, crawl_id, scope.hosts, request.since, request.incremental)
        start = start_urls(scope.seeds, revisits, max_pages, settings.scheduling.policy)
        depths = start_depths(scope.seeds, revisits)
        quiet_s = settings.output.resume_quiet_s
        if remote:
            publish_manifest(out_dir, crawl_id, history)
            restore_output(out_dir, crawl_id, work_dir, quiet_s)
            quiet_s = 0.0  # the bucket was quiet; the restore itself just wrote the directory
        # The seeds and what holds them (100,000 URLs and more) go to the tasks `as_is`:
        # Prefect would otherwise walk every item at each call, looking for futures.
        checkpoint = read_checkpoint(work_dir, crawl_id, as_is(start), quiet_s, as_is(depths))
        # After the checkpoint: a new crawl's directory must not exist before it looks.
        write_rejected_seeds(Path(work_dir) / crawl_id, scope)
        specs = allocate_nodes(as_is(scope), request.nodes, work_dir, crawl_id, settings, history)
        fleet = launch_nodes(
            as_is(
                FleetPlan(
                    crawl_id=crawl_id,
                    out_dir=out_dir,
                    config=settings,
                    nodes=specs,
                    scope_hosts=scope.hosts,
                    allow_private=request.allow_private,
                    revisits=revisits,
                    scope=scope.rules,
                    lease_token=lease_token,
                )
            )
        )
        try:
            usage = drive_crawl(fleet, as_is(start), as_is(checkpoint), as_is(depths))
        finally:
            statuses = close_nodes(fleet)
        require_committed(statuses)
        if remote:
            gather_output(out_dir, crawl_id, work_dir)
        collect_output(work_dir, crawl_id, settings.output.warc_file_bytes)
        # Nodes used (planned, added, lost) beside the crawl's own summary.
        report = report_crawl(
            work_dir,
            crawl_id,
            seed_figures(scope),
            settings.alerts,
            published_to=out_dir if remote else None,
        )
        if remote:
            publish_output(out_dir, crawl_id, work_dir, lease_token)
        summary = {**report, "nodes": usage}
    if summary["alerts"]:
        raise AlertsRaised(summary["alerts"], summary)
    return summary


# Retried as a whole: Prefect runs the flow again in the same flow run.
nightly = crawl.with_options(retries=NIGHTLY_RETRIES, retry_delay_seconds=NIGHTLY_RETRY_DELAY_S)
