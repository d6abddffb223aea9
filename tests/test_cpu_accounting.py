"""The CPU time of a command's whole process tree (runtime/cpu_accounting.py): a control group
counts the processes that leave the tree (daemons), /proc sampling stands in without one."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from runtime import cpu_accounting
from runtime.cpu_accounting import CGROUP_V1, CGROUP_V2, PROC_SAMPLING, CpuGroup, TreeCpu

BUSY_S = 0.3
# The command burns BUSY_S of CPU, and its grandchild, daemonized (a new session, its parent
# gone at once, so it is re-parented away from the tree), burns 2 x BUSY_S after the command
# has exited. Each measures its own CPU time, so the figures hold on a loaded machine too.
DAEMONIZING = f"""
import os, sys, time
def burn(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(float(sys.argv[1]))
        burn({2 * BUSY_S})
    os._exit(0)
burn({BUSY_S})
time.sleep(0.3)  # long enough for /proc sampling to read the end of the burn
"""


def cgroup_or_skip() -> TreeCpu:
    tree = TreeCpu("crawlflow-test")
    if tree.group is None:
        pytest.skip("no control group can be made here (not root, or no cgroup mounted)")
    return tree


def test_a_control_group_counts_a_daemon_that_outlives_the_command():
    tree = cgroup_or_skip()
    assert tree.method in (CGROUP_V1, CGROUP_V2)
    process = tree.start([sys.executable, "-c", DAEMONIZING, "0.2"])
    assert process.wait() == 0
    count = tree.finish(timeout_s=60)
    assert count.complete
    assert count.cpu_s >= 3 * BUSY_S
    assert count.method == tree.method
    assert tree.group is not None and not tree.group.path.exists()  # removed once empty


def test_proc_sampling_stands_in_for_a_control_group():
    tree = TreeCpu(use_cgroup=False)
    assert tree.method == PROC_SAMPLING
    process = tree.start([sys.executable, "-c", DAEMONIZING, "0"])
    assert process.wait() == 0
    count = tree.finish(timeout_s=60)
    assert count.method == PROC_SAMPLING
    # The command's own CPU at least; the daemon only if a sample caught it before it left.
    assert count.cpu_s >= BUSY_S * 0.9


def test_a_tree_still_running_at_the_timeout_is_an_incomplete_count():
    tree = cgroup_or_skip()
    process = tree.start([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        count = tree.finish(timeout_s=0.2)
        assert not count.complete
        assert tree.group is not None and tree.group.path.exists()  # not empty: kept
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert tree.group.remove()


def test_no_cgroup_file_system_means_proc_sampling(monkeypatch):
    monkeypatch.setattr(cpu_accounting, "_mounts", lambda: [])
    assert CpuGroup.create("crawlflow-test") is None
    assert TreeCpu().method == PROC_SAMPLING


def test_a_group_reads_either_version_of_the_usage(tmp_path):
    (tmp_path / "cpuacct.usage").write_text("2500000000\n")
    assert CpuGroup(tmp_path, CGROUP_V1).usage_s() == 2.5
    (tmp_path / "cpu.stat").write_text("usage_usec 1250000\nuser_usec 1000000\n")
    assert CpuGroup(tmp_path, CGROUP_V2).usage_s() == 1.25
    (tmp_path / "cgroup.procs").write_text(f"{os.getpid()}\n12\n")
    assert CpuGroup(tmp_path, CGROUP_V2).pids() == [os.getpid(), 12]
