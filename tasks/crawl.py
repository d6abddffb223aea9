"""Crawl step: the Ray driver. Routes URLs between node actors until the crawl is done."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from crawler.coordinator import Coordinator, Progress
from storage.checkpoint import Checkpoint
from tasks.launch import Fleet


@task(name="crawl", cache_policy=NO_CACHE)
def drive_crawl(
    fleet: Fleet, seeds: list[str], max_pages: int | None, checkpoint: Checkpoint
) -> Progress:
    logger = get_run_logger()
    coordinator = Coordinator(fleet.nodes, fleet.owner, max_pages)
    if checkpoint.empty:
        coordinator.seed(seeds)
    else:
        coordinator.resume(checkpoint.pending, checkpoint.done, checkpoint.budget_spent)
    artifact_id = create_progress_artifact(
        progress=0.0, key="crawl-progress", description="URLs done / URLs known"
    )

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

    final = coordinator.run(on_progress=report)
    update_progress_artifact(artifact_id, progress=100.0)
    logger.info("crawl done in %.1fs: %d pages", final.elapsed_s, final.pages)
    return final
