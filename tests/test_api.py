"""The Python API (crawlflow/api.py) and its page, docs/python-api.md: the page's code blocks
run as they are written, the crawl runs as a subflow of a user's own flow, and the summary is
typed. The installed wheel runs the page's first example in a fresh virtual environment in the
CI step `.ci/wheel-check`."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import crawlflow
import crawlflow.api
from crawler.alerts import AlertsRaised
from crawler.request import CrawlRequest
from crawlflow.api import CrawlSummary
from crawlflow.reference import SUMMARY_MARKER, render_summary_reference
from websim.coverage import coverage

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python-api.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), re.M | re.S)


def run_block(block: str, namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run a code block of the page as a script runs it (`__name__` is `__main__`)."""
    namespace = {"__name__": "__main__"} if namespace is None else namespace
    exec(compile(block, str(PAGE), "exec"), namespace)
    return namespace


def flow_summary(**changes: Any) -> dict[str, Any]:
    """A summary as the flow `crawl` returns it (flows/crawl.py)."""
    node = {
        "node_id": "node-0",
        "kind": "planned",
        "started_s": 0.0,
        "ended_s": 4.2,
        "lost": False,
        "pages": 10,
        "fetches": 12,
    }
    summary: dict[str, Any] = {
        "crawl_id": "20261127T000000Z-abcd1234",
        "out_dir": "crawl-out/20261127T000000Z-abcd1234",
        "crawls": 1,
        "fetches": 12,
        "urls_fetched": 11,
        "pages": 10,
        "duplicate_pages": 0,
        "hosts": 1,
        "status_2xx": 11,
        "status_3xx": 0,
        "not_modified": 0,
        "status_4xx": 1,
        "bans": 0,
        "status_5xx": 0,
        "robots_denied": 0,
        "network_errors": 0,
        "trap_refusals": 0,
        "family_skipped": 0,
        "left_at_deadline": 0,
        "bytes": 40_000,
        "started": datetime(2026, 11, 27, tzinfo=UTC),
        "finished": datetime(2026, 11, 27, 0, 0, 4, tzinfo=UTC),
        "duration_s": 4.0,
        "pages_per_s": 2.5,
        "ban_share": 0,
        "seeds": 1,
        "seeds_duplicates": 0,
        "seeds_malformed": 0,
        "seeds_malformed_examples": [],
        "urls_tried": 11,
        "urls_failed": 0,
        "servers": 1,
        "servers_unreachable": 0,
        "refused": {"http_4xx": 1},
        "alerts": [],
        "plot": "crawl-out/20261127T000000Z-abcd1234/host_rates.png",
        "nodes": {
            "nodes_planned": 1,
            "nodes_added": 0,
            "nodes_lost": 0,
            "planned_node_s": 4.2,
            "added_node_s": 0.0,
            "budgeted_node_s": 3600.0,
            "left_at_deadline": None,
            "nodes": [node],
        },
    }
    return summary | changes


def test_the_summary_types_the_flows_summary_and_refuses_an_unknown_figure():
    summary = CrawlSummary.model_validate(flow_summary())
    assert summary.pages == 10 and summary.ban_share == 0.0
    assert summary.nodes.nodes[0].kind == "planned"
    assert summary.refused == {"http_4xx": 1}
    with pytest.raises(ValidationError, match="new_figure"):
        CrawlSummary.model_validate(flow_summary(new_figure=1))
    with pytest.raises(ValidationError, match="pages"):
        CrawlSummary.model_validate({k: v for k, v in flow_summary().items() if k != "pages"})


def test_the_public_names_and_nothing_heavy_on_import():
    for name in crawlflow.__all__:
        assert getattr(crawlflow, name) is not None
    from flows.crawl import crawl as crawl_flow

    assert crawlflow.crawl_flow is crawl_flow
    assert crawlflow.CrawlRequest is CrawlRequest
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = crawlflow.no_such_name  # type: ignore[attr-defined]
    # The command's entry point imports the package first: it must stay light.
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, crawlflow; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for heavy in ("prefect", "ray", "pydantic", "crawler"):
        assert f"'{heavy}'" not in imported, heavy


def test_local_paths_of_the_request_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quality.csv").write_text("url,quality\nhttp://a.example/,1\n")
    request = CrawlRequest.model_validate(
        {
            "seeds_file": "seeds.txt",
            "out_dir": "out",
            "config": {"scheduling": {"quality_file": "quality.csv"}},
        }
    )
    absolute = crawlflow.api._with_absolute_paths(request)
    assert absolute.out_dir == str(tmp_path / "out")
    assert absolute.seeds_file == str(tmp_path / "seeds.txt")
    assert absolute.config.scheduling.quality_file == str(tmp_path / "quality.csv")
    bucket = request.model_copy(update={"out_dir": "s3://bucket/crawls"})
    assert crawlflow.api._with_absolute_paths(bucket).out_dir == "s3://bucket/crawls"


def test_the_summary_reference_names_every_field():
    rendered = render_summary_reference()
    for model in (crawlflow.api.CrawlSummary, crawlflow.api.NodeUsage, crawlflow.api.NodeRun):
        for name in model.model_fields:
            # name, type (an escaped | in it), meaning
            row = rf"^\| `{name}` \| (?:[^|\\]|\\\|)+ \| \w"
            assert re.search(row, rendered, re.M), (model, name)
    assert SUMMARY_MARKER in PAGE.read_text()


def test_the_pages_own_site_and_alerts_blocks(tmp_path, monkeypatch):
    """The request block builds the request it says; the alerts block types the summary an
    AlertsRaised carries. `crawl` is replaced: no crawl runs here."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crawl.toml").write_text("[limits]\nmax_depth = 3\n")
    asked: list[CrawlRequest] = []

    def crawl_crossing_alerts(request: CrawlRequest) -> CrawlSummary:
        asked.append(request)
        alerts = ["no page stored"]
        raise AlertsRaised(alerts, flow_summary(pages=0, alerts=alerts))

    monkeypatch.setattr(crawlflow.api, "crawl", crawl_crossing_alerts)
    _, own_site, alerts, _ = python_blocks()
    namespace: dict[str, Any] = {"__name__": "__main__"}
    with pytest.raises(AlertsRaised):
        run_block(own_site, namespace)
    (request,) = asked
    assert request.seeds == ["https://docs.example.org/"]
    assert request.out_dir == "/data/crawls"
    limits = request.config.limits
    assert (limits.max_pages, limits.deadline_s, limits.max_depth) == (500, 600, 3)
    run_block(alerts, namespace)
    assert namespace["summary"].pages == 0
    assert namespace["summary"].alerts == ["no page stored"]


@pytest.mark.integration
def test_the_pages_example_crawls_the_synthetic_web(
    ray_session, prefect_api, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    example = python_blocks()[0]
    # Not capsys: the flow's log handlers keep the stream they first met, for later tests.
    with contextlib.redirect_stdout(io.StringIO()) as stdout:
        namespace = run_block(example)
    summary, web = namespace["summary"], namespace["web"]
    assert isinstance(summary, CrawlSummary)
    assert summary.hosts == 5
    result = coverage(Path(summary.out_dir), web.reachable_allowed_urls())
    assert result["expected"] > 100
    assert result["missing"] == [] and result["duplicates"] == 0
    # Absolute: the nodes' Ray was started in another working directory.
    assert Path(summary.out_dir).parent == tmp_path / "crawl-out"
    printed = stdout.getvalue()
    assert f"{summary.pages} pages from 5 servers" in printed
    assert f"output: {summary.out_dir}" in printed


@pytest.fixture(scope="module")
def one_server_web():
    from websim import WebSim, WebSpec

    spec = WebSpec(hosts=1, pages=30, seed=3, rate_limit_rps=None, latency_ms=(1.0, 2.0))
    with WebSim(spec) as sim:
        yield sim


@pytest.mark.integration
def test_the_crawl_runs_as_a_subflow_of_a_users_flow(
    one_server_web, ray_session, prefect_api, tmp_path
):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    subflow_block = python_blocks()[3]
    crawl_and_check = run_block(subflow_block)["crawl_and_check"]
    state = crawl_and_check(
        [one_server_web.hub_url], str(tmp_path), allow_private=True, return_state=True
    )
    assert state.is_completed(), state.message
    crawl_dir = Path(state.result())
    assert crawl_dir.parent == tmp_path
    assert any((crawl_dir / "pages").glob("*.parquet"))
    with get_client(sync_client=True) as client:
        parent_id = state.state_details.flow_run_id
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])
            )
        )
        assert [client.read_flow(run.flow_id).name for run in children] == ["crawl"]
        (child,) = children
        assert child.state is not None and child.state.is_completed()
        # The flow's default crawl id: its own run's, so that a retry of it resumes.
        assert crawl_dir.name.endswith(str(child.id)[:8])
