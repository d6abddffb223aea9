"""The Python API: run a crawl from one's own code and get its summary as a typed object.

`crawl(request)` runs the flow `crawl` (flows/crawl.py) as the `crawlflow crawl` command does:
the same checks before anything starts, then the flow on a Prefect API and a Ray. Called from
a process of its own, it starts what the command starts (crawlflow/boot.py), unless the
environment names them: a temporary Prefect server, unless PREFECT_API_URL or the active
profile names one; a local Ray, unless RAY_ADDRESS names a cluster or the process is connected
to a Ray already. Unlike the command's, both stay up for the process's later crawls and stop
when it exits. Called inside a Prefect flow or task, the crawl runs as a subflow on that run's
own API.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from crawler.request import CrawlRequest


class _Summary(BaseModel):
    # Built from the flow's summary (a dict, which the flow's run records as its result): every
    # key must be a field here, so a figure the flow adds cannot go missing unnoticed.
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeRun(_Summary):
    """One crawler node of the crawl: planned, or added when the crawl fell behind."""

    node_id: str = Field(description="the node's name, node-N")
    kind: Literal["planned", "added"] = Field(
        description="planned by the allocation, or added during the crawl"
    )
    started_s: float = Field(description="when it started, seconds after the crawl's start")
    ended_s: float = Field(description="when it ended, seconds after the crawl's start")
    lost: bool = Field(description="it died during the crawl; its servers were taken over")
    pages: int = Field(description="pages it stored")
    fetches: int = Field(description="HTTP requests it made")
    ray_node_id: str | None = Field(
        default=None, description="the Ray node (a cluster's machine) it ran on; None: no Ray"
    )
    ray_node_ip: str | None = Field(
        default=None, description="that Ray node's address; None: no Ray"
    )


class NodeUsage(_Summary):
    """The nodes the crawl used against those it planned."""

    nodes_planned: int = Field(description="nodes the allocation planned")
    nodes_added: int = Field(description="nodes added during the crawl")
    nodes_lost: int = Field(description="nodes that died during the crawl")
    planned_node_s: float = Field(description="node-seconds of the planned nodes")
    added_node_s: float = Field(description="node-seconds of the added nodes")
    budgeted_node_s: float | None = Field(
        description="node-seconds the plan reserved: its nodes until the deadline"
    )
    left_at_deadline: int | None = Field(
        description="URLs left when the deadline stopped the crawl; None: it finished"
    )
    nodes: list[NodeRun] = Field(description="every node, one entry each")


class CrawlSummary(_Summary):
    """What a crawl did, from its output (the figures `crawlflow report` prints)."""

    crawl_id: str = Field(description="the crawl's id; the same id resumes or extends it")
    out_dir: str = Field(description="the crawl's directory: the output root, then the crawl id")
    crawls: int = Field(description="crawl ids among its rows (1)")
    fetches: int = Field(description="HTTP attempts, retries and robots.txt included")
    urls_fetched: int = Field(description="URLs that got an HTTP answer")
    pages: int = Field(description="HTML pages stored, or confirmed unchanged by a 304")
    duplicate_pages: int = Field(description="pages stored more than once (0)")
    hosts: int = Field(description="servers (host:port) fetched from")
    status_2xx: int = Field(description="2xx answers")
    status_3xx: int = Field(description="3xx answers")
    not_modified: int = Field(description="304 answers: unchanged since the earlier crawl")
    status_4xx: int = Field(description="4xx answers but 429")
    bans: int = Field(description="429 and 503 answers: a server asking to slow down")
    status_5xx: int = Field(description="5xx answers but 503")
    robots_denied: int = Field(description="URLs robots.txt refused")
    network_errors: int = Field(description="attempts without an answer, limits included")
    trap_refusals: int = Field(description="URLs refused as link traps")
    family_skipped: int = Field(description="URLs skipped because their URL family kept failing")
    left_at_deadline: int = Field(description="URLs the deadline left (a resumed run fetches them)")
    bytes: int = Field(description="bytes received")
    started: datetime | None = Field(description="the first fetch's time")
    finished: datetime | None = Field(description="the last fetch's time")
    duration_s: float = Field(description="seconds from the first fetch to the last")
    pages_per_s: float | None = Field(description="pages per second over that time")
    ban_share: float = Field(description="share of the attempts answered 429 or 503")
    seeds: int = Field(description="seeds, unique and canonical")
    seeds_duplicates: int = Field(description="seed lines repeating an earlier seed")
    seeds_malformed: int = Field(description="seed lines set aside as malformed")
    seeds_malformed_examples: list[str] = Field(
        description="the first three malformed seed lines and why"
    )
    urls_tried: int = Field(description="URLs requested (not refused before any request)")
    urls_failed: int = Field(description="URLs tried whose last attempt got no answer or a 5xx")
    servers: int = Field(description="host names fetched from")
    servers_unreachable: int = Field(description="host names that never answered")
    refused: dict[str, int] = Field(
        description="URLs refused or failed, per reason; links not followed, per scope rule"
    )
    alerts: list[str] = Field(
        description="the [alerts] thresholds crossed; crawl() raises AlertsRaised if any"
    )
    plot: str = Field(description="the achieved request rate per server over time, a PNG")
    nodes: NodeUsage = Field(description="the nodes used against those planned")


def crawl(request: CrawlRequest) -> CrawlSummary:
    """Run the crawl `request` asks for and return its summary.

    Raises before anything starts on a request that cannot run (crawler.scope.seeds.SeedError,
    storage.files.OutputRootError, crawler.scheduling.recrawl.RecrawlError); raises
    crawler.alerts.AlertsRaised, carrying the summary, when the crawl crossed an `[alerts]`
    threshold (everything is written by then); and crawler.cluster.coordinator.CrawlFailed
    when it could not go on, what was committed being kept: the same crawl id resumes it.
    """
    from crawlflow.cli import check_before_start

    request = _with_absolute_paths(request)
    check_before_start(request)
    if _in_prefect_run():
        from flows.crawl import crawl as crawl_flow

        return CrawlSummary.model_validate(crawl_flow(request))
    from crawlflow.boot import boot_for_the_command, run_crawl

    # The temporary Prefect server (if one is needed) boots while Ray starts.
    boot_for_the_command()
    from runtime.ray_backend import ensure_ray
    from storage.manifest import new_crawl_id

    # Started here, not by the command's crawl runtime, which stops the Ray it started once its
    # crawl is done: this one serves the process's later crawls too. A cluster (RAY_ADDRESS) is
    # joined by the flow's launch task, which retries passing failures.
    if not os.environ.get("RAY_ADDRESS"):
        ensure_ray()
    # Chosen here, as the command does: a crawl that fails keeps its id in its directory's name.
    if request.crawl_id is None:
        request = request.model_copy(update={"crawl_id": new_crawl_id()})
    return CrawlSummary.model_validate(run_crawl(request))


def _with_absolute_paths(request: CrawlRequest) -> CrawlRequest:
    """`request` with its local paths absolute: the nodes open them in the working directory
    of the Ray they run on, which an earlier crawl of the process may have started in another
    directory (a command's Ray starts in the command's). A URL (`scheme://...`) is left as it
    is."""

    def absolute(path: str) -> str:
        return path if "://" in path else os.path.abspath(path)

    scheduling = request.config.scheduling
    quality_file = scheduling.quality_file
    config = request.config.model_copy(
        update={
            "scheduling": scheduling.model_copy(
                update={"quality_file": quality_file and absolute(quality_file)}
            )
        }
    )
    seeds_file = request.seeds_file
    return request.model_copy(
        update={
            "out_dir": absolute(request.out_dir),
            "seeds_file": seeds_file and absolute(seeds_file),
            "config": config,
        }
    )


def _in_prefect_run() -> bool:
    if "prefect" not in sys.modules:
        return False  # and Prefect stays unimported: the temporary server boots the sooner
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None
