"""Cluster benchmark (docs/cluster.md): a crawl on a Ray cluster of two raylets, whole and with
its second raylet lost mid-crawl, against the same crawl on a local Ray.

Serves a synthetic web on loopback (8 servers of 150 pages, hidden rate limits of about 10
requests/s each, so that the crawl lasts long enough to lose a machine in it) and runs the real
`crawlflow crawl ... --nodes 2` as a subprocess, as a user would, in three ways:

- local: no RAY_ADDRESS: the command starts its own local Ray;
- cluster: RAY_ADDRESS at the head of a cluster of two raylets started by `ray start` on their
  own loopback addresses (runtime/localcluster.py, one CPU each): one node on each;
- cluster, lost: the same, and the second raylet's process group is killed (kill -9: its
  machine lost) once the nodes have committed a third of the pages, some on it.

Per run: the whole command's time, the crawl task's time ("crawl done in"), where the nodes
ran (the command's log), pages, pages missing from the reachable web and pages twice (from
the Parquet output, with DuckDB), the requests websim saw for a target it had already answered
(what the takeover fetched again), and for a loss, the seconds from the kill to the log line
that the lost node's servers went to the others. All runs use one Prefect server, started by
the benchmark (the command's time leaves out starting one). A new cluster per cluster run (a
lost raylet is not restarted); its start is timed apart. Ray's health checks are at their
defaults.

The crawls write to an S3 API on loopback (moto's server, run inside this process, as the
tests run it): the raylets and the command find it through the AWS_* variables of the
environment they start in, and the second raylet has a staging directory of its own, as a
machine of its own would. `--local-disk` writes to a local directory instead (the runs
recorded before 2026-11-27's S3 runs).

    .venv/bin/python -m bench.cluster [--quick] [--rounds N] [--local-disk] [--json PATH]

Goals (issue 32): pages are fetched by nodes on both raylets; after the loss, every page once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from prefect.settings import PREFECT_API_URL
from prefect.testing.utilities import prefect_test_harness

from bench import harness
from runtime.localcluster import LocalCluster, Raylet, raylet_ip
from storage.bucket import Bucket, is_remote, readable
from storage.views import connect
from websim import WebSim, WebSpec
from websim.coverage import coverage
from websim.sim import requested_again

WEB = WebSpec(hosts=8, pages=1200, seed=32, rate_limit_rps=(8.0, 12.0), latency_ms=(1.0, 3.0))
CRAWLFLOW = str(Path(sys.executable).with_name("crawlflow"))
LOSS_AT = (
    1 / 4
)  # of the pages, committed by the second raylet's node before its loss (about half its share)
PLACED = re.compile(r"crawler node (\S+) runs on Ray node \S+ \((\S+)\)")


def run_crawl(
    sim: WebSim,
    workdir: Path,
    out: str,
    env: dict[str, str],
    cluster: LocalCluster | None,
    lose: bool,
) -> dict[str, Any]:
    """One `crawlflow crawl` of the web to `out`; with `lose`, the second raylet lost
    mid-crawl."""
    log_path = workdir / "crawl.log"
    argv = [
        CRAWLFLOW,
        "crawl",
        sim.hub_url,
        *[f"--allow={server}" for server in sim.servers],
        "--allow-private",
        "--nodes=2",
        f"--out={out}",
        "--crawl-id=bench",
    ]
    sim.request_log(clear=True)
    started = time.monotonic()
    lost_at = None
    with log_path.open("w") as log_file:
        crawl = subprocess.Popen(
            argv, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        if lose:
            assert cluster is not None
            lost_at = lose_second_raylet(cluster, crawl, log_path, f"{out}/bench", started)
        code = crawl.wait(timeout=900)
    finally:
        if crawl.poll() is None:
            os.killpg(crawl.pid, 9)
    total_s = time.monotonic() - started
    said = log_path.read_text(errors="replace")
    if code != 0:
        # Recorded, and the benchmark goes on: on a loaded machine a Ray may fail to start.
        print(f"crawlflow crawl exited with {code}:\n{said[-1500:]}", flush=True)
        return {"failed": code, "total_s": round(total_s, 2), "last_lines": said[-1500:]}
    placed = dict(PLACED.findall(said))
    crawl_dir = readable(f"{out}/bench")  # what the bucket holds, as `crawlflow sql` reads it
    con = connect(crawl_dir)
    by_node = dict(
        con.execute(
            "SELECT node_id, count(*) FROM fetches WHERE fetch_status = 200 "
            "AND url_path <> '/robots.txt' GROUP BY node_id"
        ).fetchall()
    )
    by_raylet: dict[str, int] = {}
    for node, pages in by_node.items():
        where = placed.get(node, "local")
        by_raylet[where] = by_raylet.get(where, 0) + pages
    result = coverage(crawl_dir, sim.reachable_allowed_urls())
    crawl_s = re.search(r"crawl done in ([\d.]+)s", said)
    died = [line for line in said.splitlines() if " died: " in line]
    takeover_s = None
    if lost_at is not None and died:
        stamp = died[0].split(" | ", 1)[0]
        takeover_s = seconds_of_day(stamp) - lost_at
    return {
        "total_s": round(total_s, 2),
        "crawl_s": float(crawl_s.group(1)) if crawl_s else None,
        "placements": placed,
        "pages_by_raylet": by_raylet,
        "missing": len(result["missing"]),
        "duplicates": result["duplicates"],
        "requested_again": len(requested_again(sim.request_log())),
        "takeover_s": None if takeover_s is None else round(takeover_s, 2),
        "nodes_lost": len(died),
    }


def seconds_of_day(stamp: str) -> float:
    """A log line's HH:MM:SS.mmm (local time) as seconds since midnight."""
    hours, minutes, seconds = stamp.strip().split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def now_of_day() -> float:
    moment = time.time()
    local = time.localtime(moment)
    return local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec + moment % 1


def committed_rows(crawl: str, seen: dict[str, int]) -> dict[str, int]:
    """Rows of each committed fetches file of `crawl` (a directory, or its URI in a bucket),
    by file name; each file's count read once into `seen`."""
    if is_remote(crawl):
        bucket = Bucket(crawl)
        for key in bucket.listing("fetches"):
            if key not in seen:
                with contextlib.suppress(OSError), bucket.fs.open_input_file(bucket.path(key)) as f:
                    seen[key] = pq.ParquetFile(f).metadata.num_rows
    else:
        for path in (Path(crawl) / "fetches").glob("*.parquet"):
            if str(path) not in seen:
                with contextlib.suppress(OSError):  # renamed away meanwhile: counted next time
                    seen[str(path)] = pq.read_metadata(path).num_rows
    return {key.rsplit("/", 1)[-1]: rows for key, rows in seen.items()}


def lose_second_raylet(
    cluster: LocalCluster, crawl: subprocess.Popen[bytes], log: Path, crawl_dir: str, t0: float
) -> float | None:
    """Once the nodes have committed LOSS_AT of the pages, some on it, kill the second raylet's
    process group; returns when (seconds of the day, as the log stamps it), None if the crawl
    ended first."""
    worker = raylet_ip(1)
    seen: dict[str, int] = {}
    while True:
        if crawl.poll() is not None:
            return None  # ended (or failed) before the loss: the run says so
        if time.monotonic() - t0 > 600:
            raise SystemExit("no node of the second raylet committed enough in 10 min")
        nodes = [n for n, ip in PLACED.findall(log.read_text(errors="replace")) if ip == worker]
        committed = on_worker = 0
        for name, rows in committed_rows(crawl_dir, seen).items():
            committed += rows
            on_worker += rows if name.rsplit("-", 1)[0] in nodes else 0
        if on_worker and committed >= LOSS_AT * WEB.pages:
            cluster.lose(cluster.raylets[1].name)
            return now_of_day()
        time.sleep(0.2)


def main() -> None:
    parser = harness.arguments(__doc__, quick="one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument(
        "--local-disk", action="store_true", help="write to a local directory, not to S3"
    )
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    bench_run = harness.start("cluster", args)
    # SIGTERM ends the run through its `finally`s: its raylets are stopped, not left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "cluster": [], "cluster, lost": []}
    cluster_start_s: list[float] = []
    with (
        WebSim(WEB) as sim,
        tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp,
        prefect_test_harness(server_startup_timeout=180),
        contextlib.ExitStack() as servers,
    ):
        if not args.local_disk:
            servers.enter_context(s3_server(Path(tmp)))
        # One Prefect server for every run: a temporary one per command, on a loaded machine,
        # may not start within the command's minute; the figures compare Ray, not Prefect.
        prefect_api = {"PREFECT_API_URL": str(PREFECT_API_URL.value())}
        print(f"{WEB.hosts} servers, {WEB.pages} pages; load {harness.load_average()}")
        for round_index in range(rounds):
            for case in runs:  # interleaved: the machine's load moves between rounds
                workdir = Path(tmp) / f"{round_index}-{case.replace(', ', '-')}"
                workdir.mkdir()
                out = str(workdir / "out") if args.local_disk else f"s3://crawls/{workdir.name}"
                load = harness.load_average()
                if case == "local":
                    env = {**os.environ, **prefect_api}
                    run = run_crawl(sim, workdir, out, env, None, lose=False)
                else:
                    # The second "machine" stages its batches on a disk of its own.
                    second = Raylet("w1", env={"XDG_CACHE_HOME": str(workdir / "w1-cache")})
                    cluster = LocalCluster(workdir / "cluster", [Raylet("head"), second])
                    began = time.monotonic()
                    try:
                        cluster.start()
                    except (RuntimeError, TimeoutError) as exc:
                        print(f"the cluster did not start: {exc}", flush=True)
                        runs[case].append({"failed": "cluster start", "load": load})
                        continue
                    cluster_start_s.append(round(time.monotonic() - began, 2))
                    try:
                        run = run_crawl(
                            sim,
                            workdir,
                            out,
                            {**cluster.client_environment(), **prefect_api},
                            cluster,
                            lose=case.endswith("lost"),
                        )
                    finally:
                        cluster.stop()
                run["load"] = load
                runs[case].append(run)
                shown = {key: value for key, value in run.items() if key != "last_lines"}
                print(f"round {round_index + 1}, {case} (load {load[0]:.1f}): {shown}", flush=True)

    failed = {case: sum(1 for r in results if "failed" in r) for case, results in runs.items()}
    runs_ok = {case: [r for r in results if "failed" not in r] for case, results in runs.items()}
    rows = []
    for case, results in runs_ok.items():
        if not results:
            rows.append([case, "-", "-", "all runs failed", "-", "-", "-", "-"])
            continue
        rows.append(
            [
                case,
                fmt(median(results, "total_s")),
                fmt(median(results, "crawl_s")),
                " ".join(f"{ip}:{n}" for ip, n in sorted(results[-1]["pages_by_raylet"].items())),
                str(max(r["missing"] for r in results)),
                str(max(r["duplicates"] for r in results)),
                str(max(r["requested_again"] for r in results)),
                fmt(median(results, "takeover_s")),
            ]
        )
    harness.print_table(
        f"medians of {rounds} rounds (pages per raylet: the last round; missing, twice, asked "
        "again: the most of any round)",
        [
            "case",
            "command s",
            "crawl s",
            "pages per raylet",
            "missing",
            "twice",
            "asked again",
            "kill to takeover s",
        ],
        rows,
    )
    lost = runs_ok["cluster, lost"]
    spread = bool(lost) and all(len(r["pages_by_raylet"]) == 2 for r in runs_ok["cluster"] + lost)
    once = bool(lost) and all(
        r["nodes_lost"] >= 1 and r["missing"] == 0 and r["duplicates"] == 0 for r in lost
    )
    print(f"failed runs: {failed}")
    print(f"nodes fetched on both raylets: {harness.verdict(spread)}")
    print(f"every page once after the loss: {harness.verdict(once)}")
    if cluster_start_s:
        print(f"cluster start (two raylets): median {statistics.median(cluster_start_s):.1f} s")
    bench_run.write_json(
        {
            "web": {"hosts": WEB.hosts, "pages": WEB.pages},
            "out": "local disk" if args.local_disk else "S3 (moto's server on loopback)",
            "runs": runs,
            "failed_runs": failed,
            "cluster_start_s": cluster_start_s,
            "goals": {"spread": spread, "every_page_once_after_loss": once},
        }
    )


@contextlib.contextmanager
def s3_server(tmp: Path) -> Iterator[None]:
    """moto's S3 server on loopback with a bucket `crawls`, and this process's environment
    (which the raylets and the commands start in) pointed at it, as an operator's would be."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "XDG_CACHE_HOME": str(tmp / "cache"),
        }
    )
    boto3.client("s3").create_bucket(Bucket="crawls")
    try:
        yield
    finally:
        server.stop()


def median(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if r[key] is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    main()
