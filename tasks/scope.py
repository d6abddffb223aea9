"""Scope step: the crawl's seeds (the request's and its seed file's) and what it follows; the
seed lines set aside, written beside the crawl's output."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from crawler.request import CrawlRequest
from crawler.scope.seeds import CrawlScope, build_scope, check_usable

# The malformed lines of a seed file: `<crawl dir>/seeds/rejected.parquet`.
_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("line", pa.int64()),
    ("text", pa.string()),
    ("reason", pa.string()),
]
REJECTED_SEEDS = pa.schema(_COLUMNS)


@task(name="scope", retries=0, cache_policy=NO_CACHE)
def scope_crawl(request: CrawlRequest) -> CrawlScope:
    """Canonical seeds, the servers the crawl starts with, and its scope rules; a SeedError
    when no seed at all is usable."""
    config = request.config
    scope = build_scope(request.seeds, request.seeds_file, request.allow, config.scope)
    check_usable(scope.seeds, request.allow_private, config.fetch.resolve)
    if scope.rejected or scope.duplicates:
        get_run_logger().warning(
            "%d seeds; %d malformed lines set aside (%s), %d duplicates",
            len(scope.seeds),
            len(scope.rejected),
            "; ".join(f"line {r.line}: {r.reason}" for r in scope.rejected[:3]) or "none",
            scope.duplicates,
        )
    return scope


def write_rejected_seeds(crawl_dir: Path, scope: CrawlScope) -> None:
    """Every malformed seed line, with its reason, in `seeds/rejected.parquet` (none: no
    file). Written whole each run: a resumed or retried run writes the same rows."""
    if not scope.rejected:
        return
    table = pa.Table.from_pylist(
        [{"line": r.line, "text": r.text, "reason": r.reason} for r in scope.rejected],
        schema=REJECTED_SEEDS,
    )
    directory = crawl_dir / "seeds"
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / "rejected.parquet.tmp"
    pq.write_table(table, temporary)
    temporary.replace(directory / "rejected.parquet")
