"""crawlflow's Python API (docs/python-api.md): `crawl(CrawlRequest(...))` runs a crawl and
returns its `CrawlSummary`; `crawl_flow` is the Prefect flow itself, for a deployment or
`with_options`.

The names are imported when first used: `crawlflow` is also the command's package, and the
command starts its Prefect server before it imports anything heavy (crawlflow/entry.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.alerts import AlertsRaised
    from crawler.config import CrawlConfig
    from crawler.request import CrawlRequest
    from crawlflow.api import CrawlSummary, NodeRun, NodeUsage, crawl
    from flows.crawl import crawl as crawl_flow

__all__ = [
    "AlertsRaised",
    "CrawlConfig",
    "CrawlRequest",
    "CrawlSummary",
    "NodeRun",
    "NodeUsage",
    "crawl",
    "crawl_flow",
]

# Public name -> (module, its name there).
_EXPORTS = {
    "AlertsRaised": ("crawler.alerts", "AlertsRaised"),
    "CrawlConfig": ("crawler.config", "CrawlConfig"),
    "CrawlRequest": ("crawler.request", "CrawlRequest"),
    "CrawlSummary": ("crawlflow.api", "CrawlSummary"),
    "NodeRun": ("crawlflow.api", "NodeRun"),
    "NodeUsage": ("crawlflow.api", "NodeUsage"),
    "crawl": ("crawlflow.api", "crawl"),
    "crawl_flow": ("flows.crawl", "crawl"),
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'crawlflow' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    return getattr(importlib.import_module(module), attribute)
