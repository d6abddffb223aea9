"""How completely a crawl fetched a simulated web: its output measured against the simulator's
ground truth (`WebSim.reachable_allowed_urls()`). Used by `crawlflow demo`, tests and benchmarks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storage.views import connect


def coverage(crawl_dir: Path, expected: set[str]) -> dict[str, Any]:
    """Compare the successfully fetched URLs of a crawl with the URLs it should have fetched."""
    con = connect(crawl_dir)
    # robots.txt is not a page: each run of a crawl (a resumed one too) reads it afresh.
    rows = con.execute(
        "SELECT url, count(*) FROM fetches WHERE fetch_status BETWEEN 200 AND 299 "
        "AND url_path <> '/robots.txt' GROUP BY url"
    ).fetchall()
    fetched = {url for url, _ in rows}
    return {
        "expected": len(expected),
        "fetched": len(fetched & expected),
        "coverage": len(fetched & expected) / len(expected) if expected else 1.0,
        "missing": sorted(expected - fetched)[:10],
        "duplicates": sum(1 for _, count in rows if count > 1),
    }
