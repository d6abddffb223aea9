"""Two commands of one crawl id started a moment apart (a double-clicked cron job, a retry
while the first still lives): one refuses at once with one line naming the other, and the one
that runs finishes with every page once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from websim import WebSim, WebSpec
from websim.coverage import coverage

pytestmark = pytest.mark.integration  # the CLI with its Prefect server, Ray and websim

CRAWLFLOW = str(Path(sys.executable).with_name("crawlflow"))


def test_of_two_runs_of_one_crawl_id_one_refuses_and_the_other_fetches_each_page_once(tmp_path):
    spec = WebSpec(hosts=2, pages=150, seed=7, latency_ms=(2.0, 5.0))
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    out = tmp_path / "out"
    with WebSim(spec) as sim:
        argv = [CRAWLFLOW, "crawl", sim.hub_url, *[f"--allow={s}" for s in sim.servers]]
        argv += ["--allow-private", "--out", str(out), "--crawl-id", "night-1", "--nodes", "1"]

        def start() -> subprocess.Popen:
            return subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )

        # 0.1 s apart: either may win the race to the lock; 5 s apart: the second refuses.
        runs = [start()]
        time.sleep(0.1)
        runs.append(start())
        time.sleep(5.0)
        runs.append(start())
        results = [(run.wait(timeout=300), *run.communicate()) for run in runs]
    codes = [code for code, _, _ in results]
    assert sorted(codes[:2]) == [0, 2] and codes[2] == 2, results
    for code, _, stderr in results:
        assert "Traceback" not in stderr, stderr
        if code == 2:
            assert (
                stderr.strip()
                .splitlines()[-1]
                .startswith("crawlflow: error: crawl night-1 is being run already (process ")
            ), stderr
        result = coverage(out / "night-1", sim.reachable_allowed_urls())
    assert result["missing"] == [] and result["duplicates"] == 0, result
