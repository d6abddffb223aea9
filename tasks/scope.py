"""Scope step: validate the seeds and fix the crawl's scope."""

from __future__ import annotations

from prefect import task

from crawler.scope.seeds import CrawlScope, resolve_scope


@task(name="scope", retries=0)
def scope_crawl(seeds: list[str], allow: list[str], allow_private: bool) -> CrawlScope:
    """Canonical seeds, and every server the crawl may fetch from (seed hosts + --allow)."""
    return resolve_scope(seeds, allow, allow_private)
