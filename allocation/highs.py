"""A quiet HiGHS instance (highspy), for the LPs and knapsacks of column generation."""

from __future__ import annotations

import os
import sys

import highspy

_banner_shown = False


def quiet_highs() -> highspy.Highs:
    """A Highs object that prints nothing. The first one in a process prints a banner from C++
    before any option can be set, so standard output is pointed at /dev/null around it."""
    global _banner_shown
    if _banner_shown:
        highs = highspy.Highs()
    else:
        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            highs = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _banner_shown = True
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("threads", 1)
    return highs
