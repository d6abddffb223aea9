"""Object storage benchmark: what `--out s3://...` costs against a local disk, for the demo.

Runs the real `crawlflow demo` (the bundled synthetic web: 20 servers, 2,000 pages) as a user
would, alternately with `--out DIR` on local disk and `--out s3://crawls/demo` on an S3 API on
loopback (moto's server, run inside this process, as the tests run it), and measures each
whole command: its time from launch to exit, and the CPU time (user + system) of its process
tree (the command, its Prefect server, Ray's processes and actors, daemons included:
runtime.cpu_accounting's cgroup, as bench.startup counts it). The S3 server's own CPU (this
process's) is given apart: on AWS it is not the user's machine that pays it, here it
shares the same cores. The runs alternate so that a change of the machine's load falls on
both; figures are the medians. Each command also prints the demo's coverage line, which must
say the same for both.

    .venv/bin/python -m bench.object_storage [--quick] [--runs N] [--json PATH]

Issue 32's goal: record the cost, side by side. Nothing in the product is there for it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.startup import (
    CRAWLFLOW,
    DESCENDANTS_TIMEOUT_S,
    PR_SET_CHILD_SUBREAPER,
    Run,
    _reap_zombies,
)
from runtime import cpu_accounting

COVERAGE = re.compile(r"coverage vs ground truth: (\d+)/(\d+) .* duplicates = (\d+)")


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_demo(out: str, env: dict[str, str], hosts: int, pages: int) -> tuple[Run, float]:
    """One `crawlflow demo --out OUT` from launch to exit; and the CPU this process spent
    meanwhile (the S3 server's)."""
    run = Run()
    before = self_cpu_s()
    launched = time.monotonic()
    argv = [str(CRAWLFLOW), "demo", "--hosts", str(hosts), "--pages", str(pages), "--out", out]
    tree = cpu_accounting.TreeCpu("crawlflow-bench")
    process = tree.start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert process.stdout is not None
    run.output = [line.rstrip("\n") for line in process.stdout]
    run.returncode = process.wait()
    run.markers["exit"] = time.monotonic() - launched
    count = tree.finish(DESCENDANTS_TIMEOUT_S, reap=_reap_zombies)
    run.cpu_s, run.cpu_method = (count.cpu_s if count.complete else None), count.method
    return run, self_cpu_s() - before


def coverage_of(run: Run) -> tuple[int, int, int] | None:
    for line in run.output:
        if match := COVERAGE.search(line):
            fetched, expected, duplicates = (int(group) for group in match.groups())
            return fetched, expected, duplicates
    return None


def main() -> None:
    parser = harness.arguments(__doc__, quick="a 4-server, 400-page web, one run each")
    parser.add_argument("--runs", type=int, default=None, help="runs of each (default 3)")
    args = parser.parse_args()
    runs_each = args.runs or (1 if args.quick else 3)
    hosts, pages = (4, 400) if args.quick else (20, 2000)
    bench_run = harness.start("object_storage", args)
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with tempfile.TemporaryDirectory(prefix="bench-object-storage-") as tmp:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "200",  # the demo's coverage line on one line, to be read back
            "PREFECT_HOME": str(Path(tmp) / "prefect-home"),
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "XDG_CACHE_HOME": str(Path(tmp) / "cache"),
        }
        env.pop("PREFECT_API_URL", None)  # the default: a temporary server per command
        os.environ.update({k: env[k] for k in env if k.startswith("AWS_")})
        boto3.client("s3").create_bucket(Bucket="crawls")
        # One run first, not counted: the Prefect database is created and migrated.
        warmup, _ = run_demo(str(Path(tmp) / "warmup"), env, hosts, pages)
        if warmup.returncode != 0:
            raise SystemExit("\n".join(warmup.output[-30:]))
        results: dict[str, list[dict[str, Any]]] = {"local": [], "s3": []}
        for index in range(runs_each):
            for kind, out in (("local", str(Path(tmp) / "out")), ("s3", "s3://crawls/demo")):
                load = harness.load_average()[0]
                run, server_cpu = run_demo(out, env, hosts, pages)
                if run.returncode != 0:
                    raise SystemExit("\n".join(run.output[-30:]))
                figures = {
                    "wall_s": round(run.markers["exit"], 2),
                    "tree_cpu_s": None if run.cpu_s is None else round(run.cpu_s, 2),
                    "s3_server_cpu_s": round(server_cpu, 2),
                    "coverage": coverage_of(run),
                    "load_1min": load,
                }
                results[kind].append(figures)
                print(f"run {index + 1} {kind}: {figures}", flush=True)
    server.stop()

    def median(kind: str, key: str) -> float | None:
        values = [r[key] for r in results[kind] if r[key] is not None]
        return round(statistics.median(values), 2) if values else None

    rows = []
    summary: dict[str, dict[str, float | None]] = {}
    for key, label in (
        ("wall_s", "whole command, s"),
        ("tree_cpu_s", "CPU of the command's process tree, s"),
        ("s3_server_cpu_s", "CPU of the S3 server (this process), s"),
    ):
        local, s3 = median("local", key), median("s3", key)
        summary[key] = {"local": local, "s3": s3}
        ratio = f"{s3 / local:.2f}" if local and s3 else "-"
        rows.append([label, str(local), str(s3), ratio])
    harness.print_table(
        f"crawlflow demo --hosts {hosts} --pages {pages}: medians of {runs_each} runs each",
        ["measure", "local disk", "S3 (loopback)", "S3 / local"],
        rows,
    )
    bench_run.write_json(
        {"web": {"hosts": hosts, "pages": pages}, "medians": summary, "runs": results}
    )


if __name__ == "__main__":
    main()
