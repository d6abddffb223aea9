"""A night that fails fails loudly: `[alerts]` thresholds, a Failed flow run and exit code 3
once everything is written, a Prefect automation calling a webhook about it, and the nightly
deployment's retry, which resumes the crawl and fetches nothing twice."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crawler.alerts import AlertSettings, crossed

FIGURES = {"pages": 10, "urls_tried": 20, "urls_failed": 5, "servers": 4, "servers_unreachable": 1}


def test_the_defaults_fail_only_a_crawl_without_pages():
    assert crossed(AlertSettings(), FIGURES) == []
    assert crossed(AlertSettings(), {**FIGURES, "pages": 0}) == [
        "0 pages, fewer than [alerts] min_pages = 1"
    ]
    assert crossed(AlertSettings(min_pages=0), {**FIGURES, "pages": 0}) == []


def test_each_share_threshold_names_its_figures():
    settings = AlertSettings(max_error_share=0.2, max_unreachable_share=0.25)
    assert crossed(settings, FIGURES) == [
        "5 of 20 URLs tried failed (25%), more than [alerts] max_error_share = 0.2"
    ]
    assert crossed(AlertSettings(max_unreachable_share=0.2), FIGURES) == [
        "1 of 4 servers unreachable (25%), more than [alerts] max_unreachable_share = 0.2"
    ]
    empty = {"pages": 1, "urls_tried": 0, "urls_failed": 0, "servers": 0, "servers_unreachable": 0}
    assert crossed(settings, empty) == []


class Receiver(BaseHTTPRequestHandler):
    calls: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Receiver.calls.append(body)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook_receiver():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    Receiver.calls = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/failed-night"
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


FAST_FAILURE = {
    "retry": {"max_retries": 0},
    "fetch": {"connect_timeout_s": 1.0},
    "output": {"resume_quiet_s": 0.0, "warc": False},
}


@pytest.mark.integration
def test_a_night_with_every_server_down_exits_3_and_the_automation_calls_the_webhook(
    ray_session, prefect_api, webhook_receiver, tmp_path
):
    from prefect.blocks.webhook import Webhook
    from prefect.client.orchestration import get_client
    from prefect.events.actions import CallWebhook
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    from crawlflow import cli
    from storage.views import connect

    # What README "Alerts" shows, through the API: a webhook block, and an automation that
    # calls it when a flow run of `crawl` fails.
    block_id = Webhook(method="POST", url=webhook_receiver).save("failed-night", overwrite=True)
    automation = AutomationCore(
        name="crawl failed",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Failed"},
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related={"prefect.resource.name": "crawl", "prefect.resource.role": "flow"},
            posture=Posture.Reactive,
            threshold=1,
            within=0,
        ),
        actions=[
            CallWebhook(
                block_document_id=block_id,
                payload='{"flow_run": "{{ flow_run.id }}", "state": "{{ flow_run.state.name }}"}',
            )
        ],
    )
    with get_client(sync_client=True) as client:
        automation_id = client.create_automation(automation)
    try:
        config = tmp_path / "night.json"
        config.write_text(json.dumps(FAST_FAILURE))
        seeds = [f"http://127.0.0.1:{closed_port()}/", f"http://127.0.0.2:{closed_port()}/"]
        argv = ["crawl", *seeds, "--allow-private", "--out", str(tmp_path / "out")]
        # Not capsys: the flow's log handlers keep the stream they first met, for later tests.
        stderr, stdout = io.StringIO(), io.StringIO()
        with (
            pytest.raises(SystemExit) as exit_,
            contextlib.redirect_stderr(stderr),
            contextlib.redirect_stdout(stdout),
        ):
            cli.main([*argv, "--crawl-id", "night-1", "--config", str(config)])
        assert exit_.value.code == 3
        err = stderr.getvalue()
        assert "connection_refused" in stdout.getvalue()  # the summary's reasons
        assert "crawl failed its [alerts]: 0 pages, fewer than [alerts] min_pages = 1" in err
        # Everything was still written: a row per seed, with its reason, for a person.
        rows = (
            connect(tmp_path / "out" / "night-1")
            .execute("SELECT url, error FROM fetches WHERE url_path = '/' ORDER BY url")
            .fetchall()
        )
        assert [url for url, _ in rows] == seeds
        assert all(
            error.startswith("robots_unavailable: connection_refused: ") for _, error in rows
        )
        assert not any("Max retries" in error or "Pool" in error for _, error in rows)
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs()
        failed = [run for run in runs if run.state is not None and run.state.is_failed()]
        assert failed, "the flow run did not end Failed"
        deadline = time.monotonic() + 60
        while not Receiver.calls and time.monotonic() < deadline:
            time.sleep(0.2)
        assert Receiver.calls, "the automation did not call the webhook"
        call = json.loads(Receiver.calls[0])
        assert call["state"] == "Failed"
        assert call["flow_run"] in {str(run.id) for run in failed}
    finally:
        with get_client(sync_client=True) as client:
            client.delete_automation(automation_id)


@pytest.mark.integration
def test_the_nightly_retry_resumes_and_fetches_nothing_twice(ray_session, prefect_api, tmp_path):
    from prefect.client.orchestration import get_client

    from crawler.request import CrawlRequest
    from flows.crawl import nightly
    from storage.views import connect
    from websim import WebSim, WebSpec

    spec = WebSpec(hosts=2, pages=40, seed=3, rate_limit_rps=None, latency_ms=(1.0, 2.0))
    with WebSim(spec) as sim:
        request = CrawlRequest.model_validate(
            {
                "seeds": [sim.hub_url],
                "allow": sim.servers,
                "allow_private": True,
                "out_dir": str(tmp_path),
                "config": {**FAST_FAILURE, "alerts": {"min_pages": 1000}},
            }
        )
        state = nightly.with_options(retries=1, retry_delay_seconds=0)(request, return_state=True)
    assert state.is_failed()
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    assert run.run_count == 2  # failed its alerts, retried once, failed again
    (crawl_dir,) = tmp_path.iterdir()  # one crawl id for both runs: the retry resumed it
    fetched, urls, most = (
        connect(crawl_dir)
        .execute(
            "SELECT count(*), count(DISTINCT url), max(n) FROM (SELECT url, count(*) AS n "
            "FROM fetches WHERE fetch_status IS NOT NULL GROUP BY url)"
        )
        .fetchone()
    )
    assert urls > 10 and most == 1, (fetched, urls, most)
