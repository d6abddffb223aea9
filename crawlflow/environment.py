"""Process environment for crawlflow's processes, and for tests and benchmarks.

Set before Prefect and Ray are first imported: both read these at import or start-up, and the
processes they start inherit them.
"""

from __future__ import annotations

import os

# No telemetry: these machines often have no internet, and users did not ask for it.
NO_TELEMETRY = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "RAY_USAGE_STATS_ENABLED": "0",
}

# Some libraries send HTTP requests of their own whatever the settings above say: Ray probes
# cloud metadata addresses (169.254.169.254, metadata.google.internal) at start-up, a Prefect
# server fetches its collection registry from GitHub (with a bundled fallback). Tests and
# benchmarks may reach loopback only, so every client that honours the proxy variables is
# sent to a closed loopback port, loopback itself excepted. The crawler's own sessions ignore
# these variables (`trust_env = False`).
LOOPBACK_ONLY = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost,127.0.0.0/8",
}


def prepare_environment() -> None:
    """No telemetry; a local Ray (no RAY_ADDRESS to join) on loopback only."""
    for name, value in NO_TELEMETRY.items():
        os.environ.setdefault(name, value)
    if not os.environ.get("RAY_ADDRESS"):
        # A local Ray would listen on every interface and announce the machine's address,
        # though a one-machine crawl needs nothing beyond loopback, and Ray's ports take
        # commands from anyone who reaches them. Ray's switch to its loopback-only,
        # no-cluster mode has this name.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def confine_to_loopback() -> None:
    """For tests and benchmarks: `prepare_environment`, and no library's own HTTP leaves
    loopback."""
    os.environ.pop("RAY_ADDRESS", None)  # their Ray is the local one
    prepare_environment()
    for name, value in LOOPBACK_ONLY.items():
        os.environ[name] = value
        os.environ[name.lower()] = value
