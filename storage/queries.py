"""The questions every crawl report asks, as DuckDB SQL over the views of `storage.views`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from storage.files import parquet_files

SUMMARY_SQL = """
SELECT
    (SELECT count(DISTINCT crawl_id) FROM fetches)                         AS crawls,
    (SELECT count(*) FROM fetches)                                         AS fetches,
    (SELECT count(DISTINCT url) FROM fetches WHERE fetch_status IS NOT NULL) AS urls_fetched,
    (SELECT count(*) FROM pages)                                           AS pages,
    (SELECT count(*) - count(DISTINCT (crawl_id, url)) FROM pages)         AS duplicate_pages,
    (SELECT count(DISTINCT url_server) FROM fetches)                       AS hosts,
    (SELECT count(*) FROM fetches WHERE fetch_status BETWEEN 200 AND 299)  AS status_2xx,
    (SELECT count(*) FROM fetches WHERE fetch_status BETWEEN 300 AND 399)  AS status_3xx,
    (SELECT count(*) FROM fetches WHERE fetch_status = 304 AND error IS NULL) AS not_modified,
    (SELECT count(*) FROM fetches WHERE fetch_status BETWEEN 400 AND 499
                                    AND fetch_status <> 429)               AS status_4xx,
    (SELECT count(*) FROM fetches WHERE fetch_status IN (429, 503))        AS bans,
    (SELECT count(*) FROM fetches WHERE fetch_status >= 500
                                    AND fetch_status <> 503)               AS status_5xx,
    (SELECT count(*) FROM fetches WHERE error LIKE 'robots_disallowed%')   AS robots_denied,
    (SELECT count(*) FROM fetches WHERE fetch_status IS NULL
                                    AND error NOT LIKE 'robots_disallowed%'
                                    AND error NOT LIKE 'skipped%')         AS network_errors,
    (SELECT count(*) FROM fetches WHERE error LIKE 'trap%')                AS trap_refusals,
    (SELECT count(*) FROM fetches WHERE error LIKE 'skipped: pattern_errors%') AS family_skipped,
    -- URLs whose last row says the deadline left them: a resumed run fetches them.
    (SELECT count(*) FROM (SELECT arg_max(coalesce(error, ''), fetch_time) AS last
                           FROM fetches GROUP BY url)
     WHERE last LIKE 'skipped: deadline%')                                 AS left_at_deadline,
    (SELECT coalesce(sum(content_length), 0) FROM fetches)                 AS bytes,
    (SELECT min(fetch_time) FROM fetches)                                  AS started,
    (SELECT max(fetch_time) FROM fetches)                                  AS finished
"""

PER_HOST_SQL = """
SELECT
    url_server AS host,
    count(*) FILTER (WHERE fetch_status BETWEEN 200 AND 299)       AS ok,
    count(*)                                                       AS fetches,
    count(*) FILTER (WHERE fetch_status IN (429, 503))             AS bans,
    count(*) FILTER (WHERE fetch_status IS NULL)                   AS errors,
    round(avg(rtt_ms), 1)                                          AS rtt_ms,
    round(count(*) FILTER (WHERE fetch_status IS NOT NULL)
          / greatest(epoch(max(fetch_time) - min(fetch_time)), 1e-3), 2) AS fetches_per_s
FROM fetches
GROUP BY url_server
ORDER BY fetches DESC, host
"""


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    cursor = con.execute(sql)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def crawl_summary(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    summary = _rows(con, SUMMARY_SQL)[0]
    started, finished = summary["started"], summary["finished"]
    seconds = (finished - started).total_seconds() if started and finished else 0.0
    summary["duration_s"] = round(seconds, 2)
    summary["pages_per_s"] = round(summary["pages"] / seconds, 1) if seconds > 0 else None
    summary["ban_share"] = (
        round(summary["bans"] / summary["fetches"], 4) if summary["fetches"] else 0
    )
    return summary


def per_host(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    return _rows(con, PER_HOST_SQL)


def run_sql(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    cursor = con.execute(sql)
    columns = [d[0] for d in cursor.description] if cursor.description else []
    return columns, cursor.fetchall() if columns else []


def previous_crawl_profile(out_root: Path, crawl_id: str) -> tuple[dict[str, int], float] | None:
    """Pages per server and the average page size (KB) of the newest other crawl under
    `out_root`: what the plan step expects of tonight's crawl of the same site."""
    crawls = sorted(
        (d for d in out_root.glob("*") if d.name != crawl_id and any(d.glob("pages/*.parquet"))),
        key=lambda d: d.stat().st_mtime,
    )
    if not crawls:
        return None
    con = duckdb.connect()
    files = parquet_files(crawls[-1] / "pages")
    source = "read_parquet(?, union_by_name = true)"
    columns = {
        row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}", [files]).fetchall()
    }
    # The server as the plan keys it (host:port): url_server, or url_host_name in pages
    # written before issue 31, when it held host:port.
    server = "coalesce(url_server, url_host_name)" if "url_server" in columns else "url_host_name"
    rows = con.execute(
        f"SELECT {server}, count(*), avg(content_length) FROM {source} GROUP BY 1", [files]
    ).fetchall()
    pages = {host: count for host, count, _ in rows}
    average_kb = sum(count * size for _, count, size in rows) / max(1, sum(pages.values())) / 1000
    return pages, average_kb
