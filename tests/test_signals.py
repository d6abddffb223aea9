"""SIGTERM to the command's process group (what `timeout`, systemd and container runtimes send)
ends a crawl as Ctrl-C does: within seconds, one line naming the crawl id, no traceback; and
the same crawl id resumes with every page fetched once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.views import connect
from websim import WebSim, WebSpec

pytestmark = pytest.mark.integration  # the CLI with its Prefect server, Ray and websim

CRAWLFLOW = str(Path(sys.executable).with_name("crawlflow"))


def wait_for(path: Path, text: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in path.read_text(errors="replace"):
        assert process.poll() is None, path.read_text()[-2000:]
        assert time.monotonic() < deadline, f"no {text!r} in time"
        time.sleep(0.2)


def test_sigterm_to_the_group_ends_the_crawl_in_seconds_and_it_resumes(tmp_path):
    # Slow enough (hidden rate limits, many pages) to be mid-crawl when the signal comes.
    spec = WebSpec(hosts=4, pages=4000, seed=5, latency_ms=(2.0, 5.0))
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    out, log = tmp_path / "out", tmp_path / "crawl.log"
    with WebSim(spec) as sim:
        argv = [
            CRAWLFLOW,
            "crawl",
            sim.hub_url,
            *[f"--allow={s}" for s in sim.servers],
            "--allow-private",
            "--out",
            str(out),
            "--crawl-id",
            "night-1",
            "--nodes",
            "1",
        ]
        with log.open("w") as output:
            crawl = subprocess.Popen(
                argv, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            wait_for(log, "pages,", crawl, timeout_s=120)  # a progress line: nodes are fetching
            # And a batch committed, so that there is something to resume (under load the
            # first commit may come after the first progress line).
            deadline = time.monotonic() + 60
            while not any((out / "night-1" / "fetches").glob("*.parquet")):
                assert crawl.poll() is None and time.monotonic() < deadline, "nothing committed"
                time.sleep(0.2)
            os.killpg(crawl.pid, signal.SIGTERM)
            signalled = time.monotonic()
            code = crawl.wait(timeout=30)
            took = time.monotonic() - signalled
        finally:
            if crawl.poll() is None:
                os.killpg(crawl.pid, signal.SIGKILL)
        said = log.read_text()
        assert "Traceback" not in said
        assert code == 130, said[-2000:]
        assert said.rstrip().splitlines()[-1] == (
            "crawlflow: interrupted; what was committed is kept: run again with --crawl-id "
            f"night-1 (and --out {out}) to resume"
        )
        assert took < 10, f"{took:.1f} s from SIGTERM to exit"

        resumed = subprocess.run(
            [*argv, "--max-pages", "600"], env=env, capture_output=True, text=True, timeout=600
        )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming crawl night-1" in resumed.stderr
    # Every page once (robots.txt is read again by every run, as resume documents).
    twice = (
        connect(out / "night-1")
        .execute(
            "SELECT url FROM fetches WHERE fetch_status = 200 AND url_path <> '/robots.txt' "
            "GROUP BY url HAVING count(*) > 1"
        )
        .fetchall()
    )
    assert twice == []
