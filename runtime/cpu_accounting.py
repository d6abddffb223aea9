"""The CPU time of a command's whole process tree, counted by the kernel: every process the
command starts, including those that daemonize, leave their parent or outlive the command
(Ray's GCS, raylet and workers, a Prefect server). For the benchmarks and tests that report
CPU per page.

The command runs in a control group of its own, which its descendants inherit whatever they
do with their parents: cgroup v1's `cpuacct.usage` or, where only cgroup v2 is mounted,
`cpu.stat`'s `usage_usec`; both keep the time of processes that have ended. Creating a group
takes root (or a delegated hierarchy). Where there is none, `/proc` sampling stands in: the
tree's processes are read every `SAMPLE_S` and each keeps its last reading once it has ended.
That misses what a process used between its last reading and its end, and any process that
left the tree before it was first seen (a daemon's short-lived intermediate parent), so it
undercounts; `CpuCount.method` says which one counted.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLE_S = 0.05  # /proc sampling period
CGROUP_V1 = "cgroup v1 cpuacct"
CGROUP_V2 = "cgroup v2"
PROC_SAMPLING = "/proc sampling"
_counter = itertools.count()


@dataclass(frozen=True)
class CpuCount:
    """What a finished count says: CPU-seconds (user + system) and how they were counted;
    `complete` is False when processes of the tree were still running when the count gave up
    waiting for them (the figure then stops at that moment)."""

    cpu_s: float
    method: str
    complete: bool


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, type, options) of every cgroup file system (Linux /proc)."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mounts") as mounts:
        for line in mounts:
            _device, point, kind, options, *_ = line.split()
            if kind in ("cgroup", "cgroup2"):
                found.append((point, kind, options))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per hierarchy: controller names (or '' for cgroup v2) to
    path."""
    paths = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as groups:
        for line in groups:
            _number, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _writable_parent() -> tuple[Path, str] | None:
    """Where a new group can be made (this process's own group of the cpuacct hierarchy, or of
    cgroup v2), and which kind it is; None without either, or without the right to write."""
    own = _own_paths()
    candidates = []
    for point, kind, options in _mounts():
        if kind == "cgroup" and "cpuacct" in options.split(","):
            candidates.append((0, Path(point) / own.get("cpuacct", "/").lstrip("/"), CGROUP_V1))
        elif kind == "cgroup2":
            candidates.append((1, Path(point) / own.get("", "/").lstrip("/"), CGROUP_V2))
    for _rank, parent, kind in sorted(candidates):
        if parent.is_dir() and os.access(parent, os.W_OK):
            return parent, kind
    return None


class CpuGroup:
    """A control group of its own for one command: made by `create`, entered by the command's
    process before it runs (`enter`, as Popen's `preexec_fn`), read at any time (`usage_s`),
    removed once empty (`remove`)."""

    def __init__(self, path: Path, kind: str) -> None:
        self.path = path
        self.kind = kind

    @classmethod
    def create(cls, label: str) -> CpuGroup | None:
        """A new, empty group named after `label`; None where none can be made."""
        found = _writable_parent()
        if found is None:
            return None
        parent, kind = found
        path = parent / f"{label}-{os.getpid()}-{next(_counter)}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path, kind)

    def enter(self) -> None:
        """Move the calling process into the group (its later children are born in it)."""
        (self.path / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def usage_s(self) -> float:
        """CPU-seconds used by every process that has been in the group, ended ones too."""
        if self.kind == CGROUP_V1:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, value = line.split()
            if key == "usage_usec":
                return int(value) / 1e6
        raise OSError(f"no usage_usec in {self.path / 'cpu.stat'}")

    def pids(self) -> list[int]:
        """The processes in the group now."""
        return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]

    def remove(self) -> bool:
        """Remove the group if it is empty; whether it is gone."""
        try:
            self.path.rmdir()
        except OSError:
            return False
        return True


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces): state (0),
    ppid (1), ..., utime (11), stime (12), ..., starttime (19), in clock ticks. None once the
    process is gone, or off Linux."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_tree(root: int, exclude: int | None = None) -> set[int]:
    """`root` and its descendants now (Linux /proc), the subtree rooted at `exclude` left out
    (a benchmark counting a crawl apart from the server it runs beside)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (stat := proc_stat(int(entry))) is not None:
                children.setdefault(int(stat[1]), []).append(int(entry))
    found, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid != exclude:
            found.add(pid)
            stack += children.get(pid, [])
    return found


class ProcSampler:
    """The /proc stand-in: the CPU time of a process and its descendants, each process read
    every `SAMPLE_S` (`sample`) and kept at its last reading once ended. Processes re-parented
    away from the tree after being seen stay counted."""

    def __init__(self, root: int) -> None:
        self.root = root
        # By process id and start time: over a long run the kernel reuses ids.
        self.last: dict[tuple[int, str], float] = {}
        self.tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> int:
        """Read every process of the tree (and those seen before); how many still run."""
        running = 0
        tree = process_tree(self.root)
        for pid in tree | {pid for pid, _ in self.last}:
            stat = proc_stat(pid)
            if stat is None or stat[0] == "Z":
                continue
            key = (pid, stat[19])
            if key not in self.last and pid not in tree:
                continue  # the id of one that ended, taken by a process of another tree
            running += 1
            self.last[key] = (int(stat[11]) + int(stat[12])) / self.tick
        return running

    @property
    def total_s(self) -> float:
        return sum(self.last.values())


class TreeCpu:
    """The CPU time of one command's whole process tree. `start` it with the command's Popen
    arguments (it adds a `preexec_fn` that enters the group), then `finish` once the command
    has exited: that waits for what the command left running (up to `timeout_s`) and returns
    the count. A caller that reaps orphans (a subreaper) passes `reap` so that ended ones do not
    linger as zombies."""

    def __init__(self, label: str = "crawlflow-cpu", use_cgroup: bool = True) -> None:
        self.group = CpuGroup.create(label) if use_cgroup else None
        self.sampler: ProcSampler | None = None
        self._watch: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def method(self) -> str:
        return self.group.kind if self.group is not None else PROC_SAMPLING

    def start(self, command: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Run `command` (Popen keyword arguments as given) inside the count."""
        if self.group is not None:
            popen["preexec_fn"] = self.group.enter
        process: subprocess.Popen[Any] = subprocess.Popen(command, **popen)
        if self.group is None:
            self.sampler = ProcSampler(process.pid)
            self._watch = threading.Thread(target=self._sample, daemon=True)
            self._watch.start()
        return process

    def _sample(self) -> None:
        assert self.sampler is not None
        while not self._stop.is_set():
            self.sampler.sample()
            time.sleep(SAMPLE_S)

    def running(self) -> int:
        """How many processes of the tree run now."""
        if self.group is not None:
            return len(self.group.pids())
        assert self.sampler is not None
        return self.sampler.sample()

    def used_s(self) -> float:
        """CPU-seconds so far."""
        if self.group is not None:
            return self.group.usage_s()
        assert self.sampler is not None
        return self.sampler.total_s

    def finish(self, timeout_s: float = 60.0, reap: Any = None) -> CpuCount:
        """Wait until no process of the tree runs (or `timeout_s`), then the count; the group
        is removed if empty. `reap`: called while waiting (collects the zombies of orphans this
        process adopted)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if reap is not None:
                reap()
            if self.running() == 0:
                complete = True
                break
            if time.monotonic() > deadline:
                complete = False
                break
            time.sleep(SAMPLE_S)
        self._stop.set()
        if self._watch is not None:
            self._watch.join()
        count = CpuCount(self.used_s(), self.method, complete)
        if self.group is not None:
            self.group.remove()
        return count


def run(command: Sequence[str], timeout_s: float = 60.0, **popen: Any) -> tuple[int, CpuCount]:
    """Run `command` to its end and wait for what it left running: its exit status and the CPU
    time of its whole tree."""
    tree = TreeCpu()
    process = tree.start(command, **popen)
    returncode = process.wait()
    return returncode, tree.finish(timeout_s)
