"""Recrawl step: which earlier crawl this one revisits, and what it knows of each URL."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from crawler.scheduling.recrawl import (
    RecrawlError,
    Revisits,
    plan_revisits,
    read_history,
    require_earlier_crawl,
)
from crawler.scope.urls import host_key
from storage.manifest import (
    Manifest,
    deployment_key,
    earlier_crawls,
    read_manifest,
    write_manifest,
)


def start_manifest(
    out_dir: Path, crawl_id: str, scope_hosts: list[str], since: str | None, incremental: bool
) -> Manifest:
    """The crawl's manifest: the one it wrote when it first ran (a resume keeps its `since`),
    else a new one naming `since`, or by default the newest earlier crawl of the deployment."""
    crawl_dir = out_dir / crawl_id
    manifest = read_manifest(crawl_dir)
    if manifest is not None:
        wanted = since if since is not None else (None if not incremental else manifest.since)
        if wanted != manifest.since:
            started_as = f"revisits {manifest.since}" if manifest.since else "is a full crawl"
            raise RecrawlError(
                f"crawl {crawl_id} {started_as}; a resumed run cannot change that "
                "(drop --since/--full, or start a new crawl id)"
            )
        return manifest
    if since is not None:
        require_earlier_crawl(out_dir, since)
    deployment = deployment_key(scope_hosts)
    started = datetime.now(UTC).isoformat()
    if since is None and incremental:
        earlier = earlier_crawls(out_dir, deployment, started)
        since = earlier[-1].crawl_id if earlier else None
    manifest = Manifest(crawl_id, started, deployment, since)
    write_manifest(crawl_dir, manifest)
    return manifest


def load_revisits(out_dir: Path, manifest: Manifest, scope_hosts: list[str]) -> Revisits | None:
    """The history of the crawls up to `manifest.since`, ranked for this crawl. Only URLs of
    servers in this crawl's scope: `--since` may name a crawl of other servers too."""
    if manifest.since is None:
        return None
    since = read_manifest(out_dir / manifest.since) or Manifest(
        manifest.since, manifest.started, manifest.deployment, None
    )
    chain = [
        m
        for m in earlier_crawls(out_dir, since.deployment, manifest.started)
        if m.started <= since.started and m.crawl_id != since.crawl_id
    ]
    chain.append(since)
    in_scope = set(scope_hosts)
    history = {
        url: visits
        for url, visits in read_history(out_dir, chain).items()
        if host_key(url) in in_scope
    }
    return plan_revisits(history, len(chain), since.crawl_id)


@task(name="revisits", cache_policy=NO_CACHE)
def plan_recrawl(
    out_dir: str, crawl_id: str, scope_hosts: list[str], since: str | None, incremental: bool
) -> Revisits | None:
    """None for a full crawl; else every URL the earlier nights know, with its validators and
    revisit priority (crawler/scheduling/recrawl.py)."""
    manifest = start_manifest(Path(out_dir), crawl_id, scope_hosts, since, incremental)
    revisits = load_revisits(Path(out_dir), manifest, scope_hosts)
    if revisits is not None:
        get_run_logger().info(
            "incremental crawl: revisiting %d URLs known from crawl %s and before",
            len(revisits.urls),
            revisits.since,
        )
    return revisits
