"""When a finished crawl counts as a failure: the `[alerts]` thresholds.

A crawl that ran unattended (the nightly deployment) and fetched nothing must not look like a
success. After the crawl has written and reported everything, its figures are held against the
thresholds; any crossed makes the flow run end Failed (which a Prefect automation can notify
about, README "Alerts") and `crawlflow crawl` exit with code 3.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from crawler.section import Section


class AlertSettings(Section):
    """`[alerts]`: the figures past which a finished crawl counts as failed (crawler/alerts.py):
    everything is still written and reported, then the flow run ends Failed and the command
    exits with code 3."""

    min_pages: int = Field(
        1, ge=0, description="fewer HTML pages than this (stored or confirmed by a 304) fail it"
    )
    max_error_share: float | None = Field(
        None,
        ge=0,
        le=1,
        description="a larger share of the URLs tried ending without an answer, or with a 5xx, "
        "fails it; none: no limit",
    )
    max_unreachable_share: float | None = Field(
        None,
        ge=0,
        le=1,
        description="a larger share of the servers never answering (name, address, connection) "
        "fails it; none: no limit",
    )


class AlertsRaised(Exception):
    """A finished crawl crossed `[alerts]` thresholds; carries the crawl's summary."""

    def __init__(self, alerts: list[str], summary: dict[str, Any]) -> None:
        super().__init__(alerts, summary)
        self.alerts = alerts
        self.summary = summary

    def __str__(self) -> str:
        return "; ".join(self.alerts)


def crossed(settings: AlertSettings, figures: dict[str, Any]) -> list[str]:
    """The thresholds `figures` cross, each as a line for a person. `figures`: `pages`,
    `urls_tried`, `urls_failed`, `servers`, `servers_unreachable` (storage/health.py)."""
    alerts = []
    pages = figures["pages"]
    if pages < settings.min_pages:
        alerts.append(f"{pages} pages, fewer than [alerts] min_pages = {settings.min_pages}")
    tried, failed = figures["urls_tried"], figures["urls_failed"]
    if settings.max_error_share is not None and tried and failed / tried > settings.max_error_share:
        alerts.append(
            f"{failed} of {tried} URLs tried failed ({failed / tried:.0%}), more than "
            f"[alerts] max_error_share = {settings.max_error_share:g}"
        )
    servers, unreachable = figures["servers"], figures["servers_unreachable"]
    limit = settings.max_unreachable_share
    if limit is not None and servers and unreachable / servers > limit:
        alerts.append(
            f"{unreachable} of {servers} servers unreachable ({unreachable / servers:.0%}), "
            f"more than [alerts] max_unreachable_share = {limit:g}"
        )
    return alerts
