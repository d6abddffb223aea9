"""The figures `[alerts]` are held against (crawler/alerts.py), from a crawl's `fetches`."""

from __future__ import annotations

from typing import Any

import duckdb

from errors import REFUSALS, ErrorClass

_REFUSED = ", ".join(f"'{kind}'" for kind in (ErrorClass.ROBOTS_DISALLOWED, *REFUSALS))

# URLs tried: every URL but robots.txt whose last row is not a refusal made before any request
# (robots.txt, a limit, the deadline). Failed: the last row has no answer, or a 5xx. A server is
# unreachable when no request to it (robots.txt included) got any answer.
HEALTH_SQL = f"""
WITH last AS (
    SELECT url, arg_max(fetch_status, fetch_time) AS status,
           arg_max(split_part(coalesce(error, ''), ':', 1), fetch_time) AS kind
    FROM fetches WHERE url_path <> '/robots.txt' GROUP BY url
)
SELECT
    (SELECT count(*) FROM last WHERE kind NOT IN ({_REFUSED}))              AS urls_tried,
    (SELECT count(*) FROM last WHERE kind NOT IN ({_REFUSED})
                               AND (status IS NULL OR status >= 500))       AS urls_failed,
    (SELECT count(DISTINCT url_host_name) FROM fetches)                     AS servers,
    (SELECT count(*) FROM (SELECT url_host_name FROM fetches GROUP BY url_host_name
                           HAVING count(fetch_status) = 0))                 AS servers_unreachable
"""

# Rows per error class: why URLs were refused or failed (the summary's "refused or failed").
ERROR_CLASSES_SQL = """
SELECT split_part(error, ':', 1) AS kind, count(DISTINCT url) AS urls
FROM fetches WHERE error IS NOT NULL GROUP BY kind ORDER BY urls DESC, kind
"""


def crawl_health(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    cursor = con.execute(HEALTH_SQL)
    columns = [d[0] for d in cursor.description]
    row = cursor.fetchone()
    assert row is not None  # an aggregate has one row
    return dict(zip(columns, row, strict=True))


def urls_per_error_class(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Distinct URLs per error class of their rows."""
    return {kind: urls for kind, urls in con.execute(ERROR_CLASSES_SQL).fetchall()}


# Links the nodes' scope rules refused (crawler/scope/rules.py), per reason: each node's
# counter only grows, so its last value is its count.
SCOPE_REFUSALS_SQL = """
SELECT substr(metric, length('refused_') + 1) AS reason, sum(value)::BIGINT AS links
FROM (SELECT node_id, metric, max(value) AS value FROM metrics
      WHERE host IS NULL AND metric LIKE 'refused_%' GROUP BY node_id, metric)
GROUP BY metric ORDER BY reason
"""


def scope_refusals(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Links not followed, per scope rule (out_of_scope, excluded)."""
    return {reason: links for reason, links in con.execute(SCOPE_REFUSALS_SQL).fetchall()}
