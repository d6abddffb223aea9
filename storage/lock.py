"""One run per crawl directory at a time.

Two runs of one crawl id (a second command, or a Prefect retry while the first process still
lives) would write the same batch files and break each other's WARC pointers. The run holds an
exclusive lock on `crawl.lock` in the crawl directory from the checkpoint step through
compaction; a second run fails at once, naming the first. The lock is the kernel's (`flock`),
so a run that dies in any way, SIGKILL included, releases it, and the next run takes over
without a stale-lock rule. It holds between processes of one machine; on a shared file system
it holds only as far as that file system implements `flock`.

The lock is reentrant within one context of a process: `crawlflow crawl` takes it before
Prefect and Ray start (so of two commands started a moment apart, the second refuses at once),
and the flow it runs holds it on; a deployment's flow run takes it itself, and another thread
of the process is another run.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path

LOCK = "crawl.lock"


class CrawlLocked(RuntimeError):
    """Another run holds the crawl directory; the message names it."""


# The crawl directories held in this context: a holder's own callees (the flow that
# `crawlflow crawl` runs) hold them on; another thread or flow run of the process does not.
_held: ContextVar[frozenset[Path]] = ContextVar("crawl_locks_held", default=frozenset())


@contextmanager
def crawl_lock(crawl_dir: Path) -> Iterator[None]:
    """Hold `crawl_dir` for this run; CrawlLocked at once if another run holds it."""
    crawl_dir.mkdir(parents=True, exist_ok=True)
    key = crawl_dir.resolve()
    held = _held.get()
    if key in held:
        yield
        return
    with _flock(crawl_dir):
        token = _held.set(held | {key})
        try:
            yield
        finally:
            _held.reset(token)


@contextmanager
def _flock(crawl_dir: Path) -> Iterator[None]:
    fd = os.open(crawl_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CrawlLocked(
                f"crawl {crawl_dir.name} is being run already ({_holder(fd)}); "
                "wait for that run to end, or stop it and run again to resume"
            ) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": _now()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0))
        return f"process {holder['pid']} on {holder['host']} since {holder['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "by a run that has not said which"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
