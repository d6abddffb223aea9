"""Which URLs a crawl follows: the `[scope]` settings and the rules built from them, the seeds
and `--allow`.

A link the rules refuse is never queued (it gets no `fetches` row); each node counts what it
refused, per reason, in its metrics (`refused_out_of_scope`, `refused_excluded`, and
`refused_depth` for the links of a page at `[limits] max_depth`). The rules, in
the order they apply:

1. the mode: a URL is in scope if it is on a seed's server (`server`, the default), under a
   seed's registered domain, subdomains included (`domain`: the Public Suffix List snapshot
   tldextract ships, never fetched), or under a seed URL's directory (`prefix`: `http://x/docs/`
   and `http://x/docs/a.html` both give `http://x/docs/`); or if an `--allow` entry takes it;
2. `include`: when any is given, the canonical URL must match one (Python `re.search`);
3. `exclude`: a canonical URL that matches one is refused, whatever else says (exclude wins).

Seeds themselves are always fetched: they are what the user asked for.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, get_args

import tldextract
from pydantic import Field, field_validator

from crawler.scope.urls import BadUrl, canonical_url, server_of
from crawler.section import Section

ScopeMode = Literal["server", "domain", "prefix"]
SCOPE_MODES: tuple[str, ...] = get_args(ScopeMode)
# The reasons a link is refused, as the metrics and the summary name them.
OUT_OF_SCOPE = "out_of_scope"
EXCLUDED = "excluded"
REFUSAL_REASONS = (OUT_OF_SCOPE, EXCLUDED)
# Not a scope rule: the links of a page at `[limits] max_depth`, which the crawl does not follow.
BEYOND_MAX_DEPTH = "depth"


class ScopeSettings(Section):
    """`[scope]`: which links the crawl follows, beyond its seeds (crawler/scope/rules.py,
    docs/scope.md)."""

    mode: ScopeMode = Field(
        "server",
        description="server: the seeds' servers; domain: their registered domains with every "
        "subdomain; prefix: the URLs under each seed URL's directory",
    )
    include: list[str] = Field(
        default_factory=list,
        description="regular expressions; if any is given, a URL must match one to be followed",
    )
    exclude: list[str] = Field(
        default_factory=list,
        description="regular expressions; a URL that matches one is never followed (wins over "
        "include)",
    )

    @field_validator("include", "exclude")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for number, pattern in enumerate(patterns):
            compile_pattern(pattern, f"[{number}]")
        return patterns


def compile_pattern(pattern: str, where: str) -> re.Pattern[str]:
    """`pattern` compiled; a ValueError naming `where` if it does not compile."""
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"{where} {pattern[:80]!r} is not a regular expression: {exc}") from None


@functools.cache
def _extractor() -> tldextract.TLDExtract:
    # suffix_list_urls=(): the snapshot bundled with the library, never a download; private
    # suffixes (github.io, blogspot.com) count, so one user's site is not a whole platform.
    return tldextract.TLDExtract(
        suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True
    )


def registered_domain(host: str) -> str:
    """The domain a host name was registered as (`a.b.example.co.uk` -> `example.co.uk`); a
    host with no public suffix (an IP address, `localhost`, a name under `.test`) is its own."""
    if host.startswith("["):
        return host
    return _extractor()(host).top_domain_under_public_suffix or host


def _hostname(server: str) -> str:
    """The host name of a server key `host[:port]` (an IPv6 literal keeps its brackets)."""
    if server.startswith("["):
        return server.split("]", 1)[0] + "]"
    return server.split(":", 1)[0]


@dataclass(frozen=True)
class AllowEntry:
    """One `--allow` entry: a server, a domain with its subdomains, or URL prefixes."""

    server: str | None = None  # host[:port], as `host_key` gives
    domain: str | None = None  # `*.example.com` -> example.com
    prefixes: tuple[str, ...] = ()  # canonical URL prefixes

    @property
    def servers(self) -> list[str]:
        """The servers the entry names outright (a domain names none)."""
        if self.server is not None:
            return [self.server]
        return list(dict.fromkeys(server_of(prefix) for prefix in self.prefixes))


ALLOW_FORMS = "HOST, HOST:PORT, *.DOMAIN, or a URL prefix such as HOST/docs/"


def parse_allow_entry(entry: str) -> AllowEntry:
    """An `--allow` entry in one of the documented forms (`ALLOW_FORMS`); BadUrl otherwise. A
    prefix without a scheme takes http and https."""
    text = entry.strip()
    problem = f"bad --allow entry {entry[:200]!r} (the forms are {ALLOW_FORMS})"
    wildcard = text.startswith("*.")
    if wildcard:
        text = text[2:]
    if not text or any(char in text for char in "*?#@ \t\r\n"):
        raise BadUrl(problem)
    scheme, has_scheme, rest = text.partition("://")
    if not has_scheme:
        rest = text
    has_path = "/" in rest.rstrip("/")  # `x/` is the server x
    if wildcard and (has_scheme or has_path or rest.startswith("[")):
        raise BadUrl(problem)
    schemes = [scheme] if has_scheme else ["http", "https"]
    try:
        urls = [canonical_url(f"{each}://{rest}") for each in schemes]
    except BadUrl:
        raise BadUrl(problem) from None
    server = server_of(urls[0])
    if wildcard:
        if ":" in server:  # a port: the domain form takes every port
            raise BadUrl(problem)
        return AllowEntry(domain=server)
    if has_path:
        return AllowEntry(prefixes=tuple(urls))
    return AllowEntry(server=server)


def seed_prefix(url: str) -> str:
    """A canonical seed URL's directory: `http://x/docs/a.html?q` -> `http://x/docs/`."""
    path_start = url.index("/", url.index("//") + 2)
    path = url[path_start:].split("?", 1)[0]
    return url[:path_start] + path[: path.rfind("/") + 1]


@dataclass
class ScopeRules:
    """What a crawl follows (see the module docstring); `refusal` is the question asked of every
    link. Built once per crawl by the scope step and handed to every node; `refused` is where
    a node counts the links it refused, per reason (under its lock)."""

    mode: ScopeMode
    servers: frozenset[str]  # the seeds' and --allow's servers
    domains: frozenset[str]  # registered domains (mode domain) and --allow *.DOMAIN
    prefixes: tuple[str, ...]  # --allow URL prefixes not ending in "/"
    directories: frozenset[str] = frozenset()  # prefixes ending in "/": seed directories, ...
    include: tuple[re.Pattern[str], ...] = ()
    exclude: tuple[re.Pattern[str], ...] = ()
    refused: Counter[str] = field(default_factory=Counter, compare=False)

    @classmethod
    def build(
        cls, settings: ScopeSettings, seeds: Iterable[str], allow: Iterable[AllowEntry] = ()
    ) -> ScopeRules:
        """The rules of a crawl from its canonical `seeds` and parsed `--allow` entries."""
        seeds = list(seeds)
        allow = list(allow)
        servers = {server_of(seed) for seed in seeds} if settings.mode == "server" else set()
        servers |= {entry.server for entry in allow if entry.server is not None}
        domains = {entry.domain for entry in allow if entry.domain is not None}
        if settings.mode == "domain":
            domains |= {registered_domain(_hostname(server_of(seed))) for seed in seeds}
        prefixes = {prefix for entry in allow for prefix in entry.prefixes}
        if settings.mode == "prefix":
            prefixes |= {seed_prefix(seed) for seed in seeds}
        return cls(
            mode=settings.mode,
            servers=frozenset(servers),
            domains=frozenset(domains),
            # Directories are looked up by each directory of a URL (a set, however many seeds
            # there are); the rest are compared one by one.
            prefixes=tuple(sorted(prefix for prefix in prefixes if not prefix.endswith("/"))),
            directories=frozenset(prefix for prefix in prefixes if prefix.endswith("/")),
            include=tuple(re.compile(p) for p in settings.include),
            exclude=tuple(re.compile(p) for p in settings.exclude),
        )

    @classmethod
    def of_servers(cls, servers: Iterable[str]) -> ScopeRules:
        """The default rules over known servers: those servers, whole."""
        return cls(mode="server", servers=frozenset(servers), domains=frozenset(), prefixes=())

    def refusal(self, url: str) -> str | None:
        """None if the canonical `url` is followed, else why not (`REFUSAL_REASONS`)."""
        if not self._in_mode(url) or self.include and not any(p.search(url) for p in self.include):
            reason = OUT_OF_SCOPE
        elif self.exclude and any(p.search(url) for p in self.exclude):
            reason = EXCLUDED
        else:
            return None
        return reason

    def _in_mode(self, url: str) -> bool:
        server = server_of(url)
        if server in self.servers:
            return True
        if self.domains:
            host = _hostname(server)
            # Each suffix of the name, shortest last: a set lookup each, however many domains.
            labels = host.split(".")
            if any(".".join(labels[i:]) in self.domains for i in range(len(labels))):
                return True
        if self.directories and self._under_directory(url):
            return True
        return bool(self.prefixes) and url.startswith(self.prefixes)

    def _under_directory(self, url: str) -> bool:
        path_end = url.find("?")
        path = url if path_end < 0 else url[:path_end]
        slash = path.find("/", path.find("//") + 2)
        while slash >= 0:
            if path[: slash + 1] in self.directories:
                return True
            slash = path.find("/", slash + 1)
        return False
