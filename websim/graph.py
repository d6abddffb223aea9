"""The synthetic web as data: pages, paths, the link graph, page quality and host profiles.

`build_web` is pure and deterministic: one numpy generator seeded from the spec draws everything
in a fixed order, so the same spec always gives the same web. Pages are numbered host by host
(host h owns pages host_start[h] .. host_start[h+1]-1, its root first).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from websim.physical import PhysicalQueue
from websim.queueing import QueueingModel
from websim.spec import WebSpec, host_address

ROBOTS_DISALLOW = "/private/"
HTML_MIME = "text/html"
PDF_MIME = "application/pdf"

# Page kinds; the root is kind 0 and every other page draws one of the rest.
ROOT, PLAIN, DOC, SECTION_DOC, LISTING, PRIVATE, PDF = range(7)
# How the non-private, non-PDF pages split among the ordinary kinds.
_ORDINARY_SPLIT = {PLAIN: 0.6, DOC: 0.2, SECTION_DOC: 0.12, LISTING: 0.08}
_SECTIONS = ("guide", "api", "blog", "news")
_SORTS = ("asc", "desc")

# Link targets are drawn with weight 1/rank^s over a ranking of each host's pages: a
# heavy-tailed in-degree (s near 1 matches the web's in-degree exponent of about 2.1).
_TARGET_ZIPF_EXPONENT = 0.9
# Out-degree tail: Pareto with tail index 1.5 (degree exponent 2.5), capped so no page gets
# absurdly many links, then scaled to the requested mean.
_OUT_DEGREE_TAIL = 1.5
_OUT_DEGREE_CAP = 64.0
_PAGE_SIZE_SIGMA = 0.5
_PAGERANK_DAMPING = 0.85


@dataclass(frozen=True)
class HostProfile:
    address: str  # IP literal the host listens on and is named by in URLs
    pages: int
    latency_ms_median: float
    keepalive_max: int
    rate_limit_rps: float | None  # hidden token-bucket rate; None: unlimited
    ban_status: int  # 429 or 503, answered when the rate is exceeded
    robots_disallow: str | None  # Disallow prefix in robots.txt; None: robots.txt is a 404
    crawl_delay_s: float | None
    # Requests/s the host completes when busy; its response time grows with the arrival rate
    # (websim/queueing.py). None: latency does not depend on load.
    capacity_rps: float | None = None
    # W workers behind one FIFO queue shared with background users (websim/physical.py).
    queue: PhysicalQueue | None = None

    def queueing(self) -> QueueingModel | None:
        """The host's response time against its arrival rate (ground truth), if it degrades."""
        if self.capacity_rps is None:
            return None
        return QueueingModel(self.latency_ms_median / 1000.0, self.capacity_rps)


@dataclass(eq=False)  # numpy fields: compare arrays explicitly
class Web:
    spec: WebSpec
    hosts: list[HostProfile]
    host_start: np.ndarray  # (hosts + 1,) first page id of each host, then the page count
    host_of: np.ndarray  # (pages,) host of each page
    kind: np.ndarray  # (pages,) ROOT, PLAIN, ... PDF
    paths: list[str]  # canonical path (query sorted by key) of each page, unique per host
    size: np.ndarray  # (pages,) body size the server renders the page to, in bytes
    # Links as written in the pages, grouped by source (CSR): a page may repeat a link, and
    # the ground truth is the distinct pairs (`unique_links`).
    out_ptr: np.ndarray  # (pages + 1,) offsets into out_dst
    out_dst: np.ndarray
    pagerank: np.ndarray
    zipf_quality: np.ndarray

    @property
    def n_pages(self) -> int:
        return len(self.paths)

    @property
    def is_pdf(self) -> np.ndarray:
        return self.kind == PDF

    @cached_property
    def allowed(self) -> np.ndarray:
        """Whether the page's host robots.txt allows fetching it."""
        robots_host = np.array([h.robots_disallow is not None for h in self.hosts])
        return ~((self.kind == PRIVATE) & robots_host[self.host_of])

    def out_links(self, page: int) -> np.ndarray:
        return self.out_dst[self.out_ptr[page] : self.out_ptr[page + 1]]

    @cached_property
    def unique_links(self) -> tuple[np.ndarray, np.ndarray]:
        """Distinct (source, target) page pairs, sorted."""
        src = np.repeat(np.arange(self.n_pages), np.diff(self.out_ptr))
        return unique_pairs(src, self.out_dst, self.n_pages)


def build_web(spec: WebSpec) -> Web:
    """Draw the whole web from the spec: deterministic, no network."""
    rng = np.random.default_rng(spec.seed)
    n, n_hosts = spec.pages, spec.hosts

    host_start = _host_sizes(rng, n_hosts, n, spec.even_host_sizes)
    host_of = np.repeat(np.arange(n_hosts), np.diff(host_start))
    local = np.arange(n) - host_start[host_of]
    kind = _page_kinds(rng, spec, local)
    paths = _paths(rng, kind, local)
    size = (
        spec.page_bytes
        * np.exp(_PAGE_SIZE_SIGMA * rng.standard_normal(n) - _PAGE_SIZE_SIGMA**2 / 2)
    ).astype(np.int64)

    src, dst = _links(rng, spec, host_start, host_of, kind)
    out_ptr, out_dst = _csr(rng, src, dst, n)
    hosts = _host_profiles(rng, spec, np.diff(host_start))

    zipf_rank = np.empty(n, dtype=np.int64)
    zipf_rank[rng.permutation(n)] = np.arange(1, n + 1)
    return Web(
        spec=spec,
        hosts=hosts,
        host_start=host_start,
        host_of=host_of,
        kind=kind,
        paths=paths,
        size=size,
        out_ptr=out_ptr,
        out_dst=out_dst,
        pagerank=pagerank(*unique_pairs(src, dst, n), n),
        zipf_quality=1.0 / zipf_rank,
    )


def _host_sizes(rng: np.random.Generator, n_hosts: int, n: int, even: bool) -> np.ndarray:
    """Skewed page counts (a few big hosts, many small ones), each host at least its root; or
    as even as they divide (`even`), the draw made all the same so the rest of the web keeps
    its seed's shape."""
    weights = 1.0 / rng.permutation(np.arange(1, n_hosts + 1))  # Zipf over a random host order
    sizes = 1 + rng.multinomial(n - n_hosts, weights / weights.sum())
    if even:
        sizes = np.full(n_hosts, n // n_hosts) + (np.arange(n_hosts) < n % n_hosts)
    return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def _page_kinds(rng: np.random.Generator, spec: WebSpec, local: np.ndarray) -> np.ndarray:
    ordinary = 1.0 - spec.private_share - spec.pdf_share
    kinds = [*_ORDINARY_SPLIT, PRIVATE, PDF]
    probs = [ordinary * s for s in _ORDINARY_SPLIT.values()] + [spec.private_share, spec.pdf_share]
    kind = rng.choice(kinds, size=len(local), p=np.array(probs) / sum(probs))
    kind[local == 0] = ROOT
    return kind.astype(np.int8)


def _paths(rng: np.random.Generator, kind: np.ndarray, local: np.ndarray) -> list[str]:
    # The local index makes every path unique within its host.
    section = rng.integers(0, len(_SECTIONS), len(kind))
    sort = rng.integers(0, len(_SORTS), len(kind))
    paths = []
    for k, j, sec, srt in zip(
        kind.tolist(), local.tolist(), section.tolist(), sort.tolist(), strict=True
    ):
        if k == ROOT:
            paths.append("/")
        elif k == PLAIN:
            paths.append(f"/p/{j}")
        elif k == DOC:
            paths.append(f"/docs/{j}.html")
        elif k == SECTION_DOC:
            paths.append(f"/docs/{_SECTIONS[sec]}/{j}.html")
        elif k == LISTING:
            paths.append(f"/list?page={j}&sort={_SORTS[srt]}")  # keys already sorted
        elif k == PRIVATE:
            paths.append(f"{ROBOTS_DISALLOW}{j}.html")
        else:
            paths.append(f"/files/{j}.pdf")
    return paths


def _links(
    rng: np.random.Generator,
    spec: WebSpec,
    host_start: np.ndarray,
    host_of: np.ndarray,
    kind: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Links as (source, target) pairs, repeats allowed: a spanning tree per host plus
    power-law extra links."""
    n = len(kind)
    start = host_start[host_of]

    # Tree: every non-root page gets a link from an earlier page on its host that can carry
    # links (HTML and not under /private/), so the whole host is reachable from its root
    # through pages every robots.txt allows.
    can_parent = (kind != PDF) & (kind != PRIVATE)
    before = np.concatenate(([0], np.cumsum(can_parent)))  # parents among pages [0, i)
    candidates = before[:-1] - before[start]
    parent_rank = (rng.random(n) * candidates).astype(np.int64)
    parents = np.flatnonzero(can_parent)
    non_root = kind != ROOT
    tree_dst = np.flatnonzero(non_root)
    tree_src = parents[before[start] + parent_rank][non_root]

    # Extra links: power-law out-degree with the tree link counted in the requested mean.
    extra_mean = spec.links_per_page - 1
    raw = np.minimum((1.0 - rng.random(n)) ** (-1.0 / _OUT_DEGREE_TAIL), _OUT_DEGREE_CAP)
    raw[kind == PDF] = 0.0
    scaled = raw * (extra_mean / max(raw.mean(), 1e-12))
    degree = np.floor(scaled + rng.random(n)).astype(np.int64)
    src = np.repeat(np.arange(n), degree)

    # Targets by Zipf popularity over a random ranking of each host's pages, the root first
    # (home pages draw the most links). Same-host targets come from the source's host,
    # cross-host ones from every other host, weighted by its total popularity (the source
    # host's slice of the cumulative weights is skipped).
    order_key = rng.random(n)
    order_key[kind == ROOT] = -1.0
    order = np.lexsort((order_key, host_of))
    local_rank = np.empty(n)
    local_rank[order] = np.arange(n) - start[order] + 1.0
    popularity = local_rank**-_TARGET_ZIPF_EXPONENT
    cum = np.concatenate(([0.0], np.cumsum(popularity)))
    lo, hi = cum[host_start[host_of[src]]], cum[host_start[host_of[src] + 1]]
    same = rng.random(len(src)) < spec.same_host_link_share
    if len(host_start) == 2:
        same[:] = True  # a one-host web has nowhere else to link to
    u = rng.random(len(src))
    point = np.where(same, lo + u * (hi - lo), u * (cum[-1] - (hi - lo)))
    point = np.where(~same & (point >= lo), point + (hi - lo), point)
    dst = np.clip(np.searchsorted(cum, point, side="right") - 1, 0, n - 1)
    return np.concatenate((tree_src, src)), np.concatenate((tree_dst, dst))


def _csr(
    rng: np.random.Generator, src: np.ndarray, dst: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Group links by source, in random order within a page (the tree link is not first)."""
    order = np.argsort(src + rng.random(len(src)))  # a random fraction shuffles ties
    out_ptr = np.concatenate(([0], np.cumsum(np.bincount(src, minlength=n))))
    return out_ptr.astype(np.int64), dst[order].astype(np.int64)


def unique_pairs(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (source, target) pairs, sorted (sort + diff: much faster than np.unique)."""
    key = np.sort(src.astype(np.int64) * n + dst)
    key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    return key // n, key % n


def pagerank(src: np.ndarray, dst: np.ndarray, n: int, tol: float = 1e-10) -> np.ndarray:
    """PageRank of distinct links by power iteration (damping 0.85, stop when the L1 change is
    below tol); pages without out-links spread their rank uniformly."""
    degree = np.bincount(src, minlength=n)
    dangling = degree == 0
    weight = 1.0 / degree[src]
    rank = np.full(n, 1.0 / n)
    for _ in range(1000):
        spread = np.bincount(dst, weights=rank[src] * weight, minlength=n)
        new = (1 - _PAGERANK_DAMPING) / n + _PAGERANK_DAMPING * (spread + rank[dangling].sum() / n)
        converged = np.abs(new - rank).sum() < tol
        rank = new
        if converged:
            break
    return rank / rank.sum()


def _host_profiles(rng: np.random.Generator, spec: WebSpec, sizes: np.ndarray) -> list[HostProfile]:
    h = spec.hosts
    lo, hi = spec.latency_ms
    # Log-uniform spreads medians over the range's orders of magnitude (needs lo > 0).
    latency = np.exp(rng.uniform(np.log(lo), np.log(hi), h)) if lo > 0 else rng.uniform(lo, hi, h)
    weights = np.array(spec.keepalive_weights, dtype=float)
    keepalive = rng.choice(np.array(spec.keepalive_max), size=h, p=weights / weights.sum())
    rate_draw = rng.random(h)  # drawn even without limits, so toggling them changes nothing else
    ban = rng.choice([429, 503], size=h)
    robots = rng.random(h) < spec.robots_share
    delayed = robots & (rng.random(h) < spec.crawl_delay_share) & (spec.crawl_delay_s > 0)
    if spec.rate_limit_rps is None:
        rates: list[float | None] = [None] * h
    else:
        r_lo, r_hi = np.log(spec.rate_limit_rps[0]), np.log(spec.rate_limit_rps[1])
        rates = np.exp(r_lo + rate_draw * (r_hi - r_lo)).tolist()
    capacities: list[float | None] = [None] * h
    if spec.capacity_rps is not None:
        # A generator of its own: webs without degrading hosts stay exactly as they were.
        c_lo, c_hi = np.log(spec.capacity_rps[0]), np.log(spec.capacity_rps[1])
        draw = np.random.default_rng([spec.seed, 17]).random(h)
        capacities = np.exp(c_lo + draw * (c_hi - c_lo)).tolist()
    profiles = [
        HostProfile(
            address=host_address(i),
            pages=int(sizes[i]),
            latency_ms_median=float(latency[i]),
            keepalive_max=int(keepalive[i]),
            rate_limit_rps=rates[i],
            ban_status=int(ban[i]),
            robots_disallow=ROBOTS_DISALLOW if robots[i] else None,
            crawl_delay_s=spec.crawl_delay_s if delayed[i] else None,
            capacity_rps=capacities[i],
            queue=spec.queues[i] if spec.queues else None,
        )
        for i in range(h)
    ]
    if spec.crawl_delay_at_inflation is None:
        return profiles
    held = []
    for profile in profiles:
        model = profile.queueing()
        assert model is not None  # the spec checks that every host degrades
        delay = 1.0 / model.rate_at_inflation(spec.crawl_delay_at_inflation)
        held.append(replace(profile, crawl_delay_s=delay))
    return held
