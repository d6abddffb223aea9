"""The app a command's temporary Prefect server runs: Prefect's own, built with Python's cyclic
garbage collector paused.

Importing Prefect's server and building its app create about a million objects, nearly all of
them kept for the server's life; the collector, run every 700 allocations, walks them again
and again (0.4 s of the server's 2.8 s boot on this machine, which the flow waits for). They
are moved out of its reach once built (`gc.freeze`), and collection resumes for what the
server allocates from then on.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI


def create_app() -> FastAPI:
    """uvicorn's factory (`--factory crawlflow.prefect_app:create_app`)."""
    gc.disable()
    try:
        from prefect.server.api.server import create_app as create_prefect_app

        app = create_prefect_app()
        gc.freeze()
    finally:
        gc.enable()
    return app
