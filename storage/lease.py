"""One run per crawl in a bucket, across machines: the crawl's lease object.

The crawl lock of storage/lock.py is a `flock` on the staging directory: it excludes two runs
of one crawl id on one machine. Two runs started on two machines against one bucket would both
publish batches and compact, so a crawl in S3 also has a lease, the object
`<crawl_id>/crawl.lease`:

- **Taken** with a conditional create (`If-None-Match: *`, which S3 has had since 2024): of two
  runs, one creates it, the other is refused, naming the holder's host, pid and start time.
- **Renewed** by a heartbeat thread every third of `[output] lease_expiry_s`, with a
  conditional overwrite (`If-Match` its own ETag): a renewal that finds another object there
  means the lease was taken, and the run knows it lost it.
- **Taken over** only once it has not been renewed for `lease_expiry_s` (by the store's clock:
  the object's Last-Modified against the Date of the response that read it, so no two
  machines' clocks are compared), with a conditional overwrite of the expired object: of two
  runs taking it over, one wins. A holder on this very host whose process is gone (a `kill -9`
  of the command) is taken over at once, so a resume on the same machine does not wait; "this
  very host" is the same host name, kernel boot and pid namespace (`pid_space`), since a pid
  means nothing outside them (two containers may share a host name).
- **Fencing.** A run whose lease was lost must commit nothing more: each node reads the lease
  before it uploads a batch's `fetches` object (the commit point) and refuses if the lease's
  token is not its run's (`LeaseFence`); the driver does so before it publishes the compacted
  crawl. A check and the upload after it are two requests: a run that loses its lease between
  them commits that one batch (docs/object-storage.md).
- **Released** (deleted, if still its own) when the run ends.

S3 only: pyarrow.fs has no conditional writes, so the lease speaks to S3 through boto3, which
finds credentials and the endpoint where pyarrow does (the `AWS_*` variables, `AWS_PROFILE`,
the instance role). Other stores (`gs://`, ...) keep the local lock alone.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from storage.lock import CrawlLocked

LEASE = "crawl.lease"


def pid_space() -> str:
    """Where this process's pid names it: the kernel's boot and the pid namespace; empty where
    that cannot be read (off Linux), and then no pid of a holder is trusted."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}/{namespace}"


log = logging.getLogger(__name__)


class LeaseHeld(CrawlLocked):
    """Another run holds the crawl's lease in the bucket; the message names it."""


class LeaseUnavailable(CrawlLocked):
    """The lease cannot be taken for another reason than a holder (the store refused the
    request, no credentials): the run does not start without it."""


class LeaseLost(RuntimeError):
    """This run's lease was taken by another run (it had expired): it must commit nothing more."""


@dataclass(frozen=True)
class Current:
    """The lease object as read: what its holder wrote, its ETag, and how long ago (by the
    store's clock) it was last written."""

    holder: dict[str, Any]
    etag: str
    age_s: float


def supports_lease(location: str) -> bool:
    return urlsplit(location).scheme == "s3"


def _s3_client(location: str) -> Any:
    """A boto3 client for the bucket of `location`: the standard configuration, with the
    endpoint and region pyarrow takes from the URI's query (`endpoint_override`, `scheme`,
    `region`) when given there."""
    import boto3  # type: ignore[import-untyped]

    query = {k: v[-1] for k, v in parse_qs(urlsplit(location).query).items()}
    options: dict[str, str] = {}
    if "endpoint_override" in query:
        endpoint = query["endpoint_override"]
        if "://" not in endpoint:
            endpoint = f"{query.get('scheme', 'https')}://{endpoint}"
        options["endpoint_url"] = endpoint
    if "region" in query:
        options["region_name"] = query["region"]
    return boto3.client("s3", **options)


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


# Another conditional write won (412), or one ran at the same time (409, S3's answer to two
# conditional writes of one key in flight).
_LOST_RACE = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}


class CrawlLease:
    """The lease of crawl `crawl_id` under the output root `location` (an `s3://` URI)."""

    def __init__(self, location: str, crawl_id: str, expiry_s: float) -> None:
        parts = urlsplit(location)
        self.location = location.split("?", 1)[0].rstrip("/")
        self.crawl_id = crawl_id
        self.expiry_s = expiry_s
        self.bucket = parts.netloc
        prefix = parts.path.strip("/")
        self.key = f"{prefix}/{crawl_id}/{LEASE}" if prefix else f"{crawl_id}/{LEASE}"
        self.client = _s3_client(location)
        self.token = secrets.token_hex(16)
        self.holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_space": pid_space(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
            "token": self.token,
        }
        self.etag = ""
        self.lost = False
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # ---- the object ---------------------------------------------------------------------------

    def _put(self, **condition: str) -> str:
        body = json.dumps({**self.holder, "expiry_s": self.expiry_s}).encode()
        response = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=body, **condition)
        return str(response["ETag"])

    def read(self) -> Current | None:
        """The lease object now, or None if there is none."""
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:
            if _error_code(exc) in {"NoSuchKey", "404"}:
                return None
            raise
        body = response["Body"].read()
        try:
            holder = dict(json.loads(body))
        except (ValueError, TypeError):
            holder = {}  # written whole or not at all: another writer's, not ours
        date = response["ResponseMetadata"]["HTTPHeaders"].get("date")
        now = parsedate_to_datetime(date) if date else datetime.now(UTC)
        age_s = (now - response["LastModified"]).total_seconds()
        return Current(holder, str(response["ETag"]), age_s)

    def describe(self, current: Current) -> str:
        holder = current.holder
        return (
            f"crawl {self.crawl_id} in {self.location} is being written by "
            f"{holder.get('host', '?')} pid {holder.get('pid', '?')} since "
            f"{holder.get('since', '?')} (its lease in the bucket is taken over once not "
            f"renewed for {self.expiry_s:g} s: [output] lease_expiry_s)"
        )

    def _stale(self, current: Current) -> bool:
        """Expired, or held by a process of this host that is gone."""
        if current.age_s > self.expiry_s or not current.holder:
            return True
        same_space = current.holder.get("pid_space") == self.holder["pid_space"] != ""
        if current.holder.get("host") != self.holder["host"] or not same_space:
            return False
        pid = current.holder.get("pid")
        if not isinstance(pid, int) or pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    # ---- taking, renewing, checking, releasing --------------------------------------------

    def acquire(self, attempts: int = 3) -> None:
        """Take the lease: LeaseHeld naming the holder if another run's is live."""
        for _ in range(attempts):
            try:
                self.etag = self._put(IfNoneMatch="*")
                return
            except Exception as exc:
                if _error_code(exc) not in _LOST_RACE:
                    raise
            current = self.read()
            if current is None:
                continue  # released in between: create it again
            if not self._stale(current):
                raise LeaseHeld(self.describe(current))
            try:
                self.etag = self._put(IfMatch=current.etag)
            except Exception as exc:
                if _error_code(exc) not in _LOST_RACE:
                    raise
                continue  # renewed or taken over by another run in between
            log.warning("took over the stale lease: %s", self.describe(current))
            return
        current = self.read()
        raise LeaseHeld(self.describe(current) if current else f"crawl {self.crawl_id}: contended")

    def renew(self) -> bool:
        """Write the lease again if it is still this run's; False (and `lost`) if not."""
        try:
            self.etag = self._put(IfMatch=self.etag)
            return True
        except Exception as exc:
            if _error_code(exc) in _LOST_RACE | {"NoSuchKey", "404"}:
                self.lost = True
                return False
            raise

    def start_heartbeat(self) -> None:
        self._heartbeat = threading.Thread(
            target=self._beat, name=f"lease-{self.crawl_id}", daemon=True
        )
        self._heartbeat.start()

    def _beat(self) -> None:
        period = self.expiry_s / 3
        last_renewed = time.monotonic()
        while not self._stop.wait(period):
            try:
                if not self.renew():
                    log.error("lost the lease of crawl %s: another run took it", self.crawl_id)
                    return
                last_renewed = time.monotonic()
            except Exception as exc:  # the store unreachable: the lease may expire meanwhile
                log.warning("cannot renew the lease of crawl %s: %s", self.crawl_id, exc)
                if time.monotonic() - last_renewed > self.expiry_s:
                    self.lost = True
                    log.error("the lease of crawl %s expired unrenewed", self.crawl_id)
                    return

    def check(self) -> None:
        """LeaseLost unless the bucket's lease is still this run's (the fence before a
        publish)."""
        current = None if self.lost else self.read()
        if current is None or current.holder.get("token") != self.token:
            self.lost = True
            raise LeaseLost(
                f"crawl {self.crawl_id} in {self.location}: this run's lease was taken over "
                "by another run; it publishes nothing more"
            )

    def release(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        if not self.lost and self.etag:
            with suppress(Exception):  # expired and taken, or unreachable: it expires then
                self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)


class LeaseFence:
    """A node's check before it commits a batch in the bucket: the lease still names its run."""

    def __init__(self, location: str, crawl_id: str, token: str) -> None:
        self.lease = CrawlLease(location, crawl_id, expiry_s=0.0)
        self.lease.token = token

    def check(self) -> None:
        self.lease.check()


# The leases held in this context: the flow that `crawlflow crawl` runs holds the command's on.
_held: ContextVar[tuple[CrawlLease, ...]] = ContextVar("crawl_leases", default=())


@contextmanager
def crawl_lease(location: str, crawl_id: str, expiry_s: float) -> Iterator[CrawlLease | None]:
    """Hold the lease of `crawl_id` in the bucket `location` for this run (None for output
    that has no lease: a local disk, a store other than S3); LeaseHeld at once if another
    run's is live. Reentrant within one context, as storage.lock.crawl_lock."""
    if not supports_lease(location):
        yield None
        return
    held = _held.get()
    for lease in held:
        if (lease.location, lease.crawl_id) == (location.split("?", 1)[0].rstrip("/"), crawl_id):
            yield lease
            return
    lease = CrawlLease(location, crawl_id, expiry_s)
    try:
        lease.acquire()
    except CrawlLocked:
        raise
    except Exception as exc:  # whatever boto3 raises: a missing credential, a refusal, ...
        reason = " ".join(str(exc).split())[:300]
        raise LeaseUnavailable(
            f"crawl {crawl_id} in {lease.location}: cannot take its lease ({reason})"
        ) from None
    lease.start_heartbeat()
    token = _held.set((*held, lease))
    try:
        yield lease
    finally:
        _held.reset(token)
        lease.release()
