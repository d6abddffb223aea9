"""A crawl on a real Ray cluster of two raylets, each started by its own `ray start` on its
own loopback address as on two machines (runtime/localcluster.py): `crawlflow crawl` joins it
through RAY_ADDRESS, as a user's command would, its nodes run on both raylets, and when the
second raylet's machine is lost mid-crawl the nodes on the first take its servers over: every
page once, none lost (docs/cluster.md). The crawl writes to an S3 API on loopback (moto's
server, the `s3_server` fixture), which the raylets reach as worker machines would: from the
environment `ray start` ran in, never through the command line or Ray's runtime_env
(docs/object-storage.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from runtime.localcluster import LocalCluster, Raylet, raylet_ip
from storage.bucket import Bucket, readable
from storage.lease import CrawlLease
from storage.views import connect
from websim import WebSim, WebSpec
from websim.coverage import coverage

pytestmark = pytest.mark.integration  # a Ray cluster, the CLI with its Prefect server, websim

CRAWLFLOW = str(Path(sys.executable).with_name("crawlflow"))
HEAD, WORKER = raylet_ip(0), raylet_ip(1)


@pytest.fixture(scope="module")
def cluster(
    s3_server: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """Two raylets of one CPU each: the crawl's two nodes, spread, run one on each. Both start
    in the environment `s3_server` set (the S3 endpoint and keys, as an operator exports them
    before `ray start`); the second, a machine of its own, has its own cache directory, so its
    staging directory is not the command's: its batches reach the command through the bucket."""
    root = tmp_path_factory.mktemp("cluster")
    second_machine = {"XDG_CACHE_HOME": str(root / "worker-1-cache")}
    ray_cluster = LocalCluster(root, [Raylet("head"), Raylet("worker-1", env=second_machine)])
    ray_cluster.start()
    try:
        yield ray_cluster
    finally:
        ray_cluster.stop()


@pytest.fixture
def out(s3_server: dict[str, str]) -> str:
    """Where the crawl writes: the bucket of the S3 server every raylet reaches."""
    return "s3://crawls/cluster"


@pytest.fixture(scope="module")
def slow_web() -> Iterator[WebSim]:
    # Hidden limits of about 10 requests/s per server: the crawl lasts long enough to lose a
    # raylet in the middle of it.
    spec = WebSpec(hosts=4, pages=160, seed=5, rate_limit_rps=(10.0, 15.0), latency_ms=(1, 3))
    with WebSim(spec) as sim:
        yield sim


def crawl_command(
    sim: WebSim, cluster: LocalCluster, out: str, crawl_id: str, workdir: Path
) -> tuple[list[str], dict[str, str]]:
    config = workdir / "crawl.toml"
    # Small batches, committed often: a node has committed some when its machine goes.
    config.write_text(
        "[output]\nwrite_interval_s = 0.3\nwrite_batch_rows = 20\n[exchange]\nheartbeat_s = 0.1\n"
    )
    argv = [
        CRAWLFLOW,
        "crawl",
        sim.hub_url,
        *[f"--allow={server}" for server in sim.servers],
        "--allow-private",
        "--nodes=2",
        f"--config={config}",
        f"--out={out}",
        f"--crawl-id={crawl_id}",
    ]
    from prefect.settings import PREFECT_API_URL

    # The session's Prefect server (the `prefect_api` fixture): no temporary one to start.
    env = {**cluster.client_environment(), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    return argv, env


PLACED = re.compile(r"crawler node (\S+) runs on Ray node (\w+) \(([\d.]+)\)")


def placements(log: str) -> dict[str, tuple[str, str]]:
    """node id -> (id, address) of the Ray node it runs on, from the launch step's log."""
    return {node: (ray_node, ip) for node, ray_node, ip in PLACED.findall(log)}


def committed_rows(crawl: Bucket, nodes: list[str], seen: dict[str, int]) -> int:
    """Rows in the fetches objects of `nodes` the bucket holds (a batch is committed there
    once its fetches object is), each object's count read once into `seen`."""
    for key in crawl.listing("fetches"):
        name = key.rsplit("/", 1)[-1]
        if key not in seen and any(name.startswith(f"{node}-") for node in nodes):
            with crawl.fs.open_input_file(crawl.path(key)) as source:
                seen[key] = pq.ParquetFile(source).metadata.num_rows
    return sum(seen.values())


def test_the_workers_run_the_drivers_copy_of_crawlflow(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A worker imports crawlflow's packages from what the command uploaded (Ray's
    `py_modules`, runtime.ray_backend.cluster_runtime_env), not from its own installation.
    Runs first: the next test loses the second raylet."""
    probe = (
        "import ray\n"
        "from runtime.ray_backend import ensure_ray\n"
        "ensure_ray()\n"
        "@ray.remote(num_cpus=0, resources={'worker-1': 0.01})\n"
        "def where():\n"
        "    import crawler, storage\n"
        "    return crawler.__file__, storage.__file__\n"
        "print(*ray.get(where.remote(), timeout=90))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=cluster.client_environment(),
        cwd=tmp_path,  # not the repository: Ray puts the driver's directory on the workers' path
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for path in done.stdout.split():
        assert "/runtime_resources/py_modules_files/" in path, path
        assert not path.startswith(str(Path(__file__).parents[1])), path


def test_nodes_spread_over_both_raylets_and_losing_one_loses_no_page(
    cluster: LocalCluster, slow_web: WebSim, prefect_api: None, out: str, tmp_path: Path
) -> None:
    argv, env = crawl_command(slow_web, cluster, out, "lost-raylet", tmp_path)
    log_path = tmp_path / "crawl.log"
    bucket_crawl = Bucket(f"{out}/lost-raylet")
    seen: dict[str, int] = {}
    with log_path.open("w") as log_file:
        crawl = subprocess.Popen(
            argv, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        # The nodes on the second raylet, once launched; then a few batches of theirs.
        deadline = time.monotonic() + 180
        while not (
            on_worker := [
                node for node, (_, ip) in placements(log_path.read_text()).items() if ip == WORKER
            ]
        ):
            assert crawl.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "no node launched on the second raylet"
            time.sleep(0.2)
        while committed_rows(bucket_crawl, on_worker, seen) < 10:
            assert crawl.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the second raylet's nodes committed nothing"
            time.sleep(0.05)
        cluster.lose("worker-1")
        code = crawl.wait(timeout=300)
    finally:
        if crawl.poll() is None:
            os.killpg(crawl.pid, 9)
    said = log_path.read_text()
    assert code == 0, said[-4000:]
    assert "Traceback" not in said

    where = placements(said)
    assert sorted(ip for _, ip in where.values()) == [HEAD, WORKER], where
    # The summary's crawler-nodes table names each node's Ray node, and the lost one as lost.
    rows = [line for line in said.splitlines() if line.startswith("│ node-")]
    for node, (ray_node, ip) in where.items():
        (row,) = [line for line in rows if line.split()[1] == node]
        assert f"{ip} {ray_node[:8]}" in row
        assert row.split("│")[3].strip() == str(node in on_worker)
    # The second machine's nodes staged their batches on its own disk (and the command read
    # them from the bucket).
    assert any((cluster.root / "worker-1-cache").rglob("fetches/node-*.parquet"))
    # The run's lease on the crawl (storage/lease.py) went with it.
    assert CrawlLease(out, "lost-raylet", 60.0).read() is None
    # What the bucket holds, read as `crawlflow sql` and `report` read it.
    crawl_dir = readable(bucket_crawl.uri, required=True)
    con = connect(crawl_dir)
    fetched_by = dict(
        con.execute(
            "SELECT node_id, count(*) FROM fetches WHERE fetch_status = 200 "
            "AND url_path <> '/robots.txt' GROUP BY node_id"
        ).fetchall()
    )
    # Both raylets' nodes fetched pages; the lost one's servers were finished on the head.
    assert all(fetched_by.get(node, 0) > 0 for node in where), fetched_by
    for node in on_worker:
        assert any(f"crawler node {node}" in line and "died" in line for line in said.splitlines())
    result = coverage(crawl_dir, slow_web.reachable_allowed_urls())
    assert result["missing"] == [] and result["coverage"] == 1.0
    assert result["duplicates"] == 0
    twice = con.execute(
        "SELECT url FROM fetches WHERE fetch_status = 200 AND url_path <> '/robots.txt' "
        "GROUP BY url HAVING count(*) > 1"
    ).fetchall()
    assert twice == []
    (duplicate_pages,) = con.execute(
        "SELECT count(*) - count(DISTINCT url) FROM pages"
    ).fetchone() or (None,)
    assert duplicate_pages == 0
    print(json.dumps({"placements": where, "fetched_by": fetched_by}))
