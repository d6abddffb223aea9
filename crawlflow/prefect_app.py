"""The app a command's temporary Prefect server runs: Prefect's own, built with Python's cyclic
garbage collector paused.

Importing Prefect's server and building its app create about a million objects, nearly all of
them kept for the server's life; the collector, run every 700 allocations, walks them again
and again (0.4 s of the server's 2.8 s boot on this machine, which the flow waits for). They
are moved out of its reach once built (`gc.freeze`), and collection resumes for what the
server allocates from then on.

Its start-up (the database migrations, the block types) runs one server at a time per
PREFECT_HOME: two commands started together would otherwise migrate one SQLite database at
once, and one of them fail ("duplicate column name").
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

STARTUP_LOCK = "crawlflow-server-startup.lock"
Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


def create_app() -> FastAPI:
    """uvicorn's factory (`--factory crawlflow.prefect_app:create_app`)."""
    gc.disable()
    try:
        from prefect.server.api.server import create_app as create_prefect_app

        app = create_prefect_app()
        gc.freeze()
    finally:
        gc.enable()
    app.router.lifespan_context = _one_start_at_a_time(app.router.lifespan_context)
    return app


def _one_start_at_a_time(lifespan: Lifespan) -> Lifespan:
    """`lifespan` whose start-up holds an exclusive lock in PREFECT_HOME."""
    from prefect.settings import get_current_settings

    home = get_current_settings().home

    @asynccontextmanager
    async def serialized(app: Any) -> AsyncIterator[Any]:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(home / STARTUP_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
            async with lifespan(app) as state:
                os.close(fd)  # started: the next server may start
                fd = -1
                yield state
        finally:
            if fd >= 0:
                os.close(fd)

    return serialized
