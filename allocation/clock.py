"""The solver's time budget, in CPU seconds: this thread's plus the finished solver processes'.

Wall time would make the same solve prove a different gap on a loaded machine; CPU time does
not (CBC is single-threaded here, and is run with its own clock in CPU mode too). On an idle
machine the two agree.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def cpu_seconds() -> float:
    children = os.times()
    return time.thread_time() + children.children_user + children.children_system


class CpuClock:
    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._start = cpu_seconds()
        self._wall_start = time.perf_counter()

    def elapsed(self) -> float:
        return cpu_seconds() - self._start

    def wall_elapsed(self) -> float:
        return time.perf_counter() - self._wall_start

    def left(self) -> float:
        return self.limit_s - self.elapsed()

    def until(self, share: float) -> float:
        """CPU seconds left before ``share`` of the limit is used."""
        return share * self.limit_s - self.elapsed()

    def passed(self, stop: float) -> Callable[[], bool]:
        """A deadline for a search: true once ``stop`` CPU seconds have elapsed."""
        return lambda: self.elapsed() >= stop
