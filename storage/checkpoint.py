"""Resume: rebuild a crawl's frontier from what it already wrote.

The checkpoint is the output itself, read by the rule of `storage.outcomes`. `fetches` says
which URLs are done (a final answer, or given up after their retries), `discovered` lists
every URL the nodes found; the frontier to resume is discovered minus done. Both are written
in committed batches (see `storage.writer.CommitGroupWriter`), so after `discard_uncommitted`
they agree with `pages`: no page is kept whose links were lost, and no URL counts as done whose
page was lost.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from storage.compaction import finish_compaction
from storage.files import parquet_files, wait_for_quiet
from storage.lock import LOCK
from storage.manifest import MANIFEST
from storage.outcomes import ADMITTED_SQL, NOT_LEFT_AT_DEADLINE, fold_fetch_rows
from storage.schema import COMMITTED_DATASETS
from storage.writer import discard_uncommitted


@dataclass
class Checkpoint:
    done: set[str] = field(default_factory=set)
    # URL -> (depth, attempt of its next try)
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)
    # URLs that passed crawler.scope.limits, and so spent the --max-pages budget.
    admitted: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.done and not self.pending


def load_checkpoint(
    crawl_dir: Path, seeds: list[str], depths: Mapping[str, int] | None = None
) -> Checkpoint:
    """Read a (possibly crashed) crawl's output: what is done, and what is left to fetch from
    the discovered URLs and the seeds (at their depth in `depths`, else 0). Empty when the
    crawl has not started."""
    commit = crawl_dir / COMMITTED_DATASETS[-1]
    if not commit.is_dir():
        return Checkpoint()
    finish_compaction(crawl_dir)  # before the commit rule: it may be mid-way through renames
    discard_uncommitted(crawl_dir)
    con = duckdb.connect()
    checkpoint = Checkpoint()
    attempts: dict[str, int] = {}
    fetch_files = parquet_files(commit)
    if fetch_files:
        checkpoint.done, attempts = fold_fetch_rows(
            con.execute(
                "SELECT url, fetch_status, error, attempt "
                f"FROM read_parquet(?) WHERE {NOT_LEFT_AT_DEADLINE}",
                [fetch_files],
            ).fetchall()
        )
        checkpoint.admitted = [
            url
            for (url,) in con.execute(
                f"SELECT DISTINCT url FROM read_parquet(?) WHERE {ADMITTED_SQL}", [fetch_files]
            ).fetchall()
        ]
    discovered_files = parquet_files(crawl_dir / "discovered")
    if discovered_files:
        rows = con.execute(
            "SELECT url, min(depth) FROM read_parquet(?) GROUP BY url", [discovered_files]
        ).fetchall()
        for url, depth in rows:
            if url not in checkpoint.done:
                checkpoint.pending[url] = (depth, attempts.get(url, 0) + 1)
    if not checkpoint.empty:
        for seed in seeds:
            if seed not in checkpoint.done:
                depth = depths.get(seed, 0) if depths else 0
                checkpoint.pending.setdefault(seed, (depth, attempts.get(seed, 0) + 1))
    return checkpoint


def _changed_at(path: Path) -> float:
    """When `path` last changed; a file renamed or removed since it was listed (a node
    committing a batch) changed just now."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()


def wait_until_quiet(crawl_dir: Path, quiet_s: float, timeout_s: float) -> bool:
    """Wait until no file under `crawl_dir` has changed for `quiet_s` seconds.

    When a flow process is killed, its Ray actors outlive it for a moment and may still
    commit a batch; reading the checkpoint before they are gone would fetch those URLs twice.
    Returns False if the directory was still changing after `timeout_s`. The flow's own
    `crawl.json`, written just before this step, and its lock are no sign of a running node: a
    new crawl does not wait.
    """
    return wait_for_quiet(
        lambda: max(
            (_changed_at(p) for p in crawl_dir.rglob("*") if p.name not in (MANIFEST, LOCK)),
            default=0.0,
        ),
        quiet_s,
        timeout_s,
    )
