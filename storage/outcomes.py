"""The commit/resume rule: which `fetches` rows give their URL a final answer, read the same
way by resume (`storage.checkpoint`) and by the takeover of a dead node
(`crawler.cluster.recovery`). The error classes it is built on are the `errors` package.
"""

from __future__ import annotations

from collections.abc import Iterable

from errors import DEADLINE, NOT_ADMITTED, QUEUE_FULL_DETAIL, ErrorClass, FetchError, is_retryable


def is_final(status: int | None, error: FetchError | str | None) -> bool:
    """Whether a row gives its URL a final answer (resume and takeover never fetch it again):
    given up after its retries, or an answer a retry would not change."""
    kind = error.kind if isinstance(error, FetchError) else ErrorClass.of(error)
    return kind is ErrorClass.GAVE_UP or not is_retryable(status, error)


def fold_fetch_rows(
    rows: Iterable[tuple[str, int | None, str | None, int]],
) -> tuple[set[str], dict[str, int]]:
    """Read `(url, fetch_status, error, attempt)` rows by the resume rule: the URLs some row
    gives a final answer (`is_final`), and each URL's highest attempt, so that a pending URL
    goes on with the next one."""
    done: set[str] = set()
    attempts: dict[str, int] = {}
    for url, status, error, attempt in rows:
        attempts[url] = max(attempts.get(url, 0), attempt)
        if is_final(status, error):
            done.add(url)
    return done, attempts


def _class_in(classes: tuple[ErrorClass, ...]) -> str:
    return "split_part(coalesce(error, ''), ':', 1) IN ({})".format(
        ", ".join(f"'{kind}'" for kind in classes)
    )


# The fetches rows of URLs that passed crawler.scope.limits (the node's rule), which are also those
# that spent the --max-pages budget: first tries, not robots.txt itself, nor URLs refused
# before any request or failed with their whole server.
ADMITTED_SQL = f"attempt = 1 AND url_path <> '/robots.txt' AND NOT {_class_in(NOT_ADMITTED)}"

# Rows of URLs the crawl's deadline left queued, or a full queue never queued
# (`skipped: queue_full`), say only that they were not fetched: resume and takeover read past
# them, so the URL is pending with the attempt it was waiting for.
NOT_LEFT_AT_DEADLINE = (
    f"coalesce(error, '') NOT LIKE '{DEADLINE}%' "
    f"AND coalesce(error, '') NOT LIKE '{ErrorClass.SKIPPED}: {QUEUE_FULL_DETAIL}%'"
)
