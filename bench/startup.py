"""Start-up benchmark: where the time of a small crawl's whole command goes.

Serves two fast sites on loopback (1,700 pages in all, served from memory, no rate limits)
and runs the real `crawlflow crawl ROOT1 ROOT2 --allow-private` as a subprocess, as a user
would, several times. The phases are read from what the command prints anyway, each line
stamped when it arrives: "Starting temporary Prefect server on URL" (or Prefect's own
"Starting temporary server on URL" from versions that left it to Prefect; the bench then polls
the server's /api/health to see when it answers; when the server's process started is read
from /proc), Ray's token-authentication notice and "Started a
local Ray instance", "Beginning flow run", each task's "Finished in state", the flow's, the last
line of the summary, and the exit. Nothing in the product is there for the benchmark.

Beside the times, the CPU time (user + system) of the command's whole process tree: the
command, its Prefect server, Ray's processes and actors, counted by a control group of its own
(runtime.cpu_accounting: every process the command starts, daemons included, until the last has
ended; websim, in this process, is not in it). Beside it, the same tree sampled from /proc as
this bench did before (it undercounts: what a process used after its last reading, and
processes that left the tree unseen); the bench adopts what the command leaves stopping, as its
subreaper, and waits for it. The load of the machine moves CPU time far less than the times.

The first run uses a new PREFECT_HOME (a new user's first crawl: the database is created and
migrated); the others reuse it, as every later crawl does. Figures are the medians of those
warm runs. Phases overlap where the command runs them side by side, so they do not add up to
the total; the fixed overhead is the total minus the crawl task.

    .venv/bin/python -m bench.startup [--quick] [--runs N] [--json PATH]

Goals (issue 16): total at most 12 s with the crawl phase unchanged or faster, fixed overhead
at most 5 s.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import harness
from runtime import cpu_accounting
from websim import WebSim, WebSpec

# Two documentation-like sites of 850 pages each, as fast as loopback allows.
WEB = WebSpec(
    hosts=2,
    pages=1700,
    seed=3,
    latency_ms=(1.0, 3.0),
    rate_limit_rps=None,
    robots_share=0.0,
    keepalive_max=(100,),
    keepalive_weights=(1.0,),
    static=True,
)
CRAWLFLOW = Path(sys.executable).parent / "crawlflow"
PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphaned descendants are re-parented to this process
DESCENDANTS_TIMEOUT_S = 60.0
SAMPLE_S = 0.05
SERVER_LINE = re.compile(r"(?:Starting temporary|temporary Prefect) server on (http://[\d.:]+)")
TASK_DONE = re.compile(r"Task run '(.+)-[0-9a-f]{3}' - Finished in state")
CRAWL_DONE = re.compile(r"crawl done in ([\d.]+)s: (\d+) pages")
# Each phase: (label, start marker, end marker); markers are times in seconds since launch.
PHASES = [
    ("CLI start-up, until the Prefect server's process starts", "launch", "server_process"),
    ("Prefect server boot (its process start to API healthy)", "server_process", "server_ready"),
    ("Ray start (ray.init)", "ray_start", "ray_ready"),
    ("flow run start (after the API and imports)", "server_ready", "flow_start"),
    ("plan, checkpoint, allocate tasks (bookkeeping)", "flow_start", "task:allocate"),
    ("launch nodes task (actor start, and Ray if not yet)", "task:allocate", "task:launch nodes"),
    ("crawl task", "task:launch nodes", "task:crawl"),
    ("close nodes task", "task:crawl", "task:close nodes"),
    ("collect task (Parquet compaction)", "task:close nodes", "task:collect"),
    ("report task", "task:collect", "task:report"),
    ("flow run end (bookkeeping)", "task:report", "flow_end"),
    ("CLI summary and plot", "flow_end", "summary"),
    ("shutdown (Ray, Prefect server, exit)", "summary", "exit"),
    ("total: command to exit", "launch", "exit"),
]


@dataclass
class Run:
    markers: dict[str, float] = field(default_factory=dict)
    crawl_pages: int = 0
    crawl_s: float = 0.0
    returncode: int | None = None
    cpu_s: float | None = None  # user + system of the command's process tree (cgroup)
    cpu_method: str = ""  # how cpu_s was counted (runtime.cpu_accounting)
    cpu_proc_s: float | None = None  # the same tree sampled from /proc (undercounts)
    cpu_by_kind: dict[str, float] = field(default_factory=dict)  # the /proc samples per kind
    output: list[str] = field(default_factory=list)

    def phases(self) -> dict[str, float | None]:
        found = {}
        for label, start, end in PHASES:
            if start in self.markers and end in self.markers:
                found[label] = self.markers[end] - self.markers[start]
            else:
                found[label] = None
        return found

    @property
    def overhead_s(self) -> float:
        crawl = self.markers["task:crawl"] - self.markers["task:launch nodes"]
        return self.markers["exit"] - crawl


def _poll_health(url: str, launched: float, run: Run) -> None:
    """Record when the Prefect API first answers (the bench's own loopback requests)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "exit" not in run.markers:
        try:
            with opener.open(f"{url}/api/health", timeout=1) as response:
                if response.status == 200:
                    run.markers["server_ready"] = time.monotonic() - launched
                    return
        except OSError:
            pass
        time.sleep(0.02)


def _note(run: Run, line: str, now: float, launched: float) -> None:
    markers = run.markers
    if (match := SERVER_LINE.search(line)) and "server_start" not in markers:
        markers["server_start"] = now
        threading.Thread(
            target=_poll_health, args=(match.group(1), launched, run), daemon=True
        ).start()
    elif "Token authentication is enabled" in line:
        markers.setdefault("ray_start", now)
    elif "Started a local Ray instance" in line:
        markers.setdefault("ray_ready", now)
    elif "Beginning flow run" in line:
        markers.setdefault("flow_start", now)
    elif match := TASK_DONE.search(line):
        markers[f"task:{match.group(1)}"] = now
    elif "Flow run '" in line and "Finished in state" in line:
        markers["flow_end"] = now
    elif "achieved rate per server over time" in line:
        markers["summary"] = now
    if match := CRAWL_DONE.search(line):
        run.crawl_s, run.crawl_pages = float(match.group(1)), int(match.group(2))


class TreeCpu:
    """The CPU time (user + system) of a process and all its descendants, read from /proc
    every SAMPLE_S; a process keeps its last reading once it has ended. (The usage the kernel
    reports for waited-for children misses Ray's workers: about 5 s of a crawl's 13.) Also
    when the Prefect server's process started, after the root's start (the kernel's start
    times, in clock ticks)."""

    def __init__(self, root: int) -> None:
        self.root = root
        # By process id and start time: over a long crawl the kernel reuses ids.
        self.last: dict[tuple[int, str], float] = {}
        self.kinds: dict[tuple[int, str], str] = {}  # what each is (a Ray worker: its actor)
        self.tick = os.sysconf("SC_CLK_TCK")
        self.server_started_s: float | None = None

    def sample(self) -> int:
        """Read every process of the tree (and those re-parented away from it); how many
        are still running."""
        running = 0
        tree = cpu_accounting.process_tree(self.root)
        for pid in tree | {pid for pid, _ in self.last}:
            stat = cpu_accounting.proc_stat(pid)
            if stat is None or stat[0] == "Z":
                continue
            key = (pid, stat[19])
            if key not in self.last:
                if pid not in tree:
                    continue  # the id of one that ended, taken by a process of another tree
                if self.server_started_s is None and _is_server(pid):
                    root = cpu_accounting.proc_stat(self.root)
                    if root is not None:
                        self.server_started_s = (int(stat[19]) - int(root[19])) / self.tick
            running += 1
            self.last[key] = (int(stat[11]) + int(stat[12])) / self.tick
            if self.kinds.get(key, UNNAMED) in (UNNAMED, "ray::IDLE"):  # a worker gets a task
                self.kinds[key] = process_kind(pid)
        return running

    @property
    def total_s(self) -> float:
        return sum(self.last.values())

    def by_kind(self) -> dict[str, float]:
        """CPU-seconds per kind of process, most first."""
        totals: dict[str, float] = {}
        for key, cpu_s in self.last.items():
            kind = self.kinds.get(key, "?")
            totals[kind] = totals.get(kind, 0.0) + cpu_s
        return dict(sorted(totals.items(), key=lambda item: -item[1]))


UNNAMED = "a Ray worker before its first task"


def process_kind(pid: int) -> str:
    """What a process of the crawl is, from its command line: a Ray worker by the actor or
    task it runs (`ray::CrawlerNode`), the Prefect server, the command, or the program's name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    if argv[0].startswith("ray::"):
        return argv[0].split(".")[0].split(" ")[0]
    if any(arg.endswith("default_worker.py") for arg in argv[:2]):
        return UNNAMED
    if any("uvicorn" in arg for arg in argv):
        return "Prefect server"
    if any(arg.endswith("/crawlflow") or "crawlflow.entry" in arg for arg in argv[:3]):
        return "crawlflow command"
    program = next((arg for arg in argv[1:] if arg.endswith(".py")), argv[0])
    return Path(program.split(" ")[0]).name or "?"


def _is_server(pid: int) -> bool:
    try:
        return b"uvicorn" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _reap_zombies() -> None:
    """Reap what the command left to this process (its subreaper) once it ended."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _watch_cpu(cpu: TreeCpu, process: subprocess.Popen[str], run: Run, reap: bool) -> None:
    """Sample the tree until the command and everything it left (its server stopping, Ray's
    processes) have ended."""
    deadline = None
    while True:
        running = cpu.sample()
        if cpu.server_started_s is not None:
            run.markers.setdefault("server_process", cpu.server_started_s)
        if process.poll() is not None:
            if reap:
                _reap_zombies()
            deadline = deadline or time.monotonic() + DESCENDANTS_TIMEOUT_S
            if running == 0:
                run.cpu_proc_s = cpu.total_s
                run.cpu_by_kind = cpu.by_kind()
                return
            if time.monotonic() > deadline:
                return
        time.sleep(SAMPLE_S)


def run_command(
    roots: list[str],
    prefect_home: Path,
    out_dir: Path,
    crawlflow: Path = CRAWLFLOW,
    options: tuple[str, ...] = (),
    reap: bool = True,
) -> Run:
    """One `crawlflow crawl` from launch to exit, its output lines stamped on arrival, and the
    CPU time of its process tree once all of it has exited. `crawlflow`: the command (another
    checkout's, to compare); `options`: added to its command line; `reap`: collect the orphans
    this process adopted as subreaper (not while another command runs beside this one: its
    exit status would be taken)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PREFECT_HOME": str(prefect_home)}
    env.pop("PREFECT_API_URL", None)  # the default: a temporary server for this command
    run = Run()
    launched = time.monotonic()
    run.markers["launch"] = 0.0
    tree = cpu_accounting.TreeCpu("crawlflow-bench")
    process = tree.start(
        [str(crawlflow), "crawl", *roots, "--allow-private", "--out", str(out_dir), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        # The command's own checkout: Ray's workers put the working directory on their path.
        cwd=crawlflow.resolve().parents[2],
    )
    assert process.stdout is not None
    stdout = process.stdout
    cpu_watch = threading.Thread(target=_watch_cpu, args=(TreeCpu(process.pid), process, run, reap))
    if sys.platform == "linux":
        cpu_watch.start()

    def read() -> None:
        for line in stdout:
            _note(run, line, time.monotonic() - launched, launched)
            run.output.append(line.rstrip("\n"))

    # The command's exit is what its user waits for; a child it leaves stopping (the Prefect
    # server) may hold the pipe open a little longer.
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    run.returncode = process.wait()
    run.markers["exit"] = time.monotonic() - launched
    reader.join(timeout=30)
    if cpu_watch.is_alive():
        cpu_watch.join()
    count = tree.finish(DESCENDANTS_TIMEOUT_S, reap=_reap_zombies if reap else None)
    run.cpu_s, run.cpu_method = (count.cpu_s if count.complete else None), count.method
    return run


def help_seconds() -> float:
    """`crawlflow --help`: the CLI's own import cost, before any command's imports."""
    started = time.monotonic()
    subprocess.run([str(CRAWLFLOW), "--help"], check=True, capture_output=True)
    return time.monotonic() - started


def load() -> str:
    return "/".join(f"{value:.2f}" for value in harness.load_average())


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = harness.arguments(__doc__, quick="one cold and one warm run")
    parser.add_argument("--runs", type=int, default=None, help="runs in all (default 6)")
    args = parser.parse_args()
    runs_wanted = args.runs or (2 if args.quick else 6)
    if runs_wanted < 2:
        parser.error("--runs must be at least 2: one cold run and at least one warm run")
    bench_run = harness.start("startup", args)
    console = Console(width=130)
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    runs: list[Run] = []
    loads: list[str] = []
    with WebSim(WEB) as sim, tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        roots = sim.host_urls
        console.print(f"two sites: {', '.join(roots)}, {WEB.pages} pages; load {load()}")
        prefect_home = Path(tmp) / "prefect-home"
        for index in range(runs_wanted):
            loads.append(load())
            run = run_command(roots, prefect_home, Path(tmp) / f"out-{index}")
            if run.returncode != 0:
                console.print("\n".join(run.output[-30:]))
                raise SystemExit(f"crawlflow crawl exited with {run.returncode}")
            kind = "cold" if index == 0 else "warm"
            console.print(
                f"run {index + 1} ({kind}, load {loads[-1]}): {run.markers['exit']:.2f} s, "
                f"crawl {run.crawl_s:.1f} s for {run.crawl_pages} pages, CPU {_fmt(run.cpu_s)} s "
                f"({run.cpu_method}; /proc sampling {_fmt(run.cpu_proc_s)} s)"
            )
            runs.append(run)
        help_s = statistics.median(help_seconds() for _ in range(3))

    cold, warm = runs[0], runs[1:]
    rows = []
    figures: dict[str, Any] = {"phases": {}, "loads": loads}
    for label, _, _ in PHASES:
        values = [run.phases()[label] for run in warm]
        present = [v for v in values if v is not None]
        row = {
            "cold": cold.phases()[label],
            "warm_median": _median(values),
            "warm_min": min(present) if present else None,
            "warm_max": max(present) if present else None,
        }
        figures["phases"][label] = row
        rows.append([label, *(_fmt(v) for v in row.values())])
    overhead = [run.overhead_s for run in warm]
    rows.append(
        [
            "fixed overhead (total minus crawl task)",
            _fmt(cold.overhead_s),
            _fmt(statistics.median(overhead)),
            _fmt(min(overhead)),
            _fmt(max(overhead)),
        ]
    )
    cpu = [run.cpu_s for run in warm]
    for label, values, first in (
        (f"CPU time of the process tree ({cold.cpu_method})", cpu, cold.cpu_s),
        (
            "CPU time of the process tree (/proc sampling)",
            [run.cpu_proc_s for run in warm],
            cold.cpu_proc_s,
        ),
    ):
        present = [v for v in values if v is not None]
        rows.append(
            [
                label,
                _fmt(first),
                _fmt(_median(values)),
                _fmt(min(present) if present else None),
                _fmt(max(present) if present else None),
            ]
        )
    rows.append(["crawlflow --help (CLI import)", "", _fmt(help_s), "", ""])
    harness.print_table(
        f"crawlflow crawl of {WEB.pages} pages on 2 loopback sites, seconds "
        f"(warm: median of {len(warm)} runs)",
        ["phase", "first run (new PREFECT_HOME)", "warm median", "warm min", "warm max"],
        rows,
    )
    figures.update(
        overhead_warm_median_s=statistics.median(overhead),
        cpu_s=[run.cpu_s for run in runs],
        cpu_method=cold.cpu_method,
        cpu_proc_sampling_s=[run.cpu_proc_s for run in runs],
        cpu_proc_sampling_warm_median_s=_median([run.cpu_proc_s for run in warm]),
        cpu_warm_median_s=_median(cpu),
        help_s=help_s,
        crawl_pages=[run.crawl_pages for run in runs],
        markers=[run.markers for run in runs],
    )
    total = figures["phases"]["total: command to exit"]["warm_median"]
    console.print(
        f"goals: total {total:.2f} s (<= 12), fixed overhead "
        f"{figures['overhead_warm_median_s']:.2f} s (<= 5); load during runs: {', '.join(loads)}"
    )
    bench_run.write_json(figures)


if __name__ == "__main__":
    main()
