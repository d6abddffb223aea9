"""The crawl's lease in an S3 bucket (storage/lease.py), against moto's server on loopback: one
run of a crawl id at a time across machines, a live lease refused with its holder named, an
expired or dead one taken over, and a run that lost its lease committing nothing more."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from storage.bucket import BatchPublisher, Bucket, publish_crawl
from storage.lease import (
    LEASE,
    CrawlLease,
    LeaseFence,
    LeaseHeld,
    LeaseLost,
    LeaseUnavailable,
    crawl_lease,
)

ROOT = "s3://crawls/leases"


def lease_of(crawl_id: str, expiry_s: float = 60.0) -> CrawlLease:
    return CrawlLease(ROOT, crawl_id, expiry_s)


def pretend_other_machine(lease: CrawlLease) -> CrawlLease:
    lease.holder = {**lease.holder, "host": "other-machine", "pid": 4242}
    return lease


def test_a_live_lease_refuses_a_second_run_naming_the_holder(s3_server):
    first = pretend_other_machine(lease_of("live"))
    first.acquire()
    second = lease_of("live")
    with pytest.raises(LeaseHeld) as refused:
        second.acquire()
    assert str(refused.value).startswith(
        f"crawl live in {ROOT} is being written by other-machine pid 4242 since "
        f"{first.holder['since']}"
    )
    first.release()
    second.acquire()  # released: free again
    second.release()


def test_a_lease_that_cannot_be_taken_says_why_in_one_line(s3_server):
    refused = pytest.raises(
        LeaseUnavailable, match="^crawl c in s3://no-such-bucket/x: cannot take"
    )
    with refused, crawl_lease("s3://no-such-bucket/x", "c", 60.0):
        pytest.fail("ran without its lease")


def test_the_lease_is_no_output(s3_server):
    """Readers, the resume and the publish never see it (it changes while the crawl runs)."""
    with crawl_lease(ROOT, "hidden", 60.0) as lease:
        assert lease is not None
        bucket = Bucket(ROOT)
        bucket.put("hidden/fetches/node-0-000001.parquet", b"x")
        assert list(bucket.listing("hidden")) == ["hidden/fetches/node-0-000001.parquet"]
        assert lease.read() is not None
    assert lease.read() is None  # released at the end


def test_an_expired_lease_is_taken_over_and_its_run_is_fenced(s3_server):
    stale = pretend_other_machine(lease_of("expired", expiry_s=1.0))
    stale.acquire()
    # Held for whoever finds it renewed within their expiry: 60 s here, so that a slow
    # machine between the two calls cannot make it stale (with 1 s, CI once took it over).
    with pytest.raises(LeaseHeld):
        lease_of("expired").acquire()
    time.sleep(2.1)  # the store's clock counts whole seconds
    taker = lease_of("expired", expiry_s=1.0)
    taker.acquire()
    current = taker.read()
    assert current is not None and current.holder["token"] == taker.token
    # The old holder learns it at its next renewal, and its fences refuse from now on.
    assert not stale.renew() and stale.lost
    with pytest.raises(LeaseLost):
        stale.check()
    taker.check()
    # A node of the old run commits no batch in the bucket: the files before the commit
    # object may go up (they count only with it), the commit object does not.
    bucket = Bucket(ROOT)
    staged = s3_server_staging(s3_server) / "expired"
    batch = []
    for dataset in ("pages", "fetches"):
        path = staged / dataset / "node-0-000001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"batch")
        batch.append(path)
    old_node = BatchPublisher(bucket, staged, LeaseFence(ROOT, "expired", stale.token))
    with pytest.raises(LeaseLost):
        old_node.publish(batch)
    assert "expired/fetches/node-0-000001.parquet" not in bucket.listing("expired")
    new_node = BatchPublisher(bucket, staged, LeaseFence(ROOT, "expired", taker.token))
    new_node.publish(batch)
    assert "expired/fetches/node-0-000001.parquet" in bucket.listing("expired")
    # Nor does the old run's driver publish the compacted crawl.
    with pytest.raises(LeaseLost):
        publish_crawl(bucket, "expired", staged, LeaseFence(ROOT, "expired", stale.token).check)
    taker.release()


def s3_server_staging(environment: dict[str, str]) -> Path:
    return Path(environment["XDG_CACHE_HOME"]) / "lease-test"


def test_the_heartbeat_keeps_a_lease_past_its_expiry(s3_server):
    with crawl_lease(ROOT, "beating", 1.5) as lease:
        assert lease is not None
        time.sleep(3.5)
        with pytest.raises(LeaseHeld):
            pretend_other_machine(lease_of("beating", expiry_s=1.5)).acquire()
        lease.check()


def test_a_killed_run_on_this_machine_is_taken_over_at_once(s3_server):
    """A resume after `kill -9` of the command does not wait for the lease to expire."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    gone = lease_of("killed")
    gone.holder = {**gone.holder, "pid": int(dead.stdout)}
    gone.acquire()
    resumed = lease_of("killed")
    resumed.acquire()
    resumed.release()


def test_a_dead_pid_in_another_pid_namespace_is_not_taken_for_this_hosts(s3_server):
    """Same host name, another container: its pid says nothing here, so its lease is live."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    elsewhere = lease_of("container")
    elsewhere.holder = {**elsewhere.holder, "pid": int(dead.stdout), "pid_space": "other/1"}
    elsewhere.acquire()
    with pytest.raises(LeaseHeld):
        lease_of("container").acquire()


def test_a_second_command_is_one_line_before_anything_starts(s3_server, capsys):
    from crawlflow.cli import main

    holder = pretend_other_machine(lease_of("cli"))
    holder.acquire()
    key = f"leases/cli/{LEASE}"
    body = json.loads(boto3.client("s3").get_object(Bucket="crawls", Key=key)["Body"].read())
    assert body["host"] == "other-machine"
    with pytest.raises(SystemExit) as exit_code:
        main(
            [
                "crawl",
                "http://127.0.0.1:9/",
                "--allow-private",
                f"--out={ROOT}",
                "--crawl-id=cli",
            ]
        )
    assert exit_code.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"crawlflow: error: crawl cli in {ROOT} is being written by other-machine"
    )
    assert len(err.splitlines()) == 1
    holder.release()


def test_the_endpoint_in_the_uri_reaches_the_lease_too(s3_server, monkeypatch):
    """`?endpoint_override=` (pyarrow's option) is where the lease's client goes as well."""
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    endpoint = s3_server["AWS_ENDPOINT_URL"].removeprefix("http://")
    lease = CrawlLease(f"{ROOT}?endpoint_override={endpoint}&scheme=http", "query", 60.0)
    assert lease.location == ROOT
    lease.acquire()
    assert lease.read() is not None
    lease.release()
