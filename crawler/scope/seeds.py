"""A crawl's seeds and scope, shared by the CLI (to fail fast, before Prefect and Ray start) and
the flow's scope step.

Seeds on the command line (or the request's `seeds`) must all be URLs: a typo there is an
error. Seeds of a file (`seeds_file`) are many: a malformed line is set aside with its reason
(crawler/scope/seedfile.py). Whether a seed's server resolves, and to an address the crawler
may reach, is the nodes' question: a server that does not gets a `fetches` row per seed with its
reason (`dns_error`, `address_refused`, ...), and the crawl goes on. The crawl refuses to start
only when no seed at all is usable (`check_usable`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from crawler.scope.addresses import AddressGuard, AddressRefused, Resolver, system_resolver
from crawler.scope.rules import AllowEntry, ScopeRules, ScopeSettings, parse_allow_entry
from crawler.scope.seedfile import RejectedSeed, SeedError, SeedList, read_seed_file, seed_url
from crawler.scope.urls import BadUrl, server_of

__all__ = ["CrawlScope", "SeedError", "build_scope", "check_usable"]

# Servers asked at once while looking for one usable seed (name resolution mostly waits).
RESOLVE_CONCURRENCY = 16


@dataclass(frozen=True)
class CrawlScope:
    seeds: list[str]  # canonical, unique
    hosts: list[str]  # the servers the crawl starts with: the seeds' first, then --allow's
    rules: ScopeRules  # what else it follows
    rejected: list[RejectedSeed] = field(default_factory=list)  # malformed lines of the file
    duplicates: int = 0  # seeds given twice (after canonicalization)


def build_scope(
    seeds: Sequence[str],
    seeds_file: str | None,
    allow: Sequence[str],
    settings: ScopeSettings,
) -> CrawlScope:
    """The canonical seeds (the command line's, then the file's) and the crawl's scope; a
    SeedError for a malformed seed or --allow entry given one by one, an unreadable seed file,
    or no seed at all."""
    given = SeedList()
    for number, seed in enumerate(seeds, 1):
        try:
            given.urls.append(seed_url(seed))
        except BadUrl as exc:
            raise SeedError(f"bad seed {number}: {exc}") from None
    from_file = read_seed_file(seeds_file) if seeds_file is not None else SeedList()
    urls = list(dict.fromkeys(given.urls + from_file.urls))
    if not urls:
        raise SeedError("no seed URLs given")
    duplicates = len(given.urls) + len(from_file.urls) - len(urls) + from_file.duplicates
    entries = allow_entries(allow)
    hosts = list(
        dict.fromkeys([server_of(url) for url in urls] + [s for e in entries for s in e.servers])
    )
    return CrawlScope(
        seeds=urls,
        hosts=hosts,
        rules=ScopeRules.build(settings, urls, entries),
        rejected=from_file.rejected,
        duplicates=duplicates,
    )


def allow_entries(allow: Sequence[str]) -> list[AllowEntry]:
    """The parsed --allow entries; SeedError for one in no documented form."""
    try:
        return [parse_allow_entry(entry) for entry in allow]
    except BadUrl as exc:
        raise SeedError(str(exc)) from None


def check_usable(
    seeds: Sequence[str],
    allow_private: bool,
    resolve: Mapping[str, str] | None = None,
    resolver: Resolver = system_resolver,
) -> None:
    """Return once one seed's server resolves to an address the crawler may reach (servers in
    the seeds' order, a few at a time); SeedError with the first seed's reason if none does."""
    guard = AddressGuard(allow_private, resolver, resolve)
    first_url = {server_of(url): url for url in reversed(seeds)}
    servers = list(dict.fromkeys(server_of(url) for url in seeds))

    def problem(server: str) -> str | None:
        url = first_url[server]
        try:
            guard.check_url(url)
        except AddressRefused as exc:
            return f"seed {url} refused: {exc}"
        except OSError as exc:
            return f"seed {url} does not resolve: {exc.strerror or exc}"
        return None

    first_problem = None
    with ThreadPoolExecutor(max_workers=RESOLVE_CONCURRENCY) as pool:
        for start in range(0, len(servers), RESOLVE_CONCURRENCY):
            problems = list(pool.map(problem, servers[start : start + RESOLVE_CONCURRENCY]))
            if None in problems:
                return
            first_problem = first_problem or problems[0]
    count = len(seeds)
    raise SeedError(
        first_problem if count == 1 else f"none of the {count} seeds is usable: {first_problem}"
    )
