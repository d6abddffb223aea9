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

import itertools
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from crawler.scope.addresses import AddressGuard, AddressRefused, Resolver, system_resolver
from crawler.scope.rules import AllowEntry, ScopeRules, ScopeSettings, parse_allow_entry
from crawler.scope.seedfile import (
    RejectedSeed,
    SeedError,
    SeedList,
    read_seed_file,
    seed_url,
    stream_seeds,
)
from crawler.scope.urls import BadUrl, server_of

__all__ = ["CrawlScope", "SeedError", "build_scope", "check_seeds", "check_usable"]

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
    given = SeedList(urls=command_line_seeds(seeds))
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


def command_line_seeds(seeds: Sequence[str]) -> list[str]:
    """The canonical seeds given one by one; SeedError quoting the first malformed one."""
    urls = []
    for seed in seeds:
        try:
            urls.append(seed_url(seed))
        except BadUrl as exc:
            raise SeedError(f"bad seed: {exc}") from None
    return urls


def check_seeds(
    seeds: Sequence[str],
    seeds_file: str | None,
    allow: Sequence[str],
    allow_private: bool,
    resolve: Mapping[str, str] | None = None,
) -> None:
    """`build_scope` and `check_usable` as the command runs them before it starts, reading
    the seed file only as far as it must: until a usable seed (after one usable seed of the
    file, so that a file without any is an error too)."""
    given = command_line_seeds(seeds)
    allow_entries(allow)
    candidates: Iterable[str] = given
    if seeds_file is not None:
        from_file = stream_seeds(seeds_file)
        candidates = itertools.chain(given, [next(from_file)], from_file)
    elif not given:
        raise SeedError("no seed URLs given")
    check_usable(candidates, allow_private, resolve)


def allow_entries(allow: Sequence[str]) -> list[AllowEntry]:
    """The parsed --allow entries; SeedError for one in no documented form."""
    try:
        return [parse_allow_entry(entry) for entry in allow]
    except BadUrl as exc:
        raise SeedError(str(exc)) from None


def check_usable(
    seeds: Iterable[str],
    allow_private: bool,
    resolve: Mapping[str, str] | None = None,
    resolver: Resolver = system_resolver,
) -> None:
    """Return once one seed's server resolves to an address the crawler may reach (servers in
    the seeds' order, a few at a time, the seeds taken only as far as needed); SeedError with
    the first seed's reason if none does."""
    guard = AddressGuard(allow_private, resolver, resolve)

    def problem(url: str) -> str | None:
        try:
            guard.check_url(url)
        except AddressRefused as exc:
            return f"seed {url} refused: {exc}"
        except OSError as exc:
            return f"seed {url} does not resolve: {exc.strerror or exc}"
        return None

    first_problem: str | None = None
    servers: set[str] = set()
    count = 0
    batch: list[str] = []  # the first seed of each server not asked yet
    size = 1  # the first seed alone (usually usable), then a few servers at a time
    with ThreadPoolExecutor(max_workers=RESOLVE_CONCURRENCY) as pool:
        for url in itertools.chain(seeds, [""]):  # "": the end, to ask the last batch
            count += bool(url)
            if url and server_of(url) not in servers:
                servers.add(server_of(url))
                batch.append(url)
            if batch and (len(batch) == size or not url):
                problems = list(pool.map(problem, batch))
                if None in problems:
                    return
                first_problem = first_problem or problems[0]
                batch, size = [], RESOLVE_CONCURRENCY
    if first_problem is None:
        raise SeedError("no seed URLs given")
    raise SeedError(
        first_problem if count == 1 else f"none of the {count} seeds is usable: {first_problem}"
    )
