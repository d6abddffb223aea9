"""Seed and scope validation, shared by the CLI (to fail fast) and the flow's plan step."""

from __future__ import annotations

from dataclasses import dataclass

from crawler.scope.addresses import AddressGuard, AddressRefused, Resolver, system_resolver
from crawler.scope.urls import BadUrl, canonical_url, host_key, parse_allow


class SeedError(ValueError):
    """Seeds or scope that cannot start a crawl; the message is one line."""


@dataclass(frozen=True)
class CrawlScope:
    seeds: list[str]  # canonical
    hosts: list[str]  # every server the crawl may fetch from, seeds' first


def resolve_scope(
    seeds: list[str],
    allow: list[str],
    allow_private: bool,
    resolver: Resolver = system_resolver,
) -> CrawlScope:
    if not seeds:
        raise SeedError("no seed URLs given")
    canonical: list[str] = []
    for seed in seeds:
        try:
            canonical.append(canonical_url(seed))
        except BadUrl as exc:
            raise SeedError(f"bad seed: {exc}") from None
    try:
        allowed = [parse_allow(entry) for entry in allow]
    except BadUrl as exc:
        raise SeedError(str(exc)) from None
    hosts = list(dict.fromkeys([host_key(url) for url in canonical] + allowed))
    guard = AddressGuard(allow_private, resolver)
    for url in dict.fromkeys(canonical):
        try:
            guard.check_url(url)
        except AddressRefused as exc:
            raise SeedError(f"seed {url} refused: {exc}") from None
        except OSError as exc:
            raise SeedError(f"seed {url} does not resolve: {exc}") from None
    return CrawlScope(seeds=list(dict.fromkeys(canonical)), hosts=hosts)
