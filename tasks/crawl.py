"""Crawl step: drives the fleet the launch task started (through runtime/, which holds Ray):
seeds its nodes and watches them (takeover of dead nodes, surcharge nodes when the crawl falls
behind its deadline) with crawler.cluster.coordinator until the crawl is done."""

from __future__ import annotations

import functools
import importlib
import threading
from typing import Any
from uuid import UUID

from prefect import get_run_logger, task
from prefect.artifacts import (
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE

from crawler.cluster.coordinator import CrawlFailed, Progress
from crawler.cluster.recovery import OutputRecovery
from runtime.fleet import Fleet
from storage.bucket import Bucket, gather, is_remote, local_root
from storage.checkpoint import Checkpoint

# Seconds between the driver's looks at the nodes and the exchange at the start of a crawl, and
# at most later on (see drive_crawl).
POLL_S = 0.25
MAX_POLL_S = 1.0


@task(name="crawl", cache_policy=NO_CACHE)
def drive_crawl(
    fleet: Fleet,
    seeds: list[str],
    checkpoint: Checkpoint,
    depths: dict[str, int] | None = None,
) -> dict[str, Any]:
    """`depths`: where a recrawl's known URLs among `seeds` start
    (crawler.scheduling.recrawl.start_depths). Returns the nodes used against the nodes planned
    (see `Coordinator.report`)."""
    # From here the driver mostly waits on the fleet: the report step's plotting library
    # (matplotlib, a quarter of a second) is imported meanwhile, off the flow's path.
    threading.Thread(
        target=importlib.import_module, args=("storage.plots",), name="import-plots", daemon=True
    ).start()
    logger = get_run_logger()
    config = fleet.plan.config
    max_pages = config.limits.max_pages
    location, crawl_id = fleet.plan.out_dir, fleet.plan.crawl_id
    # Object storage output: this machine's staging directory, where a takeover first brings
    # what the nodes of other machines published.
    crawl_dir = local_root(location, config.output.staging_dir) / crawl_id
    gather_published = (
        functools.partial(gather, Bucket(location), crawl_id, crawl_dir)
        if is_remote(location)
        else None
    )
    coordinator = fleet.coordinator(
        recover=OutputRecovery(
            crawl_dir, seeds, set(checkpoint.admitted), depths, gather=gather_published
        )
    )
    if checkpoint.empty:
        coordinator.seed(seeds, depths)
    else:
        coordinator.resume(checkpoint.pending, checkpoint.done, checkpoint.admitted)
    artifact_id = create_progress_artifact(
        progress=0.0, key="crawl-progress", description="URLs done / URLs known"
    )
    # Prefect runs its async twin in an async context; this task is sync.
    assert isinstance(artifact_id, UUID)

    def report(progress: Progress) -> None:
        known = progress.urls_done + progress.queued
        target = max_pages or known
        share = 100.0 * progress.urls_done / max(1, min(target, known) if max_pages else known)
        update_progress_artifact(artifact_id, progress=min(100.0, share))
        logger.info(
            "%.0fs: %d pages, %d fetches, %d queued, %d connections open",
            progress.elapsed_s,
            progress.pages,
            progress.fetches,
            progress.queued,
            progress.active,
        )

    # Nodes route discovered URLs to each other over their peer links
    # (crawler/cluster/peerlink.py), the only routing path: the driver only watches, so it need
    # not poll often. Each poll is a remote call to every node (and to the exchange once they
    # look done), each about a millisecond of CPU on both sides: polling every 0.1 s, the
    # command and the exchange used 45 and 25 CPU-s of a 20,000-page crawl that took 30 min on
    # a loaded machine (bench/results/cpu_per_page/NOTES.md). The polls start POLL_S apart, so
    # that a short crawl's end is seen at once, and space out to 1% of the time elapsed, up to
    # MAX_POLL_S (progress is still reported every 2 s; a node that dies is seen within a
    # second).
    try:
        final = coordinator.run(
            poll_s=POLL_S,
            max_poll_s=MAX_POLL_S,
            on_progress=report,
            deadline_s=config.limits.deadline_s,
        )
    except CrawlFailed as exc:
        raise CrawlFailed(
            f"{exc}. What was committed is kept in {location}/{crawl_id}:"
            f" run again with --crawl-id {crawl_id} to resume"
        ) from exc
    update_progress_artifact(artifact_id, progress=100.0)
    usage = coordinator.report()
    placements = fleet.placements()  # the Ray node each ran on, a cluster's machine
    for row in usage["nodes"]:
        row.update(placements.get(row["node_id"], {}))
    if coordinator.left_at_deadline is not None:
        logger.warning(
            "deadline (deadline_s = %.0f) reached with %d URLs left: run again with"
            " --crawl-id %s to go on",
            config.limits.deadline_s,
            coordinator.left_at_deadline,
            crawl_id,
        )
    create_table_artifact(
        usage["nodes"], key="crawl-nodes", description="crawler nodes: planned, added, lost"
    )
    logger.info(
        "crawl done in %.1fs: %d pages; nodes: %d planned, %d added, %d lost",
        final.elapsed_s,
        final.pages,
        usage["nodes_planned"],
        usage["nodes_added"],
        usage["nodes_lost"],
    )
    return usage
