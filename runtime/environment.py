"""Process environment for crawlflow's processes, and for tests and benchmarks.

Set before Ray is first imported (and Prefect, where the process starts with crawlflow): both
read these at import or start-up, and the processes they start inherit them.
"""

from __future__ import annotations

import os

# No telemetry: these machines often have no internet, and users did not ask for it.
NO_TELEMETRY = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "RAY_USAGE_STATS_ENABLED": "0",
}
# Ray's switch to its loopback-only, no-cluster mode has this name. A local Ray would otherwise
# listen on every interface and announce the machine's address, though a one-machine crawl
# needs nothing beyond loopback: its ports stay off the network, token authentication or not.
RAY_LOCAL_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

# Some libraries send HTTP requests of their own whatever the settings above say: Ray looks up
# cloud metadata at start-up (metadata.google.internal, 169.254.169.254), a Prefect server
# fetches its collection registry from GitHub (with a bundled fallback). Tests and benchmarks
# may reach loopback only, so every client that honours the proxy variables is sent to a
# closed loopback port. The bypass list names loopback; the 127.0.0.0/8 range in it is
# understood by requests only, and urllib or httpx would send 127.0.0.2 to the closed port:
# an error, never traffic off loopback. The crawler's own sessions ignore these variables
# (`trust_env = False`).
LOOPBACK_ONLY = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost,::1,127.0.0.0/8",
}


def prepare_environment() -> None:
    """No telemetry; a local Ray (no RAY_ADDRESS to join) on loopback only."""
    for name, value in NO_TELEMETRY.items():
        os.environ.setdefault(name, value)
    if not os.environ.get("RAY_ADDRESS"):
        for name, value in RAY_LOCAL_ONLY.items():
            os.environ.setdefault(name, value)


def confine_to_loopback() -> None:
    """For tests and benchmarks: no telemetry, a local Ray on loopback, and no library's own
    HTTP off loopback, whatever the developer's environment says."""
    os.environ.pop("RAY_ADDRESS", None)
    prepare_environment()
    os.environ.update(RAY_LOCAL_ONLY)
    os.environ.update(LOOPBACK_ONLY)
    os.environ.update({name.lower(): value for name, value in LOOPBACK_ONLY.items()})
