"""A crawl command killed mid-crawl, for the tests of resume (local disk and bucket)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable


def kill_once_committed(
    command: list[str], env: dict[str, str], committed: Callable[[], int], batches: int
) -> None:
    """Run `command` in a process group of its own and `kill -9` the whole group once
    `committed()` counts at least `batches` committed batches; the test fails with the
    command's last words if it ends first, or if it commits too little within 120 s."""
    process = subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while committed() < batches:
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the crawl made no progress"
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
