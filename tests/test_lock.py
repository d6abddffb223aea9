"""One run per crawl directory (storage/lock.py): a second run is refused at once, naming the
first; a run that died, SIGKILL included, leaves nothing that stops the next."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from storage.checkpoint import wait_until_quiet
from storage.lock import CrawlLocked, crawl_lock

HOLD = """
import sys, time
from pathlib import Path
from storage.lock import crawl_lock
with crawl_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def hold_in_another_process(crawl_dir) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(crawl_dir)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_second_run_is_refused_at_once_naming_the_first(tmp_path):
    crawl_dir = tmp_path / "night-1"
    holder = hold_in_another_process(crawl_dir)
    try:
        named = f"night-1 is being run already \\(process {holder.pid} "
        started = time.monotonic()
        with pytest.raises(CrawlLocked, match=named), crawl_lock(crawl_dir):
            pytest.fail("two runs held one crawl directory")
        # At once: not after the wait for a quiet directory that resume makes (5 s).
        assert time.monotonic() - started < 3.0
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_run_leaves_the_directory_to_the_next(tmp_path):
    crawl_dir = tmp_path / "night-1"
    holder = hold_in_another_process(crawl_dir)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with crawl_lock(crawl_dir):
        pass
    with crawl_lock(crawl_dir):  # released when the run ends, too
        pass


def test_another_thread_of_the_process_is_another_run(tmp_path):
    """A flow run in the process of a first run that still holds the directory is a second
    run; the first run's own callees (the flow `crawlflow crawl` runs) hold it on."""
    outcome: list[BaseException | None] = []

    def second_run() -> None:
        try:
            with crawl_lock(tmp_path):
                outcome.append(None)
        except CrawlLocked as exc:
            outcome.append(exc)

    with crawl_lock(tmp_path):
        with crawl_lock(tmp_path):  # the command's flow, in the command's context
            pass
        thread = threading.Thread(target=second_run)
        thread.start()
        thread.join()
        with crawl_lock(tmp_path):  # still held by this context after the inner one ended
            pass
    assert isinstance(outcome[0], CrawlLocked)
    with crawl_lock(tmp_path):  # released at the end
        pass


def test_the_lock_is_no_sign_of_a_running_node(tmp_path):
    with crawl_lock(tmp_path):
        assert wait_until_quiet(tmp_path, quiet_s=5.0, timeout_s=0.1)
