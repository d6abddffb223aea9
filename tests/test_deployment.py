"""The users' nightly path for real: a `prefect server start` on loopback, the deployment from
prefect.yaml, a process worker, a run triggered with `prefect deployment run`, its final state
read from the API, and the crawl's Parquet output checked."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from websim import WebSim, WebSpec
from websim.coverage import coverage

pytestmark = pytest.mark.integration  # a Prefect server, a worker and websim

REPO = Path(__file__).resolve().parents[1]
PREFECT = str(Path(sys.executable).with_name("prefect"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": api,
        # No scheduled runs: prefect.yaml's nightly run (02:00 UTC, seeds on the internet)
        # would be picked up by the worker if the test ran just before 02:00.
        "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
    }
    server = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, "prefect server exited"
            assert time.monotonic() < deadline, "prefect server did not come up"
            try:
                if requests.get(f"{api}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.5)
        yield api, env
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def prefect(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PREFECT, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_nightly_deployment_runs_through_a_worker(prefect_server, tmp_path):
    api, env = prefect_server
    prefect(env, "work-pool", "create", "crawlflow", "--type", "process")
    prefect({**env, "CRAWLFLOW_HOME": str(REPO)}, "--no-prompt", "deploy", "--all")

    deployment = requests.get(f"{api}/deployments/name/crawl/nightly", timeout=10).json()
    assert deployment["schedules"][0]["schedule"]["cron"] == "0 2 * * *"
    assert deployment["work_pool_name"] == "crawlflow"
    assert deployment["global_concurrency_limit"]["limit"] == 1
    # One typed parameter, shown as a form: the request model's fields, with prefect.yaml's values.
    schema = deployment["parameter_openapi_schema"]
    assert list(schema["properties"]) == ["request"]
    request_form = schema["definitions"]["CrawlRequest"]["properties"]
    assert {"seeds", "since", "incremental", "config"} <= set(request_form)
    assert deployment["parameters"]["request"]["config"]["limits"]["max_pages"] == 100000

    spec = WebSpec(hosts=3, pages=150, seed=5, rate_limit_rps=None, latency_ms=(1.0, 2.0))
    with WebSim(spec) as sim:
        parameters = {
            "seeds": [sim.hub_url],
            "allow": sim.servers,
            "allow_private": True,
            "out_dir": str(tmp_path / "out"),
            "crawl_id": "nightly-test",
        }
        output = prefect(
            env,
            "deployment",
            "run",
            "crawl/nightly",
            "--params",
            json.dumps({"request": parameters}),
        )
        flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", output).group(1)
        prefect(env, "worker", "start", "--pool", "crawlflow", "--run-once")
        expected = sim.reachable_allowed_urls()

    runs = requests.post(
        f"{api}/flow_runs/filter",
        json={"flow_runs": {"deployment_id": {"any_": [deployment["id"]]}}},
        timeout=10,
    ).json()
    assert [run["id"] for run in runs] == [flow_run_id]  # the worker ran ours, and only ours
    state = requests.get(f"{api}/flow_runs/{flow_run_id}", timeout=10).json()["state"]
    assert state["type"] == "COMPLETED", state
    result = coverage(tmp_path / "out" / "nightly-test", expected)
    assert result["coverage"] == 1.0 and result["duplicates"] == 0
    artifacts = requests.post(
        f"{api}/artifacts/filter",
        json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}},
        timeout=10,
    ).json()
    assert {"crawl-summary", "crawl-hosts"} <= {a["key"] for a in artifacts}
