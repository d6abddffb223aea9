"""`crawl.json`: what a crawl directory is, so the next night can find the one before.

Written once when a crawl starts (a resumed crawl keeps its own): the crawl id, its start time,
its deployment key and the earlier crawl it revisits (`since`, null for a full crawl).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from storage.durable import sync, write_synced

MANIFEST = "crawl.json"

# A crawl id names a directory under the output root: letters, digits and `.`, `_`, `-`, not
# first, so that an id (a flow parameter anyone who starts a run may set) can never leave the
# root (`../x`), hide (`.x`) or name a path.
_CRAWL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def new_crawl_id(started: datetime | None = None, suffix: str | None = None) -> str:
    """`<UTC start>-<suffix>`: sorts by start time (default now); the suffix (default 8 random
    hex digits) keeps two crawls started in one second apart."""
    started = started or datetime.now(UTC)
    return started.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ-") + (suffix or secrets.token_hex(4))


def check_crawl_id(name: str) -> str:
    """`name` if it is a valid crawl id; else ValueError saying what one is."""
    if not _CRAWL_ID.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a crawl id: 1-100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class Manifest:
    crawl_id: str
    started: str  # ISO 8601, UTC: orders the crawls of a deployment
    deployment: str  # crawls with the same key revisit each other's URLs
    since: str | None  # the crawl whose URLs this one revisits; None: a full crawl


def deployment_key(scope_hosts: list[str]) -> str:
    """The servers a crawl covers: nights over the same servers are one deployment."""
    return " ".join(sorted(scope_hosts))


def read_manifest(crawl_dir: Path) -> Manifest | None:
    """The manifest of `crawl_dir`; None when it has none, or one that is unreadable or names
    another directory as its crawl (later crawls read its rows by that name)."""
    try:
        manifest = Manifest(**json.loads((crawl_dir / MANIFEST).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if manifest.crawl_id != crawl_dir.name:
        return None
    return manifest


def write_manifest(crawl_dir: Path, manifest: Manifest) -> None:
    """Written whole and synced before it is renamed into place, the rename synced: a failure
    at any step leaves the manifest there was (none, for a new crawl), which the run writes
    again when it is started again; never an empty or half one."""
    crawl_dir.mkdir(parents=True, exist_ok=True)
    sync(crawl_dir.parent)  # the crawl directory's own entry
    temporary = crawl_dir / f"{MANIFEST}.tmp"
    write_synced(temporary, [json.dumps(asdict(manifest), indent=1).encode()])
    os.replace(temporary, crawl_dir / MANIFEST)
    sync(crawl_dir)


def earlier_crawls(out_dir: Path, deployment: str, before: str) -> list[Manifest]:
    """The crawls of `deployment` in `out_dir` that started before `before` (ISO time) and
    wrote output, oldest first."""
    found = []
    for child in out_dir.iterdir() if out_dir.is_dir() else []:
        manifest = read_manifest(child)
        if (
            manifest is not None
            and manifest.deployment == deployment
            and manifest.started < before
            and (child / "fetches").is_dir()
        ):
            found.append(manifest)
    return sorted(found, key=lambda m: (m.started, m.crawl_id))
