"""Seeds at scale: `crawlflow crawl --seeds FILE` of many URLs over many websim servers.

websim serves its servers on 127.0.x.y; the seed file names them by host name
(`site-N.seeds.example`), which `[fetch] resolve` maps to those addresses, so nothing is asked of
a DNS server. 5% of the servers have names under `.invalid` (RFC 6761: they never resolve, and
the crawler answers that itself), and 1% of the lines are malformed. The crawl follows no link
(`[limits] max_depth = 0`): the seeds are the work. Everything else is the defaults.

The Prefect database is made first by a crawl of one page (as a user's is by any earlier
crawl). Measured: the time from the command's launch to its first fetch (the earliest `fetch_time`),
the command's exit code and time, the driver's peak memory (VmHWM of the `crawlflow` process,
sampled while it runs), and whether every seed ends with a `fetches` row (or, if malformed, a
row of `seeds/rejected.parquet`). Goals (issue 30): first fetch within 10 s, every seed
accounted for, driver peak under 1 GB.

    .venv/bin/python -m bench.seeds [--quick] [--seeds N] [--servers N] [--json PATH]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from bench import harness
from websim import WebSim, WebSpec, build_web, host_address

CRAWLFLOW = Path(sys.executable).parent / "crawlflow"
UNRESOLVED_SHARE = 0.05
MALFORMED_SHARE = 0.01


def seed_lines(spec: WebSpec, seeds: int) -> tuple[list[str], dict[str, str]]:
    """The seed file's lines (URLs over every server, a share of them under names that do not
    resolve, a share malformed, in a shuffled order) and the `[fetch] resolve` map."""
    import random

    web = build_web(spec)
    rnd = random.Random(spec.seed)
    per_server = -(-seeds // spec.hosts)
    resolve: dict[str, str] = {}
    lines: list[str] = []
    unresolved = set(rnd.sample(range(spec.hosts), int(spec.hosts * UNRESOLVED_SHARE)))
    for host in range(spec.hosts):
        if host in unresolved:
            name = f"gone-{host}.seeds.invalid"
        else:
            name = f"site-{host}.seeds.example"
            resolve[name] = host_address(host)
        first, end = int(web.host_start[host]), int(web.host_start[host + 1])
        paths = web.paths[first:end][:per_server]
        # A server with fewer pages than its share gets URLs it answers 404 to: fetched too.
        paths += [f"/missing/{n}" for n in range(per_server - len(paths))]
        lines += [f"http://{name}:{{port}}{path}" for path in paths]
    lines = lines[:seeds]
    for index in rnd.sample(range(len(lines)), int(len(lines) * MALFORMED_SHARE)):
        lines[index] = rnd.choice(["htp:/broken/{n}", "not a url {n}", "http://bad host/{n}"])
        lines[index] = lines[index].replace("{n}", str(index))
    rnd.shuffle(lines)
    return lines, resolve


def peak_memory_mb(pid: int, stop: threading.Event, peak: list[float]) -> None:
    """The process's peak resident set (VmHWM), read until it exits."""
    while not stop.is_set():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak[0] = max(peak[0], int(line.split()[1]) / 1024)
        except OSError:
            return
        time.sleep(0.2)


def main() -> None:
    parser = harness.arguments(__doc__, quick="2,000 seeds over 100 servers")
    parser.add_argument("--seeds", type=int, default=None, help="seed URLs (default 10,000)")
    parser.add_argument("--servers", type=int, default=None, help="websim servers (default 500)")
    parser.add_argument(
        "--nodes", type=int, default=None, help="crawler nodes (default: the allocation plan's)"
    )
    args = parser.parse_args()
    seeds = args.seeds or (2_000 if args.quick else 10_000)
    servers = args.servers or (100 if args.quick else 500)
    run = harness.start("seeds", args)
    spec = WebSpec(
        hosts=servers,
        pages=max(2 * seeds, servers),
        seed=30,
        rate_limit_rps=None,
        latency_ms=(1.0, 5.0),
        robots_share=0.3,
        static=False,
    )
    lines, resolve = seed_lines(spec, seeds)
    with WebSim(spec) as sim, tempfile.TemporaryDirectory(prefix="bench-seeds-") as tmp:
        root = Path(tmp)
        seed_file = root / "seeds.txt"
        seed_file.write_text("# bench.seeds\n" + "\n".join(lines).replace("{port}", str(sim.port)))
        config = root / "seeds.toml"
        config.write_text(
            "[limits]\nmax_depth = 0\n\n[fetch.resolve]\n"
            + "".join(f'"{name}" = "{address}"\n' for name, address in resolve.items())
        )
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PREFECT_HOME": str(root / "prefect")}
        env.pop("PREFECT_API_URL", None)
        command = [
            str(CRAWLFLOW),
            "crawl",
            "--seeds",
            str(seed_file),
            "--allow-private",
            "--config",
            str(config),
            "--out",
            str(root / "out"),
            "--crawl-id",
            "seeds",
            *(["--nodes", str(args.nodes)] if args.nodes else []),
        ]
        # A user's Prefect database exists already: a first crawl of one seed creates it.
        warm_up = [str(CRAWLFLOW), "crawl", sim.hub_url, "--allow-private", "--max-pages", "1"]
        subprocess.run(
            [*warm_up, "--out", str(root / "warm-up")], env=env, capture_output=True, check=True
        )
        launched_wall = datetime.now(UTC)
        launched = time.monotonic()
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        peak = [0.0]
        stop = threading.Event()
        sampler = threading.Thread(target=peak_memory_mb, args=(process.pid, stop, peak))
        sampler.start()
        assert process.stdout is not None
        output = [f"{time.monotonic() - launched:6.1f}s {line.rstrip()}" for line in process.stdout]
        process.wait()
        elapsed = time.monotonic() - launched
        stop.set()
        sampler.join()
        figures = account(root / "out" / "seeds", seed_file, launched_wall)
    figures |= {
        "seed_lines": len(lines),
        "servers": servers,
        "nodes": args.nodes,
        "names_unresolved": servers - len(resolve),
        "exit_code": process.returncode,
        "command_s": round(elapsed, 1),
        "driver_peak_mb": round(peak[0]),
    }
    if process.returncode not in (0, 3):
        print("\n".join(output[-40:]))
    rows = [
        ["seed lines (1% malformed)", f"{figures['seed_lines']:,}"],
        ["servers (5% names that do not resolve)", f"{servers:,} ({figures['names_unresolved']})"],
        ["first fetch after launch (s)", f"{figures['first_fetch_s']:.1f}"],
        ["command exit code", str(figures["exit_code"])],
        ["command time (s)", f"{figures['command_s']:.0f}"],
        ["driver peak memory (MB)", f"{figures['driver_peak_mb']:,}"],
        ["seeds fetched (an HTTP answer)", f"{figures['seeds_fetched']:,}"],
        ["seeds with an error row", f"{figures['seeds_failed']:,}"],
        ["malformed lines in seeds/rejected.parquet", f"{figures['rejected_rows']:,}"],
        ["seeds with no row at all", f"{figures['seeds_missing']:,}"],
    ]
    rows += [[f"  error class {kind}", f"{count:,}"] for kind, count in figures["errors"].items()]
    harness.print_table(f"crawlflow crawl --seeds: {seeds:,} URLs", ["measure", "value"], rows)
    run.write_json({"figures": figures, "command_output": output[:60]})


def account(crawl_dir: Path, seed_file: Path, launched: datetime) -> dict[str, Any]:
    """Every seed line's fate, from the output."""
    from crawler.scope.seedfile import read_seed_file

    seeds = read_seed_file(seed_file)
    con = duckdb.connect()
    con.register("seeds", pa.table({"url": seeds.urls}))
    fetches = str(crawl_dir / "fetches" / "*.parquet")
    con.execute(f"CREATE VIEW fetches AS SELECT * FROM read_parquet('{fetches}')")
    first = con.execute("SELECT min(fetch_time) FROM fetches").fetchone()
    fates = con.execute(
        """SELECT s.url, bool_or(f.fetch_status IS NOT NULL) AS answered,
                  arg_max(split_part(f.error, ':', 1), f.fetch_time) AS kind, count(f.url) AS rows
           FROM seeds s LEFT JOIN fetches f ON f.url = s.url GROUP BY s.url"""
    ).fetchall()
    rejected = crawl_dir / "seeds" / "rejected.parquet"
    rejected_rows = (
        con.execute(f"SELECT count(*) FROM read_parquet('{rejected}')").fetchone()[0]
        if rejected.exists()
        else 0
    )
    errors: dict[str, int] = {}
    for _, answered, kind, rows in fates:
        if rows and not answered and kind:
            errors[kind] = errors.get(kind, 0) + 1
    return {
        "first_fetch_s": (first[0] - launched).total_seconds() if first and first[0] else None,
        "seeds_unique": len(seeds.urls),
        "seeds_fetched": sum(1 for _, answered, _, _ in fates if answered),
        "seeds_failed": sum(1 for _, answered, _, rows in fates if rows and not answered),
        "seeds_missing": sum(1 for *_, rows in fates if not rows),
        "rejected_rows": rejected_rows,
        "errors": dict(sorted(errors.items(), key=lambda item: -item[1])),
    }


if __name__ == "__main__":
    main()
