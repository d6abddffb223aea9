"""Ground truth about a served web: canonical URLs, what a polite crawler reaches, and the
Parquet export that analyses join crawl output against.

Canonical URL: http://host:port/path?query with query parameters sorted by key and no
fragment; it is what w3lib.url.canonicalize_url makes of any of the forms a page writes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from websim.graph import HTML_MIME, PDF_MIME, Web
from websim.pages import Renderer
from websim.server import HUB_PATH


def origins(web: Web, port: int) -> list[str]:
    return [f"http://{h.address}:{port}" for h in web.hosts]


def hub_url(web: Web, port: int) -> str:
    return origins(web, port)[0] + HUB_PATH


def page_urls(web: Web, port: int) -> list[str]:
    """Canonical URL of every page, indexed by page id."""
    origin = origins(web, port)
    return [origin[h] + path for h, path in zip(web.host_of.tolist(), web.paths, strict=True)]


def reachable_pages(web: Web, seeds: np.ndarray) -> np.ndarray:
    """Boolean mask of the pages a crawler fetches starting from `seeds`: breadth-first over
    the links, where pages robots.txt disallows are neither fetched nor expanded."""
    allowed = web.allowed
    seen = np.zeros(web.n_pages, dtype=bool)
    frontier = np.unique(seeds.astype(np.int64))
    seen[frontier] = True
    while frontier.size:
        frontier = frontier[allowed[frontier]]
        targets = _gather(web.out_ptr, web.out_dst, frontier)
        frontier = np.unique(targets[~seen[targets]])
        seen[frontier] = True
    return seen & allowed


def _gather(ptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Concatenation of the CSR rows `rows`, without a Python loop."""
    lengths = ptr[rows + 1] - ptr[rows]
    if lengths.sum() == 0:
        return np.empty(0, dtype=values.dtype)
    offsets = np.cumsum(lengths) - lengths
    index = np.repeat(ptr[rows] - offsets, lengths) + np.arange(lengths.sum())
    return values[index]


def export(web: Web, port: int, directory: str | Path) -> None:
    """Write pages.parquet, links.parquet and hosts.parquet (zstd) into directory."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    urls = page_urls(web, port)
    origin = origins(web, port)
    host_names = [f"{h.address}:{port}" for h in web.hosts]
    renderer = Renderer(web, port)
    pages = pa.table(
        {
            "page_id": pa.array(np.arange(web.n_pages), pa.int64()),
            "url": urls,
            "host": [host_names[h] for h in web.host_of.tolist()],
            "path": web.paths,
            "mime": np.where(web.is_pdf, PDF_MIME, HTML_MIME).tolist(),
            "pagerank": web.pagerank,
            "zipf_quality": web.zipf_quality,
            "robots_allowed": web.allowed,
            # Rendered, so it is exactly the Content-Length the server sends.
            "bytes": pa.array([len(renderer.page(p)) for p in range(web.n_pages)], pa.int64()),
        }
    )
    src, dst = web.unique_links
    hub = hub_url(web, port)
    links = pa.table(
        {
            "src_url": [hub] * len(origin) + [urls[s] for s in src.tolist()],
            "dst_url": [o + "/" for o in origin] + [urls[d] for d in dst.tolist()],
        }
    )
    hosts = pa.table(
        {
            "host": host_names,
            "latency_ms_median": [h.latency_ms_median for h in web.hosts],
            "keepalive_max": pa.array([h.keepalive_max for h in web.hosts], pa.int32()),
            "rate_limit_rps": pa.array([h.rate_limit_rps for h in web.hosts], pa.float64()),
            "ban_status": pa.array([h.ban_status for h in web.hosts], pa.int32()),
            "robots_disallow": pa.array([h.robots_disallow for h in web.hosts], pa.string()),
            "crawl_delay_s": pa.array([h.crawl_delay_s for h in web.hosts], pa.float64()),
            "pages": pa.array([h.pages for h in web.hosts], pa.int64()),
        }
    )
    for name, table in (("pages", pages), ("links", links), ("hosts", hosts)):
        pq.write_table(table, out / f"{name}.parquet", compression="zstd")
